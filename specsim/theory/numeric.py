r"""Numeric twins of the closed forms: vectorized, exact at alpha = 1, accurate near it.

Each function here evaluates one expression that :mod:`specsim.theory.symbolic`
derives with sympy (the test suite makes every pair agree on a dense grid). All of
them broadcast over numpy arrays and return a Python ``float`` (``int`` for
:func:`optimal_gamma`) when every argument is a scalar.

Symbols: ``alpha`` is the mean acceptance probability in [0, 1], ``gamma`` the
number of drafted tokens per pass (an integer >= 0; 0 means plain decoding), ``c``
the time of one draft step over the time of one target step, ``c_hat`` the draft's
arithmetic per token over the target's, and ``v`` the target's time to verify
``gamma + 1`` tokens over its time for one token (``v = 1`` is the paper's
memory-bound assumption).

Accuracy near alpha = 1 (a note on method): ``(1 - alpha**n) / (1 - alpha)`` is
0/0 at alpha = 1 and loses all its digits to cancellation just below it. With
``d = 1 - alpha`` (exact for alpha >= 1/2, by Sterbenz's lemma) the twins evaluate
``-expm1(n * log1p(-d)) / d``, whose relative error stays at a few ulps for every
alpha and n, and equals ``n`` at d = 0. The variance, which tends to 0 as alpha -> 1,
uses a finite series in ``d`` where ``n * d < 1`` (see :func:`tokens_variance`).

Reference: Leviathan, Kalman & Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023 (arXiv:2211.17192), Section 3.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.theory._checks import (
    FloatArray,
    check_alpha,
    check_count,
    check_integer,
    check_nonnegative,
    check_positive,
    check_shapes,
    scalar_or_array,
)

__all__ = [
    "TIE_RTOL",
    "expected_tokens",
    "tokens_variance",
    "tokens_pmf",
    "walltime_speedup",
    "ops_factor",
    "optimal_gamma",
    "oracle_speedup_bound",
    "target_calls_per_token",
    "draft_calls_per_token",
    "gamma1_lower_bound",
]

TIE_RTOL = 64 * float(np.finfo(np.float64).eps)
"""Speedups this close (relative) count as a tie in :func:`optimal_gamma`.

