"""The single-stream simulator against the closed forms, with tolerances from standard errors."""

import json
from dataclasses import replace

import numpy as np
import pytest

from specsim import theory
from specsim.acceptance.processes import IIDAcceptance, MarkovAcceptance, PositionalAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import (
    ConfidenceThreshold,
    FixedGamma,
    HeuristicPlusTwoMinusOne,
    OptimalStatic,
    Oracle,
)
from specsim.sim import CardCost, PlainCost, StreamConfig, simulate_stream
from specsim.sim.stream.stream import run_lengths, simulate_stream_metrics

Z = 4.4  # two-sided false-alarm rate about 1e-5 per check


def run(alpha=0.7, gamma=4, c=0.05, tokens=60_000, seed=0, **kw):
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=kw.pop("acceptance", IIDAcceptance(alpha=alpha)),
        policy=kw.pop("policy", FixedGamma(gamma=gamma)),
        cost=kw.pop("cost", PlainCost(c=c)),
        max_gamma=kw.pop("max_gamma", 16),
        **kw,
    )
    return simulate_stream(cfg, np.random.default_rng(seed))


@pytest.mark.parametrize("gamma", [0, 1, 5])
def test_known_answers_alpha_zero_and_one(gamma: int) -> None:
    m0 = run(alpha=0.0, gamma=gamma, tokens=500).metrics()
    assert m0["tokens_per_target_pass"] == 1.0
    m1 = run(alpha=1.0, gamma=gamma, tokens=500).metrics()
    assert m1["tokens_per_target_pass"] == pytest.approx(gamma + 1, rel=0.02)
    assert m1["target_positions_wasted"] == 0


@pytest.mark.parametrize(("alpha", "gamma", "c"), [(0.3, 2, 0.0), (0.7, 4, 0.05), (0.9, 8, 0.2)])
def test_simulation_agrees_with_theory(alpha: float, gamma: int, c: float) -> None:
    m = run(alpha=alpha, gamma=gamma, c=c).metrics()
    for key, formula in (
        ("tokens_per_target_pass", theory.expected_tokens(alpha, gamma)),
        ("speedup", theory.walltime_speedup(alpha, gamma, c)),
        ("ops_factor", theory.ops_factor(alpha, gamma, c)),
    ):
        assert abs(m[key] - formula) < Z * m[f"{key}_se"], key


def test_standard_error_is_honest() -> None:
    """Batch-means SE against the known variance: SE * sqrt(n) ~ sd of tokens per pass."""
    m = run(alpha=0.6, gamma=5, tokens=200_000).metrics()
    sd = np.sqrt(theory.tokens_variance(0.6, 5))
    assert m["tokens_per_target_pass_se"] * np.sqrt(m["target_passes"]) == pytest.approx(
        sd, rel=0.35
    )


def test_positional_acceptance_matches_its_closed_form() -> None:
    proc = PositionalAcceptance(alphas=(0.9, 0.8, 0.6, 0.4))
    m = run(acceptance=proc, gamma=4).metrics()
    assert (
        abs(m["tokens_per_target_pass"] - proc.mean_tokens(4)) < Z * m["tokens_per_target_pass_se"]
    )


def test_markov_acceptance_breaks_the_iid_formula() -> None:
    proc = MarkovAcceptance.two_state(mean=0.7, spread=0.25, persistence=0.95)
    m = run(acceptance=proc, gamma=4, tokens=200_000).metrics()
    e = theory.expected_tokens(0.7, 4)
    assert (e - m["tokens_per_target_pass"]) > Z * m["tokens_per_target_pass_se"]


def test_same_seed_same_result_and_methods_agree() -> None:
    a, b = run(seed=5).metrics(), run(seed=5).metrics()
    assert a == b
    assert run(seed=6).metrics() != a
    for cost in (PlainCost(c=0.3), PlainCost(c=0.3, overlap=True)):
        fast = run(tokens=5_000, cost=cost)
        events = simulate_stream(
            StreamConfig(
                tokens=5_000,
                acceptance=IIDAcceptance(alpha=0.7),
                policy=FixedGamma(gamma=4),
                cost=cost,
                max_gamma=16,
            ),
            np.random.default_rng(0),
            method="events",
        )
        np.testing.assert_allclose(events.blocks.verify_end, fast.blocks.verify_end, rtol=1e-12)
        np.testing.assert_allclose(
            events.blocks.overlap_wasted_s, fast.blocks.overlap_wasted_s, rtol=1e-9, atol=1e-12
        )


