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

A paged run (:mod:`specsim.sim.serving.paged`) drains too, once memory can no longer
bind (:func:`never_binds`): then it admits and runs as the reservation model
does, and the blocks each pass holds are summed over the same pairs. At gamma
0 the sums come in closed form from what joins and leaves. Chunked prefill's
drain, built on these pieces: :mod:`specsim.sim.serving.chunk_drain`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost import verification_positions
from specsim.sim.costs.source import CostSource, IterationCosts
from specsim.sim.results.records import ITERATION_COLUMNS
from specsim.sim.serving.batch import Admission, Batch, Requests
from specsim.sim.serving.paged import EXTRA_COLUMNS, Paging
from specsim.sim.serving.tally import Tally
from specsim.sim.serving.walks import decode_costs, iteration_sums, trajectories

__all__ = ["Drain", "drain", "never_binds"]

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
    run1: NDArray[np.int64] | None  # tokens a block from each flat position emits uncapped
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


@dataclass(eq=False)
class _Schedule:
    """A drain's event simulation on iteration numbers (:func:`drain`): the state it
    carries from one admission or finish to the next, and what it records for the table."""

    d: Drain
    column: list[int]  # each request's column in the trajectories (-1: none)
    need: list[int]  # iterations each column needs
    joined: Ints  # the iteration each column joins at
    heap: list[tuple[int, int]]  # (last iteration, request) of the running sequences
    running: int
    done: int
    single: list[bool] = field(default_factory=list)  # each request's output is one token
    grow: list[int] | None = None  # gamma 0 without paging: contexts as numbers
    shrink: list[int] | None = None
    ctx_now: int = 0
    it: int = 0
    row: int = 0
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # (it, row, count)
    seg_ctx: list[tuple[int, int]] = field(default_factory=list)  # (context sum, batch)
    prefills: list[tuple[int, float, int, float]] = field(default_factory=list)
    firsts: list[tuple[Ints, int, float]] = field(default_factory=list)  # (requests, row, s)
    ends: list[tuple[Ints, int]] = field(default_factory=list)  # (requests, their last row)
    tokens: list[tuple[int, int]] = field(default_factory=list)  # (row, prompt tokens)

    def admit(self) -> None:
        """Admit and prefill what fits; the one-token requests are done with it (a speed
        trick: an admission is a request or two, so the bookkeeping is on Python lists)."""
        d, admission, req = self.d, self.d.admission, self.d.req
        adm: list[int] = []
        if admission.waiting and self.running < d.max_batch:
            adm = admission.admit(self.running)
        if not adm:
            admission.check_progress(self.running)
            return
        a = np.asarray(adm, dtype=np.int64)
        prompts = req.prompt[a]
        pc = d.cost.prefill(prompts, draft=d.gamma != 0)
        self.prefills.append((self.row, pc.time_s, len(adm), pc.energy_j or 0.0))
        if d.paging is not None:  # the tokens prefilled: a paged table's extra column
            self.tokens.append((self.row, int(prompts.sum())))
        self.firsts.append((a, self.row, pc.time_s))
        single = self.single
        if any([single[r] for r in adm]):  # one-token requests are done with their prefill
            one = req.out_len[a] == 1
            admission.release(a[one])
            self.done += int(one.sum())
        for r in adm:
            if single[r]:
                continue
            col = self.column[r]
            self.joined[col] = self.it
            heapq.heappush(self.heap, (self.it + self.need[col] - 1, r))
            self.running += 1
            if self.grow is not None:
                self.ctx_now += self.grow[r]

    def advance(self) -> None:
        """Run until a sequence finishes (nobody joins or leaves before), and retire it."""
        it, heap = self.it, self.heap
        last = heap[0][0]
        self.segments.append((it, self.row, last - it + 1))
        finished = []
        while heap and heap[0][0] == last:
            finished.append(heapq.heappop(heap)[1])
        if self.shrink is not None:
            self.seg_ctx.append((self.ctx_now, self.running))
            shrink = self.shrink
            self.ctx_now += self.running * (last - it + 1) - sum([shrink[r] for r in finished])
        self.row += last - it + 1
        self.it = last + 1
        f = np.asarray(finished, dtype=np.int64)
        self.ends.append((f, self.row - 1))
        self.d.admission.release(f)
        self.done += len(finished)
        self.running -= len(finished)

    def rows(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The segments (first iteration, row, count) and each decoding iteration's row."""
        seg = np.array(self.segments, dtype=np.int64).reshape(-1, 3)
        return seg, np.repeat(seg[:, 1] - seg[:, 0], seg[:, 2]) + np.arange(self.it)


def drain(
    d: Drain, *, start: float, done: int, total: int, tally: Tally | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """Serve until all ``total`` requests (of this replica) are done, from ``start`` (every
    request has arrived, ``done`` are done); returns the iteration table's rows as one
    array and, paged, their extra columns (:data:`specsim.sim.serving.paged.EXTRA_COLUMNS`), and
    fills in the first-token and finish times (see the module docstring); ``tally`` counts
    the drained passes' drafts and acceptances."""
    req, admission, batch, gamma = d.req, d.admission, d.batch, d.gamma
    waiting = np.array(admission.waiting, dtype=np.int64)
    joiners = waiting[req.out_len[waiting] > 1]  # the rest are done with their prefill
    rid = np.concatenate([batch.rid, joiners])
    end = np.concatenate([batch.end, req.base[joiners] + req.out_len[joiners]])
    off = np.concatenate([batch.off, req.prompt[joiners] - req.base[joiners]])
    first = np.concatenate([batch.ptr, req.base[joiners] + 1])
    numbers = gamma == 0 and d.paging is None
    if d.paging is not None:  # memory can no longer bind (ready): admit as if unlimited
        admission.capacity = None
    pos = None
    if numbers:  # one token an iteration: no walk, and the context sums as numbers
        steps = end - first
    else:
        assert gamma == 0 or d.run1 is not None and d.mixed_many is not None
        pos, steps = trajectories(
            d.run1 if gamma else None, first, end, verification_positions(gamma)
        )
    if tally is not None:
        tally.add_drain(rid, pos, steps, end, gamma)
    column = np.full(len(req), -1, dtype=np.int64)
    column[rid] = np.arange(rid.shape[0])
    need = steps.tolist()
    heap = [(need[c] - 1, r) for c, r in enumerate(batch.rid.tolist())]  # (last iteration, id)
    heapq.heapify(heap)
    sched = _Schedule(
        d,
        column.tolist(),
        need,
        np.zeros(rid.shape[0], dtype=np.int64),
        heap,
        batch.size,
        done,
        single=(req.out_len == 1).tolist(),
    )
    if numbers:
        sched.grow = (req.prompt + 1).tolist()  # a sequence's context when it joins ...
        sched.shrink = (req.prompt + req.out_len).tolist()  # ... and when it leaves
        sched.ctx_now = batch.ctx_sum
    while sched.done < total:
        sched.admit()
        if sched.running == 0:  # only one-token requests were admitted: prefill only
            sched.row += 1
            continue
        sched.advance()
    if pos is None:
        return _plain_table(sched, start=start), None
    return _walk_table(sched, pos, steps, off, end, start=start)


def _plain_table(sched: _Schedule, *, start: float) -> NDArray[np.float64]:
    """Gamma 0 without paging: every iteration's sums from the segments in closed form."""
    d, it = sched.d, sched.it
    seg, rows = sched.rows()
    ctx0, size = np.array(sched.seg_ctx, dtype=np.int64).reshape(-1, 2).T
    b = np.repeat(size, seg[:, 2])
    ctx_sum = np.repeat(ctx0 - size * seg[:, 0], seg[:, 2]) + b * np.arange(it)
    t, e, dr = d.uniform(batch=b, context_sum=ctx_sum - b, gamma=0)  # cached
    table = np.zeros((sched.row, WIDTH), dtype=np.float64)
    table[rows, 3], table[rows, 4], table[rows, 7] = dr, b, b
    table[rows, 10] = b
    return _finish(d, table, rows, t, e, sched.prefills, sched.firsts, sched.ends, start=start)


def _walk_table(
    sched: _Schedule, pos: Ints, steps: Ints, off: Ints, end: Ints, *, start: float
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """The drained iterations' rows from the trajectories, costed in bulk; paged, the
    extra columns (blocks held, tokens prefilled)."""
    d, gamma, it = sched.d, sched.d.gamma, sched.it
    _, rows = sched.rows()
    block = None if d.paging is None else d.paging.block
    sums = iteration_sums(pos, steps, sched.joined, off, end, gamma, it, block=block)
    b, emitted, drafted = sums.batch, sums.emitted, sums.drafted
    t, e, dr = decode_costs(d.uniform, d.mixed_many, sums, gamma)
    table = np.zeros((sched.row, WIDTH), dtype=np.float64)
    table[rows, 3], table[rows, 4], table[rows, 6] = dr, b, drafted
    table[rows, 7] = drafted + b
    table[rows, 8] = table[rows, 9] = drafted + b - emitted
    table[rows, 10] = emitted
    table = _finish(d, table, rows, t, e, sched.prefills, sched.firsts, sched.ends, start=start)
    if d.paging is None:
        return table, None
    extras = np.zeros((sched.row, EXTRA), dtype=np.float64)
    extras[rows, 0] = sums.blocks
    at, size = np.array(sched.tokens, dtype=np.int64).reshape(-1, 2).T
    extras[at, 4] = size
    return table, extras


def _finish(
    d: Drain,
    table: NDArray[np.float64],
    rows: Any,
    t: NDArray[np.float64],
    e: NDArray[np.float64],
    prefills: list[tuple[int, float, int, float]],
    firsts: list[tuple[Ints, int, float]],
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
    if firsts:  # every admission's requests at once: the same sums, element for element
        a, at = _spread([(f[0], (f[1], f[2])) for f in firsts])
        t = clock[at[:, 0].astype(np.int64)] + at[:, 1]
        d.first_tok[a] = t
        one = d.req.out_len[a] == 1  # done with their prefill
        d.finish[a[one]] = t[one]
    if ends:
        f, at = _spread([(e[0], (e[1],)) for e in ends])
        d.finish[f] = clock[at[:, 0].astype(np.int64) + 1]
    return table


def _spread(groups: list[tuple[Ints, tuple[float, ...]]]) -> tuple[Ints, NDArray[np.float64]]:
    """The groups' requests in one array, and each one's group numbers as a row."""
    ids = np.concatenate([g[0] for g in groups])
    size = [g[0].shape[0] for g in groups]
    return ids, np.repeat(np.array([g[1] for g in groups], dtype=np.float64), size, axis=0)