The twins are accurate to a few ulps, so a smaller difference is rounding noise."""

_LOG_FLOOR = -1000.0  # below log of the smallest subnormal; keeps 0 * log(0) at 0, not NaN


def _log_alpha(d: FloatArray) -> FloatArray:
    """``log(alpha)`` from ``d = 1 - alpha``, accurate near alpha = 1, floored at alpha = 0."""
    with np.errstate(divide="ignore"):
        return np.maximum(np.log1p(-d), _LOG_FLOOR)


def _geometric_sum(d: FloatArray, log_a: FloatArray, m: FloatArray) -> FloatArray:
    """``sum_{k<m} alpha**k = (1 - alpha**m) / (1 - alpha)``, equal to ``m`` at alpha = 1."""
    positive = d > 0.0
    ratio = -np.expm1(m * log_a) / np.where(positive, d, 1.0)
    return np.where(positive, ratio, m)


def _expected(a: FloatArray, g: FloatArray) -> FloatArray:
    """``E = 1 + alpha * sum_{k<gamma} alpha**k``: exactly 1 at gamma = 0, gamma+1 at alpha = 1."""
    d = 1.0 - a
    return 1.0 + a * _geometric_sum(d, _log_alpha(d), g)


def expected_tokens(alpha: ArrayLike, gamma: ArrayLike) -> FloatArray | float:
    r"""Expected tokens emitted per target pass, :math:`E = (1-\alpha^{\gamma+1})/(1-\alpha)`.

    Assumes the acceptances of successive draft tokens are i.i.d. with mean
    ``alpha``, so the accepted count is geometric capped at ``gamma`` and each pass
    emits one more token than it accepts. ``E = gamma + 1`` at alpha = 1 and
    ``E = 1`` at alpha = 0 or gamma = 0. Leviathan et al. 2023, Section 3.1,
    Equation (1).

    >>> expected_tokens(0.8, 5)
    3.68928
    >>> expected_tokens(1.0, 7)
    8.0
    """
    where = "expected_tokens"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    check_shapes(where, alpha=a, gamma=g)
    return scalar_or_array(_expected(a, g))


def _variance(a: FloatArray, g: FloatArray) -> FloatArray:
    a, g = np.broadcast_arrays(a, g)
    n = g + 1.0
    d = 1.0 - a
    out = np.empty(a.shape)
    near = n * d < 1.0
    far = ~near
    # Far from alpha = 1 the closed form N / d**2 keeps its digits.
    af, df, nf = a[far], d[far], n[far]
    top = np.power(af, nf)
    out[far] = (af - (2.0 * nf - 1.0) * df * top - top * top) / (df * df)
    # Near alpha = 1: Var = d (2 chi + psi - d psi**2) with the finite series
    # psi = sum_j C(n, j+2) (-d)**j and chi = sum_j C(n, j+3) (-d)**j; consecutive
    # terms shrink by at least n d / (j + 3) < 1/3, so 20 terms reach full precision.
    dn, nn = d[near], n[near]
    t = nn * (nn - 1.0) / 2.0
    u = t * (nn - 2.0) / 3.0
    psi, chi = t.copy(), u.copy()
    for j in range(20):
        t = t * (-dn) * (nn - j - 2.0) / (j + 3.0)
        u = u * (-dn) * (nn - j - 3.0) / (j + 4.0)
        psi += t
        chi += u
    out[near] = dn * (2.0 * chi + psi - dn * psi * psi)
    # gamma = 0 emits exactly one token; the closed form would leave -alpha**2 * eps there.
    out[g == 0.0] = 0.0
    return out


def tokens_variance(alpha: ArrayLike, gamma: ArrayLike) -> FloatArray | float:
    r"""Variance of the tokens emitted per target pass.

    :math:`\mathrm{Var} = \frac{\alpha - (2\gamma+1)(1-\alpha)\alpha^{\gamma+1}
    - \alpha^{2\gamma+2}}{(1-\alpha)^2}`, derived in :mod:`specsim.theory.symbolic`
    from the capped-geometric pmf under the i.i.d. assumption of Leviathan et al.
    2023, Section 3.1. It is 0 at alpha = 0, alpha = 1 and gamma = 0. Near
    alpha = 1 the closed form cancels to nothing; there (``(gamma+1)(1-alpha) < 1``)
    the twin sums the exact finite series in ``d = 1 - alpha`` instead.

    >>> round(tokens_variance(0.5, 1), 12)
    0.25
    """
    where = "tokens_variance"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    check_shapes(where, alpha=a, gamma=g)
    return scalar_or_array(_variance(a, g))


def tokens_pmf(alpha: ArrayLike, gamma: ArrayLike, k: ArrayLike) -> FloatArray | float:
    r"""Probability that one target pass emits exactly ``k`` tokens.

    :math:`P(T=k) = \alpha^{k-1}(1-\alpha)` for :math:`1 \le k \le \gamma`,
    :math:`\alpha^{\gamma}` for :math:`k = \gamma + 1` (every draft accepted, plus
    the target's bonus token) and 0 for any other integer ``k``. I.i.d.
    acceptances, Leviathan et al. 2023, Section 3.1 ("a capped geometric variable").

    >>> tokens_pmf(0.5, 2, 3)
    0.25
    """
    where = "tokens_pmf"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    kk = check_integer(k, "k", where)
    check_shapes(where, alpha=a, gamma=g, k=kk)
    body = np.power(a, np.maximum(kk - 1.0, 0.0)) * (1.0 - a)
    inside = (kk >= 1.0) & (kk <= g)
    out = np.where(kk == g + 1.0, np.power(a, g), np.where(inside, body, 0.0))
    return scalar_or_array(out)


def walltime_speedup(
    alpha: ArrayLike, gamma: ArrayLike, c: ArrayLike, v: ArrayLike = 1.0
) -> FloatArray | float:
    r"""Expected walltime improvement factor, :math:`E / (\gamma c + v)`.

    A pass costs ``gamma`` draft steps (``c`` each) and one verification of
    ``gamma + 1`` tokens (``v`` target steps) and emits ``E`` tokens on average;
    plain decoding costs one target step per token. With ``v = 1`` (verifying
    ``gamma + 1`` tokens takes as long as one, the memory-bound case) this is
    Theorem 3.8 of Leviathan et al. 2023 (Section 3.3),
    :math:`\frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}`. Long generations
    are assumed (the renewal-reward average over many passes).

    >>> round(walltime_speedup(0.2, 3, 0.0), 2)  # Section 3.6: a bigram draft
    1.25
    """
    where = "walltime_speedup"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    cc, vv = check_nonnegative(c, "c", where), check_positive(v, "v", where)
    check_shapes(where, alpha=a, gamma=g, c=cc, v=vv)
    return scalar_or_array(_expected(a, g) / (g * cc + vv))


def ops_factor(alpha: ArrayLike, gamma: ArrayLike, c_hat: ArrayLike) -> FloatArray | float:
    r"""Expected factor of increase in total arithmetic operations per emitted token.

    :math:`\frac{(1-\alpha)(\gamma\hat c + \gamma + 1)}{1-\alpha^{\gamma+1}}
    = (\gamma\hat c+\gamma+1)/E`: a pass runs the target on ``gamma + 1``
    positions and the draft ``gamma`` times, and emits ``E`` tokens. Leviathan et
    al. 2023, Section 3.4, Theorem 3.11. At low agreement the bill is large: five
    guesses at alpha = 0.2 with a free draft cost 4.8x the operations per token.

    >>> round(ops_factor(0.2, 5, 0.0), 4)
    4.8003
    """
    where = "ops_factor"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    ch = check_nonnegative(c_hat, "c_hat", where)
    check_shapes(where, alpha=a, gamma=g, c_hat=ch)
    return scalar_or_array((g * ch + g + 1.0) / _expected(a, g))


def target_calls_per_token(alpha: ArrayLike, gamma: ArrayLike) -> FloatArray | float:
    r"""Expected serial target calls per emitted token, :math:`1/E`.

    One target call per pass, ``E`` tokens per pass (renewal-reward over a long
    generation). It is the factor by which speculative decoding cuts the serial
    target calls (and the reads of its weights), Leviathan et al. 2023, Sections
    3.1 and 3.4. It is 1 at alpha = 0 and ``1/(gamma+1)`` at alpha = 1.
    """
    where = "target_calls_per_token"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    check_shapes(where, alpha=a, gamma=g)
    return scalar_or_array(1.0 / _expected(a, g))


def draft_calls_per_token(alpha: ArrayLike, gamma: ArrayLike) -> FloatArray | float:
    r"""Expected draft calls per emitted token, :math:`\gamma/E`.

    ``gamma`` draft steps per pass over ``E`` tokens per pass (renewal-reward).
    Leviathan et al. 2023, Section 3.3 (the ``T c gamma`` term of Theorem 3.8's proof).
    """
    where = "draft_calls_per_token"
    a, g = check_alpha(alpha, where), check_count(gamma, "gamma", where)
    check_shapes(where, alpha=a, gamma=g)
    return scalar_or_array(g / _expected(a, g))


def oracle_speedup_bound(alpha: ArrayLike) -> FloatArray | float:
    r"""The bound :math:`1/(1-\alpha)` on tokens per pass (and on the speedup when c = 0).

    It is the limit of ``E`` as gamma -> infinity, what a per-token oracle choice
    of gamma achieves (Leviathan et al. 2023, Section 3.5), and an upper bound on
    the walltime improvement of a negligible-cost draft (Section 3.6). At
    alpha = 1 the bound is infinite: this returns ``inf`` there, by design.
    """
    a = check_alpha(alpha, "oracle_speedup_bound")
    d = 1.0 - a
    out = np.divide(1.0, d, out=np.full(a.shape, np.inf), where=d > 0.0)
    return scalar_or_array(out)


def gamma1_lower_bound(alpha: ArrayLike, c: ArrayLike) -> FloatArray | float:
    r"""Corollary 3.9's improvement at gamma = 1, :math:`(1+\alpha)/(1+c)`.

    If alpha > c this exceeds 1, so some gamma improves on plain decoding and the
    best gamma does at least this well (Leviathan et al. 2023, Section 3.3,
    Corollary 3.9, with v = 1).
    """
    where = "gamma1_lower_bound"
    a, cc = check_alpha(alpha, where), check_nonnegative(c, "c", where)
    check_shapes(where, alpha=a, c=cc)
    return scalar_or_array((1.0 + a) / (1.0 + cc))


def _v_table(v: Callable[[int], float] | ArrayLike | None, max_gamma: int) -> FloatArray:
    """v(gamma) for gamma = 0..max_gamma, checked: finite, > 0, and v(0) = 1."""
    where = "optimal_gamma"
    if v is None:
        return np.ones(max_gamma + 1)
    if callable(v):
        table = np.array([check_positive(v(g), f"v({g})", where) for g in range(max_gamma + 1)])
    else:
        table = check_positive(v, "v", where)
        if table.shape != (max_gamma + 1,):
            raise ValueError(
                f"{where}: v must hold one value per gamma = 0..max_gamma, i.e. shape "
                f"({max_gamma + 1},), got shape {table.shape}"
            )
    # v is a time in units of one target step for one token, so v(0) = 1 by definition.
    if abs(table[0] - 1.0) > 1e-9:
        raise ValueError(
            f"{where}: v(0) must be 1 (one target step for one token is the unit of time), "
            f"got {float(table[0])!r}"
        )
    return table


def optimal_gamma(
    alpha: ArrayLike,
    c: ArrayLike,
    max_gamma: int = 64,
    v: Callable[[int], float] | ArrayLike | None = None,
) -> NDArray[np.int64] | int:
    r"""The integer gamma in ``0..max_gamma`` that maximizes the walltime improvement.

    Maximizes :math:`E(\gamma)/(\gamma c + v(\gamma))` (Leviathan et al. 2023,
    Section 3.5: "since gamma is an integer, it can be easily found numerically").
    ``v`` is ``None`` (v = 1, Theorem 3.8), a callable ``gamma -> v(gamma)`` or an
    array of ``v`` for gamma = 0..max_gamma; ``v(0)`` must be 1. gamma = 0 means
    "do not speculate", with improvement exactly 1. Ties (speedups within
    :data:`TIE_RTOL`, relative) go to the smaller gamma, so alpha <= c gives 0.

    >>> optimal_gamma(0.8, 0.05)
    8
    """
    where = "optimal_gamma"
    a, cc = check_alpha(alpha, where), check_nonnegative(c, "c", where)
    if isinstance(max_gamma, bool) or not isinstance(max_gamma, int | np.integer):
        raise TypeError(f"{where}: max_gamma must be an int, got {type(max_gamma).__name__}")
    if max_gamma < 0:
        raise ValueError(f"{where}: max_gamma must be >= 0, got {max_gamma}")
    table = _v_table(v, int(max_gamma))
    shape = check_shapes(where, alpha=a, c=cc)
    flat_a = np.broadcast_to(a, shape).ravel()
    flat_c = np.broadcast_to(cc, shape).ravel()
    gammas = np.arange(max_gamma + 1, dtype=np.float64)
    out = np.empty(flat_a.size, dtype=np.int64)
    chunk = max(1, (1 << 20) // gammas.size)  # bounds the (points, gammas) table to ~8 MB
    for lo in range(0, flat_a.size, chunk):
        ca, cb = flat_a[lo : lo + chunk, None], flat_c[lo : lo + chunk, None]
        speed = _expected(ca, gammas) / (gammas * cb + table)
        speed[:, 0] = 1.0
        best = speed.max(axis=1, keepdims=True)
        out[lo : lo + chunk] = np.argmax(speed >= best * (1.0 - TIE_RTOL), axis=1)
    if out.size == 1 and not shape:
        return int(out[0])
    return out.reshape(shape)
