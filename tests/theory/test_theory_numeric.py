"""The numeric twins: known answers, accuracy against mpmath, invariants, bad input."""

from __future__ import annotations

import doctest
import itertools
from collections.abc import Callable

import mpmath as mp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import specsim.theory
from specsim import theory
from specsim.theory import numeric, symbolic

GAMMAS = np.arange(0, 31)
EPS = float(np.finfo(np.float64).eps)
MONO_RTOL = 8 * EPS  # a few ulps: the twins' accuracy (see specsim.theory.numeric)
ALPHAS = np.array([0.0, 1e-300, 1e-12, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1 - 1e-6, 1 - 1e-12, 1.0])


# --- known answers -------------------------------------------------------------------------


def test_alpha_zero_gives_one_token_and_alpha_one_gives_gamma_plus_one() -> None:
    for g in range(0, 12):
        assert theory.expected_tokens(0.0, g) == 1.0
        assert theory.expected_tokens(1.0, g) == g + 1
        assert theory.tokens_variance(0.0, g) == 0.0
        assert theory.tokens_variance(1.0, g) == 0.0
        assert theory.target_calls_per_token(1.0, g) == 1.0 / (g + 1)
        assert theory.draft_calls_per_token(1.0, g) == g / (g + 1)
        assert theory.ops_factor(1.0, g, 0.0) == 1.0


def test_gamma_zero_is_plain_decoding() -> None:
    a = np.linspace(0.0, 1.0, 101)
    np.testing.assert_array_equal(theory.expected_tokens(a, 0), 1.0)
    np.testing.assert_array_equal(theory.tokens_variance(a, 0), 0.0)
    np.testing.assert_array_equal(theory.walltime_speedup(a, 0, 0.3), 1.0)
    np.testing.assert_array_equal(theory.ops_factor(a, 0, 0.7), 1.0)
    np.testing.assert_array_equal(theory.target_calls_per_token(a, 0), 1.0)
    np.testing.assert_array_equal(theory.draft_calls_per_token(a, 0), 0.0)
    np.testing.assert_array_equal(theory.tokens_pmf(a, 0, 1), 1.0)
    # Found by hypothesis: 1 - alpha rounds to 1 for tiny alpha; the variance must stay 0.
    np.testing.assert_array_equal(theory.tokens_variance([5.6e-22, 1e-300, 5e-324], 0), 0.0)


def test_small_cases_by_hand() -> None:
    # gamma = 1: T is 1 + Bernoulli(alpha).
    for a in (0.1, 0.25, 0.5, 0.9):
        assert theory.expected_tokens(a, 1) == pytest.approx(1 + a, rel=1e-15)
        assert theory.tokens_variance(a, 1) == pytest.approx(a * (1 - a), rel=1e-14)
        assert theory.gamma1_lower_bound(a, 0.1) == pytest.approx(
            theory.walltime_speedup(a, 1, 0.1), rel=1e-15
        )
    # expm1 and log1p are within an ulp or two, and may differ between libms.
    assert theory.expected_tokens(0.5, 2) == pytest.approx(1.75, rel=4 * EPS)
    assert theory.walltime_speedup(0.5, 2, 0.25, 2.0) == pytest.approx(1.75 / 2.5, rel=4 * EPS)
    assert theory.ops_factor(0.5, 2, 0.5) == pytest.approx(4.0 / 1.75, rel=1e-15)
    assert theory.oracle_speedup_bound(0.75) == 4.0
    assert theory.oracle_speedup_bound(1.0) == np.inf


def test_pmf_is_a_distribution_with_the_stated_mean_and_variance() -> None:
    for a, g in itertools.product([0.0, 0.2, 0.5, 0.8, 0.97, 1.0], [0, 1, 2, 5, 13, 30]):
        ks = np.arange(1, g + 2)
        pmf = np.asarray(theory.tokens_pmf(a, g, ks))
        assert pmf.sum() == pytest.approx(1.0, abs=1e-14)
        mean = float((ks * pmf).sum())
        var = float(((ks - mean) ** 2 * pmf).sum())
        assert theory.expected_tokens(a, g) == pytest.approx(mean, rel=1e-13)
        assert theory.tokens_variance(a, g) == pytest.approx(var, rel=1e-11, abs=1e-13)
    # Outside the support 1..gamma+1 the probability is 0.
    np.testing.assert_array_equal(theory.tokens_pmf(0.5, 3, [-2, 0, 5, 6]), 0.0)


