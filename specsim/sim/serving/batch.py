"""The serving engine's bookkeeping: the requests, admission under a KV budget, the running batch.

- :class:`Requests`: the workload's table as arrays, each request's acceptance
  draw, and the run lengths of accepted positions over all of them (one
  vectorized pass, each run cut at its request's end);
- :class:`Admission`: the waiting queue and the KV budget; its scheduler
  (:mod:`specsim.sim.serving.scheduler`, first come, first served by default) starts
  requests while the batch has room and the request's KV cache fits; prompt, output
  and lookahead are reserved up front, so an admitted request is never evicted;
- :class:`Batch`: the running sequences as a struct of arrays, with each
  sequence's lookahead history (the last block's gamma and accepted count),
  the batch's context sum and a lower bound on the tokens any sequence has
  left, kept as numbers so that most iterations cost a handful of numpy calls
  (a speed trick: the serving benchmark runs thousands of iterations).

:mod:`specsim.sim.serving` runs the iteration loop over these.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from specsim.acceptance.processes import AcceptanceDraw, AcceptanceProcess, accepted_in_block
from specsim.cost import verification_positions
from specsim.policies.lookahead import LookaheadPolicy, PolicyContext, check_choice
from specsim.sim.costs.source import CostSource, iteration_cost
from specsim.sim.serving.scheduler import FCFS, Scheduler
from specsim.sim.stream.stream import run_lengths

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Admission", "Batch", "Requests", "composed_times", "draw_requests", "sequence_gammas"]

TimesOf = Callable[[NDArray[np.int64], int], NDArray[np.float64]]

Ints = NDArray[np.int64]
NO_HISTORY = -1  # a sequence's last gamma / accepted count before its first block


def draw_requests(
    acceptance: AcceptanceProcess,
    output_tokens: Ints,
    *,
    max_gamma: int,
    rng: np.random.Generator,
) -> list[AcceptanceDraw]:
    """Each request's acceptance draw, in request order: its output tokens plus a full
    lookahead of positions, so that a block may start at any token it still has to emit."""
    lengths = output_tokens + verification_positions(max_gamma)
    return [acceptance.sample(rng, int(m)) for m in lengths]


@dataclass(frozen=True, eq=False)
class Requests:
    """The requests of a run as arrays, with their draws; shared by a run and its plain twin.

    Request ``i``'s positions are ``base[i] ..`` in the flat arrays; position
    ``base[i] + t`` is its token ``t`` (token 0 comes from the prefill).
    ``run1[p]``: tokens a block starting at flat position ``p`` emits when its
    gamma does not cap it (the accepted run there, at most ``max_gamma``, plus one). ``reserve``: KV
    tokens held from admission to the end (prompt, output and a lookahead pass).
    """

    table: pd.DataFrame
    arrival: NDArray[np.float64]
    prompt: Ints
    out_len: Ints
    draws: list[AcceptanceDraw]
    base: Ints
    run1: Ints
    reserve: Ints
    plain_weights: bool  # acceptance does not depend on the position in a block

    @classmethod
    def build(cls, table: pd.DataFrame, draws: list[AcceptanceDraw], *, max_gamma: int) -> Requests:
        prompt = table["prompt_tokens"].to_numpy().astype(np.int64)
        out_len = table["output_tokens"].to_numpy().astype(np.int64)
        lengths = np.array([len(d) for d in draws], dtype=np.int64)
        ends = np.cumsum(lengths)
        # Compared draw by draw (no two copies of every position's floats; a speed trick).
        ok = np.concatenate([d.u < d.prob for d in draws])
        run1 = run_lengths(ok, lengths, cap=max_gamma)
        run1 += 1
        return cls(
            table=table,
            arrival=table["arrival_s"].to_numpy(),
            prompt=prompt,
            out_len=out_len,
            draws=draws,
            base=ends - lengths,
            run1=run1,
            reserve=prompt + out_len + verification_positions(max_gamma),
            plain_weights=bool(np.all(np.concatenate([d.position_weights for d in draws]) == 1)),
        )

    @classmethod
    def undrawn(cls, table: pd.DataFrame, *, lookahead: int) -> Requests:
        """The requests without acceptance draws, for a plan that draws its acceptance per
        pass (token trees, :class:`specsim.sim.serving.loop.TreePlan`): each reserves its
        prompt, its output and ``lookahead`` positions of one pass."""
        prompt = table["prompt_tokens"].to_numpy().astype(np.int64)
        out_len = table["output_tokens"].to_numpy().astype(np.int64)
        lengths = out_len + lookahead
        ends = np.cumsum(lengths)
        return cls(
            table=table,
            arrival=table["arrival_s"].to_numpy(),
            prompt=prompt,
            out_len=out_len,
            draws=[],
            base=ends - lengths,
            run1=np.ones(int(ends[-1]) if ends.shape[0] else 0, dtype=np.int64),
            reserve=prompt + out_len + lookahead,
            plain_weights=False,
        )

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    def emitted(self, batch: Batch, gamma: Ints) -> Ints:
        """Tokens each running sequence emits when it drafts ``gamma``: accepted run plus one."""
        if self.plain_weights:
            return np.minimum(self.run1[batch.ptr], verification_positions(gamma))
        pos, rid = batch.positions(self).tolist(), batch.rid.tolist()
        return 1 + np.array(
            [accepted_in_block(self.draws[rid[k]], pos[k], int(gamma[k])) for k in range(len(rid))],
            dtype=np.int64,
        )


class Admission:
    """The waiting queue and the KV budget, reserved up front; its scheduler picks who starts.

    ``capacity`` is in KV tokens (None: unlimited). A request that could never
    fit is a ValueError here, before anything runs.
    """

    def __init__(
        self,
        requests: Requests,
        *,
        capacity: int | None,
        max_batch: int,
        max_gamma: int,
        reserve: Ints | None = None,
        unit: str = "tokens",
        scheduler: Scheduler = FCFS,
    ) -> None:
        """``reserve``: what each request needs at admission, in the capacity's ``unit``
        (default: its whole KV footprint in tokens; a paged cache passes blocks);
        ``scheduler``: which waiting requests start (:mod:`specsim.sim.serving.scheduler`)."""
        reserve = requests.reserve if reserve is None else reserve
        if capacity is not None and reserve.max() > capacity:
            i = int(np.argmax(reserve))
            raise ValueError(
                f"kv_capacity_tokens: {capacity} tokens cannot hold request {i} (prompt "
                f"{requests.prompt[i]} + output {requests.out_len[i]} + lookahead "
                f"{verification_positions(max_gamma)})"
            )
        self.reserve = reserve
        self.capacity = capacity
        self.unit = unit
        self.max_batch = max_batch
        self.scheduler = scheduler
        self.waiting: deque[int] = deque()
        self.arrived = 0  # requests that have arrived so far
        self.used = 0  # KV tokens reserved by the admitted requests still running

    def arrive(self, i: int) -> None:
        self.waiting.append(i)
        self.arrived += 1

    def fits(self, i: int) -> bool:
        """Whether request ``i``'s reservation fits in what is free; if so it is reserved."""
        need = int(self.reserve[i])
        if self.capacity is not None and self.used + need > self.capacity:
            return False
        self.used += need
        return True

    def admit(self, running: int, fits: Callable[[int], bool] | None = None) -> list[int]:
        """The waiting requests the scheduler starts while the batch (``running``
        sequences) has room, each reserved (:meth:`fits`, or the caller's ``fits``, which
        reserves through it)."""
        room = self.max_batch - running
        return self.scheduler.admit(self.waiting, room, self.fits if fits is None else fits)

    def release(self, finished: Ints) -> None:
        self.used -= int(self.reserve[finished].sum())

    def check_progress(self, running: int) -> None:
        """A ValueError when nothing runs (``running`` sequences, in the batch or in prefill)
        and the first waiting request does not fit: nothing will ever free room, so nothing
        will ever be admitted, and the run would otherwise spin forever."""
        if running or not self.waiting or self.capacity is None:
            return
        i = self.waiting[0]
        need, free = int(self.reserve[i]), self.capacity - self.used
        if need <= free:
            return
        leak = (
            f"; {self.used:,} are still reserved with no request running (a finished "
            "request's reservation was never released)"
            if self.used
            else ""
        )
        raise ValueError(
            f"serving: request {i} needs {need:,} KV {self.unit} and only {free:,} of the "
            f"capacity of {self.capacity:,} are free{leak}: nothing will ever be admitted"
        )

    def requeue(self, preempted: list[int]) -> None:
        """Preempted requests go back to the front of the queue, earliest arrival first."""
        for i in sorted(preempted, reverse=True):
            self.waiting.appendleft(i)


