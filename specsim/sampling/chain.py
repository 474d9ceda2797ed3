"""Exact speculative sampling of a chain: acceptance, correction and block verification.

A draft model proposes a token ``x ~ q``; the target accepts it with probability
``min(1, p(x)/q(x))``; at the first rejection it emits a sample of the
*correction* (residual) distribution ``normalize(max(0, p - q))``. The token a
verification position emits is then distributed exactly as ``p``
(Leviathan, Kalman & Matias 2023, arXiv:2211.17192, Section 2.3 and Appendix
A.1, "Correctness of Speculative Sampling"; Chen et al. 2023, arXiv:2302.01318,
Section 4.2 and Theorem 1). The probability of acceptance is the overlap
``alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q)`` (Leviathan et al., Section
3.2: Definition 3.2, Theorem 3.5 and Corollary 3.6).

Every function takes float64 arrays whose last axis is the vocabulary and
broadcasts over leading axes; none loops in Python over the vocabulary. Random
functions take a :class:`numpy.random.Generator`; nothing seeds globals.

The package docstring (:mod:`specsim.sampling`) has a worked two-token example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.sampling.cdf import inverse_cdf

__all__ = [
    "SUM_TOLERANCE",
    "RESIDUAL_FLOOR",
    "BlockResult",
    "BatchBlockResult",
    "check_distribution",
    "acceptance_rate",
    "correction_distribution",
    "emitted_distribution",
    "verify",
    "verify_batch",
    "enumerate_block",
]

SUM_TOLERANCE = 1e-9
"""How far a probability row's sum may be from 1 before it is rejected."""

RESIDUAL_FLOOR = 1e-15
"""Leftover mass ``sum max(0, p - q)`` at or below which p == q is assumed."""

FloatArray = NDArray[np.float64]


