"""The (P, D) capacity walk of a disaggregated deployment: its answer holds, one decode
replica fewer does not, speculation needs no more GPUs than plain decoding where TPOT
binds, and bad input names its argument."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity import SLO
from specsim.capacity.disagg import disagg_capacity, serve_pools, smallest_pools
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost
from specsim.sim.disagg import DisaggConfig, card_link
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
SLO_ = SLO(tpot_p99_s=0.006, ttft_p99_s=0.5)


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def walked() -> object:
    return disagg_capacity(
        CONFIG, rate_per_s=40.0, slo=SLO_, requests=800, seed=1, max_prefill=3, max_decode=5
    )


def test_answer_holds_and_one_decode_replica_fewer_does_not(walked: object) -> None:
    frame = walked  # type: ignore[assignment]
    best = smallest_pools(frame)  # type: ignore[arg-type]
    spec = best[best["mode"] == "speculative"].iloc[0]
    assert spec["outcome"] == "holds"
    p, d = int(spec["prefill_replicas"]), int(spec["decode_replicas"])
    assert spec["gpus"] == p + d
    rows = frame[(frame["mode"] == "speculative")]  # type: ignore[index]
    fewer = rows[(rows["prefill_replicas"] == p) & (rows["decode_replicas"] == d - 1)]
    if d > 1:  # the walk tried it, and it did not hold
        assert len(fewer) == 1 and fewer["outcome"].iloc[0] != "holds"


def test_speculation_needs_no_more_gpus_where_tpot_binds(walked: object) -> None:
    frame = walked  # type: ignore[assignment]
    best = smallest_pools(frame).set_index("mode")  # type: ignore[arg-type]
    plain = frame[frame["mode"] == "plain"]  # type: ignore[index]
    # Plain decoding's TPOT misses 6 ms on every pair (its p99 interval lies above it).
    assert (plain["tpot_p99_low_s"] > SLO_.tpot_p99_s).all()
    assert "plain" not in best.index and "speculative" in best.index


def test_an_unstable_pool_fails_the_pair() -> None:
    res = serve_pools(CONFIG, rate_per_s=40.0, requests=300, prefill=1, decode=1, seed=1)
    from specsim.capacity.disagg import judge_pair

    row = judge_pair(res, SLO_)
    assert row["decode_stable"] is False and row["outcome"] == "fails"


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="max_prefill"):
        disagg_capacity(CONFIG, rate_per_s=1.0, slo=SLO_, max_prefill=0)
    trace = TraceWorkload(arrival_s=(0.0,), prompt_tokens=(10,), output_tokens=(5,))
    import dataclasses

    with pytest.raises(TypeError, match="with_rate"):
        serve_pools(
            dataclasses.replace(CONFIG, workload=trace),
            rate_per_s=1.0,
            requests=2,
            prefill=1,
            decode=1,
            seed=0,
        )
    assert np.isfinite(SLO_.tpot_p99_s)


def test_the_capacity_study_sizes_the_pools_when_disaggregated() -> None:
    from specsim.plots.figures import alt_text
    from specsim.report.studies import run_study

    out = run_study(
        "capacity",
        overrides={
            "disaggregated": True,
            "hardware": ("h100-sxm",),
            "target": "llama-3.1-8b",
            "rate_per_s": 12.0,
            "prompt_tokens": (256, 1024),
            "output_tokens": (64, 256),
            "requests": 400,
            "fast_max_requests": 400,
            "max_prefill": 2,
            "max_decode": 3,
            "slo_tpot_p99_s": 0.012,
            "slo_ttft_p99_s": 1.0,
        },
        fast=True,
    )
    data = out.data
    assert {"prefill_replicas", "decode_replicas", "gpus", "outcome", "chosen"} <= set(data)
    assert set(data["mode"]) == {"speculative", "plain"}
    chosen = data[data["chosen"]]
    assert (chosen["outcome"] == "holds").all() and len(chosen) <= 2
    assert "Disaggregated capacity for 12 requests/s" in out.summary
    fig = out.figures["capacity_pools"]
    assert fig.axes[0].get_xlabel() == "prefill replicas P (count)"
    assert len(alt_text(fig) or "") > 40
