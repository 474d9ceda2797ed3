"""Chunked prefill's costs, and the rest of a chunked run after the last arrival, in bulk.

:func:`chunk_cost` prices the prefill chunks an iteration carries
(:mod:`specsim.sim.serving.paged`'s docstring: the verification pass with the chunks
less the pass without them, plus the draft's prefill of the chunks), in
closed form where the cost source offers ``chunk_costs``
(:meth:`specsim.sim.costs.costs.CardCost.chunk_costs`: the same pass sums, so the
same floats) and from its passes otherwise.

:func:`drain_chunked` is chunked prefill's counterpart of
:func:`specsim.sim.serving.drain.drain` (a speed trick: after the last arrival the
clock steers nothing). It applies to a fixed gamma on the vectorized path
when the token budget never shrinks the lookahead (``max_batch * (gamma + 1)
<= token_budget``) and the memory can no longer bind (:func:`specsim.sim.serving.drain.never_binds`:
the largest footprints of the requests left, ``max_batch`` of them, fit), so
that no admission waits for memory and no sequence is preempted. Each
sequence's trajectory is then its own (:func:`specsim.sim.serving.drain.trajectories`);
a small event loop walks only the iterations in which prompts start or
advance (the positions the decoding sequences take, from the cuts near their
ends registered when they join) and jumps over the rest to the next finish;
the tables are then formed and costed in bulk, element for element the floats
of the engine's own iterations (tests compare the two, bit for bit).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from specsim.cost import chain_pairs_exact, verification_positions
from specsim.sim.costs.source import CostSource, IterationCosts, PassCost
from specsim.sim.serving.drain import EXTRA, WIDTH, Drain, never_binds
from specsim.sim.serving.prefill import Prefills
from specsim.sim.serving.tally import Tally
from specsim.sim.serving.walks import decode_costs, iteration_sums, trajectories

if TYPE_CHECKING:
    from specsim.sim.serving.batch import Admission, Batch, Requests
    from specsim.sim.serving.paged import Paging

__all__ = ["ChunkDrain", "chunk_cost", "drain_chunked", "draining"]

Ints = NDArray[np.int64]


class DrainingReplica(Protocol):
    """What :func:`draining` reads of a replica (:class:`specsim.sim.serving.router.Replica`, which
    imports this module, so it is named by what it holds rather than imported)."""

    admission: Admission
    batch: Batch
    paging: Paging | None
    prefills: Prefills | None
    req: Requests
    first_tok: NDArray[np.float64]
    finish: NDArray[np.float64]


def chunk_cost(
    cost: CostSource,
    gam: int,
    g: Ints | None,
    batch: Batch,
    sizes: list[int],
    offsets: list[int],
    *,
    draft: bool,
) -> tuple[float, float]:
    """Time and energy prefill chunks add to an iteration: the target's verification pass
    with the chunks (chains of new tokens at their offsets) less the pass without them, and
    the draft's own prefill of the chunks when drafting."""
    if not sizes:
        return 0.0, 0.0
    closed = getattr(cost, "chunk_costs", None)
    if closed is not None:  # the pass sums in closed form, on Python integers (exact)
        b, csum = batch.size, batch.ctx_sum - batch.size  # the cached contexts' sum
        if g is None:  # every sequence verifies gam + 1 positions
            n = gam + 1
            T, P = n * b, chain_pairs_exact(csum, n, b)
        else:
            pos = g + 1
            T = int(pos.sum())
            P = int(chain_pairs_exact(batch.cached(), pos).sum())
        chunks = tuple(float(x) for x in chunk_sums(sizes, offsets))
        t, e = closed((float(T), float(P), float(csum), float(b)), chunks, draft=draft)
        return float(t), float(e)
    new, at = np.asarray(sizes, dtype=np.int64), np.asarray(offsets, dtype=np.int64)
    if batch.size:
        pos = verification_positions(np.full(batch.size, gam, dtype=np.int64) if g is None else g)
        ctx = batch.cached()
        ver = bool((pos > 1).any())  # a decoding sequence drafted; the chunks never count
        alone = _chains(cost, pos, ctx, verify=ver)
        chained = np.concatenate([pos, new]), np.concatenate([ctx, at])
        both = _chains(cost, *chained, verify=ver, verified=int(pos.sum()))  # chunks unsampled
        t, e = both.time_s - alone.time_s, (both.energy_j or 0.0) - (alone.energy_j or 0.0)
    else:
        p = _chains(cost, new, at, verify=False)
        t, e = p.time_s, p.energy_j or 0.0
    if draft:
        with_draft: PassCost = cost.prefill(new, draft=True)
        target = cost.prefill(new, draft=False)
        t += with_draft.time_s - target.time_s
        e += (with_draft.energy_j or 0.0) - (target.energy_j or 0.0)
    return max(t, 0.0), e


