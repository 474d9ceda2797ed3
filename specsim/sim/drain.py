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
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.sim.batch import Admission, Batch, Requests
from specsim.sim.records import ITERATION_COLUMNS
from specsim.sim.source import CostSource, IterationCosts

__all__ = ["Drain", "drain"]

Ints = NDArray[np.int64]
WIDTH = len(ITERATION_COLUMNS)


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


def _trajectories(step: Ints, first: Ints, end: Ints) -> tuple[Ints, Ints]:
    """Each sequence's flat position before each of its iterations and after its last
    (column ``i``: sequence ``i``, held at its end once there), and how many iterations it
    needs: a block's end is ``step[p]``, cut at the request's last token."""
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


def drain(d: Drain, *, start: float, done: int) -> NDArray[np.float64]:
    """Serve until every request is done, from ``start`` (every request has arrived, ``done``
    are done); returns the iteration table's rows as one array and fills in the first-token
    and finish times (see the module docstring)."""
    req, admission, batch, gamma = d.req, d.admission, d.batch, d.gamma
    n = len(req)
    waiting = np.array(admission.waiting, dtype=np.int64)
    joiners = waiting[req.out_len[waiting] > 1]  # the rest are done with their prefill
    rid = np.concatenate([batch.rid, joiners])
    end = np.concatenate([batch.end, req.base[joiners] + req.out_len[joiners]])
    off = np.concatenate([batch.off, req.prompt[joiners] - req.base[joiners]])
    first = np.concatenate([batch.ptr, req.base[joiners] + 1])
    if gamma == 0:  # one token an iteration: no walk, and the context sums as numbers
        steps = end - first
        grow = (req.prompt + 1).tolist()  # a sequence's context when it joins ...
        shrink = (req.prompt + req.out_len).tolist()  # ... and when it leaves
        ctx_now, seg_ctx = batch.ctx_sum, []
    else:
        assert d.step is not None and d.mixed_many is not None
        pos, steps = _trajectories(d.step, first, end)
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
    while done < n:
        adm: list[int] = []
        if admission.waiting and running < d.max_batch:
            adm = admission.admit(running)
        if adm:
            a = np.asarray(adm, dtype=np.int64)
            pc = d.cost.prefill(req.prompt[a], draft=gamma != 0)
            prefills.append((row, pc.time_s, len(adm), pc.energy_j or 0.0))
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
                if gamma == 0:
                    ctx_now += grow[r]
        if running == 0:  # only one-token requests were admitted: a prefill-only iteration
            row += 1
            continue
        last = heap[0][0]  # until a sequence finishes, nobody joins or leaves
        segments.append((it, row, last - it + 1))
        finished = []
        while heap and heap[0][0] == last:
            finished.append(heapq.heappop(heap)[1])
        if gamma == 0:
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
    if gamma == 0:
        ctx0, size = np.array(seg_ctx, dtype=np.int64).reshape(-1, 2).T
        b = np.repeat(size, seg[:, 2])
        ctx_sum = np.repeat(ctx0 - size * seg[:, 0], seg[:, 2]) + b * np.arange(it)
        t, e, dr = d.uniform(batch=b, context_sum=ctx_sum, gamma=0)
        table = np.zeros((row, WIDTH), dtype=np.float64)
        table[rows, 3], table[rows, 4], table[rows, 7] = dr, b, b
        table[rows, 10] = b
        return _finish(d, table, rows, t, e, prefills, firsts, ends, start=start)
    # Every (sequence, iteration) pair: the iteration (past a sequence's end: a spare bin,
    # ``it``), the context, the tokens emitted; sums per iteration by bincount, exact
    # in float64 (integers far below 2^53).
    here = pos[:-1]
    step_no = np.arange(here.shape[0])[:, None]
    valid = step_no < steps
    at = np.where(valid, joined + step_no, it)
    ctx, left = off + here, end - here
    flat = at.ravel()
    b = np.bincount(flat, minlength=it + 1)[:it]
    ctx_sum = np.bincount(flat, weights=ctx.ravel(), minlength=it + 1)[:it].astype(np.int64)
    emitted = np.bincount(flat, weights=(pos[1:] - here).ravel(),
                          minlength=it + 1)[:it].astype(np.int64)  # fmt: skip
    cut = valid & (left <= gamma)  # within gamma of its end: gamma cut to left - 1
    tc, gc, cc = at[cut], left[cut] - 1, ctx[cut]
    width = gamma + 1
    cell = tc * width + gc
    count = np.bincount(cell, minlength=it * width).reshape(it, width)
    csum = np.bincount(cell, weights=cc, minlength=it * width).reshape(it, width)
    count[:, gamma] = b - count.sum(axis=1)
    csum[:, gamma] = ctx_sum - np.bincount(tc, weights=cc, minlength=it).astype(np.int64)
    drafted = (count * np.arange(width)).sum(axis=1)
    low = np.argmax(count > 0, axis=1)  # the smallest and largest gamma drafted
    high = gamma - np.argmax(count[:, ::-1] > 0, axis=1)
    t, e, dr = np.zeros(it), np.zeros(it), np.zeros(it)
    same = low == high
    for v in np.unique(low[same]).tolist():  # as iteration() does: the uniform formula
        sel = np.flatnonzero(same & (low == v))
        t[sel], e[sel], dr[sel] = d.uniform(batch=b[sel], context_sum=ctx_sum[sel], gamma=v)
    sel = np.flatnonzero(~same)
    if sel.shape[0]:
        assert d.mixed_many is not None
        t[sel], e[sel], dr[sel] = d.mixed_many(count[sel], csum[sel].astype(np.float64))
    table = np.zeros((row, WIDTH), dtype=np.float64)
    table[rows, 3], table[rows, 4], table[rows, 6] = dr, b, drafted
    table[rows, 7] = drafted + b
    table[rows, 8] = table[rows, 9] = drafted + b - emitted
    table[rows, 10] = emitted
    return _finish(d, table, rows, t, e, prefills, firsts, ends, start=start)


def _finish(d: Drain, table: NDArray[np.float64], rows: Any, t: NDArray[np.float64],
            e: NDArray[np.float64], prefills: list[tuple[int, float, int, float]],
            firsts: list[tuple[Ints, int, float, NDArray[np.bool_]]],
            ends: list[tuple[Ints, int]], *, start: float) -> NDArray[np.float64]:  # fmt: skip
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
