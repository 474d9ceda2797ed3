"""Skewed routing: sympy against the twin, the twin against routing, the measured profile."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.cards.routing import list_routing_profiles, load_routing_profile
from specsim.theory import (
    count_cv,
    experts_touched,
    experts_touched_load,
    lognormal_load,
    moe_verification_factor,
)
from specsim.theory.moe_symbolic import LOAD
from specsim.theory.results import get_result

Z = 5.0  # standard errors a Monte Carlo mean may miss by (a 1-in-1.7-million event each)
R1 = load_routing_profile("deepseek-r1-translation")
R1_LOAD = lognormal_load(R1.experts, cv=count_cv(mean=R1.mean_tokens, std=R1.std_tokens))


def _systematic(rng: np.random.Generator, pi: np.ndarray, *, reps: int, n: int) -> np.ndarray:
    """Distinct experts in ``reps`` passes of ``n`` tokens, each token's ``k = sum(pi)``
    experts drawn by randomized systematic sampling (Madow 1949): a random order of the
    experts, their inclusion probabilities laid end to end on [0, k), and the experts whose
    interval holds u, u + 1, ..., u + k - 1 for one uniform u. It picks exactly k distinct
    experts with marginals exactly pi (each pi_e <= 1), and a joint far from independent."""
    k = int(round(pi.sum()))
    E = pi.size
    order = np.argsort(rng.random((reps, n, E)), axis=-1)
    edges = np.cumsum(np.take(pi, order), axis=-1)
    points = rng.random((reps, n, 1)) + np.arange(k)
    slot = np.minimum((points[..., None] >= edges[..., None, :]).sum(axis=-1), E - 1)
    chosen = np.take_along_axis(order, slot, axis=-1)
    hit = np.zeros((reps, E), dtype=bool)
    hit[np.arange(reps)[:, None], chosen.reshape(reps, -1)] = True
    assert all(len(set(row)) == k for row in chosen.reshape(-1, k)[:50])  # k distinct
    return hit.sum(axis=1)


def _gumbel_top_k(rng: np.random.Generator, logits: np.ndarray, *, reps: int, n: int, k: int):
    """A softmax router with Gumbel noise: the top k of ``logits + Gumbel`` per token."""
    noisy = logits + rng.gumbel(size=(reps, n, logits.size))
    chosen = np.argsort(-noisy, axis=-1)[..., :k]
    hit = np.zeros((reps, logits.size), dtype=bool)
    hit[np.arange(reps)[:, None], chosen.reshape(reps, -1)] = True
    return hit.sum(axis=1)


def _plackett_luce_inclusion(w: np.ndarray, k: int) -> np.ndarray:
    """Exact P(e among the first k of a Plackett-Luce draw with weights w), by enumeration."""
    pi = np.zeros(w.size)
    for seq in itertools.permutations(range(w.size), k):
        prob, left = 1.0, w.sum()
        for e in seq:
            prob *= w[e] / left
            left -= w[e]
        pi[list(seq)] += prob
    return pi


@pytest.mark.parametrize("n", [2, 5, 8, 64])
def test_the_measured_profile_matches_a_monte_carlo_of_top_k_routing(
    rng: np.random.Generator, n: int
) -> None:
    counts = _systematic(rng, R1.top_k * R1_LOAD, reps=400, n=n)
    mean, se = counts.mean(), counts.std(ddof=1) / np.sqrt(counts.size)
    want = experts_touched_load(n, load=R1_LOAD, top_k=R1.top_k)
    assert abs(mean - want) <= Z * se, (mean, want, se)
    assert want < experts_touched(n, experts=R1.experts, top_k=R1.top_k)  # skew reads fewer


@pytest.mark.parametrize("n", [1, 2, 4, 9])
def test_a_noisy_softmax_router_matches_its_inclusion_probabilities(
    rng: np.random.Generator, n: int
) -> None:
    # Mixtral's shape (2 of 8) with unequal router logits: only the marginals matter.
    w = np.exp(np.linspace(-1.0, 1.5, 8))
    pi = _plackett_luce_inclusion(w, 2)
    assert pi.sum() == pytest.approx(2.0, rel=1e-12)
    counts = _gumbel_top_k(rng, np.log(w), reps=4000, n=n, k=2)
    mean, se = counts.mean(), counts.std(ddof=1) / np.sqrt(counts.size)
    want = experts_touched_load(n, load=pi / 2, top_k=2)
    if n == 1:
        assert mean == 2 and want == pytest.approx(2.0, rel=1e-12)
    else:
        assert abs(mean - want) <= Z * se, (mean, want, se)


def test_the_sympy_form_is_the_twin_and_reduces_to_uniform() -> None:
    result = get_result("moe_experts_touched_load")
    assert result.proved
    n, E, k = result.symbols[:3]
    shares = [0.1, 0.2, 0.3, 0.4]
    four = result.expr.subs(E, 4).doit()
    for steps, top_k in itertools.product([0, 1, 2, 3, 10, 100], [1, 2]):
        value = four.subs({n: steps, k: top_k, **{LOAD[i + 1]: s for i, s in enumerate(shares)}})
        got = experts_touched_load(steps, load=shares, top_k=top_k)
        assert got == pytest.approx(float(value), rel=1e-13, abs=1e-300)
    uniform = experts_touched_load([1, 2, 7], load=np.full(64, 1 / 64), top_k=4)
    np.testing.assert_allclose(uniform, experts_touched([1, 2, 7], experts=64, top_k=4), rtol=1e-12)


def test_the_lognormal_profile_has_the_published_spread_and_nearly_its_hottest_expert() -> None:
    p = R1_LOAD
    assert p.sum() == pytest.approx(1.0, rel=1e-12) and np.all(np.diff(p) > 0)
    cv = np.sqrt(R1.std_tokens**2 - R1.mean_tokens) / R1.mean_tokens
    assert p.std() / p.mean() == pytest.approx(cv, rel=1e-10)  # what it was built from
    # A check, not a fit: the published hottest expert (1 + 10.948 times the mean) against
    # the profile's. The published one is a mean of per-iteration maxima, which sampling
    # noise pushes up, so the profile may fall a little short; 10% is the margin.
    assert p.max() * p.size == pytest.approx(1 + R1.imbalance_ratio, rel=0.10)
    np.testing.assert_allclose(lognormal_load(5, cv=0.0), 0.2)
    assert [x.slug for x in list_routing_profiles()] == ["deepseek-r1-translation"]


def test_the_rank_spread_of_a_random_placement_is_near_the_published_one(
    rng: np.random.Generator,
) -> None:
    # Second check on the profile: 32 ranks of 8 experts placed at random spread by
    # 491.6 / 1024 tokens (Table 1, by rank); the published placement is DeepSeek's own, so
    # only a loose agreement (20%) is expected.
    ranks = np.array([rng.permutation(R1_LOAD).reshape(32, 8).sum(axis=1) for _ in range(200)])
    spread = float((ranks.std(axis=1) / ranks.mean(axis=1)).mean())
    assert spread == pytest.approx(491.6 / 1024, rel=0.20)


def test_skew_lowers_v_gamma_and_leaves_gamma_0_at_one() -> None:
    kw = {"experts": 256, "top_k": 8, "routed_fraction": 0.6}
    uniform = moe_verification_factor(np.arange(8), **kw)
    skewed = moe_verification_factor(np.arange(8), **kw, load=R1_LOAD)
    assert skewed[0] == pytest.approx(1.0) and np.all(skewed[1:] < uniform[1:])
    same = moe_verification_factor(np.arange(8), **kw, load=np.full(256, 1 / 256))
    np.testing.assert_allclose(same, uniform, rtol=1e-12)
    assert count_cv(mean=100.0, std=10.0) == 0.0  # sampling noise alone: no skew


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: experts_touched_load(2, load=[0.5, 0.4], top_k=1), "sum to 1, they sum to 0.9"),
        (lambda: experts_touched_load(2, load=[1.5, -0.5], top_k=1), "share 1 is -0.5"),
        (lambda: experts_touched_load(2, load=[0.7, 0.3], top_k=2), "top_k \\* load = 1.4 > 1"),
        (lambda: experts_touched_load(2, load=[1.0], top_k=2), "at least top_k = 2"),
        (
            lambda: moe_verification_factor(
                1, experts=8, top_k=2, routed_fraction=0.5, load=[0.25] * 4
            ),
            "load lists 4 experts, the model has 8",
        ),
        (lambda: lognormal_load(8, cv=3.0), "cv must be in \\[0, 2.64575\\)"),
        (lambda: count_cv(mean=0.0, std=1.0), "mean must be > 0"),
    ],
)
def test_bad_loads_are_named(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


@given(
    raw=st.lists(st.floats(0.05, 1.0), min_size=2, max_size=40),
    top_k=st.integers(1, 2),
    n=st.integers(0, 500),
)
def test_skewed_counts_are_bounded_and_grow_with_the_tokens(
    raw: list[float], top_k: int, n: int
) -> None:
    p = np.asarray(raw) / sum(raw)
    if top_k * p.max() > 1:
        top_k = 1
    t0 = experts_touched_load(n, load=p, top_k=top_k)
    t1 = experts_touched_load(n + 1, load=p, top_k=top_k)
    slack = 1e-9 * p.size
    assert -slack <= t0 <= min(p.size, n * top_k) + slack
    assert t0 <= t1 + slack and t1 - t0 <= top_k + slack
    assert t0 <= experts_touched(n, experts=p.size, top_k=top_k) + slack  # Jensen
