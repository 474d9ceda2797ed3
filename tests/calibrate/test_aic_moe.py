"""aiconfigurator's MoE tables (specsim.calibrate.aic_moe): the committed extract, the fit of
the expert kernel's floor and bandwidth, its held-out check, the device parts that take it,
the cost term it prices, and bad input named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.aic_moe import (
    MAX_TOKENS_PER_EXPERT,
    MIN_READ_BYTES,
    MOE_SHAPES,
    MOE_TOKENS,
    choose_moe,
    expert_bytes,
    fit_moe,
    local_experts,
    moe_table,
)
from specsim.calibrate.aic_tables import load_extract
from specsim.cards import load_hardware, load_model
from specsim.cards.stack_files import device_part_for
from specsim.cost.deployment import Deployment
from specsim.cost.shape import chain_sums

EXTRACTS = ("h100_sxm", "h200_sxm", "b200_sxm")


def _rows(system: str = "h100_sxm", backend: str = "trtllm") -> pd.DataFrame:
    return load_extract(system, backend, "moe")


def test_the_extract_keeps_the_cards_shapes_at_decode_sizes() -> None:
    for system in EXTRACTS:
        for backend in ("sglang", "trtllm"):
            r = _rows(system, backend)
            shapes = set(zip(r["hidden"], r["inter"], r["experts"], r["topk"], strict=True))
            assert shapes <= set(MOE_SHAPES.values())
            assert set(r["tokens"]) <= set(MOE_TOKENS) and (r["time_s"] > 0).all()
            assert r["source"].str.contains(f"{system}/moe/{backend}/").all()
            assert r["line"].notna().all()
            for model in set(r["model"]):  # the shape is the card's
                card = load_model(model)
                assert card.moe_spec is not None
                assert (card.moe_spec.experts, card.moe_spec.top_k) == MOE_SHAPES[model][2:]


def test_balanced_routing_touches_min_experts_and_tokens_split_over_the_group() -> None:
    r = pd.DataFrame(
        {"experts": [256, 256, 256, 8], "tokens": [1, 64, 1, 4], "topk": [8, 8, 8, 2]}
        | {"ep": [8, 8, 256, 1]}
    )
    # 8 of 256 experts over 8 GPUs: one each; 64 tokens touch all 256: 32 a GPU; one expert
    # at least on a GPU that runs the kernel; 4 tokens of top-2 touch all 8 experts.
    assert local_experts(r).tolist() == [1.0, 32.0, 1.0, 8.0]


def test_the_fit_recovers_a_known_floor_and_bandwidth_exactly() -> None:
    """Rows made by the formula itself (a floor of 40 us, 80% of the bandwidth) give them back
    with a zero residual: the fit inverts its own arithmetic."""
    r = _rows().copy()
    bw = load_hardware("h100-sxm").mem_bandwidth
    r["time_s"] = 40e-6 + local_experts(r) * expert_bytes(r) / (0.8 * bw)
    for f in fit_moe(r):
        assert f.floor_s == pytest.approx(40e-6, rel=1e-9)
        assert f.efficiency == pytest.approx(0.8, rel=1e-9)
        assert f.floor_se < 1e-12


def test_the_fit_leaves_out_cached_and_compute_bound_rows() -> None:
    r = _rows()
    (f, *_) = fit_moe(r)
    kept = r[(r["weights"] == f.weights) & (r["kernel"] == f.kernel)]
    read = local_experts(kept) * expert_bytes(kept)
    per = kept["tokens"] * kept["topk"] / np.minimum(kept["experts"], kept["tokens"] * kept["topk"])
    assert f.rows == int(((read >= MIN_READ_BYTES) & (per <= MAX_TOKENS_PER_EXPERT)).sum())
    assert 0 < f.rows < len(kept)


@pytest.mark.parametrize("system", EXTRACTS)
def test_committed_moe_fits_beat_no_floor_out_of_sample(system: str) -> None:
    """Every committed fit is physical and predicts the held-out shapes better than the
    assumption it replaces (no floor, the device's memory efficiency); the floor is tens of
    microseconds a layer, every one with a standard error well under it."""
    hw = load_hardware({"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200"}[system])
    me = device_part_for(hw).memory_efficiency
    for backend in ("sglang", "trtllm"):
        for c in choose_moe(_rows(system, backend), me):
            if not c.committed:
                continue
            assert c.fitted_median < c.current_median
            assert 0 < c.fit.efficiency <= 1 and 10e-6 < c.fit.floor_s < 100e-6
            assert 0 < c.fit.floor_se < 0.25 * c.fit.floor_s


def test_the_device_parts_carry_the_fits_and_the_cost_model_charges_them() -> None:
    """DeepSeek-V3 on 8 H200s under tensorrt-llm (fp8 experts): the expert kernel's fixed cost
    is paid once per MoE layer and pass, whatever the batch; with the part's MoE tables
    removed the plain step falls by exactly that floor plus the slower expert reads."""
    dep = Deployment(
        target="deepseek-v3", hardware="h200", runtime="tensorrt-llm",
        tensor_parallel=8, expert_parallel=8,
    )  # fmt: skip
    rt = dep.runtime
    assert rt is not None and rt.moe_fixed_s is not None and rt.moe_memory_efficiency is not None
    floor = load_model("deepseek-v3").moe_layers * rt.moe_fixed_s["float8"]
    bare = dataclasses.replace(dep, runtime=dataclasses.replace(rt, moe_fixed_s=None))
    for batch in (1, 16):
        t, p, c = chain_sums(batch, batch * 2048, 1)
        got = dep.aggregates_cost(batch=batch, tokens=t, context_tokens=c, pairs=p)
        base = bare.aggregates_cost(batch=batch, tokens=t, context_tokens=c, pairs=p)
        assert float(got.roofline_time_s - base.roofline_time_s) == pytest.approx(floor, rel=1e-9)
        assert float(got.time_s - base.time_s) == pytest.approx(floor, rel=1e-9)
    # The expert reads at the part's MoE bandwidth fraction, not the dense one.
    slow = dataclasses.replace(rt, moe_memory_efficiency=None, moe_fixed_s=None)
    t, p, c = chain_sums(1, 2048, 1)
    fast = bare.aggregates_cost(batch=1, tokens=t, context_tokens=c, pairs=p).roofline_time_s
    dense = dataclasses.replace(dep, runtime=slow)
    other = dense.aggregates_cost(batch=1, tokens=t, context_tokens=c, pairs=p).roofline_time_s
    assert float(fast) != pytest.approx(float(other), rel=1e-3)


def test_a_dense_model_pays_no_moe_floor() -> None:
    dep = Deployment(target="llama-3.1-8b", hardware="h200", runtime="tensorrt-llm")
    rt = dep.runtime
    assert rt is not None and rt.moe_fixed_s
    bare = dataclasses.replace(dep, runtime=dataclasses.replace(rt, moe_fixed_s=None))
    t, p, c = chain_sums(1, 512, 1)
    a = dep.aggregates_cost(batch=1, tokens=t, context_tokens=c, pairs=p).time_s
    b = bare.aggregates_cost(batch=1, tokens=t, context_tokens=c, pairs=p).time_s
    assert float(a) == float(b)


def test_bad_input_is_named(tmp_path: Path) -> None:
    (tmp_path / "data" / "h100_sxm" / "moe").mkdir(parents=True)
    with pytest.raises(ValueError, match="'h100_sxm' backend 'sglang' ships no MoE table"):
        moe_table(tmp_path, "h100_sxm", "sglang")
    with pytest.raises(ValueError, match="backend 'vllm' is not fitted"):
        moe_table(tmp_path, "h100_sxm", "vllm")
    with pytest.raises(ValueError, match="system 'tpu_v5' is not read"):
        moe_table(tmp_path, "tpu_v5", "sglang")
    with pytest.raises(ValueError, match="no extract .*'l40s'.*operation 'moe'"):
        load_extract("l40s", "sglang", "moe")
    with pytest.raises(ValueError, match="no rows"):
        fit_moe(_rows().iloc[:0])
    few = _rows()
    few = few[few["time_s"] > 0].copy()
    one = few.loc[(few["model"] == "deepseek-v3") & (few["ep"] == 8) & (few["tokens"] == 64)]
    with pytest.raises(ValueError, match="do not identify a floor and a bandwidth"):
        fit_moe(one.iloc[:1])
    rt = Deployment(target="deepseek-v3", hardware="h200", runtime="tensorrt-llm").runtime
    assert rt is not None
    with pytest.raises(ValueError, match=r"moe_memory_efficiency\.float8.*\(0, 1\]"):
        dataclasses.replace(rt, moe_memory_efficiency={"float8": 1.5})
    with pytest.raises(ValueError, match=r"moe_fixed_s\.float8"):
        dataclasses.replace(rt, moe_fixed_s={"float8": -1e-6})
