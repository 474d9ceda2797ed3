"""What a cost source is: the records of a pass's cost and the protocols the simulators use.

A cost source is anything with the few methods of :class:`CostSource`: the
cost of a verification pass over chains (``verify(new_tokens, context)``, one
pass covering per-sequence arrays), of one draft step, and of a prefill, each a
:class:`PassCost`, and whether the draft runs overlapped on its own
accelerator. Sources that can do better than pass by pass also implement
:class:`BatchedCostSource` (whole blocks of a stream, whole serving
iterations); :func:`block_costs` and :func:`iteration_cost` use those speed
paths when a source has them and compose passes otherwise, so a minimal source
works wherever the simulators call these two functions. The sources that ship
are in :mod:`specsim.sim.costs.costs`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import ModelCard
from specsim.checks import check_int
from specsim.cost import verification_positions
from specsim.cost.checks import check_positions
from specsim.policies.lookahead import LookaheadPolicy, PolicyContext, check_choice

__all__ = [
    "check_positions_fit",
    "check_whole",
    "PassCost",
    "BlockCosts",
    "IterationCost",
    "IterationCosts",
    "CostSource",
    "BatchedCostSource",
    "block_costs",
    "iteration_cost",
    "TableTimes",
    "BatchWide",
    "MEMO",
    "Remembers",
]


@dataclass(frozen=True, slots=True)
class PassCost:
    """Time (s), operations (FLOP, or target-token units for PlainCost), bytes and energy (J)."""

    time_s: float
    flops: float
    bytes: float
    energy_j: float | None


@dataclass(frozen=True, slots=True)
class BlockCosts:
    """Per-block arrays for one stream (batch 1): a verification pass, one draft step.

    ``verify_*`` is the pass verifying ``gamma + 1`` positions at the block's
    context; ``draft_*`` is one draft step there. Each is the time, flops and
    energy of a :class:`PassCost`, one element per block.
    """

    verify_time: NDArray[np.float64]
    verify_flops: NDArray[np.float64]
    verify_energy: NDArray[np.float64] | None
    draft_time: NDArray[np.float64]
    draft_flops: NDArray[np.float64]
    draft_energy: NDArray[np.float64] | None


# A NamedTuple built without its Python-level __new__: a speed trick for the serving
# simulator's fast paths, which return one per iteration.
named = tuple.__new__


class IterationCost(NamedTuple):
    """A serving iteration: its time (draft steps plus the verification pass), the energy of
    both, and the draft steps' share of the time (seconds, joules)."""

    time_s: float
    energy_j: float
    draft_s: float


class IterationCosts(NamedTuple):
    """A stretch of serving iterations at one batch and gamma: :class:`IterationCost`'s
    fields as arrays, one element per iteration."""

    time_s: NDArray[np.float64]
    energy_j: NDArray[np.float64]
    draft_s: NDArray[np.float64]


class CostSource(Protocol):
    """What every cost source provides (see the module docstring)."""

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost: ...

    def draft_step(self, context: NDArray[np.int64]) -> PassCost: ...

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost: ...

    @property
    def overlapped(self) -> bool: ...


