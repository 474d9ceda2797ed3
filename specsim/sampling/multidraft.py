"""Several independent drafts verified exactly: SpecTr's k-sequential selection, and SpecInfer's.

``k`` draft sequences of length ``L`` are drawn independently from the draft model.
At position ``j`` the drafts that still agree with the accepted prefix (the *alive*
ones, ``m`` of them) propose next tokens that are i.i.d. from ``q(.|prefix)``; one
of them is selected or a token is drawn from a residual, and the drafts whose token
was selected stay alive. Two exact one-position selections:

- **k-sequential** (``"kseq"``; SpecTr, Sun et al., NeurIPS 2023, arXiv:2310.15141,
  Section 4, Algorithm K-SEQ): for a ``rho >= 1``, candidate ``x_i`` is accepted with
  probability ``min(1, p(x_i) / (rho q(x_i)))``, in order; if none is, the token is
  drawn from ``p_res ∝ p - min(q, p/rho) (1 - (1 - beta)^m) / beta`` with
  ``beta = sum min(q, p/rho)``. It is exact whenever ``p_res >= 0``; :func:`kseq_rho`
  finds the smallest such ``rho`` (which maximizes the acceptance
  ``1 - (1 - beta)^m``) by bisection on ``[1, m]``, where feasibility is monotone.
- **multi-step speculative sampling** (``"mss"``; SpecInfer, Miao et al., ASPLOS 2024,
  Algorithm 2): candidate ``x_i`` is accepted with probability ``min(1, r(x_i)/q(x_i))``
  against the residual ``r``, which after each rejection becomes
  ``normalize(max(0, r - q))``; if none is accepted a token is drawn from ``r``.

Both run on ``B`` independent problems at once (no loop over problems).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.sampling.cdf import inverse_cdf
from specsim.sampling.chain import (
    RESIDUAL_FLOOR,
    BatchBlockResult,
    FloatArray,
    check_distribution,
    check_token_range,
    first_index,
)

__all__ = [
    "METHODS",
    "kseq_rho",
    "kseq_residual",
    "verify_multidraft_batch",
]

METHODS = ("kseq", "mss")
"""The one-position selections :func:`verify_multidraft_batch` knows."""

_BISECTIONS = 64  # halvings of one segment of [1, k]: down to the float spacing


def _kseq_parts(
    p: FloatArray, q: FloatArray, m: FloatArray, rho: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``(min(q, p/rho), (1 - (1 - beta)^m) / beta)``; the second is ``m`` at beta = 0."""
    accepted = np.minimum(q, p / rho[..., None])
    beta = accepted.sum(axis=-1)
    safe = np.where(beta > 0.0, beta, 1.0)
    with np.errstate(divide="ignore"):  # beta = 1: log1p(-1) = -inf, and expm1(-inf) = -1
        scale = np.where(beta > 0.0, -np.expm1(m * np.log1p(-np.minimum(beta, 1.0))) / safe, m)
    return accepted, scale


