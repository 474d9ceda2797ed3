"""MoE distinct-expert count and v(gamma): sympy against the twins, and against routing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from specsim.theory import experts_touched, experts_touched_load, moe_verification_factor
from specsim.theory.results import get_result

Z = 5.0  # standard errors a Monte Carlo mean may miss by (a 1-in-1.7-million event each)


def _route(rng: np.random.Generator, *, reps: int, n: int, experts: int, top_k: int) -> np.ndarray:
    """Distinct experts touched in each of ``reps`` passes of ``n`` tokens: each token's
    ``top_k`` experts a uniform draw without replacement (the first k of a random order)."""
    chosen = np.argsort(rng.random((reps, n, experts)), axis=-1)[..., :top_k]
    hit = np.zeros((reps, experts), dtype=bool)
    hit[np.arange(reps)[:, None], chosen.reshape(reps, -1)] = True
    return hit.sum(axis=1)


CASES = [(8, 2), (128, 8), (256, 8), (32, 4)]  # Mixtral, Qwen3, DeepSeek-V3, gpt-oss-20b


@pytest.mark.parametrize(("experts", "top_k"), CASES)
@pytest.mark.parametrize("n", [1, 2, 5, 9, 64])
def test_distinct_experts_match_a_monte_carlo_of_routing(
    rng: np.random.Generator, experts: int, top_k: int, n: int
) -> None:
    counts = _route(rng, reps=2000, n=n, experts=experts, top_k=top_k)
    mean, se = counts.mean(), counts.std(ddof=1) / np.sqrt(counts.size)
    want = experts_touched(n, experts=experts, top_k=top_k)
    if n == 1:  # exactly k, no spread
        assert mean == top_k and want == pytest.approx(top_k, rel=1e-15)
    else:  # (plus rounding, for passes that touch every expert in every draw: se = 0)
        assert abs(mean - want) <= Z * se + 1e-6 * want, (mean, want, se)


@pytest.mark.parametrize(("experts", "top_k"), CASES)
def test_moe_verification_factor_matches_a_monte_carlo(
    rng: np.random.Generator, experts: int, top_k: int
) -> None:
    f = 0.9
    for gamma in (0, 1, 3, 7):
        counts = _route(rng, reps=2000, n=gamma + 1, experts=experts, top_k=top_k)
        v_mc = 1 - f + f * counts / top_k
        mean, se = v_mc.mean(), v_mc.std(ddof=1) / np.sqrt(v_mc.size)
        want = moe_verification_factor(gamma, experts=experts, top_k=top_k, routed_fraction=f)
        assert abs(mean - want) <= Z * se + 1e-6 * want, (gamma, mean, want, se)


def test_twins_equal_their_sympy_expressions() -> None:
    touched = get_result("moe_experts_touched")
    v = get_result("moe_verification_factor")
    t_fn = sp.lambdify(touched.symbols, touched.expr, "mpmath")
    v_fn = sp.lambdify(v.symbols, v.expr, "mpmath")
    for (experts, top_k), n in itertools.product(CASES, [0, 1, 2, 3, 10, 100, 1000]):
        got = experts_touched(n, experts=experts, top_k=top_k)
        assert got == pytest.approx(float(t_fn(n, experts, top_k)), rel=1e-13, abs=1e-300)
        for f in (0.0, 0.5, 0.97):
            got_v = moe_verification_factor(n, experts=experts, top_k=top_k, routed_fraction=f)
            assert got_v == pytest.approx(float(v_fn(n, experts, top_k, f)), rel=1e-13)
    assert touched.proved and v.proved


def test_known_answers_and_limits() -> None:
    assert experts_touched(0, experts=8, top_k=2) == 0.0
    assert experts_touched(5, experts=8, top_k=8) == 8.0  # every expert from the first token
    assert experts_touched(10**6, experts=256, top_k=8) == pytest.approx(256.0)
    big = experts_touched(np.arange(1, 6), experts=10**9, top_k=8)
    np.testing.assert_allclose(big, 8.0 * np.arange(1, 6), rtol=1e-7)  # no collisions
    assert moe_verification_factor(0, experts=8, top_k=2, routed_fraction=0.9) == pytest.approx(1.0)
    assert moe_verification_factor(7, experts=8, top_k=2, routed_fraction=0.0) == 1.0
    # Mixtral's 8 experts saturate: 8 positions touch 7.8 of 8 experts.
    assert experts_touched(8, experts=8, top_k=2) == pytest.approx(8 * (1 - 0.75**8))


def test_a_uniform_load_is_the_uniform_formula_and_skew_touches_fewer() -> None:
    n = np.array([1.0, 2.0, 7.0])
    uniform = experts_touched_load(n, load=np.full(64, 1 / 64), top_k=4)
    np.testing.assert_allclose(uniform, experts_touched(n, experts=64, top_k=4), rtol=1e-12)
    skew = np.linspace(1.0, 3.0, 64)
    skewed = experts_touched_load(7.0, load=skew / skew.sum(), top_k=4)
    assert skewed < experts_touched(7.0, experts=64, top_k=4)  # concave in each share


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"experts": 8, "top_k": 9}, "top_k = 9 exceeds experts = 8"),
        ({"experts": 0, "top_k": 1}, "experts must be an integer >= 1, got 0"),
        ({"experts": 8, "top_k": 2.5}, "top_k must be an integer >= 1, got 2.5"),
    ],
)
def test_bad_expert_counts_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        experts_touched(3, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be finite and >= 0"):
        experts_touched(-1, experts=8, top_k=2)
    with pytest.raises(ValueError, match="routed_fraction must be in"):
        moe_verification_factor(1, experts=8, top_k=2, routed_fraction=1.5)


@given(
    experts=st.integers(1, 512),
    frac=st.floats(0.0, 1.0),
    n=st.integers(0, 10_000),
)
def test_touched_experts_are_bounded_and_grow_with_the_tokens(
    experts: int, frac: float, n: int
) -> None:
    top_k = max(1, round(frac * experts))
    t0 = experts_touched(n, experts=experts, top_k=top_k)
    t1 = experts_touched(n + 1, experts=experts, top_k=top_k)
    slack = 1e-9 * experts
    assert -slack <= t0 <= min(experts, n * top_k) + slack
    assert t0 <= t1 + slack  # one more token never touches fewer experts
    assert t1 - t0 <= top_k + slack  # and at most its own k new ones