# --- types and shapes ------------------------------------------------------------------------


def test_scalars_in_floats_out_and_arrays_broadcast() -> None:
    assert type(theory.expected_tokens(0.5, 3)) is float
    assert type(theory.walltime_speedup(np.float32(0.5), np.int64(3), 0)) is float
    assert type(theory.optimal_gamma(0.5, 0.1)) is int
    e = theory.expected_tokens(np.linspace(0, 1, 5)[:, None], np.arange(4)[None, :])
    assert isinstance(e, np.ndarray) and e.shape == (5, 4) and e.dtype == np.float64
    w = theory.walltime_speedup([0.5, 0.8], 3, [[0.0], [0.1], [0.2]], 1.0)
    assert isinstance(w, np.ndarray) and w.shape == (3, 2)
    best = theory.optimal_gamma(np.full((2, 3), 0.8), [0.0, 0.05, 0.5])
    assert isinstance(best, np.ndarray) and best.shape == (2, 3) and best.dtype == np.int64
    assert theory.expected_tokens(0.5, 3.0) == theory.expected_tokens(0.5, 3)


# --- accuracy near alpha = 1 -------------------------------------------------------------------


def _mp_expected(a: float, g: int) -> mp.mpf:
    x = mp.mpf(a)
    return mp.mpf(g + 1) if x == 1 else (1 - x ** (g + 1)) / (1 - x)


def _mp_variance(a: float, g: int) -> mp.mpf:
    x = mp.mpf(a)
    if x == 1:
        return mp.mpf(0)
    return (x - (2 * g + 1) * (1 - x) * x ** (g + 1) - x ** (2 * g + 2)) / (1 - x) ** 2


@pytest.mark.parametrize("a", [1 - 1e-12, 1 - 1e-9, 1 - 2.0**-52, 1 - 1e-6, 0.999, 0.5, 1e-9])
def test_accurate_near_alpha_one_against_mpmath(a: float) -> None:
    gammas = [0, 1, 2, 3, 7, 20, 64, 1000, 10**6]
    with mp.workdps(60):
        for g in gammas:
            e_ref = _mp_expected(a, g)
            v_ref = _mp_variance(a, g)
            assert abs(theory.expected_tokens(a, g) - e_ref) <= 1e-14 * e_ref
            assert abs(theory.target_calls_per_token(a, g) - 1 / e_ref) <= 1e-14 / e_ref
            w_ref = e_ref / (g * mp.mpf("0.01") + mp.mpf("1.5"))
            assert abs(theory.walltime_speedup(a, g, 0.01, 1.5) - w_ref) <= 1e-14 * w_ref
            ops_ref = (g * mp.mpf("0.1") + g + 1) / e_ref
            assert abs(theory.ops_factor(a, g, 0.1) - ops_ref) <= 1e-14 * ops_ref
            if v_ref == 0:
                assert theory.tokens_variance(a, g) == 0.0
            else:
                assert abs(theory.tokens_variance(a, g) - v_ref) <= 1e-13 * v_ref


def test_variance_accurate_on_both_sides_of_its_series_switch() -> None:
    # The twin switches from the closed form to a series at (gamma + 1)(1 - alpha) = 1.
    rng = np.random.default_rng(7)
    gammas = rng.integers(1, 500, size=300)
    nd = np.exp(rng.uniform(np.log(0.05), np.log(20.0), size=300))
    alphas = 1.0 - nd / (gammas + 1)
    keep = alphas >= 0.0
    alphas, gammas = alphas[keep], gammas[keep]
    got = theory.tokens_variance(alphas, gammas)
    with mp.workdps(60):
        for a, g, v in zip(alphas, gammas, np.atleast_1d(got), strict=True):
            ref = _mp_variance(float(a), int(g))
            assert abs(v - ref) <= 1e-13 * ref


# --- invariants (hypothesis) -----------------------------------------------------------------

alpha_st = st.floats(0.0, 1.0)
gamma_st = st.integers(0, 200)


