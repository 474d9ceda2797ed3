"""The rest of a fixed-gamma serving run once every request has arrived: no clock needed.

After the last arrival nothing the engine decides depends on the time any
more (admission reads the queue, the batch and the KV budget; a fixed policy
reads nothing), so :func:`drain` runs the remaining iterations without simpy
and without costing them one by one (a speed trick: the serving benchmark
spends most of its iterations here). A sequence's trajectory depends on its
own acceptance run lengths alone (``step[p]``: where a block drafting gamma
from flat position ``p`` leaves it, cut at its request's last token), so the
iterations each sequence needs are known before it is admitted; admissions
and retirements are then a small event simulation on iteration numbers, and
every iteration's batch, context sum, tokens and gammas one scatter-add over
all (sequence, iteration) pairs. The iterations are costed at the end: those
in which every sequence drafts one gamma in one vectorized
``uniform_iterations`` call per gamma, the others in one ``iterations`` call,
element for element the floats of one call each; the clock is their
durations' cumulative sum, which numpy adds in order, as simpy's clock did.
Tests check the tables equal the per-sequence engine's, bit for bit.

A paged run (:mod:`specsim.sim.paged`) drains too, once memory can no longer
bind (:func:`never_binds`): then it admits and runs as the reservation model
does, and the blocks each pass holds are summed over the same pairs. At gamma
0 the sums come in closed form from what joins and leaves. Chunked prefill's
drain, built on these pieces: :mod:`specsim.sim.engine`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from specsim.sim.batch import Admission, Batch, Requests
from specsim.sim.paged import EXTRA_COLUMNS, Paging
from specsim.sim.records import ITERATION_COLUMNS
from specsim.sim.source import CostSource, IterationCosts
from specsim.sim.tally import Tally

__all__ = [
    "Drain",
    "IterationSums",
    "decode_costs",
    "drain",
    "iteration_sums",
    "never_binds",
    "trajectories",
]

Ints = NDArray[np.int64]
WIDTH = len(ITERATION_COLUMNS)
EXTRA = len(EXTRA_COLUMNS)


@dataclass(frozen=True, kw_only=True, eq=False)
class Drain:
    """What :func:`drain` needs from the engine (the admission is updated in place, the batch
    only read: nothing reads it after the drain)."""

    cost: CostSource
    uniform: Callable[..., IterationCosts]  # the source's uniform_iterations
    mixed_many: Callable[[Ints, NDArray[np.float64]], IterationCosts] | None  # iterations
    req: Requests
    admission: Admission
    batch: Batch
    step: NDArray[np.int64] | None
    gamma: int
    max_batch: int
    with_energy: bool
    first_tok: NDArray[np.float64]
    finish: NDArray[np.float64]
    paging: Paging | None = None  # a paged cache: drained once memory can no longer bind
    seen: list[int] = field(default_factory=lambda: [-1])  # done at the last failed check

    def ready(self, done: int) -> bool:
        """Whether the drain may start now (paged: memory can no longer bind; checked
        again only once more requests are done)."""
        if self.paging is None:
            return True
        if self.seen[0] == done:
            return False
        left = np.concatenate([self.batch.rid, np.asarray(self.admission.waiting, dtype=np.int64)])
        ok = never_binds(
            self.req, left, paging=self.paging, admission=self.admission, max_batch=self.max_batch
        )
        self.seen[0] = -1 if ok else done
        return ok


def never_binds(
    req: Requests, left: Ints, *, paging: Paging | None, admission: Admission, max_batch: int
) -> bool:
    """Whether memory can no longer bind for the requests ``left`` (running, prefilling or
    waiting): their ``max_batch`` largest footprints fit the cache together (paged: each
    request's admission need or its longest pass in blocks, whichever is more, and nothing
    preempted waiting to resume; reserved: the reservations)."""
    if paging is not None:
        if paging.resume:
            return False
        if paging.capacity is None:
            return True
        longest = -(-(req.prompt[left] + req.out_len[left] - 1) // paging.block)
        size, cap = np.maximum(paging.need[left], longest), paging.capacity
    else:
        if admission.capacity is None:
            return True
        size, cap = admission.reserve[left], admission.capacity
    return int(np.sort(size)[::-1][:max_batch].sum()) <= cap


def trajectories(step: Ints | None, first: Ints, end: Ints) -> tuple[Ints, Ints]:
    """Each sequence's flat position before each of its iterations and after its last
    (column ``i``: sequence ``i``, held at its end once there), and how many iterations it
    needs: a block's end is ``step[p]``, cut at the request's last token. ``step`` None:
    one token an iteration (gamma 0), and only the first row is formed, the rest being
    ``first + s``."""
    if step is None:
        return first[None, :], end - first
    chunks = [first[None, :]]
    ptr = first
    while not (ptr == end).all():
        block = np.empty((32, first.shape[0]), dtype=np.int64)
        for k in range(32):
            step.take(ptr, out=block[k])
            np.minimum(block[k], end, out=block[k])
            ptr = block[k]
        chunks.append(block)
    pos = np.concatenate(chunks)
    return pos, (pos == end).argmax(axis=0)


def drain(
    d: Drain, *, start: float, done: int, total: int, tally: Tally | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """Serve until all ``total`` requests (of this replica) are done, from ``start`` (every
    request has arrived, ``done`` are done); returns the iteration table's rows as one
    array and, paged, their extra columns (:data:`specsim.sim.paged.EXTRA_COLUMNS`), and
    fills in the first-token and finish times (see the module docstring); ``tally`` counts
    the drained passes' drafts and acceptances."""
    req, admission, batch, gamma = d.req, d.admission, d.batch, d.gamma
    n = len(req)
    waiting = np.array(admission.waiting, dtype=np.int64)
    joiners = waiting[req.out_len[waiting] > 1]  # the rest are done with their prefill
    rid = np.concatenate([batch.rid, joiners])
    end = np.concatenate([batch.end, req.base[joiners] + req.out_len[joiners]])
    off = np.concatenate([batch.off, req.prompt[joiners] - req.base[joiners]])
    first = np.concatenate([batch.ptr, req.base[joiners] + 1])
    numbers = gamma == 0 and d.paging is None
    if d.paging is not None:  # memory can no longer bind (ready): admit as if unlimited
        admission.capacity = None
    if numbers:  # one token an iteration: no walk, and the context sums as numbers
        steps = end - first
        grow = (req.prompt + 1).tolist()  # a sequence's context when it joins ...
        shrink = (req.prompt + req.out_len).tolist()  # ... and when it leaves
        ctx_now, seg_ctx = batch.ctx_sum, []
    else:
        assert gamma == 0 or d.step is not None and d.mixed_many is not None
        pos, steps = trajectories(d.step if gamma else None, first, end)
    if tally is not None:
        tally.add_drain(rid, None if numbers else pos, steps, end, gamma)
    column = np.full(n, -1, dtype=np.int64)
    column[rid] = np.arange(rid.shape[0])
    joined = np.zeros(rid.shape[0], dtype=np.int64)  # the iteration each sequence joins at
    need = steps.tolist()
    heap = [(need[c] - 1, r) for c, r in enumerate(batch.rid.tolist())]  # (last iteration, id)
    heapq.heapify(heap)
    running, it, row = batch.size, 0, 0
    segments: list[tuple[int, int, int]] = []  # (first iteration, its row, iterations)
    prefills: list[tuple[int, float, int, float]] = []  # row, time, admitted, energy
    firsts: list[tuple[Ints, int, float, NDArray[np.bool_]]] = []  # requests, row, prefill, done
    ends: list[tuple[Ints, int]] = []  # (requests, the row they finish in)
    tokens: list[tuple[int, int]] = []  # (row, prompt tokens prefilled)
    while done < total:
        adm: list[int] = []
        if admission.waiting and running < d.max_batch:
            adm = admission.admit(running)
        if adm:
            a = np.asarray(adm, dtype=np.int64)
            pc = d.cost.prefill(req.prompt[a], draft=gamma != 0)
            prefills.append((row, pc.time_s, len(adm), pc.energy_j or 0.0))
            tokens.append((row, int(req.prompt[a].sum())))
            one = req.out_len[a] == 1  # one-token requests are done with their prefill
            firsts.append((a, row, pc.time_s, one))
            if one.any():
                admission.release(a[one])
                done += int(one.sum())
            for r in a[~one].tolist():
                col = int(column[r])
                joined[col] = it
                heapq.heappush(heap, (it + need[col] - 1, r))
                running += 1
                if numbers:
                    ctx_now += grow[r]
        if running == 0:  # only one-token requests were admitted: a prefill-only iteration
            row += 1
            continue
        last = heap[0][0]  # until a sequence finishes, nobody joins or leaves
        segments.append((it, row, last - it + 1))
        finished = []
        while heap and heap[0][0] == last:
            finished.append(heapq.heappop(heap)[1])
        if numbers:
            seg_ctx.append((ctx_now, running))
            ctx_now += running * (last - it + 1) - sum([shrink[r] for r in finished])
        row += last - it + 1
        it = last + 1
        f = np.asarray(finished, dtype=np.int64)
        ends.append((f, row - 1))
        admission.release(f)
        done += f.shape[0]
        running -= f.shape[0]
    seg = np.array(segments, dtype=np.int64).reshape(-1, 3)  # first iteration, row, count
    rows = np.repeat(seg[:, 1] - seg[:, 0], seg[:, 2]) + np.arange(it)  # each one's row
    if numbers:
        ctx0, size = np.array(seg_ctx, dtype=np.int64).reshape(-1, 2).T
        b = np.repeat(size, seg[:, 2])
        ctx_sum = np.repeat(ctx0 - size * seg[:, 0], seg[:, 2]) + b * np.arange(it)
        t, e, dr = d.uniform(batch=b, context_sum=ctx_sum, gamma=0)
        table = np.zeros((row, WIDTH), dtype=np.float64)
        table[rows, 3], table[rows, 4], table[rows, 7] = dr, b, b
        table[rows, 10] = b
        return _finish(d, table, rows, t, e, prefills, firsts, ends, start=start), None
    sums = iteration_sums(
        pos, steps, joined, off, end, gamma, it, block=None if d.paging is None else d.paging.block
    )
    b, emitted, drafted = sums.batch, sums.emitted, sums.drafted
    t, e, dr = decode_costs(d.uniform, d.mixed_many, sums, gamma)
    table = np.zeros((row, WIDTH), dtype=np.float64)
    table[rows, 3], table[rows, 4], table[rows, 6] = dr, b, drafted
    table[rows, 7] = drafted + b
    table[rows, 8] = table[rows, 9] = drafted + b - emitted
    table[rows, 10] = emitted
    table = _finish(d, table, rows, t, e, prefills, firsts, ends, start=start)
    if d.paging is None:
        return table, None
    extras = np.zeros((row, EXTRA), dtype=np.float64)  # paged: blocks held, tokens prefilled
    extras[rows, 0] = sums.blocks
    at, size = np.array(tokens, dtype=np.int64).reshape(-1, 2).T
    extras[at, 4] = size
    return table, extras


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
    its step ``s`` in iteration ``joined[c] + s``; past its end, a spare bin ``it``), by
    bincount, exact in float64 (integers far below 2^53). Gamma 0 (``pos``: its first row):
    each sequence runs ``steps`` iterations from ``joined``, its context one more each, so
    the sums are cumulative sums of what joins and leaves."""
    if gamma == 0:
        return _plain_sums(pos[0], steps, joined, off, it, block)
    here = pos[:-1]
    step_no = np.arange(here.shape[0])[:, None]
    valid = step_no < steps
    at = np.where(valid, joined + step_no, it)
    ctx, left = off + here, end - here
    flat = at.ravel()
    b = np.bincount(flat, minlength=it + 1)[:it]
    ctx_sum = np.bincount(flat, weights=ctx.ravel(), minlength=it + 1)[:it].astype(np.int64)
    emitted = np.bincount(flat, weights=(pos[1:] - here).ravel(), minlength=it + 1)[:it].astype(
        np.int64
    )
    cut = valid & (left <= gamma)  # within gamma of its end: gamma cut to left - 1
    tc, gc, cc = at[cut], left[cut] - 1, ctx[cut]
    width = gamma + 1
    cell = tc * width + gc
    count = np.bincount(cell, minlength=it * width).reshape(it, width)
    csum = np.bincount(cell, weights=cc, minlength=it * width).reshape(it, width)
    count[:, gamma] = b - count.sum(axis=1)
    csum[:, gamma] = ctx_sum - np.bincount(tc, weights=cc, minlength=it).astype(np.int64)
    drafted = (count * np.arange(width)).sum(axis=1)
    blocks = pairs = None
    if block is not None:
        n = np.minimum(left, width)  # positions of the pass: gamma + 1, cut to left
        w = np.where(valid, (ctx + n + (block - 2)) // block, 0).ravel()
        blocks = np.bincount(flat, weights=w, minlength=it + 1)[:it].astype(np.int64)
        w = np.where(valid, n * ctx + n * (n + 1) // 2, 0).ravel()
        pairs = np.bincount(flat, weights=w, minlength=it + 1)[:it]
    return IterationSums(b, ctx_sum, emitted, drafted, count, csum, blocks, pairs)


def _plain_sums(
    first: Ints, steps: Ints, joined: Ints, off: Ints, it: int, block: int | None
) -> IterationSums:
    """:func:`iteration_sums` at gamma 0: differences at joins and leaves, summed up."""
    stop = joined + steps

    def running(at: Ints, w: Any, until: Ints, w_until: Any) -> NDArray[Any]:
        diff = np.bincount(at, weights=w, minlength=it + 1)
        diff -= np.bincount(until, weights=w_until, minlength=it + 1)
        return np.cumsum(diff)[:it]

    ones = np.ones(joined.shape[0])
    b = running(joined, ones, stop, ones).astype(np.int64)
    ctx0 = off + first  # the context at a sequence's first iteration
    lead = (ctx0 - joined).astype(np.float64)  # its context in iteration t is lead + t
    ctx_sum = running(joined, lead, stop, lead).astype(np.int64) + b * np.arange(it, dtype=np.int64)
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
        blocks = running(at, w, stop, blocks_out.astype(np.float64)).astype(np.int64)
        pairs = (ctx_sum + b).astype(np.float64)  # one position each: context + 1 pairs
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
    """The iterations' decode times, energies and draft times (zero where none decodes):
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
        t[sel], e[sel], dr[sel] = uniform(batch=b[sel], context_sum=sums.ctx_sum[sel], gamma=v)
    sel = np.flatnonzero(~same & some)
    if sel.shape[0]:
        assert mixed_many is not None
        t[sel], e[sel], dr[sel] = mixed_many(count[sel], sums.csum[sel].astype(np.float64))
    return t, e, dr


