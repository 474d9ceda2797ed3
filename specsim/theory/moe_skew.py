r"""Skewed routing: the distinct experts a pass touches when experts are not equally popular.

Let ``p_e`` be the share of routed token-slots that expert ``e`` receives (what engines'
expert-load counters report, normalized: ``sum_e p_e = 1``) and ``pi_e`` the probability
that ``e`` is among one token's ``k`` experts. A token picks exactly ``k`` distinct
experts, so its expected count of ``e`` is ``pi_e`` and ``pi_e = k p_e`` exactly
(``sum_e pi_e = k``). With tokens independent, all ``n`` tokens of a pass miss ``e`` with
probability ``(1 - pi_e)^n``, and by linearity of expectation

.. math:: E_\mathrm{distinct}(n) = \sum_e 1 - (1 - \pi_e)^n, \qquad \pi_e = k\,p_e

(:func:`experts_touched_load`). Only the per-token marginals enter the mean, so this holds
for any router that picks ``k`` distinct experts (softmax top-k, group-limited top-k);
the assumption is that tokens route independently. Uniform load ``p_e = 1/E`` gives
``E (1 - (1 - k/E)^n)``, :func:`specsim.theory.moe.experts_touched`; every term is concave
in ``p_e``, so any skew touches fewer experts (Jensen). The sympy proofs are in
:mod:`specsim.theory.moe_symbolic` (result ``moe_experts_touched_load``).

**Loads from published statistics.** Engines publish summary statistics of per-expert
token counts (mean, standard deviation, the hottest expert's excess), not the vector.
:func:`lognormal_load` builds a vector with a given coefficient of variation ``cv``:
shares proportional to ``exp(s z_i)`` at the normal quantiles ``z_i = Phi^-1((i - 1/2)/E)``,
with ``s`` solved so that the vector's own (population) ``cv`` is the one asked for. The
log-normal shape is an approximation, chosen because it was the best of several fits to
DeepSeek-V3's measured per-rank token counts (deepseek-ai/DeepEP pull request #393); its
hottest expert is a check on it, not a fitted number. :func:`count_cv` removes the
sampling noise from a per-iteration standard deviation: counts of mean ``m`` drawn from
fixed shares vary by about ``sqrt(m)`` (multinomial, ``p_e`` small), so the shares' own
``cv = sqrt(std^2 - m) / m``.

>>> round(experts_touched_load(2, load=[0.25] * 4, top_k=2), 6)
3.0
>>> load = lognormal_load(8, cv=0.5)
>>> round(float(load.std() / load.mean()), 12)
0.5
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from specsim.theory._checks import FloatArray, as_real, scalar_or_array

__all__ = ["check_load", "count_cv", "experts_touched_load", "lognormal_load"]

LOAD_RTOL = 1e-6
"""How far from 1 the shares of a load may sum (rounded published shares)."""


def check_load(load: ArrayLike, *, top_k: int, where: str) -> FloatArray:
    """``load`` as a float array of shares when it is one-dimensional, has at least
    ``top_k`` entries, every share is >= 0 and finite, they sum to 1 (within
    :data:`LOAD_RTOL`) and no expert takes more than every token (``top_k * p_e <= 1``);
    else a ValueError naming ``where`` and the bad value."""
    p = as_real(load, "load", where)
    if p.ndim != 1 or p.size < top_k:
        raise ValueError(
            f"{where}: load must list one share per expert (at least top_k = {top_k}), "
            f"got shape {p.shape}"
        )
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        bad = int(np.flatnonzero(~np.isfinite(p) | (p < 0))[0])
        raise ValueError(f"{where}: load shares must be finite and >= 0; share {bad} is {p[bad]}")
    total = float(p.sum())
    if abs(total - 1.0) > LOAD_RTOL:
        raise ValueError(f"{where}: load shares must sum to 1, they sum to {total:.9g}")
    if top_k * float(p.max()) > 1 + LOAD_RTOL:
        raise ValueError(
            f"{where}: top_k * load = {top_k * float(p.max())!r} > 1 for expert "
            f"{int(p.argmax())} (an expert cannot be chosen by more than every token)"
        )
    return p


def experts_touched_load(n: ArrayLike, *, load: ArrayLike, top_k: int) -> FloatArray | float:
    """Expected distinct experts ``sum_e 1 - (1 - top_k load_e)^n`` that ``n`` tokens touch.

    ``load`` lists each expert's share of the routed token-slots (:func:`check_load`).
    Exact for any router that picks ``top_k`` distinct experts per token, tokens
    independent (module docstring); uniform shares give
    :func:`specsim.theory.moe.experts_touched`. ``n`` may be an array of real ``n >= 0``.
    """
    where = "experts_touched_load"
    k = int(top_k)
    if isinstance(top_k, bool) or k != top_k or k < 1:
        raise ValueError(f"{where}: top_k must be an integer >= 1, got {top_k!r}")
    q = np.minimum(k * check_load(load, top_k=k, where=where), 1.0)
    x = as_real(n, "n", where)
    if np.any(x < 0) or not np.all(np.isfinite(x)):
        raise ValueError(f"{where}: n must be finite and >= 0, got {np.asarray(n).tolist()!r}")
    with np.errstate(divide="ignore"):
        # -expm1(n log1p(-q)) is 1 - (1 - q)^n without cancellation for small n q; q = 1
        # (an expert every token takes) gives log1p(-1) = -inf, exp(-inf) = 0: missed never.
        miss = -np.expm1(x[..., None] * np.log1p(-q))
    miss = np.where(x[..., None] > 0, miss, 0.0)
    return scalar_or_array(np.asarray(miss.sum(axis=-1), dtype=np.float64))


def _quantile_cv(s: float, z: FloatArray) -> float:
    w = np.exp(s * (z - z.max()))  # scaled by the largest: no overflow at any s
    return float(w.std() / w.mean())


def lognormal_load(experts: int, *, cv: float) -> FloatArray:
    """Shares of ``experts`` experts, ascending, proportional to ``exp(s z_i)`` at the normal
    quantiles ``z_i = Phi^-1((i - 1/2) / experts)``, with ``s`` such that their coefficient of
    variation (population standard deviation over mean) is ``cv``; ``cv = 0`` is uniform.

    The documented approximation of the module docstring: a published spread made into a
    load vector. A ``cv`` above what ``experts`` quantiles can reach (every load on one
    expert: ``sqrt(experts - 1)``) is an error.
    """
    where = "lognormal_load"
    if isinstance(experts, bool) or not isinstance(experts, int | np.integer) or experts < 1:
        raise ValueError(f"{where}: experts must be an integer >= 1, got {experts!r}")
    c = float(cv)
    reach = math.sqrt(experts - 1)
    if not math.isfinite(c) or c < 0 or c >= reach:
        raise ValueError(
            f"{where}: cv must be in [0, {reach:.6g}) for {experts} experts, got {cv!r}"
        )
    if c == 0.0 or experts == 1:
        return np.full(int(experts), 1.0 / experts)
    from scipy.optimize import brentq  # start-up: theory's numbers need no scipy otherwise
    from scipy.special import ndtri  # start-up: as above

    z = ndtri((np.arange(int(experts)) + 0.5) / experts)
    hi = 1.0
    while _quantile_cv(hi, z) < c:  # the cv grows with s without bound toward reach
        hi *= 2.0
    s = brentq(lambda t: _quantile_cv(t, z) - c, 0.0, hi, xtol=1e-14, rtol=1e-14)
    w = np.exp(s * (z - z.max()))
    return np.asarray(w / w.sum(), dtype=np.float64)


def count_cv(*, mean: float, std: float) -> float:
    """The shares' own coefficient of variation behind per-iteration counts of ``mean``
    tokens per expert with standard deviation ``std`` across experts: ``sqrt(std^2 -
    mean) / mean``, the sampling noise (about ``sqrt(mean)``) removed; 0 when the counts
    vary no more than sampling does."""
    m, s = float(mean), float(std)
    if not (math.isfinite(m) and m > 0 and math.isfinite(s) and s >= 0):
        raise ValueError(f"count_cv: mean must be > 0 and std >= 0, got mean={mean!r}, std={std!r}")
    return math.sqrt(max(s * s - m, 0.0)) / m
