"""Weight-only kernels by rows (specsim.calibrate.kernels): the committed sweeps, the one-GEMM
pass against a hand computation, recovery of known parameters, and the device parts' numbers."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.kernels import (
    SWEEP_COLUMNS,
    SWEEP_FITS,
    beyond_peak,
    fit_committed_sweep,
    fit_kernel_sweep,
    gemm_roofline,
    gemm_time,
    kernel_fit_rows,
    kernel_profile,
    load_kernel_sweeps,
)
from specsim.cards import compose, load_hardware, load_model, load_stack
from specsim.cards.stack_files import device_part_for
from specsim.cost import step_cost
from specsim.cost.quant import WEIGHT_FORMATS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "models" / "measured" / "kernels" / "README.md"


def test_committed_sweeps_parse_with_a_source_on_every_row():
    data = load_kernel_sweeps()
    assert set(SWEEP_COLUMNS) <= set(data.columns)
    assert set(data["sweep"]) == set(SWEEP_FITS)
    text = README.read_text()
    for key in set(data["source"]):
        assert f"source `{key}`" in text, key
    assert (data["line"].astype(str).str.len() > 0).all()
    a100 = data.loc[data["sweep"] == "marlin-a100-vllm-layers"]
    assert len(a100) == 216 and a100["rows"].max() == 64
    # Derived times as the README says: rows / tokens-per-second, or 2 rows K N / TFLOPS.
    tok = a100["published"].astype(float)
    assert np.allclose(a100["time_s"], a100["rows"] / tok, rtol=1e-6)
    h100 = data.loc[data["sweep"] == "marlin-h100-humming"]
    flops = 2.0 * h100["rows"] * h100["K"] * h100["N"]
    assert np.allclose(h100["time_s"], flops / (h100["published"].astype(float) * 1e12), rtol=1e-6)


def test_a_sweep_without_a_column_or_a_source_is_refused(tmp_path):
    data = load_kernel_sweeps()
    bad = tmp_path / "bad.csv"
    data.drop(columns=["line"]).to_csv(bad, index=False)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['line'\]"):
        load_kernel_sweeps(bad)
    data.assign(source=None).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="no source or line"):
        load_kernel_sweeps(bad)
    data.assign(time_s=0.0).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="column 'time_s' must be > 0"):
        load_kernel_sweeps(bad)
    with pytest.raises(ValueError, match="no float16 rows"):
        fit_kernel_sweep(data.loc[data["weights"] == "int4"], hardware="a100-80gb")
    with pytest.raises(ValueError, match="unknown sweep 'nope'"):
        fit_committed_sweep("nope")
    with pytest.raises(ValueError, match=r"fixed parameter\(s\) \['fixed_s.int2'\]"):
        fit_kernel_sweep(data.iloc[:20], hardware="a100-80gb", fixed={"fixed_s.int2": 0.0})


def _hand_time(hw, *, me, ce, f, c, K, N, rows, t0, bpw):
    """The one-GEMM pass by hand: fixed + max(compute, memory) + per-row dequantization,
    full work for each of the first 16 rows, then one row's worth per 16 further rows."""
    P, W = hw.peak("float16") * ce, hw.mem_bandwidth * me * f
    compute = rows * 2.0 * K * N / P
    memory = (K * N * bpw + rows * (K + N) * 2.0) / W
    paid = rows if rows <= 16 else 16 + (rows - 16) / 16
    return t0 + max(compute, memory) + c * K * N * paid / hw.peak_flops["float32"]


@pytest.mark.parametrize("rows", [1.0, 4.0, 16.0, 48.0])
def test_one_gemm_pass_equals_the_hand_computation(rows):
    hw = load_hardware("a100-80gb")
    base = kernel_profile(hw)
    prof = dataclasses.replace(
        base,
        memory_efficiency=0.7,
        format_memory_factor={"int4": 0.6},
        format_dequant_ops={"int4": 3.0},
    )
    co = gemm_roofline(hw, prof, weights="int4", K=4096, N=12288, group_size=128, fixed_s=2e-5)
    bpw = WEIGHT_FORMATS["int4"].bytes_per_weight(d_model=4096, group_size=128)
    want = _hand_time(
        hw, me=0.7, ce=base.compute_efficiency, f=0.6, c=3.0, K=4096, N=12288, rows=rows,
        t0=2e-5, bpw=bpw,
    )  # fmt: skip
    assert float(gemm_time(co, [rows])[0]) == pytest.approx(want, rel=1e-12)