def test_card_cost_methods_agree_and_report_energy() -> None:
    cost = CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )
    fast = run(tokens=800, prompt=256, cost=cost)
    cfg = StreamConfig(
        tokens=800,
        prompt=256,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=4),
        cost=cost,
        max_gamma=16,
    )
    ev = simulate_stream(cfg, np.random.default_rng(0), method="events")
    np.testing.assert_allclose(ev.blocks.verify_end, fast.blocks.verify_end, rtol=1e-12)
    m = fast.metrics()
    assert m["energy_j"] > m["energy_j_wasted"] > 0
    assert 0 < m["energy_j_per_token"] < m["baseline_energy_j_per_token"] * 10


def test_overlap_discards_predrafted_work() -> None:
    m = run(alpha=0.5, gamma=4, c=0.2, cost=PlainCost(c=0.2, overlap=True)).metrics()
    assert m["overlap_draft_s_wasted"] > 0
    assert m["overlapped"] is True


def test_policies_order_as_expected() -> None:
    proc = MarkovAcceptance.two_state(mean=0.7, spread=0.25, persistence=0.9)
    fixed = run(acceptance=proc, gamma=4, c=0.05).metrics()
    oracle = run(acceptance=proc, policy=Oracle(max_gamma=16), c=0.05).metrics()
    assert oracle["speedup"] > fixed["speedup"]
    assert oracle["target_positions_wasted"] == 0
    best = OptimalStatic(alpha=0.7, c=0.05)
    assert best.gamma == theory.optimal_gamma(0.7, 0.05)
    hf = run(acceptance=proc, policy=HeuristicPlusTwoMinusOne(initial=5, max_gamma=16)).metrics()
    assert 1 <= hf["mean_gamma"] <= 16
    conf = run(acceptance=proc, policy=ConfidenceThreshold(threshold=0.6, max_gamma=8)).metrics()
    assert conf["mean_gamma"] < 8


def test_event_table_and_chrome_trace_are_consistent(tmp_path) -> None:
    r = run(tokens=300, cost=PlainCost(c=0.3, overlap=True))
    ev = r.events()
    m = r.metrics()
    assert ev.loc[ev.kind == "emit", "tokens"].sum() == m["tokens"]
    assert (ev.loc[ev.kind == "verify", "tokens"].sum()) == m["target_positions_verified"]
    trace = r.chrome_trace()
    json.loads(json.dumps(trace))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {"draft", "target", "output", "discarded"} <= names
    assert all(e["dur"] >= 0 for e in trace["traceEvents"] if e["ph"] == "X")


@pytest.mark.parametrize(
    ("kwargs", "message", "error"),
    [
        ({"tokens": 0}, "tokens", ValueError),
        ({"prompt": -1}, "prompt", ValueError),
        ({"max_gamma": 2.5}, r"max_gamma: expected an integer >= 0, got 2\.5", TypeError),
    ],
)
def test_bad_config_raises(kwargs, message, error) -> None:
    base = {
        "tokens": 10,
        "acceptance": IIDAcceptance(alpha=0.5),
        "policy": FixedGamma(gamma=2),
        "cost": PlainCost(c=0.1),
    }
    with pytest.raises(error, match=message):
        StreamConfig(**{**base, **kwargs})


def test_policy_beyond_max_gamma_is_an_error() -> None:
    message = r"chose gamma: expected an integer in 0\.\.\d+, got \d+ \(at most max_gamma\)"
    with pytest.raises(ValueError, match=message):
        run(tokens=100, policy=HeuristicPlusTwoMinusOne(initial=20, max_gamma=64), max_gamma=8)
    with pytest.raises(ValueError, match=message):  # the fixed-gamma fast path
        run(tokens=100, gamma=10, max_gamma=4)


def test_optimal_static_runs_as_its_fixed_gamma() -> None:
    best = OptimalStatic(alpha=0.7, c=0.05, max_gamma=16)
    ours = run(policy=best, tokens=20_000).metrics()
    assert ours == run(gamma=best.gamma, tokens=20_000).metrics()


def test_plain_cost_validation() -> None:
    with pytest.raises(ValueError, match="c:"):
        PlainCost(c=-0.1)
    with pytest.raises(ValueError, match=r"v\[1\]"):
        PlainCost(c=0.1, v=(1.0, 0.0))


def test_capped_run_lengths_equal_the_uncapped_ones_cut() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        lengths = rng.integers(0, 12, rng.integers(1, 6))
        ok = rng.random(int(lengths.sum())) < rng.random()
        for cap in (0, 1, 2, 5, 8, 9, 20):
            want = np.minimum(run_lengths(ok, lengths), cap)
            assert np.array_equal(run_lengths(ok, lengths, cap), want)
            assert np.array_equal(run_lengths(ok, None, cap), np.minimum(run_lengths(ok), cap))


