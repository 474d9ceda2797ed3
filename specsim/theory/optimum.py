r"""The best lookahead for one (alpha, c), and whether a best one exists at all.

With v = 1, the walltime improvement :math:`W(\gamma) = E(\gamma)/(\gamma c + 1)`
rises from gamma to gamma + 1 exactly when
:math:`\Delta(\gamma) = \alpha^{\gamma+1}(1 + \gamma c) - c E(\gamma) > 0`
(Leviathan et al. 2023, Section 3.5; derived in :mod:`specsim.theory.speedup`).
Once it stops rising it never rises again, so W rises to one peak and falls
after it, and the peak is found by bisection, in about ``2 log2(peak)``
evaluations and no memory that grows with ``max_gamma``.

Two cases have no peak: W rises at every gamma, and no finite gamma is optimal.
With a free draft (``c = 0`` and ``alpha > 0``), :math:`\Delta = \alpha^{\gamma+1}
> 0` and W climbs towards the oracle bound :math:`1/(1 - \alpha)`, by less than
rounding once :math:`\alpha^{\gamma+1}` is below about 1e-14. With every draft
accepted (``alpha = 1`` and ``c < 1``) W = (gamma + 1)/(gamma c + 1) climbs
towards 1/c (without bound at c = 0). :func:`best_gamma` says so
(:attr:`GammaOptimum.unbounded`).

>>> best = best_gamma(0.8, 0.05)
>>> best.gamma, round(best.speedup, 4), best.unbounded
(8, 3.0921, False)
>>> free = best_gamma(0.2, 0.0)
>>> free.unbounded, free.gamma, free.supremum
(True, 19, 1.25)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from specsim.theory._checks import check_alpha, check_nonnegative
from specsim.theory.numeric import (
    TIE_RTOL,
    expected_tokens,
    oracle_speedup_bound,
    walltime_speedup,
)

__all__ = ["GammaOptimum", "best_gamma"]


@dataclass(frozen=True)
class GammaOptimum:
    """The best lookahead for one (alpha, c) with v = 1 (see :func:`best_gamma`).

    ``gamma``: the best gamma in ``0..max_gamma``, the smallest whose improvement
    is within :data:`~specsim.theory.TIE_RTOL` (relative) of the best there, as
    :func:`~specsim.theory.optimal_gamma` picks it. ``speedup``: W at that gamma.
    ``unbounded``: W rises at every gamma, so no finite gamma is optimal; then
    ``gamma`` is where a larger one stops gaining more than rounding (or
    ``max_gamma``). ``supremum``: the largest improvement any gamma gives or
    approaches; the peak's W when bounded, ``1/(1 - alpha)`` at c = 0, ``1/c`` at
    alpha = 1, and ``inf`` at alpha = 1, c = 0.
    """

    gamma: int
    speedup: float
    unbounded: bool
    supremum: float


def _rises(alpha: float, c: float, gamma: int) -> bool:
    """W(gamma + 1) > W(gamma) (v = 1): the sign of Delta(gamma)."""
    e = float(expected_tokens(alpha, gamma))
    return alpha ** (gamma + 1) * (1.0 + gamma * c) - c * e > 0.0


def _peak(alpha: float, c: float, limit: int) -> int:
    """The first gamma in 0..limit where W stops rising (``limit`` if it rises up to there)."""
    if not _rises(alpha, c, 0):
        return 0
    lo, hi = 0, 1  # W rises at lo; doubling finds an hi where it does not
    while hi < limit and _rises(alpha, c, hi):
        lo, hi = hi, min(2 * hi, limit)
    if hi >= limit and _rises(alpha, c, limit):
        return limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _rises(alpha, c, mid) else (lo, mid)
    return hi


def _speedup(alpha: float, c: float, gamma: int) -> float:
    return float(walltime_speedup(alpha, gamma, c))


def best_gamma(alpha: ArrayLike, c: ArrayLike, *, max_gamma: int = 64) -> GammaOptimum:
    r"""The best integer lookahead in ``0..max_gamma`` for v = 1, and whether W has a peak.

    Maximizes :math:`W(\gamma) = E(\gamma)/(\gamma c + 1)` (Theorem 3.8) as
    :func:`~specsim.theory.optimal_gamma` does, ties within
    :data:`~specsim.theory.TIE_RTOL` going to the smaller gamma, but for one
    scalar (alpha, c), by bisection on the sign of the marginal gain (Leviathan et
    al. 2023, Section 3.5): time and memory grow with ``log(max_gamma)``, so
    ``max_gamma = 10**9`` costs no more than 64. ``unbounded`` is True when W
    rises at every gamma (c = 0 < alpha, or alpha = 1 > c): no finite gamma is
    optimal and the answer is bounded only by ``max_gamma`` and by rounding.
    """
    where = "best_gamma"
    a_arr, c_arr = check_alpha(alpha, where), check_nonnegative(c, "c", where)
    if a_arr.ndim or c_arr.ndim:
        raise TypeError(
            f"{where}: alpha and c must be scalars, got shapes {a_arr.shape}, "
            f"{c_arr.shape} (optimal_gamma takes arrays)"
        )
    if isinstance(max_gamma, bool) or not isinstance(max_gamma, int | np.integer):
        raise TypeError(f"{where}: max_gamma must be an int, got {type(max_gamma).__name__}")
    if max_gamma < 0:
        raise ValueError(f"{where}: max_gamma must be >= 0, got {max_gamma}")
    a, cc, limit = float(a_arr), float(c_arr), int(max_gamma)
    unbounded = (cc == 0.0 and a > 0.0) or (a == 1.0 and cc < 1.0)
    if unbounded:
        top = limit
        # alpha = 1 > c > 0: W tends to 1/c; c = 0: to the oracle bound (inf at alpha = 1).
        supremum = 1.0 / cc if cc > 0.0 else float(oracle_speedup_bound(a))
    else:
        peak = _peak(a, cc, 2**62)  # bounded: W turns down at a finite gamma
        top = min(peak, limit)
        supremum = _speedup(a, cc, peak)
    # W rises on 0..top: the smallest gamma within TIE_RTOL of W(top), by bisection.
    threshold = _speedup(a, cc, top) * (1.0 - TIE_RTOL)
    lo, hi = -1, top  # W(hi) reaches the threshold; W(lo) does not (lo = -1: none below)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _speedup(a, cc, mid) >= threshold else (mid, hi)
    return GammaOptimum(
        gamma=hi, speedup=_speedup(a, cc, hi), unbounded=unbounded, supremum=supremum
    )