def test_a_gemm_of_a_models_weights_dequantizes_as_its_pass():
    """The one-GEMM pass prices dequantization as step_cost does (same vector peak, same
    work per weight and row, the device part's override): K x N = the pass's weights."""
    m, hw = load_model("llama-2-7b"), load_hardware("h100-sxm")
    part = device_part_for(hw)  # the part's tables, without a stack's graph padding of rows
    rt = dataclasses.replace(kernel_profile(hw), format_dequant_ops=part.format_dequant_ops)
    weights = m.decode_params  # a dense model's pass multiplies every decode weight once
    co = gemm_roofline(hw, rt, weights="int4", K=m.d_model, N=weights // m.d_model)
    for rows in (1, 3, 5):
        cost = step_cost(m, hw, batch=1, context=64, new_tokens=rows, weights="int4", runtime=rt)
        want = cost.dequant_time_s * (weights // m.d_model) * m.d_model / weights
        assert co.dequant_s * rows == pytest.approx(want, rel=1e-9)
    assert co.dequant_s == pytest.approx(0.019 * (weights // m.d_model) * m.d_model / 6.7e13)


def _synthetic(hw, *, me, f, c, t0, rng):
    base = kernel_profile(hw)
    prof = dataclasses.replace(
        base, memory_efficiency=me, format_memory_factor={"int4": f}, format_dequant_ops={"int4": c}
    )
    out = []
    for K, N in ((4096, 4096), (4096, 12288), (8192, 10240), (5120, 1024)):
        for w, g, fixed in (("float16", None, t0[0]), ("int4", 128, t0[1])):
            co = gemm_roofline(hw, prof, weights=w, K=K, N=N, group_size=g, fixed_s=fixed)
            rows = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
            t = gemm_time(co, rows) * np.exp(rng.normal(0.0, 0.01, rows.size))
            out += [
                {"sweep": "synthetic", "hardware": hw.slug, "kernel": w, "weights": w,
                 "group_size": g, "K": K, "N": N, "rows": r, "time_s": s, "source": "test",
                 "line": "1"}
                for r, s in zip(rows, t, strict=True)
            ]  # fmt: skip
    return pd.DataFrame(out).astype({"group_size": "Int64"})


@pytest.mark.parametrize("c", [3.0, 0.0])
def test_the_fit_recovers_known_parameters(c):
    hw = load_hardware("a100-80gb")
    rows = _synthetic(hw, me=0.75, f=0.6, c=c, t0=(1e-5, 2e-5), rng=np.random.default_rng(7))
    fit = fit_kernel_sweep(rows, hardware=hw)
    truth = {
        "memory_efficiency": 0.75,
        "fixed_s.float16": 1e-5,
        "fixed_s.int4": 2e-5,
        "format_memory_factor.int4": 0.6,
        "format_dequant_ops.int4": c,
    }
    for name, value in truth.items():
        se = fit.std_error(name)
        assert math.isfinite(se) and se < 0.2 * max(abs(value), 0.5), (name, se)
        # 1% noise on 56 calls: the estimate within 5 standard errors (plus a hair for c = 0,
        # a bound of the fit).
        assert abs(fit.value(name) - value) <= 5 * se + 1e-9, (name, fit.value(name), se)
    assert float(np.median(np.abs(fit.residuals["rel_error"]))) < 0.02


def test_times_beyond_the_peak_are_screened_by_shape():
    """A shape whose some row implies more than the card's fp16 peak leaves the fit whole; on
    the committed A100 sweep, Marlin at 5120 x 15360 and 8192 x 10240 (the README)."""
    hw = load_hardware("a100-80gb")
    fit = fit_committed_sweep("marlin-a100-vllm-layers")
    assert fit.excluded is not None and len(fit.excluded) == 18
    shapes = set(fit.excluded[["kernel", "K", "N"]].itertuples(index=False, name=None))
    assert shapes == {("marlin", 5120, 15360), ("marlin", 8192, 10240)}
    assert not fit.residuals.merge(fit.excluded[["kernel", "K", "N"]]).size
    one = pd.DataFrame(
        {"weights": ["int4"] * 2, "K": [4096] * 2, "N": [4096] * 2, "rows": [1, 64],
         "time_s": [1e-5, 2 * 64 * 4096 * 4096 / hw.peak("float16") * 0.99]}
    )  # fmt: skip
    assert beyond_peak(one, hw).tolist() == [True, True]
    assert beyond_peak(one.assign(time_s=[1e-5, 1e-5]), hw).tolist() == [False, False]


def test_marlin_pays_no_dequantization_per_row():
    """Both committed sweeps: Marlin's time does not grow with the rows (1-64 on the A100, 1-4
    on the H100), far below the 2.64 / 2.30 operations that quant.py fits on gpt-fast's
    batch-1 decode (another kernel)."""
    a100 = fit_committed_sweep("marlin-a100-vllm-layers")
    assert a100.value("format_dequant_ops.int4") < 0.1
    assert 2.64 - a100.value("format_dequant_ops.int4") > 5 * a100.std_error(
        "format_dequant_ops.int4"
    )
    h100 = fit_committed_sweep("marlin-h100-humming")
    for w, default in (("int4", 2.64), ("int8", 2.30)):
        assert default - h100.value(f"format_dequant_ops.{w}") > 10 * h100.std_error(
            f"format_dequant_ops.{w}"
        )
        assert 0.5 < h100.value(f"format_memory_factor.{w}") < 0.8
    assert h100.value("memory_efficiency") == pytest.approx(0.690, abs=0.002)


def _table(text: str, name: str) -> dict[str, float]:
    block = re.search(rf"\[{name}\]\n((?:\w+ = [-\d.e]+.*\n)+)", text)
    assert block, name
    return {k: float(v) for k, v in re.findall(r"(\w+) = ([-\d.e]+)", block.group(1))}


def test_device_parts_carry_the_fits_to_their_printed_digits():
    a100 = fit_committed_sweep("marlin-a100-vllm-layers")
    part = device_part_for(load_hardware("a100-80gb"))
    assert part.format_dequant_ops == {"int4": round(a100.value("format_dequant_ops.int4"), 2)}
    assert part.format_memory_factor is None  # not identified by that sweep (its README)
    h100 = fit_committed_sweep("marlin-h100-humming")
    text = (ROOT / "models" / "stacks" / "devices" / "h100-sxm.toml").read_text()
    for table in ("format_memory_factor", "format_dequant_ops"):
        for w, v in _table(text, table).items():
            assert v == round(h100.value(f"{table}.{w}"), 3), (table, w)


def test_device_part_numbers_reach_a_stacks_pass():
    """A stack composed on the card prices int4 verification with its part's fitted work: on
    the A100, none (Marlin), so five rows cost what one does but for the tokens' own bytes."""
    m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    rt = compose(load_stack("vllm-v1"), hw)
    cost = step_cost(m, hw, batch=1, context=128, new_tokens=5, weights="int4", runtime=rt)
    assert cost.dequant_time_s == 0.0
    default = step_cost(m, hw, batch=1, context=128, new_tokens=5, weights="int4")
    assert default.dequant_time_s > 1e-3  # the gpt-fast profile keeps its own kernel's fit


def test_kernel_fit_rows_name_each_sweep_and_kernel():
    rows = kernel_fit_rows()
    assert set(rows["family"]) == {"kernel sweeps (in-sample)"}
    assert len(rows) == 5
    h = rows.loc[(rows["sweep"] == "marlin-h100-humming") & (rows["weights"] == "int4")].iloc[0]
    assert h["worst_abs_error"] < 0.01 and h["calls"] == 3