class Batch:
    """The running sequences: a struct of arrays updated in place, and two running numbers.

    Per sequence: its request (``rid``), the flat position of its next token
    (``ptr``), the flat position of its last token (``end``: tokens still to
    emit are ``end - ptr``), a context offset (its context is ``off + ptr``),
    and its lookahead history (``last_gamma``, ``last_accepted``; ``-1``
    before its first block). ``ctx_sum`` is the sum of the contexts; ``low``
    a lower bound on ``min(end - ptr)``, exact after :meth:`refresh_low`.
    """

    __slots__ = (
        "rid",
        "ptr",
        "end",
        "off",
        "last_gamma",
        "last_accepted",
        "ctx_sum",
        "low",
        "caps",
        "last_run",
    )

    def __init__(self, max_batch: int) -> None:
        empty = np.zeros(0, dtype=np.int64)
        self.rid, self.ptr, self.end, self.off = empty, empty, empty, empty
        self.last_gamma, self.last_accepted = empty, empty
        self.ctx_sum = 0
        self.low = 0
        self.caps = np.zeros(max_batch, dtype=np.int64)  # gamma + 1, for a fast minimum
        self.last_run = empty  # tokens each sequence emitted in the last uniform block

    @property
    def size(self) -> int:
        return int(self.rid.shape[0])

    def add(self, adm: Ints, requests: Requests, resume: Ints | None = None) -> None:
        """Admitted requests join after their prefill, which emitted their first token; or,
        given ``resume`` (rows of flat position, last gamma, last accepted), preempted ones
        rejoin where they left off."""
        base, prompt = requests.base[adm], requests.prompt[adm]
        if resume is None:
            none = np.full(adm.shape[0], NO_HISTORY, dtype=np.int64)
            ptr, last_g, last_a = base + 1, none, none
        else:
            ptr, last_g, last_a = resume[:, 0], resume[:, 1], resume[:, 2]
        self.rid = np.concatenate([self.rid, adm])
        self.ptr = np.concatenate([self.ptr, ptr])
        self.end = np.concatenate([self.end, base + requests.out_len[adm]])
        self.off = np.concatenate([self.off, prompt - base])
        self.last_gamma = np.concatenate([self.last_gamma, last_g])
        self.last_accepted = np.concatenate([self.last_accepted, last_a])
        self.ctx_sum += int((prompt - base + ptr).sum())
        self.refresh_low()

    def remove(self, rows: Ints) -> Ints:
        """Take the sequences in ``rows`` out (preempted); returns their requests, flat
        positions, lookahead histories and contexts, a row each."""
        keep = np.ones(self.rid.shape[0], dtype=bool)
        keep[rows] = False
        ctx = self.off[rows] + self.ptr[rows]
        out = np.stack(
            [self.rid[rows], self.ptr[rows], self.last_gamma[rows], self.last_accepted[rows], ctx],
            axis=1,
        )
        self.ctx_sum -= int(ctx.sum())
        self.rid, self.ptr = self.rid[keep], self.ptr[keep]
        self.end, self.off = self.end[keep], self.off[keep]
        self.last_gamma, self.last_accepted = self.last_gamma[keep], self.last_accepted[keep]
        self.refresh_low()
        return out

    def refresh_low(self) -> int:
        self.low = int((self.end - self.ptr).min()) if self.rid.shape[0] else 0
        return self.low

    def positions(self, requests: Requests) -> Ints:
        """Each sequence's position in its own draw: the tokens it has emitted."""
        return self.ptr - requests.base[self.rid]

    def contexts(self) -> Ints:
        """Each sequence's prompt and emitted tokens."""
        return self.off + self.ptr

    def cached(self) -> Ints:
        """Each sequence's tokens in the KV cache, what its next pass attends to: its
        contexts less the last emitted token, which that pass writes (docs/design.md,
        "The context of a pass")."""
        return self.off + self.ptr - 1

    def advance_uniform(self, gamma: int, run1: Ints) -> int:
        """Every sequence drafts ``gamma`` and none is within ``gamma`` of its end (``gamma <
        low``): a gather, a minimum and an add, and the bound on tokens left kept as a number."""
        b, most = self.rid.shape[0], verification_positions(gamma)
        if gamma == 0:  # plain decoding: one token each
            self.ptr += 1
            emitted = b
            self.last_run = np.ones(b, dtype=np.int64)
        else:
            caps = self.caps[:b]
            caps[:] = most
            acc = run1[self.ptr]
            np.minimum(acc, caps, out=acc)
            self.ptr += acc
            emitted = sum(acc.tolist())
            self.last_run = acc
        self.ctx_sum += emitted
        self.low -= most
        return emitted

    def advance(self, emitted: Ints) -> int:
        """Every sequence emitted ``emitted`` tokens (its accepted run plus one)."""
        self.ptr += emitted
        total = int(emitted.sum())
        self.ctx_sum += total
        self.low = int((self.end - self.ptr).min())
        return total

    def retire(self) -> Ints:
        """Drop the finished sequences; returns their requests."""
        fin = self.ptr >= self.end
        finished = self.rid[fin]
        self.ctx_sum -= int((self.off[fin] + self.end[fin]).sum())
        keep = ~fin
        self.rid, self.ptr = self.rid[keep], self.ptr[keep]
        self.end, self.off = self.end[keep], self.off[keep]
        self.last_gamma, self.last_accepted = self.last_gamma[keep], self.last_accepted[keep]
        self.refresh_low()
        return finished


def composed_times(cost: CostSource, contexts: NDArray[np.int64], size: int) -> NDArray[np.float64]:
    """Iteration times for gammas 0..size from a source's passes (no speed path)."""
    ones = np.ones(contexts.shape[0], dtype=np.int64)
    return np.array([iteration_cost(cost, g * ones, contexts).time_s for g in range(size + 1)])


def sequence_gammas(policy: LookaheadPolicy, batch: Batch, req: Requests) -> NDArray[np.int64]:
    """Ask a per-sequence policy for every running sequence's gamma, with its own history."""
    b = batch.size
    pos = batch.positions(req).tolist()
    rid = batch.rid.tolist()
    last_g, last_a = batch.last_gamma.tolist(), batch.last_accepted.tolist()
    draws = req.draws
    out = np.empty(b, dtype=np.int64)
    for k in range(b):
        had = last_g[k] != NO_HISTORY
        ctx = PolicyContext(
            position=pos[k],
            draw=draws[rid[k]],
            last_gamma=last_g[k] if had else None,
            last_accepted=last_a[k] if had else None,
            batch=b,
        )
        out[k] = check_choice(policy, policy.choose(ctx))
    return out