@given(a=alpha_st, b=alpha_st, g=gamma_st, h=gamma_st)
def test_expected_tokens_bounded_and_monotone(a: float, b: float, g: int, h: int) -> None:
    # The twin is accurate to a few ulps (module docstring), so the bounds and the order
    # between two close values hold up to MONO_RTOL (relative); 1 <= E holds exactly.
    e = theory.expected_tokens(a, g)
    assert 1.0 <= e <= (g + 1) * (1 + MONO_RTOL)
    lo, hi = sorted((a, b))
    assert theory.expected_tokens(lo, g) <= theory.expected_tokens(hi, g) * (1 + MONO_RTOL)
    short, long_ = sorted((g, h))
    assert theory.expected_tokens(a, short) <= theory.expected_tokens(a, long_) * (1 + MONO_RTOL)
    assert e <= theory.oracle_speedup_bound(a) * (1 + MONO_RTOL)
    assert theory.tokens_variance(a, g) >= 0.0
    assert theory.ops_factor(a, g, 0.0) >= 1.0 - 1e-15
    assert theory.target_calls_per_token(a, g) <= 1.0


@given(a=alpha_st, c=st.floats(0.0, 2.0), m=st.integers(0, 40))
def test_optimal_gamma_is_the_smallest_best_gamma(a: float, c: float, m: int) -> None:
    best = theory.optimal_gamma(a, c, m)
    speeds = np.asarray(theory.walltime_speedup(a, np.arange(m + 1), c))
    speeds[0] = 1.0
    top = speeds.max()
    # optimal_gamma computes the same speeds along another array axis, where numpy's vector
    # loops may round differently by an ulp or two: the tie threshold holds up to 8 eps.
    assert 0 <= best <= m
    assert speeds[best] >= top * (1 - numeric.TIE_RTOL - 8 * EPS)
    assert np.all(speeds[:best] < top * (1 - numeric.TIE_RTOL + 8 * EPS))


# optimal_gamma counts speedups within TIE_RTOL (relative) as ties, and two twins that compute
# the same W(1) by different expressions may differ by a few ulps: the best gamma's speedup is
# at least W(1) up to this relative tolerance.
BEST_RTOL = numeric.TIE_RTOL + 8 * EPS


@example(a=0.5772635678559385, c=0.5)  # W(best) fell two ulps below (1 + alpha)/(1 + c)
@given(a=alpha_st, c=st.floats(0.0, 1.0))
def test_speculation_pays_exactly_when_alpha_exceeds_c(a: float, c: float) -> None:
    # Corollary 3.9 and its converse, for v = 1; a margin keeps gains above rounding noise.
    best = theory.optimal_gamma(a, c)
    if a > c + 1e-9:
        assert best >= 1
        lower = theory.gamma1_lower_bound(a, c)
        assert lower > 1.0
        assert theory.walltime_speedup(a, best, c) >= lower * (1 - BEST_RTOL)
    elif a <= c:
        assert best == 0


# --- optimal_gamma: ties, v, limits ----------------------------------------------------------


def test_optimal_gamma_known_cases_and_ties() -> None:
    assert theory.optimal_gamma(0.5, 0.2) == 1  # W(1) = W(2) = 1.25 exactly: the smaller wins
    assert theory.optimal_gamma(0.3, 0.3) == 0  # alpha == c: W(1) = 1, a tie with plain decoding
    assert theory.optimal_gamma(1.0, 0.0) == 64
    assert theory.optimal_gamma(1.0, 0.0, max_gamma=7) == 7
    assert theory.optimal_gamma(0.0, 0.0) == 0
    assert theory.optimal_gamma(0.8, 0.05) == 8
    assert theory.optimal_gamma(0.9, 0.3, max_gamma=0) == 0


def test_optimal_gamma_with_v() -> None:
    m = 20
    ones = np.ones(m + 1)
    assert theory.optimal_gamma(0.8, 0.05, m, v=ones) == theory.optimal_gamma(0.8, 0.05, m)

    # Verification that costs 10% more per extra token pushes the optimum down.
    def v_lin(g: int) -> float:
        return 1.0 + 0.1 * g

    table = np.array([v_lin(g) for g in range(m + 1)])
    by_callable = theory.optimal_gamma(0.8, 0.05, m, v=v_lin)
    assert by_callable == theory.optimal_gamma(0.8, 0.05, m, v=table)
    speeds = np.asarray(theory.walltime_speedup(0.8, np.arange(m + 1), 0.05, table))
    assert by_callable == int(np.argmax(speeds)) < theory.optimal_gamma(0.8, 0.05, m)