def check_distribution(probs: ArrayLike, name: str) -> FloatArray:
    """Return ``probs`` as a float64 array of probability rows, or raise.

    Checks the type, a non-empty last (vocabulary) axis, finiteness, sign and
    that each row sums to 1 within :data:`SUM_TOLERANCE`. The messages name
    the argument, the offending row (as an index over the leading axes) and
    the value found.
    """
    arr = np.asarray(probs)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise TypeError(f"{name}: expected a float array of probabilities, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim == 0:
        raise ValueError(f"{name}: expected an array with a vocabulary axis, got a scalar")
    if arr.shape[-1] == 0:
        raise ValueError(f"{name}: the vocabulary is empty (shape {arr.shape})")
    # One pass for the sums and one for the minima: a NaN or inf makes the row
    # sum non-finite, so finiteness needs no pass of its own (a speed trick).
    sums = arr.sum(axis=-1)
    bad = ~(np.abs(sums - 1.0) <= SUM_TOLERANCE)
    mins = arr.min(axis=-1)
    negative = mins < 0.0
    if np.any(negative):
        at = first_index(arr < 0.0)
        raise ValueError(f"{name}: negative probability {float(arr[at])!r} at index {at}")
    if np.any(bad):
        row = first_index(bad)
        total = float(sums[row])
        where = f"row {row}" if row else "the distribution"
        if not np.isfinite(total):
            raise ValueError(f"{name}: {where} contains a non-finite value (sum is {total})")
        raise ValueError(
            f"{name}: {where} sums to {total:.12g}, not 1 (tolerance {SUM_TOLERANCE:g})"
        )
    return arr


def first_index(mask: NDArray[np.bool_]) -> tuple[int, ...]:
    """The index of the first True of ``mask`` (row-major), for error messages."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_token_range(tokens: NDArray[np.int64], vocab: int, name: str) -> None:
    """A ValueError naming the first entry of ``tokens`` outside ``[0, vocab)``, as
    ``name[i, j]``."""
    bad = (tokens < 0) | (tokens >= vocab)
    if np.any(bad):
        at = first_index(bad)
        raise ValueError(
            f"{name}{list(at)} = {int(tokens[at])} is out of range for a vocabulary of {vocab}"
        )


def _pair(target: ArrayLike, draft: ArrayLike) -> tuple[FloatArray, FloatArray]:
    p = check_distribution(target, "target")
    q = check_distribution(draft, "draft")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"target and draft have different vocabularies: {p.shape[-1]} vs {q.shape[-1]}"
        )
    try:
        np.broadcast_shapes(p.shape, q.shape)
    except ValueError:
        raise ValueError(
            f"target shape {p.shape} and draft shape {q.shape} do not broadcast"
        ) from None
    return p, q


def _scalar_or_array(x: FloatArray) -> FloatArray | float:
    return float(x) if x.ndim == 0 else x


def acceptance_rate(target: ArrayLike, draft: ArrayLike) -> FloatArray | float:
    """Probability that a draft token is accepted: ``sum_x min(p(x), q(x))``.

    Equals ``1 - TV(p, q)`` with ``TV = 1/2 sum |p - q|`` (Leviathan et al.
    2023, Section 3.2, Corollary 3.6). Returns a float for single
    distributions and an array over the leading axes otherwise.
    """
    p, q = _pair(target, draft)
    return _scalar_or_array(np.minimum(p, q).sum(axis=-1))


def correction_distribution(target: ArrayLike, draft: ArrayLike) -> FloatArray:
    """The residual distribution sampled after a rejection: ``normalize(max(0, p - q))``.

    Where the leftover mass is at most :data:`RESIDUAL_FLOOR` the draft equals
    the target, no rejection can happen, and a copy of the target is returned.
    """
    p, q = _pair(target, draft)
    return correction_rows(p, q)


def correction_rows(p: FloatArray, q: FloatArray) -> FloatArray:
    """:func:`correction_distribution` on rows already checked (no validation, broadcasts)."""
    residual = np.maximum(p - q, 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    degenerate = mass <= RESIDUAL_FLOOR
    safe = np.where(degenerate, 1.0, mass)
    return np.where(degenerate, np.broadcast_to(p, residual.shape), residual / safe)


def emitted_distribution(target: ArrayLike, draft: ArrayLike) -> FloatArray:
    """Exact distribution of the token one verification position emits.

    ``q(x) min(1, p(x)/q(x)) + (1 - sum min(p, q)) * correction(x)``, which
    equals ``p`` (the exactness theorem: Leviathan et al. 2023, Appendix A.1).
    The first term is written ``min(p, q)``, which is the same quantity without
    a division.
    """
    p, q = _pair(target, draft)
    overlap = np.minimum(p, q)
    alpha = overlap.sum(axis=-1, keepdims=True)
    return overlap + (1.0 - alpha) * correction_rows(p, q)


@dataclass(frozen=True, slots=True)
class BlockResult:
    """What one speculative block emitted.

    ``tokens`` holds the accepted draft tokens followed by one more token (the
    correction sample, or the bonus token when every draft was accepted), so
    ``len(tokens) == accepted + 1``.
    """

    tokens: NDArray[np.int64]
    accepted: int


@dataclass(frozen=True, slots=True)
class BatchBlockResult:
    """What a batch of independent speculative blocks emitted.

    ``tokens`` has shape ``(batch, gamma + 1)``; row ``b`` holds
    ``accepted[b] + 1`` tokens followed by ``-1`` padding.
    """

    tokens: NDArray[np.int64]
    accepted: NDArray[np.int64]

    @property
    def emitted(self) -> NDArray[np.int64]:
        return self.accepted + 1

    def row(self, b: int) -> BlockResult:
        n = int(self.accepted[b])
        return BlockResult(tokens=self.tokens[b, : n + 1].copy(), accepted=n)


def verify(
    draft_tokens: ArrayLike,
    draft_probs: ArrayLike,
    target_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    greedy: bool = False,
) -> BlockResult:
    """Verify one block of ``gamma`` drafted tokens (Leviathan et al. 2023, Algorithm 1).

    Parameters
    ----------
    draft_tokens : (gamma,) int array, the tokens the draft sampled.
    draft_probs : (gamma, V) array, the draft's distribution at each drafted position.
    target_probs : (gamma + 1, V) array, the target's distribution at each position,
        the last one after all drafted tokens (for the bonus token).
    rng : the generator; a block always consumes ``gamma + 1`` uniforms, so the
        stream does not depend on the outcome and :func:`verify_batch` agrees
        exactly with repeated calls of this function.
    greedy : temperature 0: a draft token is accepted iff it equals the target's
        argmax, and the emitted replacement or bonus is the target's argmax.
        Consumes no random numbers.
    """
    tokens = np.asarray(draft_tokens)
    if tokens.ndim != 1:
        raise ValueError(f"draft_tokens: expected shape (gamma,), got {tokens.shape}")
    result = verify_batch(
        tokens[None, :],
        np.asarray(draft_probs)[None, ...],
        np.asarray(target_probs)[None, ...],
        rng,
        greedy=greedy,
    )
    return result.row(0)


def verify_batch(
    draft_tokens: ArrayLike,
    draft_probs: ArrayLike,
    target_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    greedy: bool = False,
) -> BatchBlockResult:
    """Verify a batch of independent blocks at once, with no loop over sequences.

    Shapes: ``draft_tokens (B, gamma)``, ``draft_probs (B, gamma, V)``,
    ``target_probs (B, gamma + 1, V)``. Row ``b`` uses the uniforms
    ``rng.random((B, gamma + 1))[b]``: the same numbers ``B`` successive calls
    of :func:`verify` draw, so both forms give identical results.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    toks, q, p = _checked_block(draft_tokens, draft_probs, target_probs)
    batch, gamma = toks.shape
    rows = np.arange(batch)[:, None]
    cols = np.arange(gamma)[None, :]
    q_x = q[rows, cols, toks]
    p_x = p[rows, cols, toks]
    if np.any(q_x <= 0.0):
        b, i = first_index(q_x <= 0.0)
        raise ValueError(
            f"draft_tokens[{b}, {i}] = {int(toks[b, i])} has draft probability 0: "
            "it cannot have been sampled from draft_probs"
        )
    u = None if greedy else rng.random((batch, gamma + 1))
    if u is None:
        accept = toks == np.argmax(p, axis=-1)[:, :gamma]
    else:
        # Accept iff u < p/q, written without a division.
        accept = u[:, :gamma] * q_x < p_x
    # The first rejection, or gamma when there is none (a rejection appended; gamma 0 too).
    stop = np.concatenate([accept, np.zeros((batch, 1), dtype=bool)], axis=1)
    accepted = np.argmin(stop, axis=1).astype(np.int64)
    if u is None:
        last = np.argmax(p[np.arange(batch), accepted], axis=-1).astype(np.int64)
    else:
        last = _sampled_last(p, q, accepted, u)
    tokens = np.full((batch, gamma + 1), -1, dtype=np.int64)
    keep = np.arange(gamma)[None, :] < accepted[:, None]
    tokens[:, :gamma] = np.where(keep, toks, -1)
    tokens[np.arange(batch), accepted] = last
    return BatchBlockResult(tokens=tokens, accepted=accepted)


def _checked_block(
    draft_tokens: ArrayLike, draft_probs: ArrayLike, target_probs: ArrayLike
) -> tuple[NDArray[np.int64], FloatArray, FloatArray]:
    """The arguments of :func:`verify_batch` as arrays, their types, shapes, rows and token
    ids checked; a TypeError or ValueError naming the argument otherwise."""
    toks = np.asarray(draft_tokens)
    if not np.issubdtype(toks.dtype, np.integer):
        raise TypeError(f"draft_tokens: expected integer token ids, got dtype {toks.dtype}")
    if toks.ndim != 2:
        raise ValueError(f"draft_tokens: expected shape (batch, gamma), got {toks.shape}")
    batch, gamma = toks.shape
    q = check_distribution(draft_probs, "draft_probs")
    p = check_distribution(target_probs, "target_probs")
    if q.ndim != 3 or q.shape[:2] != (batch, gamma):
        raise ValueError(
            f"draft_probs: expected shape ({batch}, {gamma}, V) to match draft_tokens, "
            f"got {q.shape}"
        )
    vocab = q.shape[-1]
    if p.shape != (batch, gamma + 1, vocab):
        raise ValueError(
            f"target_probs: expected shape ({batch}, {gamma + 1}, {vocab}) "
            f"(gamma + 1 positions), got {p.shape}"
        )
    check_token_range(toks, vocab, "draft_tokens")
    return toks, q, p


def _sampled_last(
    p: FloatArray, q: FloatArray, accepted: NDArray[np.int64], u: FloatArray
) -> NDArray[np.int64]:
    """The token each block emits last, from position ``accepted`` and the block's last
    uniform: a sample of the correction distribution there, or of the target itself after a
    fully accepted block."""
    batch, gamma = q.shape[:2]
    p_last = p[np.arange(batch), accepted]
    if gamma == 0:
        return inverse_cdf(p_last, u[:, 0])
    q_last = q[np.arange(batch), np.minimum(accepted, gamma - 1)]
    residual = p_last - q_last
    np.maximum(residual, 0.0, out=residual)
    # Unnormalized residual weights are fine for inverse-CDF sampling; fall back
    # to the target where no rejection was possible or none happened.
    use_target = (accepted == gamma) | (residual.sum(axis=-1) <= RESIDUAL_FLOOR)
    weights = np.where(use_target[:, None], p_last, residual)
    return inverse_cdf(weights, u[:, gamma])


Distribution = Callable[[tuple[int, ...]], Sequence[float] | FloatArray]


def enumerate_block(
    target: Distribution,
    draft: Distribution,
    gamma: int,
    *,
    prefix: tuple[int, ...] = (),
) -> dict[tuple[int, ...], float]:
    """The exact distribution of what one block emits, by enumerating every path.

    ``target(prefix)`` and ``draft(prefix)`` give the next-token distributions
    after a prefix (so p and q may depend on the context). Every path of draft
    proposals, acceptances and corrections is enumerated and the probability
    of each emitted token sequence is summed. Exponential in ``gamma``: meant
    for proofs and teaching on vocabularies of a handful of tokens.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int | np.integer) or gamma < 0:
        raise ValueError(f"gamma: expected a non-negative integer, got {gamma!r}")
    out: dict[tuple[int, ...], float] = {}

    def emit(seq: tuple[int, ...], weight: float, probs: FloatArray) -> None:
        for y in np.flatnonzero(probs):
            key = seq + (int(y),)
            out[key] = out.get(key, 0.0) + weight * float(probs[y])

    def walk(drafted: tuple[int, ...], weight: float) -> None:
        ctx = prefix + drafted
        p = check_distribution(target(ctx), f"target{ctx}")
        if len(drafted) == gamma:
            emit(drafted, weight, p)  # every draft accepted: the bonus token
            return
        q = check_distribution(draft(ctx), f"draft{ctx}")
        if p.shape != q.shape:
            raise ValueError(f"target{ctx} and draft{ctx} have shapes {p.shape} and {q.shape}")
        residual = correction_rows(p, q)  # the same at every rejected proposal here
        for x in np.flatnonzero(q):
            keep = min(1.0, p[x] / q[x])
            if keep < 1.0:
                emit(drafted, weight * q[x] * (1.0 - keep), residual)
            if keep > 0.0:
                walk(drafted + (int(x),), weight * q[x] * keep)

    walk((), 1.0)
    return out