def _finish(
    d: Drain,
    table: NDArray[np.float64],
    rows: Any,
    t: NDArray[np.float64],
    e: NDArray[np.float64],
    prefills: list[tuple[int, float, int, float]],
    firsts: list[tuple[Ints, int, float, NDArray[np.bool_]]],
    ends: list[tuple[Ints, int]],
    *,
    start: float,
) -> NDArray[np.float64]:
    """The prefills, energies and the clock of a drained table; first-token and finish
    times. ``t``, ``e``: the iterations' times and energies, in rows ``rows``."""
    if prefills:
        first, pre_s, admitted, pre_e = (np.array(c) for c in zip(*prefills, strict=True))
        table[first, 2], table[first, 5], table[first, 11] = pre_s, admitted, pre_e
    times, energies = np.zeros(table.shape[0]), np.zeros(table.shape[0])
    times[rows], energies[rows] = t, e
    duration = table[:, 2] + times  # as the engine adds them
    table[:, 11] = table[:, 11] + energies if d.with_energy else np.nan
    clock = np.cumsum(np.concatenate(([start], duration)))
    table[:, 0], table[:, 1] = clock[:-1], clock[1:]
    for a, r, pt, one in firsts:
        d.first_tok[a] = clock[r] + pt
        d.finish[a[one]] = clock[r] + pt
    for f, r in ends:
        d.finish[f] = clock[r + 1]
    return table
