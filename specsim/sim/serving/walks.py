"""The drains' walks: where each sequence is before each of its iterations
(:func:`trajectories`), the sums over every (sequence, iteration) pair that give each
drained iteration's batch, contexts, tokens, blocks and attention pairs
(:func:`iteration_sums`), and their costs in bulk (:func:`decode_costs`); used by
:mod:`specsim.sim.serving.drain` and :mod:`specsim.sim.serving.chunk_drain`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from specsim.cost import chain_pairs_exact
from specsim.sim.costs.source import IterationCosts

__all__ = ["IterationSums", "decode_costs", "iteration_sums", "trajectories"]

Ints = NDArray[np.int64]


def trajectories(run1: Ints | None, first: Ints, end: Ints, most: int = 1) -> tuple[Ints, Ints]:
    """Each sequence's flat position before each of its iterations and after its last
    (column ``i``: sequence ``i``, held at its end once there), and how many iterations it
    needs: a block from flat position ``p`` emits ``min(run1[p], most)`` tokens (``most``:
    gamma + 1), cut at the request's last token. ``run1`` None: one token an iteration
    (gamma 0), and only the first row is formed, the rest being ``first + s``."""
    if run1 is None:
        return first[None, :], end - first
    chunks = [first[None, :]]
    ptr = first
    while not (ptr == end).all():
        block = np.empty((32, first.shape[0]), dtype=np.int64)
        for k in range(32):  # on the sequences' rows alone (no table of every position's end)
            row = run1.take(ptr, out=block[k])
            np.minimum(row, most, out=row)
            row += ptr
            ptr = np.minimum(row, end, out=row)
        chunks.append(block)
    pos = np.concatenate(chunks)
    return pos, (pos == end).argmax(axis=0)


class IterationSums(NamedTuple):
    """Per iteration, sums over its decoding sequences: how many, their contexts, tokens
    emitted and drafted, per gamma drafted (cut near the ends) the count and context sum,
    and, given a block size, the KV blocks held during the pass and the pass's causal
    (query, key) pairs."""

    batch: NDArray[Any]
    ctx_sum: NDArray[Any]
    emitted: NDArray[Any]
    drafted: NDArray[Any]
    counts: NDArray[Any]
    csum: NDArray[Any]
    blocks: NDArray[Any] | None
    pairs: NDArray[Any] | None


def iteration_sums(
    pos: Ints,
    steps: Ints,
    joined: Ints,
    off: Ints,
    end: Ints,
    gamma: int,
    it: int,
    block: int | None = None,
) -> IterationSums:
    """Sums over every (sequence, iteration) pair of :func:`trajectories` (sequence ``c`` runs
    its step ``s`` in iteration ``joined[c] + s``, all before iteration ``it``), by
    bincount, exact in float64 (integers far below 2^53). Gamma 0 (``pos``: its first row):
    each sequence runs ``steps`` iterations from ``joined``, its context one more each, so
    the sums are cumulative sums of what joins and leaves."""
    if gamma == 0:
        return _plain_sums(pos[0], steps, joined, off, it, block)
    # A speed trick: a walk holds at its end, so tokens left (end - position) are 0 past a
    # sequence's last step and weigh nothing there; the batch, the contexts' tail
    # (off + end) and what joins and leaves are sums over sequences, and the tokens emitted
    # telescope from the context sums; only tokens left are scattered over every pair.
    here = pos[:-1]
    left = end - here
    at = joined + np.arange(here.shape[0])[:, None]  # the iteration of each pair, if run
    stop = joined + steps
    b = _running(joined, None, stop, None, it).astype(np.int64)
    tail = off + end  # a sequence's context after its last step
    behind = np.bincount(at.ravel(), weights=left.ravel(), minlength=it)[:it]
    ctx_sum = (_running(joined, tail, stop, tail, it) - behind).astype(np.int64)
    joins = np.bincount(joined, weights=off + pos[0], minlength=it + 1)[1 : it + 1]
    leaves = np.bincount(stop, weights=tail, minlength=it + 1)[1 : it + 1]
    after = np.zeros_like(ctx_sum)  # the next iteration's contexts
    after[:-1] = ctx_sum[1:]
    emitted = after - ctx_sum + (leaves - joins).astype(np.int64)
    cut = (left <= gamma) & (left > 0)  # within gamma of its end: gamma cut to left - 1
    pair = np.flatnonzero(cut)
    tc, gc = at.ravel()[pair], left.ravel()[pair] - 1
    cc = off[pair % here.shape[1]] + here.ravel()[pair]
    width = gamma + 1
    cell = tc * width + gc
    count = np.bincount(cell, minlength=it * width).reshape(it, width)
    csum = np.bincount(cell, weights=cc, minlength=it * width).reshape(it, width)
    count[:, gamma] = b - count.sum(axis=1)
    csum[:, gamma] = ctx_sum - np.bincount(tc, weights=cc, minlength=it).astype(np.int64)
    drafted = (count * np.arange(width)).sum(axis=1)
    blocks = pairs = None
    if block is not None:
        valid, ctx, flat = left > 0, off + here, at.ravel()
        n = np.minimum(left, width)  # positions of the pass: gamma + 1, cut to left
        w = np.where(valid, (ctx + n + (block - 2)) // block, 0).ravel()
        blocks = np.bincount(flat, weights=w, minlength=it)[:it].astype(np.int64)
        w = np.where(valid, chain_pairs_exact(ctx, n), 0).ravel()
        pairs = np.bincount(flat, weights=w, minlength=it)[:it]
    return IterationSums(b, ctx_sum, emitted, drafted, count, csum, blocks, pairs)


def _running(at: Ints, w: Any, until: Ints, w_until: Any, it: int) -> NDArray[Any]:
    """Per iteration ``0 .. it - 1``: the weights ``w`` of what joined at ``at`` or before,
    less the weights ``w_until`` of what left at ``until`` or before (whole numbers, exact
    in float64; None: counts)."""
    diff = np.bincount(at, weights=w, minlength=it + 1)
    diff = diff - np.bincount(until, weights=w_until, minlength=it + 1)
    return np.cumsum(diff)[:it]


def _plain_sums(
    first: Ints, steps: Ints, joined: Ints, off: Ints, it: int, block: int | None
) -> IterationSums:
    """:func:`iteration_sums` at gamma 0: differences at joins and leaves, summed up."""
    stop = joined + steps
    ones = np.ones(joined.shape[0])
    b = _running(joined, ones, stop, ones, it).astype(np.int64)
    ctx0 = off + first  # the context at a sequence's first iteration
    lead = (ctx0 - joined).astype(np.float64)  # its context in iteration t is lead + t
    ctx_sum = _running(joined, lead, stop, lead, it).astype(np.int64) + b * np.arange(
        it, dtype=np.int64
    )
    blocks = pairs = None
    if block is not None:  # ceil(context / block) blocks, one more at each block's start
        last = ctx0 + steps - 1
        blocks_in = -(-ctx0 // block)
        blocks_out = -(-last // block)
        grow = blocks_out - blocks_in  # steps at which a sequence takes a new block
        s0 = (-ctx0) % block + 1  # its first: context s0 + ctx0 - 1 is a multiple of block
        k = np.repeat(np.arange(grow.shape[0]), grow)
        nth = np.arange(k.shape[0]) - np.repeat(np.cumsum(grow) - grow, grow)
        at = np.concatenate([joined, joined[k] + s0[k] + nth * block])
        w = np.concatenate([blocks_in, np.ones(k.shape[0], dtype=np.int64)]).astype(np.float64)
        blocks = _running(at, w, stop, blocks_out.astype(np.float64), it).astype(np.int64)
        pairs = chain_pairs_exact(ctx_sum, 1, b).astype(np.float64)  # one position each
    counts, csum = b[:, None].copy(), ctx_sum[:, None].astype(np.float64)
    return IterationSums(
        b, ctx_sum, b.copy(), np.zeros(it, dtype=np.int64), counts, csum, blocks, pairs
    )


def decode_costs(
    uniform: Callable[..., IterationCosts],
    mixed_many: Callable[[Ints, NDArray[np.float64]], IterationCosts] | None,
    sums: IterationSums,
    gamma: int,
) -> tuple[Any, Any, Any]:
    """The iterations' decode times, energies and draft times (zero where none decodes), at
    the cached contexts (``sums`` hold the contexts; each pass attends to one token less):
    those in which every sequence drafts one gamma by ``uniform_iterations``, one call per
    gamma, the others by ``iterations``, as the engine costs them one at a time."""
    b, count, it = sums.batch, sums.counts, sums.batch.shape[0]
    low = np.argmax(count > 0, axis=1)  # the smallest and largest gamma drafted
    high = gamma - np.argmax(count[:, ::-1] > 0, axis=1)
    t, e, dr = np.zeros(it), np.zeros(it), np.zeros(it)
    some = b > 0
    same = (low == high) & some
    for v in np.unique(low[same]).tolist():  # as iteration() does: the uniform formula
        sel = np.flatnonzero(same & (low == v))
        t[sel], e[sel], dr[sel] = uniform(
            batch=b[sel], context_sum=sums.ctx_sum[sel] - b[sel], gamma=v
        )
    sel = np.flatnonzero(~same & some)
    if sel.shape[0]:
        assert mixed_many is not None
        t[sel], e[sel], dr[sel] = mixed_many(
            count[sel], (sums.csum[sel] - count[sel]).astype(np.float64)
        )
    return t, e, dr