@runtime_checkable
class BatchedCostSource(CostSource, Protocol):
    """The optional speed paths of a cost source: whole blocks and whole serving iterations.

    Each must equal what :func:`block_costs` and :func:`iteration_cost` compose
    from the passes of :class:`CostSource`; ``uniform_iteration`` is the
    iteration in which every sequence drafts ``gamma``, from the batch and the
    sum of its contexts alone. Two more methods are optional, for the serving
    simulator's drain, which costs whole runs of iterations at once
    (:class:`IterationCosts`): ``uniform_iterations(batch=, context_sum=,
    gamma=)`` on arrays, and ``iterations(count, csum)``, mixed iterations from
    each gamma's count and context sum; both shipped sources have them.
    """

    def blocks(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> BlockCosts: ...

    def iteration(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> IterationCost: ...

    def uniform_iteration(self, *, batch: int, context_sum: float, gamma: int) -> IterationCost: ...

    def uniform_iteration_times(
        self, context: NDArray[np.int64], max_gamma: int
    ) -> NDArray[np.float64]: ...


def block_costs(
    source: CostSource, gamma: NDArray[np.int64], context: NDArray[np.int64]
) -> BlockCosts:
    """Per-block costs of a stream: the source's :meth:`~BatchedCostSource.blocks`, or pass by
    pass from ``verify`` and ``draft_step``."""
    if isinstance(source, BatchedCostSource):
        return source.blocks(gamma, context)
    one = np.ones(1, dtype=np.int64)
    ver = [
        source.verify(verification_positions(g) * one, c * one)
        for g, c in zip(gamma, context, strict=True)
    ]
    dra = [source.draft_step(c * one) for c in context]

    def column(costs: list[PassCost], name: str) -> NDArray[np.float64]:
        return np.array([getattr(p, name) for p in costs], dtype=np.float64)

    energy = all(p.energy_j is not None for p in ver + dra)
    return BlockCosts(
        verify_time=column(ver, "time_s"),
        verify_flops=column(ver, "flops"),
        verify_energy=column(ver, "energy_j") if energy else None,
        draft_time=column(dra, "time_s"),
        draft_flops=column(dra, "flops"),
        draft_energy=column(dra, "energy_j") if energy else None,
    )


def iteration_cost(
    source: CostSource, gamma: NDArray[np.int64], context: NDArray[np.int64]
) -> IterationCost:
    """A serving iteration: the source's :meth:`~BatchedCostSource.iteration`, or composed:
    draft step ``j`` batches the sequences with ``gamma_i > j`` (their contexts ``j`` tokens
    on), then one pass verifies ``gamma_i + 1`` positions of every sequence."""
    if isinstance(source, BatchedCostSource):
        return source.iteration(gamma, context)
    ver = source.verify(verification_positions(gamma), context)
    energy, d_time = ver.energy_j or 0.0, 0.0
    for j in range(int(gamma.max()) if gamma.shape[0] else 0):
        d = source.draft_step(context[gamma > j] + j)
        d_time += d.time_s
        energy += d.energy_j or 0.0
    return IterationCost(ver.time_s + d_time, energy, d_time)


MEMO = 1 << 16
"""The most entries a :class:`Remembers` source keeps (then it forgets them all)."""


class Remembers:
    """For an immutable cost source: a bounded memo of results by their arguments (a speed
    trick: serving runs meet the same batch and context sum again and again; a function of
    its arguments, so the same floats). Not pickled."""

    @cached_property
    def _memo(self) -> dict[tuple[Any, ...], Any]:
        return {}

    @cached_property
    def _memo_prefills(self) -> dict[tuple[Any, ...], Any]:
        """Prefills apart: keyed by their prompts, mostly new when prompt lengths vary, they
        would push out the iterations' costs, which recur."""
        return {}

    def _remember(
        self, key: tuple[Any, ...], value: Any, memo: dict[tuple[Any, ...], Any] | None = None
    ) -> Any:
        memo = self._memo if memo is None else memo
        if len(memo) >= MEMO:
            memo.clear()
        memo[key] = value
        return value

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_memo")}


Ints = NDArray[np.int64]


class TableTimes:
    """``pass_time(gamma)`` for a batch-wide policy: the coming iteration's time if every
    sequence drafts gamma, from ``times(n)``, the times for gammas 0..n at once (kept as
    ``table``, which :class:`specsim.policies.lookahead.LoadAdaptive` reads whole)."""

    __slots__ = ("times", "table")

    def __init__(self, times: Callable[[int], NDArray[np.float64]], size: int) -> None:
        self.times, self.table = times, times(size)

    def __call__(self, gamma: int) -> float:
        if gamma >= self.table.shape[0]:
            self.table = self.times(gamma)
        return float(self.table[gamma])


class BatchWide:
    """A batch-wide policy's lookahead for each serving iteration
    (:func:`specsim.policies.lookahead.
    batch_wide`: chosen from the batch size and ``pass_time`` alone), capped at ``max_gamma``.

    ``pass_time`` comes from the source's ``uniform_times(batch=, context_sum=, max_gamma=)``
    where it has one (:meth:`specsim.sim.CardCost.uniform_times`), which depends on the batch
    and the sum of its contexts alone, and the choice is then remembered by these two numbers
    (a speed trick: a capacity search asks the policy every iteration); else from
    ``times_of(contexts, n)``, asked every time. Where, moreover, the source declares its
    times non-decreasing in the context sum (``monotone_times``) and the policy can tell the
    choice every table between two bounds makes (``settled(low, high)``, e.g.
    :meth:`specsim.policies.lookahead.LoadAdaptive.settled`), each new choice also tries the table
    ``SPAN`` tokens a sequence further: if the bounds settle it, every context sum in
    between, at that batch, gets the same choice without asking (the same answer:
    the choice is proven constant there).
    """

    SPAN = 32

    def __init__(
        self,
        policy: LookaheadPolicy,
        *,
        cost: CostSource,
        size: int,
        max_gamma: int,
        times_of: Callable[[Ints, int], NDArray[np.float64]],
    ) -> None:
        self.policy, self.size, self.max_gamma, self.times_of = policy, size, max_gamma, times_of
        self.sums = getattr(cost, "uniform_times", None)
        self.memo: dict[tuple[int, int], int] = {}
        settled = getattr(policy, "settled", None)
        bounded = self.sums is not None and getattr(cost, "monotone_times", False) is True
        self.settled = settled if bounded else None
        self.spans: dict[int, tuple[int, int, int]] = {}  # batch: (from, to, gamma)
        self.widths: dict[int, int] = {}  # batch: tokens a sequence the next span tries

    def __call__(self, batch: int, context_sum: int, contexts: Callable[[], Ints]) -> int:
        key = (batch, context_sum)
        gam = self.memo.get(key, -1)
        if gam >= 0:
            return gam
        span = self.spans.get(batch)
        if span is not None and span[0] <= context_sum <= span[1]:
            return span[2]
        if self.sums is None:
            times = TableTimes(partial(self.times_of, contexts()), self.size)
        else:
            times = TableTimes(partial(_sum_times, self.sums, batch, context_sum), self.size)
        ctx = PolicyContext(
            position=0, draw=None, last_gamma=None, last_accepted=None, batch=batch, pass_time=times
        )
        gam = min(check_choice(self.policy, self.policy.choose(ctx)), self.max_gamma)
        if self.sums is not None:
            self.memo[key] = gam
        if self.settled is not None and times.table.shape[0] == self.size + 1:
            width = self.widths.get(batch, self.SPAN)
            to = context_sum + width * batch
            high = _sum_times(self.sums, batch, to, self.size)  # type: ignore[arg-type]
            proven = self.settled(times.table, high)
            if proven is not None and min(check_choice(self.policy, proven), self.max_gamma) == gam:
                self.spans[batch] = (context_sum, to, gam)
                self.widths[batch] = min(2 * width, 1024)
            else:
                self.widths[batch] = max(width // 2, 2)
        return gam


def _sum_times(
    sums: Callable[..., NDArray[np.float64]], batch: int, context_sum: int, n: int
) -> NDArray[np.float64]:
    return sums(batch=batch, context_sum=context_sum, max_gamma=n)


def check_positions_fit(
    cost: CostSource,
    *,
    context: ArrayLike,
    new_tokens: ArrayLike,
    name: str,
    draft_new_tokens: ArrayLike | None = None,
) -> None:
    """A ValueError naming ``name`` when a run on a card-priced source would take its target
    past the card's ``max_position`` (``context + new_tokens``) or its draft past its own
    (``context + draft_new_tokens``, by default the same); sources without model cards have
    no positions to check. Callers count every position a pass can reach, the last block's
    lookahead included, so that a run is refused before it starts, never midway."""
    draft_new = new_tokens if draft_new_tokens is None else draft_new_tokens
    for model, new in (
        (getattr(cost, "target", None), new_tokens),
        (getattr(cost, "draft", None), draft_new),
    ):
        if isinstance(model, ModelCard):
            check_positions(model, context=context, new_tokens=new, name=name)


def check_whole(value: object, name: str, *, minimum: int) -> int:
    """``value`` when it is an integer (not a bool) of at least ``minimum``; else the error of
    :func:`specsim.checks.check_int` naming the field: a run's counts (tokens, batch, gamma,
    KV tokens) are whole numbers."""
    return check_int(value, name=name, minimum=minimum)