def chunk_sums(sizes: list[int], offsets: list[int]) -> tuple[int, int, int, int, int]:
    """The sums a source's ``chunk_costs`` reads of prefill chunks (chains of ``sizes[k]``
    new tokens after ``offsets[k]`` cached): their tokens, their attention pairs, the offsets'
    sum, their count and their pairs at offset 0; Python integers (exact)."""
    own = [chain_pairs_exact(0, c) for c in sizes]
    pairs = sum([chain_pairs_exact(o, c) for c, o in zip(sizes, offsets, strict=True)])
    return sum(sizes), pairs, sum(offsets), len(sizes), sum(own)


def _chains(
    cost: CostSource, new: Ints, ctx: Ints, *, verify: bool, verified: int | None = None
) -> PassCost:
    """The pass of chains ``new`` at ``ctx``, a verification only when ``verify``, of whose new
    tokens ``verified`` (None: all) verify drafts: through the source's ``chains_pass`` where
    it has one (:meth:`specsim.sim.CardCost.chains_pass`: its ``verify`` would take any
    sequence of more than one new token, a prefill chunk, for a verification and charge the
    stack's rejection sampler), else its ``verify`` (a source without one prices passes by
    their shape alone)."""
    given = getattr(cost, "chains_pass", None)
    if given is None:
        return cost.verify(new, ctx)
    out: PassCost = given(new, ctx, verify=verify, verified=verified)
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class ChunkDrain:
    """What :func:`drain_chunked` needs from a replica's engine (its queue, batch and prompts
    in prefill are taken over; nothing reads them afterwards)."""

    cost: Any  # a source with chunk_costs
    uniform: Callable[..., IterationCosts]  # the source's uniform_iterations
    mixed_many: Callable[[Ints, NDArray[np.float64]], IterationCosts] | None
    req: Requests
    admission: Admission
    batch: Batch
    prefills: Prefills
    paging: Paging | None
    run1: Ints | None  # tokens a block from each flat position emits uncapped (Requests.run1)
    gamma: int
    budget: int
    max_batch: int
    with_energy: bool
    first_tok: NDArray[np.float64]
    finish: NDArray[np.float64]
    seen: list[int]  # the requests done when memory last could still bind

    def ready(self, done: int) -> bool:
        """Whether memory can no longer bind (checked again only once more are done)."""
        if self.seen[0] == done:
            return False
        left = np.concatenate(
            [
                self.batch.rid,
                np.asarray(self.prefills.rid, dtype=np.int64),
                np.asarray(self.admission.waiting, dtype=np.int64),
            ]
        )
        ok = never_binds(
            self.req, left, paging=self.paging, admission=self.admission, max_batch=self.max_batch
        )
        self.seen[0] = -1 if ok else done
        return ok


def draining(
    rep: DrainingReplica,
    *,
    cost: Any,
    gamma: int,
    budget: int | None,
    run1: Ints | None,
    with_energy: bool,
) -> Drain | ChunkDrain | None:
    """The replica's drain for a fixed ``gamma`` on the vectorized path, where the cost source
    has the bulk paths (``uniform_iterations``, ``iterations`` and, under a token budget,
    ``chunk_costs``) and the budget never shrinks the lookahead; else None."""
    uniform, mixed = getattr(cost, "uniform_iterations", None), getattr(cost, "iterations", None)
    if uniform is None or (gamma and mixed is None):
        return None
    kw: dict[str, Any] = dict(
        cost=cost,
        uniform=uniform,
        mixed_many=mixed,
        req=rep.req,
        admission=rep.admission,
        batch=rep.batch,
        paging=rep.paging,
        gamma=gamma,
        max_batch=rep.admission.max_batch,
        with_energy=with_energy,
        first_tok=rep.first_tok,
        finish=rep.finish,
    )
    if budget is None:
        return Drain(run1=run1, **kw)
    if (
        getattr(cost, "chunk_costs", None) is None
        or rep.prefills is None
        or kw["max_batch"] * (gamma + 1) > budget
    ):
        return None
    return ChunkDrain(run1=run1, budget=budget, prefills=rep.prefills, seen=[-1], **kw)


