"""Colocated against disaggregated layouts on the same GPUs: the same requests in every
layout, the decode pool's TPOT equal to the colocated one's where no batch is shared, the
trade of TTFT for TPOT under load, trees through the comparison, and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tree_cases import DRAFT

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.disagg_layouts import LAYOUT_METRICS, colocated_run, compare_layouts
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.disagg import DisaggConfig, card_link, simulate_disaggregated
from specsim.sim.serving.tree_serving import TreeServingConfig
from specsim.sim.workload.arrivals import PoissonWorkload, TraceWorkload

TARGET, SMALL, HW = load_model("llama-2-7b"), load_model("llama-68m"), load_hardware("h100-sxm")
CONFIG = DisaggConfig(
    workload=PoissonWorkload(
        rate_per_s=1.0, requests=10, prompt_tokens=(256, 1536), output_tokens=(64, 256)
    ),
    prefill_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW)),
    decode_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=SMALL),
    acceptance=IIDAcceptance(alpha=0.8),
    policy=FixedGamma(gamma=3),
    link=card_link(HW, "interconnect"),
    max_batch=16,
    max_gamma=3,
)


def test_rows_cover_every_rate_mode_and_layout_on_the_same_gpus() -> None:
    df = compare_layouts(CONFIG, replicas=3, rates_per_s=(0.5, 4.0), requests=40)
    assert len(df) == 2 * 2 * 3
    assert set(df["layout"]) == {"colocated", "1+2", "2+1"}
    assert (df["gpus"] == 3).all()
    assert set(LAYOUT_METRICS) <= set(df.columns)
    # Without speculation the decode pool's TPOT is longer, in every layout and at each rate.
    spec = df[df["mode"] == "speculative"].set_index(["rate_per_s", "layout"])
    plain = df[df["mode"] == "plain"].set_index(["rate_per_s", "layout"])
    assert (plain["tpot_p50_s"] > spec["tpot_p50_s"]).all()


def test_the_colocated_row_is_a_colocated_serving_run() -> None:
    df = compare_layouts(CONFIG, replicas=2, rates_per_s=(2.0,), requests=30, seed=5)
    row = df[(df["layout"] == "colocated") & (df["mode"] == "speculative")].iloc[0]
    w = dataclasses.replace(CONFIG.workload, rate_per_s=2.0, requests=30)  # type: ignore[arg-type]
    direct = ServingConfig(
        workload=w,
        cost=CONFIG.decode_cost,
        acceptance=CONFIG.acceptance,  # type: ignore[arg-type]
        policy=CONFIG.policy,  # type: ignore[arg-type]
        max_batch=16,
        max_gamma=3,
        replicas=2,
        plain_twin=False,
    )
    m = simulate_serving(direct, np.random.default_rng(5)).metrics()
    for key in ("ttft_p99_s", "tpot_p99_s", "throughput_tokens_per_s"):
        assert row[key] == m[key]


def test_requests_far_apart_decode_alike_in_both_layouts() -> None:
    """No batch is shared: each request decodes alone on a decode replica as on a colocated
    one (the same requests and acceptance draws), so TPOT is the same; the split's TTFT
    adds the transfer and the first step to the prefill."""
    spaced = dataclasses.replace(
        CONFIG,
        workload=TraceWorkload(
            arrival_s=(0.0, 3.0, 6.0, 9.0),
            prompt_tokens=(700, 300, 1200, 500),
            output_tokens=(90, 40, 150, 60),
        ),
    )
    col = colocated_run(spaced, replicas=2, seed=1)
    split = dataclasses.replace(spaced, prefill_replicas=1, decode_replicas=1, plain_twin=False)
    dis = simulate_disaggregated(split, np.random.default_rng(1)).metrics()
    for key in ("tpot_p50_s", "tpot_p99_s"):
        assert dis[key] == pytest.approx(col[key], rel=1e-12)
    assert dis["ttft_p50_s"] > col["ttft_p50_s"]


def test_a_tree_plan_is_compared_colocated_and_split() -> None:
    tree = TreeServingConfig(
        workload=CONFIG.workload,
        parents=(-1, 0, 0, 1),
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
        plain_twin=False,
    )
    cfg = dataclasses.replace(
        CONFIG, acceptance=None, policy=None, tree=tree, decode_cost=tree.card_cost()
    )
    df = compare_layouts(cfg, replicas=2, rates_per_s=(2.0,), requests=20)
    assert len(df) == 4 and df["throughput_tokens_per_s"].gt(0).all()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"replicas": 1}, "replicas"),
        ({"prefill_replicas": (3,)}, "leaves no decode replica"),
        ({"rates_per_s": ()}, "at least one rate"),
        ({"requests": 1}, "requests"),
    ],
)
def test_bad_input_names_the_argument(kw: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"replicas": 3, "rates_per_s": (1.0,), "requests": 10}
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        compare_layouts(CONFIG, **args)  # type: ignore[arg-type]


def test_a_workload_without_a_rate_is_a_type_error() -> None:
    fixed = dataclasses.replace(
        CONFIG, workload=TraceWorkload(arrival_s=(0.0,), prompt_tokens=(10,), output_tokens=(5,))
    )
    with pytest.raises(TypeError, match="has no with_rate"):
        compare_layouts(fixed, replicas=2, rates_per_s=(1.0,), requests=10)


def test_plain_mode_has_no_proposer_or_tree() -> None:
    df = compare_layouts(
        dataclasses.replace(CONFIG, policy=FixedGamma(gamma=0)),
        replicas=2,
        rates_per_s=(1.0,),
        requests=12,
    )
    spec = df[df["mode"] == "speculative"].reset_index(drop=True)
    plain = df[df["mode"] == "plain"].reset_index(drop=True)
    for key in LAYOUT_METRICS:
        assert spec[key].tolist() == plain[key].tolist()
