"""The serving simulator against queueing theory: the checks pass, and fail when it is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.sim.serving import ServingConfig
from specsim.sim.workload.workload import Fixed, Geometric
from specsim.theory.queueing import (
    jsq_mean_wait,
    jsq_mean_wait_bounds,
    md1_mean_wait,
    mg1_mean_wait,
)
from specsim.validate.queueing import (
    JSQ_ROWS,
    OVERLOAD,
    QUEUEING_COLUMNS,
    Z_CHECK,
    jsq_waits,
    mean_wait_check,
    overload_check,
    queueing_checks,
    queueing_summary,
    serve_exponential,
    simulate_queue,
    waiting_times,
)


def test_waiting_time_is_ttft_less_the_prefill_pass() -> None:
    # Three one-token requests at once on a 1 s pass: they start at 0, 1 and 2 s.
    from specsim.acceptance.processes import IIDAcceptance
    from specsim.policies.lookahead import FixedGamma
    from specsim.sim import PlainCost
    from specsim.sim.serving import simulate_serving
    from specsim.sim.workload.workload import TraceWorkload

    work = TraceWorkload(
        arrival_s=(0.0, 0.0, 0.0, 5.0), prompt_tokens=(1,) * 4, output_tokens=(1, 1, 3, 1)
    )
    cfg = ServingConfig(
        workload=work,
        cost=PlainCost(c=0.0, step_s=1.0),
        acceptance=IIDAcceptance(alpha=0.0),
        policy=FixedGamma(gamma=0),
        max_batch=1,
        max_gamma=0,
        plain_twin=False,
    )
    req = simulate_serving(cfg, np.random.default_rng(0)).requests()
    assert waiting_times(req, prefill_s=1.0).tolist() == [0.0, 1.0, 2.0, 0.0]
    # Service is output tokens x step: the three-token request holds the server 3 s.
    assert (req["finish_s"] - req["first_token_s"] + 1.0).tolist() == [1.0, 1.0, 3.0, 1.0]


def test_mg1_wait_matches_pollaczek_khinchine() -> None:
    # (M/D/1 and two M/G/1 rows are in the table below; this is another length law.)
    rng = np.random.default_rng(11)
    dist = Geometric(mean_tokens=3.0)
    step = 1 / 3
    waits = waiting_times(
        simulate_queue(arrival_rate=0.5, output=dist, step_s=step, requests=6_000, rng=rng),
        prefill_s=step,
    )
    want = mg1_mean_wait(
        arrival_rate=0.5, mean_service=1.0, second_moment=dist.second_moment * step * step
    )
    check = mean_wait_check(waits, expected=want)
    assert check["pass"] and abs(check["z"]) <= Z_CHECK and check["se"] < 0.1 * want


def test_the_check_fails_when_the_simulator_is_wrong() -> None:
    # The simulator's passes take twice what the formula assumes: the check must see it.
    rng = np.random.default_rng(12)
    waits = waiting_times(
        simulate_queue(
            arrival_rate=0.25, output=Fixed(value=1), step_s=2.0, requests=6_000, rng=rng
        ),
        prefill_s=2.0,
    )
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
    assert ran == passed == len(table) == 5 + len(JSQ_ROWS) and skipped == 0
    over = table[table["check"] == "overload"].iloc[0]
    assert over["load"] == OVERLOAD[0] > 1 and over["note"].count("overloaded: ") == 1
    jsq = table[table["check"] == "JSQ"]
    assert jsq["servers"].tolist() == [k for k, _, _ in JSQ_ROWS]
    for row in jsq.itertuples():
        rate = row.load * row.servers
        assert row.expected == jsq_mean_wait(
            arrival_rate=rate, mean_service=1.0, servers=row.servers
        )
        # The exact value, not a bound: strictly inside the old bounds, and the simulated
        # mean is precise enough (se < 12% of it) to tell JSQ from the bounds' rules.
        low, high = jsq_mean_wait_bounds(arrival_rate=rate, mean_service=1.0, servers=row.servers)
        assert low < row.expected < high and row.se < 0.12 * row.expected
    assert (table.loc[table["pass"].notna(), "se"] > 0).all()


# Join-the-shortest-queue rows -----------------------------------------------------------------
def test_exponential_service_known_answer() -> None:
    # Two replicas, four requests of 1 s at 0, 0.1, 0.2, 0.3 s: the first two start at once;
    # the third finds both busy with one each (a tie: replica 0) and starts at 1.0 s, the
    # fourth joins replica 1 (fewer waiting) and starts at 1.1 s.
    arrival, service = np.array([0.0, 0.1, 0.2, 0.3]), np.ones(4)
    for router in ("join-shortest-queue", "least-outstanding"):
        waits = serve_exponential(
            arrival, service, servers=2, router=router, rng=np.random.default_rng(0)
        )
        assert waits == pytest.approx([0.0, 0.0, 0.8, 0.8], abs=1e-12)
    # Round-robin ignores the queues: requests 0 and 2 share replica 0, 1 and 3 replica 1.
    waits = serve_exponential(
        arrival,
        np.array([1.0, 1.0, 0.5, 0.5]),
        servers=2,
        router="round-robin",
        rng=np.random.default_rng(0),
    )
    assert waits == pytest.approx([0.0, 0.0, 0.8, 0.8], abs=1e-12)


def test_one_token_requests_stay_outstanding_while_prefilled() -> None:
    # As above with one-token (prefill-only) requests: the second arrival must go to the idle
    # replica 1, not queue behind request 0 on replica 0.
    arrival, service = np.array([0.0, 0.1, 0.2, 0.3]), np.ones(4)
    waits = serve_exponential(
        arrival,
        service,
        servers=2,
        router="join-shortest-queue",
        rng=np.random.default_rng(0),
        output_tokens=1,
    )
    assert waits == pytest.approx([0.0, 0.0, 0.8, 0.8], abs=1e-12)


def test_four_replicas_behind_jsq_match_the_chain() -> None:
    waits = jsq_waits(arrival_rate=2.4, servers=4, requests=10_000, rng=np.random.default_rng(24))
    check = mean_wait_check(
        waits, expected=jsq_mean_wait(arrival_rate=2.4, mean_service=1.0, servers=4)
    )
    assert check["pass"] and check["se"] < 0.1 * check["expected"]


def _round_robin_wait(k: int, lam: float) -> float:
    """Round-robin over k exponential servers (mean 1): each sees Erlang-k inter-arrivals of
    rate lam, a GI/M/1 queue: W = s / (1 - s), s = (lam / (lam + 1 - s))^k (Kleinrock 1975,
    Sec. 6.4)."""
    s = 0.5
    for _ in range(500):
        s = (lam / (lam + 1.0 - s)) ** k
    return s / (1.0 - s)


def test_the_jsq_check_fails_when_the_simulator_is_wrong() -> None:
    # A router that does not look at the queues (round-robin) against the JSQ value: fails,
    # while the same waits match round-robin's own exact value (so the check is not noise).
    k, lam = 3, 1.5
    waits = jsq_waits(
        arrival_rate=lam,
        servers=k,
        requests=16_000,
        router="round-robin",
        rng=np.random.default_rng(22),
    )
    jsq = jsq_mean_wait(arrival_rate=lam, mean_service=1.0, servers=k)
    check = mean_wait_check(waits, expected=jsq)
    assert not check["pass"] and check["z"] > Z_CHECK
    assert mean_wait_check(waits, expected=_round_robin_wait(k, lam))["pass"]
    # Service half as slow again as the formula assumes (load 0.75, not 0.5): fails too.
    slow = jsq_waits(
        arrival_rate=1.0, servers=2, requests=6_000, served_mean=1.5, rng=np.random.default_rng(23)
    )
    check = mean_wait_check(
        slow, expected=jsq_mean_wait(arrival_rate=1.0, mean_service=1.0, servers=2)
    )
    assert not check["pass"] and check["z"] > Z_CHECK


# Goodput (specsim.sim.results.records.goodput) ---------------------------------------------
def test_goodput_known_answer_and_bad_targets() -> None:
    import pandas as pd

    from specsim.sim.results.records import goodput

    req = pd.DataFrame(
        {
            "arrival_s": [0.0, 1.0, 2.0, 3.0],
            "first_token_s": [0.2, 1.9, 2.1, 3.1],
            "finish_s": [1.2, 2.9, 6.1, 4.0],
            "output_tokens": [11, 11, 11, 1],
        }
    )
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
    from specsim.acceptance.processes import IIDAcceptance
    from specsim.policies.lookahead import FixedGamma
    from specsim.sim import PlainCost
    from specsim.sim.serving import simulate_serving
    from specsim.sim.workload.arrivals import PoissonWorkload

    cfg = ServingConfig(
        workload=PoissonWorkload(
            rate_per_s=30.0, requests=80, prompt_tokens=(8, 64), output_tokens=(4, 40)
        ),
        cost=PlainCost(c=0.05, step_s=0.01),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_batch=8,
        max_gamma=3,
    )
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


# Above saturation ----------------------------------------------------------------------------
def test_the_overload_row_fails_when_the_run_is_not_flagged() -> None:
    # The same check at a load the server sustains: the detector does not flag it, so the
    # row fails (it passes only on a flagged run serving at its rate).
    stable = overload_check(np.random.default_rng(3), n=4000, load=0.8)
    assert stable["pass"] is False and stable["reason"].startswith("stable: ")
    over = overload_check(np.random.default_rng(3), n=4000)
    assert over["pass"] is True and over["reason"].startswith("overloaded: ")
    assert abs(over["z"]) <= Z_CHECK and over["expected"] == 1.0