class _ChunkSchedule:
    """A chunked drain's event simulation on iteration numbers (:func:`drain_chunked`):
    the running sequences' finishes, the prompts in prefill (a copy of the replica's), and
    what it records."""

    def __init__(self, d: ChunkDrain, *, need: list[int], tails: list[list[int]]) -> None:
        pf, self.d = d.prefills, d
        self.need, self.tails, self.gam = need, tails, d.gamma
        self.cuts: dict[int, int] = {}  # iteration: positions the cuts near ends remove
        self.joined = [0] * len(need)
        self.heap: list[tuple[int, int]] = []  # (last iteration, column)
        self.prompt, self.out_len = d.req.prompt.tolist(), d.req.out_len.tolist()
        self.holds_of = None if d.paging is None else d.paging.need
        self.pf = Prefills(list(pf.rid), list(pf.left), list(pf.done), list(pf.holds))
        self.b, self.it = d.batch.size, 0
        self.left = d.batch.size + len(self.pf) + len(d.admission.waiting)
        self.slow: list[tuple[int, ...]] = []  # iteration, started, blocks held, chunk sums
        self.firsts: list[tuple[list[int], int]] = []
        self.ends: list[tuple[list[int], int]] = []

    def join(self, c: int, at: int) -> None:
        """Column ``c`` joins the batch at iteration ``at``; its cuts are registered."""
        self.joined[c] = at
        heapq.heappush(self.heap, (at + self.need[c] - 1, c))
        for k, v in enumerate(self.tails[c]):
            if v:
                key = at + self.need[c] - self.gam + k
                self.cuts[key] = self.cuts.get(key, 0) + v

    def chunks(self) -> None:
        """Prompts start (the admission's scheduler, as start_prefills asks it; memory no
        longer binds) and advance (Prefills.plan) in the budget's room."""
        d, pf, prompt, holds_of = self.d, self.pf, self.prompt, self.holds_of
        positions = self.b * (self.gam + 1) - self.cuts.pop(self.it, 0)
        left = [d.budget - positions - sum(pf.left)]

        def fits(i: int) -> bool:
            if left[0] <= 0:
                return False
            left[0] -= prompt[i]
            return True

        admission = d.admission
        got = admission.scheduler.admit(admission.waiting, d.max_batch - self.b - len(pf), fits)
        for i in got:
            pf.start(i, prompt[i], 0 if holds_of is None else int(holds_of[i]))
        rows, sizes, offsets = pf.plan(d.budget - positions)
        for k, c in zip(rows, sizes, strict=True):
            pf.left[k] -= c
            pf.done[k] += c
        tc, pc, cc, nc, q = chunk_sums(sizes, offsets)
        self.slow.append((self.it, len(got), sum(pf.holds), tc, pc, cc, nc, q))

    def retire(self, rid_l: list[int]) -> None:
        heap, it = self.heap, self.it
        if heap and heap[0][0] == it:
            fin = []
            while heap and heap[0][0] == it:
                fin.append(rid_l[heapq.heappop(heap)[1]])
            self.ends.append((fin, it))
            self.b, self.left = self.b - len(fin), self.left - len(fin)

    def prefilled(self, col_of: dict[int, int]) -> None:
        """Prompts prefilled: first tokens; the others join the batch."""
        pf = self.pf
        if not (pf.rid and 0 in pf.left):
            return
        done_p = [r for r, x in zip(pf.rid, pf.left, strict=True) if x == 0]
        self.firsts.append((done_p, self.it))
        for r in done_p:
            if self.out_len[r] == 1:
                self.ends.append(([r], self.it))
                self.left -= 1
            else:
                self.join(col_of[r], self.it + 1)
                self.b += 1
        pf.keep([k for k, x in enumerate(pf.left) if x > 0])