def kseq_rho(p: ArrayLike, q: ArrayLike, m: ArrayLike) -> FloatArray:
    """The smallest ``rho`` in ``[1, m]`` for which K-SEQ's residual is non-negative.

    ``p``, ``q``: ``(..., V)``; ``m``: the number of candidates (broadcasting over the
    leading axes). K-SEQ is exact iff ``min(q, p/rho) g <= p`` for every token, with
    ``g = (1 - (1 - beta)^m)/beta``; ``g <= rho`` suffices, ``1 - (1 - beta)^m <= rho
    beta(rho)`` has its left side falling and its right side rising in ``rho`` (SpecTr,
    Section 4), and ``rho = m`` is always feasible. Token by token the condition reads
    ``min(q/p, 1/rho) g <= 1`` where ``p > 0``, i.e. ``min(c, 1/rho) g <= 1`` with
    ``c = max q/p``; ``c g`` rises with ``rho``, so where ``rho = 1`` fails the feasible
    set is where ``phi = rho beta - 1 + (1 - beta)^m >= 0``, ``phi`` rising. Between
    consecutive ratios ``p/q`` (sorted once per row) ``beta = A + B/rho`` with ``A``, ``B``
    fixed, so ``phi`` at every ratio brackets the root in one segment and a bisection
    there needs no pass over the vocabulary (a speed trick). The bisection keeps its upper
    end feasible: the returned ``rho`` always gives an exact sampler, as close to the
    smallest feasible one as ``phi`` can be evaluated (relative 1e-11 where beta is tiny).
    """
    pp, qq = check_distribution(p, "p"), check_distribution(q, "q")
    mm = np.broadcast_to(np.asarray(m, dtype=np.float64), pp.shape[:-1])
    if np.any(mm < 1):
        raise ValueError(f"m: the number of candidates must be >= 1, got {mm.min()!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.max(np.where(pp > 0.0, qq / np.where(pp > 0.0, pp, 1.0), 0.0), axis=-1)
        beta1 = np.minimum(pp, qq).sum(axis=-1)
        g1 = np.where(
            beta1 > 0.0,
            -np.expm1(mm * np.log1p(-np.minimum(beta1, 1.0))) / np.where(beta1 > 0.0, beta1, 1.0),
            mm,
        )
    at_one = np.minimum(c, 1.0) * g1 <= 1.0 + 4e-16
    # Tokens the draft never proposes add nothing to beta: ratio 0 and no p.
    drafted = qq > 0.0
    ratio = np.where(drafted, pp / np.where(drafted, qq, 1.0), 0.0)
    order = np.argsort(ratio, axis=-1)
    ts = np.take_along_axis(ratio, order, -1)
    ps = np.take_along_axis(np.where(drafted, pp, 0.0), order, -1)
    qs = np.take_along_axis(qq, order, -1)
    zero = np.zeros((*ts.shape[:-1], 1))
    below = np.concatenate([zero, np.cumsum(ps, axis=-1)], axis=-1)  # p before index i
    above = np.concatenate([np.flip(np.cumsum(np.flip(qs, -1), -1), -1), zero], axis=-1)
    m1 = mm[..., None]

    def phi(rho: FloatArray, a: FloatArray, b: FloatArray, n: FloatArray) -> FloatArray:
        beta = np.minimum(a + b / rho, 1.0)
        return rho * beta - 1.0 + (1.0 - beta) ** n

    inside = (ts >= 1.0) & (ts <= m1)
    with np.errstate(divide="ignore", invalid="ignore"):
        at_ratio = phi(np.where(inside, ts, 1.0), above[..., :-1], below[..., :-1], m1)
    lo = np.maximum(1.0, np.max(np.where(inside & (at_ratio < 0.0), ts, 1.0), axis=-1))
    hi = np.minimum(mm, np.min(np.where(inside & (at_ratio >= 0.0), ts, np.inf), axis=-1))
    k = np.sum(ts <= lo[..., None], axis=-1)[..., None]
    a_seg = np.take_along_axis(above, k, -1)[..., 0]
    b_seg = np.take_along_axis(below, k, -1)[..., 0]
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        ok = phi(mid, a_seg, b_seg, mm) >= 0.0
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    return np.where(at_one, 1.0, hi)


def kseq_residual(p: FloatArray, q: FloatArray, m: FloatArray, rho: FloatArray) -> FloatArray:
    """K-SEQ's residual weights ``max(0, p - min(q, p/rho) g)`` (unnormalized, rows)."""
    accepted, scale = _kseq_parts(p, q, m, rho)
    return np.maximum(p - accepted * scale[..., None], 0.0)


def _check(
    drafts: ArrayLike, draft_probs: ArrayLike, target_probs: ArrayLike
) -> tuple[NDArray[np.int64], FloatArray, FloatArray]:
    toks = np.asarray(drafts)
    if not np.issubdtype(toks.dtype, np.integer):
        raise TypeError(f"drafts: expected integer token ids, got dtype {toks.dtype}")
    if toks.ndim != 3 or toks.shape[1] < 1:
        raise ValueError(f"drafts: expected shape (batch, k >= 1, length), got {toks.shape}")
    batch, k, length = toks.shape
    q = check_distribution(draft_probs, "draft_probs")
    p = check_distribution(target_probs, "target_probs")
    vocab = p.shape[-1]
    if q.shape != (batch, k, length, vocab):
        raise ValueError(
            f"draft_probs: expected shape ({batch}, {k}, {length}, {vocab}), got {q.shape}"
        )
    if p.shape != (batch, k, length + 1, vocab):
        raise ValueError(
            f"target_probs: expected shape ({batch}, {k}, {length + 1}, V) "
            f"(length + 1 positions per draft), got {p.shape}"
        )
    check_token_range(toks, vocab, "drafts")
    q_x = np.take_along_axis(q, toks[..., None], axis=-1)[..., 0]
    if np.any(q_x <= 0.0):
        at = first_index(q_x <= 0.0)
        raise ValueError(f"drafts{list(at)} = {int(toks[at])} has draft probability 0")
    return toks.astype(np.int64, copy=False), q, p


def verify_multidraft_batch(
    drafts: ArrayLike,
    draft_probs: ArrayLike,
    target_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    method: str = "kseq",
) -> BatchBlockResult:
    """Verify ``B`` problems of ``k`` independent drafts of length ``L`` each, exactly.

    ``drafts (B, k, L)``; ``draft_probs (B, k, L, V)``, ``q`` after each draft's prefix;
    ``target_probs (B, k, L + 1, V)``, ``p`` after each draft's prefix (drafts that share
    a prefix must carry the same rows there: that is what "p and q depend on the context"
    means). Returns the chain's :class:`BatchBlockResult` (tokens ``(B, L + 1)``, padded
    with -1). Draws ``rng.random((B, L + 1, k + 1))``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    toks, q, p = _check(drafts, draft_probs, target_probs)
    batch, k, length = toks.shape
    u = rng.random((batch, length + 1, k + 1))
    rows = np.arange(batch)
    alive = np.ones((batch, k), dtype=bool)
    live = np.ones(batch, dtype=bool)  # still accepting
    out = np.full((batch, length + 1), -1, dtype=np.int64)
    accepted = np.zeros(batch, dtype=np.int64)
    for j in range(length):
        lead = np.argmax(alive, axis=1)  # an alive draft: its prefix is the accepted one
        pj, qj = p[rows, lead, j], q[rows, lead, j]
        m = alive.sum(axis=1).astype(np.float64)
        chosen = np.full(batch, -1, dtype=np.int64)
        if method == "kseq":
            rho = np.ones(batch)
            resid = pj.copy()
            s = np.flatnonzero(live)  # finished rows need no rho (a speed trick)
            rho[s] = kseq_rho(pj[s], qj[s], m[s])
            resid[s] = kseq_residual(pj[s], qj[s], m[s], rho[s])
        else:
            resid = pj.copy()
        for i in range(k):
            x = toks[:, i, j]
            trying = live & alive[:, i] & (chosen < 0)
            if method == "kseq":
                ok = u[:, j, i] * rho * qj[rows, x] < pj[rows, x]
            else:
                ok = u[:, j, i] * qj[rows, x] < resid[rows, x]
                miss = np.flatnonzero(trying & ~ok)
                left = np.maximum(resid[miss] - qj[miss], 0.0)
                mass = left.sum(axis=-1)
                keep = mass > RESIDUAL_FLOOR  # none left: p == q, a rejection was impossible
                resid[miss[keep]] = left[keep] / mass[keep, None]
            chosen = np.where(trying & ok, x, chosen)
        stop = live & (chosen < 0)
        if np.any(stop):
            s = np.flatnonzero(stop)
            out[s, j] = inverse_cdf(resid[s], u[s, j, k])
        go = live & (chosen >= 0)
        out[go, j] = chosen[go]
        accepted[go] += 1
        alive &= toks[:, :, j] == chosen[:, None]
        live = go
    if np.any(live):
        s = np.flatnonzero(live)
        lead = np.argmax(alive[s], axis=1)
        out[s, length] = inverse_cdf(p[s, lead, length], u[s, length, k])
    return BatchBlockResult(tokens=out, accepted=accepted)
