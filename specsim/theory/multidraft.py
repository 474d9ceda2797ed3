r"""Acceptance of one position verified against k i.i.d. draft candidates, and how it grows with k.

The draft proposes ``k`` candidates ``x_1..x_k`` i.i.d. from ``q``; an exact verifier
emits a token with the target's law ``p`` and *accepts* when that token is one of
the candidates. For ``k = 1`` every exact verifier is bounded by, and speculative
sampling reaches, :math:`\alpha = \sum_x \min(p, q)` (Leviathan et al. 2023,
Section 3.2). For ``k`` candidates:

- :func:`optimal_multidraft_acceptance`: the best any exact verifier can do, the value
  of SpecTr's optimal-transport problem (Sun et al., NeurIPS 2023, arXiv:2310.15141,
  Section 3, the linear program over couplings of ``q^k`` and ``p``). As a max flow
  from candidate tuples (capacity ``q^k``) to the tokens they contain (capacity ``p``)
  it equals, by max-flow/min-cut (derived here; the tests check it against the linear
  program solved by scipy), :math:`\min_{H \subseteq V} [1 + p(H) - q(H)^k]`, where
  ``H`` is the set of tokens whose edges to the sink are cut; enumerated over the
  ``2^V`` subsets, so for small vocabularies. ``k = 1`` gives ``1 - TV(p, q)``.
- :func:`kseq_acceptance`: SpecTr's k-sequential selection in closed form,
  :math:`1 - (1 - \beta_\rho)^k` with :math:`\beta_\rho = \sum_x \min(q, p/\rho)` at the
  smallest ``rho`` that keeps its residual non-negative (Sun et al., Section 4,
  Algorithm K-SEQ: a candidate is accepted with probability ``beta`` each, in turn).
- :func:`mss_acceptance`: SpecInfer's multi-step speculative sampling on i.i.d.
  candidates (Miao et al. 2024, Algorithm 2): the recursion
  :math:`A_k(p) = \alpha(p, q) + (1 - \alpha(p, q)) A_{k-1}(r)`,
  :math:`r = \mathrm{normalize}(\max(0, p - q))`, exact and cheap.
- :func:`rrs_acceptance`: candidates drawn *without replacement* under recursive
  rejection sampling (Jeon et al. 2024, arXiv:2402.14160), exactly by enumeration of
  the ordered candidates (``V^k`` terms).

>>> p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
>>> [round(mss_acceptance(p, q, k), 4) for k in (1, 2, 3)]
[0.7, 0.76, 0.808]
>>> [round(kseq_acceptance(p, q, k), 4) for k in (1, 2, 3)]
[0.7, 0.7914, 0.8585]
>>> [round(optimal_multidraft_acceptance(p, q, k), 4) for k in (1, 2, 3)]  # k=1: 1 - TV
[0.7, 0.86, 0.988]

Candidates without replacement are not i.i.d., so they may beat that bound: with three
tokens, three distinct candidates always hold the emitted one.

>>> [round(rrs_acceptance(p, q, k), 4) for k in (1, 2, 3)]
[0.7, 0.82, 1.0]
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import ArrayLike

from specsim.theory._checks import FloatArray, as_real

__all__ = [
    "optimal_multidraft_acceptance",
    "kseq_rho_star",
    "kseq_acceptance",
    "mss_acceptance",
    "rrs_acceptance",
    "multidraft_acceptance_by_k",
]

_MAX_SUBSET_VOCAB = 20  # 2^20 subsets
_FLOOR = 1e-15  # residual mass at or below which p == q


def _pair(p: ArrayLike, q: ArrayLike, k: int, where: str) -> tuple[FloatArray, FloatArray]:
    pp, qq = as_real(p, "p", where), as_real(q, "q", where)
    for name, arr in (("p", pp), ("q", qq)):
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(
                f"{where}: {name} must be one non-empty distribution, got shape {arr.shape}"
            )
        if not (np.all(arr >= 0.0) and abs(float(arr.sum()) - 1.0) <= 1e-9):
            raise ValueError(f"{where}: {name} must be non-negative and sum to 1, got {arr!r}")
    if pp.size != qq.size:
        raise ValueError(f"{where}: p and q have different vocabularies: {pp.size} vs {qq.size}")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"{where}: k must be an integer >= 1, got {k!r}")
    return pp, qq


def optimal_multidraft_acceptance(p: ArrayLike, q: ArrayLike, k: int) -> float:
    """The best acceptance of any exact verifier of ``k`` i.i.d. candidates:
    ``min over token subsets H of 1 + p(H) - q(H)^k`` (see the module docstring)."""
    pp, qq = _pair(p, q, k, "optimal_multidraft_acceptance")
    if pp.size > _MAX_SUBSET_VOCAB:
        raise ValueError(
            f"optimal_multidraft_acceptance: {pp.size} tokens means 2^{pp.size} "
            f"subsets; at most {_MAX_SUBSET_VOCAB}"
        )
    masks = np.array(list(itertools.product((0.0, 1.0), repeat=pp.size)))
    return float(np.min(1.0 + masks @ pp - (masks @ qq) ** k))


def _beta_scale(
    p: FloatArray, q: FloatArray, k: int, rho: float
) -> tuple[FloatArray, float, float]:
    accepted = np.minimum(q, p / rho)
    beta = float(accepted.sum())
    scale = (1.0 - (1.0 - beta) ** k) / beta if beta > 0.0 else float(k)
    return accepted, beta, scale


def kseq_rho_star(p: ArrayLike, q: ArrayLike, k: int) -> float:
    """The smallest ``rho`` in ``[1, k]`` with ``min(q, p/rho) (1 - (1-beta)^k)/beta <= p``.

    Bisection (60 halvings); the upper end is always feasible, and feasibility is
    monotone because ``1 - (1 - beta)^k`` falls and ``rho beta(rho)`` rises with ``rho``.
    """
    pp, qq = _pair(p, q, k, "kseq_rho_star")

    def feasible(rho: float) -> bool:
        accepted, _, scale = _beta_scale(pp, qq, k, rho)
        return bool(np.all(accepted * scale - pp <= 4e-16 * pp))

    if feasible(1.0):
        return 1.0
    lo, hi = 1.0, float(k)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


def kseq_acceptance(p: ArrayLike, q: ArrayLike, k: int, rho: float | None = None) -> float:
    r"""SpecTr's k-sequential acceptance, :math:`1 - (1 - \beta_\rho)^k`.

    ``rho`` defaults to :func:`kseq_rho_star`; a given ``rho`` must be feasible (else
    the selection is not exact) and a ValueError says so. ``k = 1``, ``rho = 1`` gives
    ``sum min(p, q)``.
    """
    pp, qq = _pair(p, q, k, "kseq_acceptance")
    r = kseq_rho_star(pp, qq, k) if rho is None else float(rho)
    if not r >= 1.0:
        raise ValueError(f"kseq_acceptance: rho must be >= 1, got {rho!r}")
    accepted, beta, scale = _beta_scale(pp, qq, k, r)
    if np.any(accepted * scale - pp > 1e-12):
        raise ValueError(
            f"kseq_acceptance: rho = {r!r} is infeasible for k = {k}: the residual would be "
            "negative (the selection would not be exact)"
        )
    return float(1.0 - (1.0 - beta) ** k)


def _residual(p: FloatArray, q: FloatArray) -> FloatArray:
    left = np.maximum(p - q, 0.0)
    mass = float(left.sum())
    return p if mass <= _FLOOR else left / mass


def mss_acceptance(p: ArrayLike, q: ArrayLike, k: int) -> float:
    r"""Multi-step speculative sampling on ``k`` i.i.d. candidates:
    :math:`A_k(p) = \alpha(p, q) + (1 - \alpha(p, q)) A_{k-1}(\mathrm{res}(p, q))`, ``A_0 = 0``."""
    pp, qq = _pair(p, q, k, "mss_acceptance")
    total, survive, r = 0.0, 1.0, pp
    for _ in range(k):
        a = float(np.minimum(r, qq).sum())
        total += survive * a
        survive *= 1.0 - a
        r = _residual(r, qq)
    return total


def rrs_acceptance(p: ArrayLike, q: ArrayLike, k: int) -> float:
    """Recursive rejection sampling on ``k`` candidates drawn without replacement from ``q``.

    Exact by enumerating the ordered candidates: candidate ``i`` comes from ``q`` with the
    earlier ones removed (renormalized), is accepted with ``min(1, r/q_i)``, and a rejection
    sets ``r = normalize(max(0, r - q_i))`` (Jeon et al. 2024). Stops early when ``q`` runs
    out of tokens.
    """
    pp, qq = _pair(p, q, k, "rrs_acceptance")

    def walk(r: FloatArray, removed: tuple[int, ...], left: int) -> float:
        law = qq.copy()
        law[list(removed)] = 0.0
        mass = float(law.sum())
        if left == 0 or mass <= 0.0:
            return 0.0
        law /= mass
        after = _residual(r, law)
        total = 0.0
        for x in np.flatnonzero(law):
            keep = min(float(law[x]), float(r[x]))
            total += keep
            if law[x] - keep > 0.0:
                total += (float(law[x]) - keep) * walk(after, (*removed, int(x)), left - 1)
        return total

    return walk(pp, (), k)


def multidraft_acceptance_by_k(p: ArrayLike, q: ArrayLike, max_k: int) -> dict[str, list[float]]:
    """Each acceptance above for ``k = 1..max_k``: how it grows with the number of drafts."""
    _pair(p, q, max_k, "multidraft_acceptance_by_k")
    ks = range(1, max_k + 1)
    return {
        "k": [float(k) for k in ks],
        "kseq": [kseq_acceptance(p, q, k) for k in ks],
        "mss": [mss_acceptance(p, q, k) for k in ks],
        "rrs": [rrs_acceptance(p, q, k) for k in ks],
        "optimal": [optimal_multidraft_acceptance(p, q, k) for k in ks],
    }
