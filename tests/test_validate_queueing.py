"""The serving simulator against queueing theory: the checks pass, and fail when it is wrong."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.sim.serving import ServingConfig
from specsim.sim.workload import Fixed, Geometric
from specsim.theory.queueing import md1_mean_wait, mg1_mean_wait
from specsim.validate_queueing import (
    QUEUEING_COLUMNS,
    Z_CHECK,
    mean_wait_check,
    queueing_checks,
    queueing_summary,
    simulate_queue,
    waiting_times,
)

HAS_REPLICAS = "replicas" in {f.name for f in dataclasses.fields(ServingConfig)}


def test_waiting_time_is_ttft_less_the_prefill_pass() -> None:
    # Three one-token requests at once on a 1 s pass: they start at 0, 1 and 2 s.
    from specsim.acceptance import IIDAcceptance
    from specsim.policies import FixedGamma
    from specsim.sim import PlainCost
    from specsim.sim.serving import simulate_serving
    from specsim.sim.workload import TraceWorkload

    work = TraceWorkload(arrival_s=(0.0, 0.0, 0.0, 5.0), prompt_tokens=(1,) * 4,
                         output_tokens=(1, 1, 3, 1))  # fmt: skip
    cfg = ServingConfig(workload=work, cost=PlainCost(c=0.0, step_s=1.0),
                        acceptance=IIDAcceptance(alpha=0.0), policy=FixedGamma(gamma=0),
                        max_batch=1, max_gamma=0, plain_twin=False)  # fmt: skip
    req = simulate_serving(cfg, np.random.default_rng(0)).requests()
    assert waiting_times(req, prefill_s=1.0).tolist() == [0.0, 1.0, 2.0, 0.0]
    # Service is output tokens x step: the three-token request holds the server 3 s.
    assert (req["finish_s"] - req["first_token_s"] + 1.0).tolist() == [1.0, 1.0, 3.0, 1.0]


def test_mg1_wait_matches_pollaczek_khinchine() -> None:
    # (M/D/1 and two M/G/1 rows are in the table below; this is another length law.)
    rng = np.random.default_rng(11)
    dist = Geometric(mean_tokens=3.0)
    step = 1 / 3
    waits = waiting_times(simulate_queue(arrival_rate=0.5, output=dist, step_s=step,
                                         requests=6_000, rng=rng), prefill_s=step)  # fmt: skip
    want = mg1_mean_wait(arrival_rate=0.5, mean_service=1.0,
                         second_moment=dist.second_moment * step * step)  # fmt: skip
    check = mean_wait_check(waits, expected=want)
    assert check["pass"] and abs(check["z"]) <= Z_CHECK and check["se"] < 0.1 * want


def test_the_check_fails_when_the_simulator_is_wrong() -> None:
    # The simulator's passes take twice what the formula assumes: the check must see it.
    rng = np.random.default_rng(12)
    waits = waiting_times(simulate_queue(arrival_rate=0.25, output=Fixed(value=1), step_s=2.0,
                                         requests=6_000, rng=rng), prefill_s=2.0)  # fmt: skip
    check = mean_wait_check(waits, expected=md1_mean_wait(arrival_rate=0.25, service=1.0))
    assert not check["pass"] and check["z"] > Z_CHECK
    # The same run against the right service time passes.
    assert mean_wait_check(waits, expected=md1_mean_wait(arrival_rate=0.25, service=2.0))["pass"]


def test_bounds_verdict() -> None:
    waits = np.random.default_rng(0).exponential(1.0, size=6000)
    inside = mean_wait_check(waits, expected=0.5, expected_high=1.5)
    assert inside["z"] == 0.0 and inside["pass"]
    below = mean_wait_check(waits, expected=2.0, expected_high=3.0)
    assert below["z"] < -Z_CHECK and not below["pass"]
    with pytest.raises(ValueError, match="too few"):
        mean_wait_check(waits[:20], expected=1.0)


def test_queueing_table_passes() -> None:
    table = queueing_checks(np.random.default_rng(1), quick=True)
    assert list(table.columns) == QUEUEING_COLUMNS
    ran, passed, skipped = queueing_summary(table)
    assert ran == passed >= 4 and ran + skipped == len(table)
    jsq = table[table["check"].str.startswith("JSQ")].iloc[0]
    if HAS_REPLICAS:
        assert jsq["pass"] is True or jsq["pass"] == True  # noqa: E712
    else:
        assert jsq["pass"] is None and "skipped" in jsq["note"]
    assert (table.loc[table["pass"].notna(), "se"] > 0).all()


@pytest.mark.skipif(not HAS_REPLICAS, reason="ServingConfig has no replicas field yet")
def test_more_replicas_behind_jsq_wait_between_the_bounds() -> None:
    from specsim.theory.queueing import jsq_mean_wait_bounds

    dist = Geometric(mean_tokens=16.0)
    step = 1 / 16
    req = simulate_queue(arrival_rate=2.1, output=dist, step_s=step, requests=3000,
                         rng=np.random.default_rng(3), servers=3)  # fmt: skip
    low, high = jsq_mean_wait_bounds(arrival_rate=2.1, mean_service=1.0, servers=3)
    assert mean_wait_check(waiting_times(req, prefill_s=step), expected=low,
                           expected_high=high)["pass"]  # fmt: skip


# Goodput (specsim.sim.records.goodput) -------------------------------------------------------
def test_goodput_known_answer_and_bad_targets() -> None:
    import pandas as pd

    from specsim.sim.records import goodput

    req = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0, 3.0],
                        "first_token_s": [0.2, 1.9, 2.1, 3.1], "finish_s": [1.2, 2.9, 6.1, 4.0],
                        "output_tokens": [11, 11, 11, 1]})  # fmt: skip
    # TTFT 0.2, 0.9, 0.1, 0.1; TPOT 0.1, 0.1, 0.4, none: requests 0 and 3 meet both.
    assert goodput(req, ttft_s=0.5, tpot_s=0.2) == pytest.approx(2 / 6.1)
    assert goodput(req, ttft_s=1.0, tpot_s=0.5) == pytest.approx(4 / 6.1)  # all of them
    assert goodput(req, ttft_s=0.05, tpot_s=0.5) == 0.0
    unfinished = req.assign(finish_s=np.nan)
    assert goodput(unfinished, ttft_s=1.0, tpot_s=1.0) == 0.0
    for bad in ({"ttft_s": 0.0, "tpot_s": 1.0}, {"ttft_s": 1.0, "tpot_s": -1.0}):
        with pytest.raises(ValueError, match=next(k for k, v in bad.items() if v <= 0)):
            goodput(req, **bad)


def test_goodput_metrics_keys_are_added_only_with_targets() -> None:
    from specsim.acceptance import IIDAcceptance
    from specsim.policies import FixedGamma
    from specsim.sim import PlainCost
    from specsim.sim.arrivals import PoissonWorkload
    from specsim.sim.serving import simulate_serving

    cfg = ServingConfig(
        workload=PoissonWorkload(rate_per_s=30.0, requests=80, prompt_tokens=(8, 64),
                                 output_tokens=(4, 40)),
        cost=PlainCost(c=0.05, step_s=0.01), acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3), max_batch=8, max_gamma=3,
    )  # fmt: skip
    result = simulate_serving(cfg, np.random.default_rng(7))
    plain = result.metrics()
    assert "goodput_requests_per_s" not in plain
    m = result.metrics(ttft_target_s=plain["ttft_p50_s"], tpot_target_s=plain["tpot_p90_s"])
    assert {k: v for k, v in m.items() if k in plain} == plain  # existing keys unchanged
    assert set(m) - set(plain) == {"goodput_requests_per_s", "slo_attainment"}
    assert 0 < m["slo_attainment"] < 1
    assert m["goodput_requests_per_s"] == pytest.approx(m["slo_attainment"] * 80 / m["time_s"])
    loose = result.metrics(ttft_target_s=1e9, tpot_target_s=1e9)
    assert loose["slo_attainment"] == 1.0
    with pytest.raises(ValueError, match="tpot_s: expected a latency target > 0 seconds, got None"):
        result.metrics(ttft_target_s=1.0)  # one target alone is not goodput