def drain_chunked(
    d: ChunkDrain, *, start: float, tally: Tally | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Serve the replica's requests left from ``start`` (all have arrived; :meth:`ChunkDrain.
    ready`); returns the iteration table's rows and their extra columns
    (:data:`specsim.sim.serving.paged.EXTRA_COLUMNS`) and fills in first-token and finish times."""
    req, batch, pf, gam = d.req, d.batch, d.prefills, d.gamma
    wait: deque[int] = d.admission.waiting
    later = np.array(pf.rid + list(wait), dtype=np.int64)
    joiners = later[req.out_len[later] > 1]  # the others are done with their prefill
    rid = np.concatenate([batch.rid, joiners])
    end = np.concatenate([batch.end, req.base[joiners] + req.out_len[joiners]])
    off = np.concatenate([batch.off, req.prompt[joiners] - req.base[joiners]])
    first = np.concatenate([batch.ptr, req.base[joiners] + 1])
    pos, steps = trajectories(d.run1 if gam else None, first, end, verification_positions(gam))
    if tally is not None:  # the drained passes' drafts and acceptances
        tally.add_drain(rid, pos, steps, end, gam)
    cols, rid_l = rid.shape[0], rid.tolist()
    col_of = dict(zip(joiners.tolist(), range(batch.size, cols), strict=True))
    # Each sequence's cuts near its end (gamma less the positions it drafts), in its last
    # gamma steps: registered when it joins, they give every iteration's positions.
    idx = steps[None, :] - gam + np.arange(gam)[:, None]
    near = pos[np.maximum(idx, 0), np.arange(cols)]
    tails = np.where(idx >= 0, gam - np.minimum(gam, end - near - 1), 0).T.tolist()
    s = _ChunkSchedule(d, need=steps.tolist(), tails=tails)
    for c in range(batch.size):
        s.join(c, 0)
    while s.left:
        if not s.pf.rid and (not wait or s.b >= d.max_batch):  # nothing starts before a finish
            s.it = s.heap[0][0]
        else:
            s.chunks()
        s.retire(rid_l)
        s.prefilled(col_of)
        s.it += 1
    joined = np.array(s.joined, dtype=np.int64)
    return _tables(d, pos, steps, joined, off, end, s.it, s.slow, s.firsts, s.ends, start=start)


def _tables(
    d: ChunkDrain,
    pos: Ints,
    steps: Ints,
    joined: Ints,
    off: Ints,
    end: Ints,
    it: int,
    slow: list[tuple[int, ...]],
    firsts: list[tuple[list[int], int]],
    ends: list[tuple[list[int], int]],
    *,
    start: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The drained iterations' rows and extra columns, costed in bulk; first-token and
    finish times."""
    gam = d.gamma
    sums = iteration_sums(
        pos, steps, joined, off, end, gam, it, block=1 if d.paging is None else d.paging.block
    )
    b, drafted, emitted = sums.batch, sums.drafted, sums.emitted
    t, e, dr = decode_costs(d.uniform, d.mixed_many, sums, gam)
    s = np.array(slow, dtype=np.int64).reshape(-1, 8)
    ch = s[s[:, 6] > 0]
    r = ch[:, 0]
    pre_s, pre_e = np.zeros(it), np.zeros(it)
    if r.shape[0]:
        assert sums.pairs is not None
        n = b[r] + drafted[r]  # the positions; at the cached contexts, n fewer pairs
        dec = (
            n.astype(np.float64),
            sums.pairs[r] - n,
            (sums.ctx_sum[r] - b[r]).astype(np.float64),
            b[r].astype(np.float64),
        )
        chunks = tuple(ch[:, k].astype(np.float64) for k in range(3, 8))
        pre_s[r], pre_e[r] = d.cost.chunk_costs(dec, chunks, draft=gam != 0)
    pre_s = pre_s + 0.0  # the swap time, as the engine adds it
    table = np.zeros((it, WIDTH), dtype=np.float64)
    table[:, 2], table[:, 3], table[:, 4] = pre_s, dr, b
    table[s[:, 0], 5] = s[:, 1]
    table[:, 6], table[:, 7] = drafted, drafted + b
    table[:, 8] = table[:, 9] = drafted + b - emitted
    table[:, 10] = emitted
    table[:, 11] = pre_e + e if d.with_energy else np.nan
    clock = np.cumsum(np.concatenate(([start], pre_s + t)))
    table[:, 0], table[:, 1] = clock[:-1], clock[1:]
    extras = np.zeros((it, EXTRA), dtype=np.float64)
    if d.paging is not None:
        assert sums.blocks is not None
        extras[:, 0] = sums.blocks
        extras[s[:, 0], 0] += s[:, 2]
    extras[s[:, 0], 4] = s[:, 3]
    for rids, k in firsts:
        d.first_tok[rids] = clock[k + 1]
    for rids, k in ends:
        d.finish[rids] = clock[k + 1]
    return table, extras