def _config(tokens, alpha=0.7, gamma=4, cost=None):
    return StreamConfig(
        tokens=tokens,
        acceptance=IIDAcceptance(alpha=alpha),
        policy=FixedGamma(gamma=gamma),
        cost=cost or PlainCost(c=0.05),
        max_gamma=gamma,
    )


@pytest.mark.parametrize("cost", [PlainCost(c=0.05), PlainCost(c=0.3, overlap=True)])
def test_a_stream_in_one_chunk_is_the_plain_run(cost) -> None:
    """Issue 13: chunking must not move any figure of a run that fits in one chunk."""
    cfg = _config(20_000, cost=cost)
    whole = simulate_stream(cfg, np.random.default_rng(3)).metrics()
    assert simulate_stream_metrics(cfg, np.random.default_rng(3)) == whole
    assert whole["tokens_requested"] == 20_000 and 20_000 <= whole["tokens"] <= 20_004


@pytest.mark.parametrize(("alpha", "per_pass"), [(0.0, 1.0), (1.0, 5.0)])
def test_chunks_keep_the_known_answers(alpha: float, per_pass: float) -> None:
    m = simulate_stream_metrics(
        _config(10_000, alpha=alpha), np.random.default_rng(0), chunk_tokens=997
    )
    assert m["tokens_per_target_pass"] == per_pass
    assert m["speedup"] == pytest.approx(per_pass / (1 + 4 * 0.05))


def test_chunks_add_up_and_only_the_last_block_overshoots() -> None:
    done: list[tuple[int, int]] = []
    m = simulate_stream_metrics(
        _config(60_000),
        np.random.default_rng(1),
        chunk_tokens=4096,
        progress=lambda d, t: done.append((d, t)),
    )
    assert m["tokens_requested"] == 60_000 and 60_000 <= m["tokens"] <= 60_004
    assert len(done) >= 60_000 // 4100 and done[-1] == (m["tokens"], 60_000)
    assert [d for d, _ in done] == sorted(d for d, _ in done)
    exact = theory.expected_tokens(0.7, 4)
    assert abs(m["tokens_per_target_pass"] - exact) < Z * m["tokens_per_target_pass_se"]
    assert m["target_calls_per_token"] == pytest.approx(1 / m["tokens_per_target_pass"])
    speedup = exact / (1 + 4 * 0.05)  # Theorem 3.8 with v = 1
    assert abs(m["speedup"] - speedup) < Z * m["speedup_se"]
    whole = run(alpha=0.7, gamma=4, tokens=60_000, seed=1, max_gamma=4).metrics()
    assert set(m) == set(whole)


def test_chunk_size_is_checked() -> None:
    with pytest.raises(ValueError, match="chunk_tokens"):
        simulate_stream_metrics(_config(100), np.random.default_rng(0), chunk_tokens=0)


@pytest.mark.parametrize("method", ["fast", "events"])
@pytest.mark.parametrize(
    "cost",
    [
        PlainCost(c=0.05),
        PlainCost(c=0.1, v=[1.0, 1.1, 1.2, 1.3, 1.5]),
        PlainCost(c=0.3, overlap=True),
    ],
)
def test_event_table_and_trace_start_at_exactly_zero(method, cost) -> None:
    """Issue 13: the first pass started at -5.55e-17 (end minus duration)."""
    r = simulate_stream(_config(500, cost=cost), np.random.default_rng(7), method=method)
    ev = r.events()
    assert ev["start_s"].min() == 0.0 and (ev["start_s"] >= 0).all()
    assert min(e["ts"] for e in r.chrome_trace()["traceEvents"] if "ts" in e) == 0.0


def test_the_last_blocks_lookahead_is_checked_before_the_run() -> None:
    """The last block starts at most at prompt + tokens - 1 and drafts gamma positions
    (llama-68m: 2048): 1800 + 245 + 3 reaches 2048 exactly and runs; one token more is
    refused up front, naming the field, instead of failing in the last pass."""
    cost = CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )
    ok = StreamConfig(
        tokens=245,
        prompt=1800,
        acceptance=IIDAcceptance(alpha=0.9),
        policy=FixedGamma(gamma=4),
        cost=cost,
    )
    assert simulate_stream(ok, np.random.default_rng(0)).metrics()["tokens"] >= 245
    with pytest.raises(ValueError, match=r"^prompt: 1800 \+ 249 new tokens exceeds llama-68m"):
        replace(ok, tokens=246)