def test_optimal_gamma_rejects_bad_v_and_max_gamma() -> None:
    with pytest.raises(ValueError, match=r"v\(0\) must be 1"):
        theory.optimal_gamma(0.8, 0.1, 3, v=[2.0, 2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        theory.optimal_gamma(0.8, 0.1, 3, v=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"v\(2\).*> 0.*-1.0"):
        theory.optimal_gamma(0.8, 0.1, 3, v=lambda g: 1.0 if g < 2 else -1.0)
    with pytest.raises(ValueError, match="max_gamma must be >= 0, got -1"):
        theory.optimal_gamma(0.8, 0.1, -1)
    with pytest.raises(TypeError, match="max_gamma must be an int"):
        theory.optimal_gamma(0.8, 0.1, 2.5)  # type: ignore[arg-type]


# --- bad input ---------------------------------------------------------------------------------

BAD_VALUES = [
    (lambda x: theory.expected_tokens(x, 3), "alpha", [-0.1, 1.5, float("nan"), float("inf")]),
    (lambda x: theory.tokens_variance(0.5, x), "gamma", [-1, 2.5, float("nan"), float("inf")]),
    (lambda x: theory.walltime_speedup(0.5, 3, x), "c", [-0.01, float("inf"), float("nan")]),
    (lambda x: theory.walltime_speedup(0.5, 3, 0.1, x), "v", [0.0, -1.0, float("inf")]),
    (lambda x: theory.ops_factor(0.5, 3, x), "c_hat", [-1.0, float("nan")]),
    (lambda x: theory.tokens_pmf(0.5, 3, x), "k", [1.5, float("nan")]),
    (lambda x: theory.optimal_gamma(x, 0.1), "alpha", [1.01, -1e-9]),
    (lambda x: theory.gamma1_lower_bound(0.5, x), "c", [-0.5]),
    (lambda x: theory.oracle_speedup_bound(x), "alpha", [2.0]),
    (lambda x: theory.target_calls_per_token(0.5, x), "gamma", [-3]),
    (lambda x: theory.draft_calls_per_token(x, 2), "alpha", [float("nan")]),
]


@pytest.mark.parametrize(("call", "name", "values"), BAD_VALUES)
def test_bad_values_raise_value_error_naming_parameter_and_value(
    call: Callable[[float], object], name: str, values: list[float]
) -> None:
    for x in values:
        with pytest.raises(ValueError, match=rf"\b{name} must .*got {x!r}"):
            call(x)


def test_bad_values_in_arrays_are_located() -> None:
    with pytest.raises(ValueError, match=r"expected_tokens: alpha .* got 1\.5 at index \(1,\)"):
        theory.expected_tokens([0.2, 1.5, 0.3], 2)
    with pytest.raises(ValueError, match=r"gamma .* got 0\.5 at index \(0, 1\)"):
        theory.expected_tokens(0.2, [[1, 0.5]])


def test_wrong_types_and_shapes() -> None:
    with pytest.raises(TypeError, match="alpha must be a real number"):
        theory.expected_tokens("0.5", 3)
    with pytest.raises(TypeError, match="gamma must be a real number"):
        theory.expected_tokens(0.5, True)
    with pytest.raises(ValueError, match=r"shapes do not broadcast: alpha \(2,\), gamma \(3,\)"):
        theory.expected_tokens([0.1, 0.2], [1, 2, 3])


# --- the public surface ------------------------------------------------------------------------


def test_public_api_and_doctests() -> None:
    for name in specsim.theory.__all__:
        assert getattr(specsim.theory, name) is not None, name
    for module in (specsim.theory, numeric, symbolic):
        failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert tried > 0 and failed == 0, module.__name__


def test_dense_grid_has_no_nan_and_no_warnings() -> None:
    a, g, c = np.meshgrid(ALPHAS, GAMMAS, [0.0, 0.01, 0.5], indexing="ij")
    for values in (
        theory.expected_tokens(a, g),
        theory.tokens_variance(a, g),
        theory.walltime_speedup(a, g, c),
        theory.ops_factor(a, g, c),
        theory.target_calls_per_token(a, g),
        theory.draft_calls_per_token(a, g),
    ):
        assert np.all(np.isfinite(values))


# --- best_gamma: the optimum of one (alpha, c), and when there is none -------------------------


def test_a_free_draft_has_no_best_gamma() -> None:
    # Regression: optimal_gamma(0.2, 0.0) says 19, yet W rises at every gamma (W(19) and W(64)
    # differ by 1e-14): no finite gamma is optimal, and best_gamma says so.
    best = theory.best_gamma(0.2, 0.0)
    assert best.unbounded and best.supremum == theory.oracle_speedup_bound(0.2) == 1.25
    assert best.gamma == theory.optimal_gamma(0.2, 0.0) == 19
    assert best.speedup == theory.walltime_speedup(0.2, 19, 0.0) < best.supremum
    every = theory.best_gamma(1.0, 0.0, max_gamma=7)
    assert every.unbounded and every.gamma == 7 and every.supremum == np.inf
    assert theory.best_gamma(1.0, 0.25) == theory.GammaOptimum(
        gamma=64, speedup=65 / 17, unbounded=True, supremum=4.0
    )


@pytest.mark.parametrize(
    ("a", "c"), [(0.0, 0.0), (0.8, 0.05), (0.5, 0.2), (0.3, 0.3), (1.0, 1.0), (1.0, 2.0)]
)
def test_a_peak_is_bounded(a: float, c: float) -> None:
    best = theory.best_gamma(a, c)
    assert not best.unbounded and best.supremum == best.speedup
    assert best.gamma == theory.optimal_gamma(a, c)


def test_best_gamma_agrees_with_the_scan_on_a_grid() -> None:
    alphas = np.linspace(0.0, 1.0, 41)
    cs = [0.0, 1e-300, 1e-12, 1e-3, 0.05, 0.3, 0.99, 1.0, 1.5]
    for a, c, m in itertools.product(alphas, cs, [0, 1, 5, 64, 200]):
        assert theory.best_gamma(a, c, max_gamma=m).gamma == theory.optimal_gamma(a, c, m)


@given(a=alpha_st, c=st.floats(0.0, 2.0), m=st.integers(0, 300))
def test_best_gamma_is_the_smallest_best_gamma(a: float, c: float, m: int) -> None:
    best = theory.best_gamma(a, c, max_gamma=m)
    speeds = np.asarray(theory.walltime_speedup(a, np.arange(m + 1), c))
    top = speeds.max()
    assert speeds[best.gamma] == pytest.approx(best.speedup, rel=4 * EPS)
    assert best.speedup >= top * (1 - BEST_RTOL)
    assert np.all(speeds[: best.gamma] < top * (1 - numeric.TIE_RTOL + 8 * EPS))
    assert best.supremum >= top * (1 - 8 * EPS)
    if not best.unbounded and m > 0 and 0 < best.gamma < m:
        assert speeds[best.gamma + 1] <= speeds[best.gamma] * (1 + BEST_RTOL)


def test_best_gamma_needs_no_table_as_long_as_max_gamma() -> None:
    # A peak near 1.1e12 (alpha = 1 - 1e-12, c = 1e-12) and a 10^9 range, found by bisection.
    far = theory.best_gamma(1 - 1e-12, 1e-12, max_gamma=10**15)
    assert not far.unbounded and 1e12 < far.gamma < 1.3e12
    assert theory.best_gamma(0.7, 0.05, max_gamma=10**9).gamma == theory.optimal_gamma(0.7, 0.05)


def test_best_gamma_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"best_gamma: alpha must be .* got 1.5"):
        theory.best_gamma(1.5, 0.1)
    with pytest.raises(ValueError, match=r"best_gamma: c must be .* got -0.1"):
        theory.best_gamma(0.5, -0.1)
    with pytest.raises(TypeError, match="must be scalars"):
        theory.best_gamma([0.5, 0.6], 0.1)
    with pytest.raises(ValueError, match="max_gamma must be >= 0, got -1"):
        theory.best_gamma(0.5, 0.1, max_gamma=-1)
    with pytest.raises(TypeError, match="max_gamma must be an int"):
        theory.best_gamma(0.5, 0.1, max_gamma=2.0)  # type: ignore[arg-type]
