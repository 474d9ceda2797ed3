import math

import numpy as np
import pytest

from specsim.acceptance import processes as acc
from specsim.acceptance.processes import accepted_in_block, leading_run


def _se_check(sample: np.ndarray, expected: float) -> None:
    se = sample.std(ddof=1) / math.sqrt(sample.shape[0])
    assert abs(sample.mean() - expected) < 4.4 * se + 1e-12


def test_iid_acceptance_rate(rng: np.random.Generator) -> None:
    d = acc.IIDAcceptance(alpha=0.3).sample(rng, 100_000)
    _se_check((d.u < d.prob).astype(float), 0.3)


def test_markov_has_the_stated_mean_and_clusters(rng: np.random.Generator) -> None:
    m = acc.MarkovAcceptance.two_state(mean=0.6, spread=0.3, persistence=0.95)
    assert m.mean == pytest.approx(0.6)
    s = m.states(rng, 200_000)
    # Stationary occupancy 1/2 each; runs last 1/(1 - persistence * (1 - 1/2)) on average.
    assert abs(s.mean() - 0.5) < 0.02
    changes = np.count_nonzero(np.diff(s))
    expected_changes = (s.shape[0] - 1) * (1 - 0.95) * 0.5
    assert abs(changes - expected_changes) < 5 * math.sqrt(expected_changes)
    d = m.sample(rng, 200_000)
    hits = (d.u < d.prob).astype(float)
    # Burstiness: acceptance is positively autocorrelated, unlike i.i.d.
    assert np.corrcoef(hits[:-1], hits[1:])[0, 1] > 0.05


def test_positional_mean_tokens(rng: np.random.Generator) -> None:
    p = acc.PositionalAcceptance(alphas=(0.9, 0.7, 0.5))
    assert p.mean_tokens(0) == 1.0
    assert p.mean_tokens(4) == pytest.approx(
        1 + 0.9 + 0.9 * 0.7 + 0.9 * 0.7 * 0.5 + 0.9 * 0.7 * 0.25
    )
    d = p.sample(rng, 60_000)
    got = np.array([accepted_in_block(d, 6 * i, 3) + 1 for i in range(10_000)], dtype=float)
    _se_check(got, p.mean_tokens(3))
    with pytest.raises(ValueError, match="gamma"):
        p.mean_tokens(-3)


def test_leading_run() -> None:
    assert leading_run(np.array([True, True, False, True])) == 2
    assert leading_run(np.array([True, True])) == 2
    assert leading_run(np.array([False])) == 0
    assert leading_run(np.zeros(0, dtype=bool)) == 0


def test_trace_replay_and_distribution_pairs(rng: np.random.Generator) -> None:
    t = acc.TraceAcceptance(probs=(1.0, 0.0, 1.0), offset_from_rng=False)
    d = t.sample(rng, 7)
    assert d.prob.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    assert accepted_in_block(d, 0, 3) == 1
    p = np.array([[0.8, 0.2], [0.5, 0.5]])
    q = np.array([[0.4, 0.6], [0.5, 0.5]])
    da = acc.DistributionAcceptance(p, q)
    np.testing.assert_allclose(da.alphas, [0.6, 1.0])
    assert da.sample(rng, 3).prob.tolist() == pytest.approx([0.6, 1.0, 0.6])


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: acc.IIDAcceptance(alpha=1.5), "alpha"),
        (lambda: acc.IIDAcceptance(alpha=0.5, confidence_noise=-1), "confidence_noise"),
        (lambda: acc.PositionalAcceptance(alphas=()), "alphas"),
        (lambda: acc.MarkovAcceptance(alphas=(0.5,), weights=(0.5, 0.5), persistence=0.5), "same"),
        (lambda: acc.MarkovAcceptance.two_state(mean=0.9, spread=0.3, persistence=0.5), "spread"),
        (lambda: acc.TraceAcceptance(probs=(0.5, 2.0)), r"probs\[1\]"),
        (lambda: acc.TraceAcceptance(probs=()), "empty"),
    ],
)
def test_bad_processes_raise(factory, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()


def test_short_draw_is_an_error(rng: np.random.Generator) -> None:
    d = acc.IIDAcceptance(alpha=1.0).sample(rng, 3)
    with pytest.raises(ValueError, match="too short"):
        accepted_in_block(d, 1, 5)
