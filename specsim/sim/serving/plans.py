"""The serving engine's seams: what it reads of a run's configuration
(:class:`EngineConfig`), a plan that verifies a token tree per sequence
(:class:`TreePlan`, returning a :class:`TreeStep` each pass) beside the lookahead
policies' chains (:mod:`specsim.policies.lookahead`), and what an iteration's scheduler
asks of the engine (:class:`Iterating`: the chunked-prefill iteration of
:mod:`specsim.sim.serving.chunked` reads the engine only through it, so that the loop
imports the scheduler and not the other way round). The memory (reserved or paged KV), the
scheduler (whole prompts or chunked prefill) and the replicas with their router are the
configuration's fields (:class:`specsim.sim.ServingConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy
from numpy.typing import NDArray

from specsim.sim.costs.source import CostSource
from specsim.sim.serving.batch import Batch, Requests
from specsim.sim.serving.paged import Preemption
from specsim.sim.serving.router import Replica, Router
from specsim.sim.serving.scheduler import Scheduler

__all__ = ["Decoded", "EngineConfig", "Iterating", "Plan", "TreePlan", "TreeStep"]

Ints = NDArray[np.int64]
Plan = tuple[int, Ints | None, Ints | None]
"""An iteration's lookahead: (one gamma for all, or -1; the gammas chosen; drafted)."""
Decoded = tuple[float, float, float, int, int]
"""A decoding pass: (time, energy, draft time, tokens emitted, tokens drafted)."""


class EngineConfig(Protocol):
    """What the engine reads of a run's configuration (:class:`~specsim.sim.ServingConfig`
    has these fields; so does the tree fronts' set-up, :mod:`specsim.sim.serving.tree_batch`)."""

    @property
    def cost(self) -> CostSource: ...

    @property
    def max_batch(self) -> int: ...

    @property
    def max_gamma(self) -> int: ...

    @property
    def kv_block_tokens(self) -> int | None: ...

    @property
    def preemption(self) -> Preemption: ...

    @property
    def token_budget(self) -> int | None: ...

    @property
    def replicas(self) -> int: ...

    @property
    def router(self) -> Router: ...

    @property
    def scheduler(self) -> Scheduler: ...

    def kv_capacity(self) -> int | None: ...


@dataclass(frozen=True)
class TreeStep:
    """One decoding pass of the running batch under a tree plan: per sequence the nodes
    ``accepted`` (before the cut at its request's end) and ``nodes`` verified; the pass's
    ``verify_s``, ``draft_s`` and ``energy_j``; whether a position budget cut a tree
    (``budget_bound``) and the plan's ``extra`` columns."""

    accepted: Ints
    nodes: Ints
    verify_s: float
    draft_s: float
    energy_j: float
    budget_bound: bool
    extra: tuple[float, ...] = ()


class TreePlan(Protocol):
    """A plan that verifies a token tree per sequence (a fixed tree, or trees chosen per
    pass) instead of a lookahead policy's chain: ``lookahead``, the positions a pass writes
    at most past a sequence's emitted tokens (its root and its largest tree: the KV
    reservation and the paged cache's pass size); ``draft_prefill``, whether a draft model
    prefills beside the target; ``columns``, the names of its ``extra`` columns; and
    ``step(contexts, rng, positions=None)``, the pass over sequences each after
    ``contexts[i]`` cached tokens (all but the root), its acceptance walks drawn from
    ``rng``, verifying at most ``positions`` positions over the batch, roots included
    (the scheduler's token budget; None: the plan's own limits). ``reach``: the deepest
    position a pass verifies past a sequence's emitted tokens (its tree's depth, or the
    deepest a chosen tree can be), what a run checks against the cards' ``max_position``;
    the draft reaches one less.

    >>> from specsim.sim.serving.plans import TreePlan
    >>> sorted(n for n in ("lookahead", "reach", "step") if hasattr(TreePlan, n))
    ['lookahead', 'reach', 'step']"""

    @property
    def lookahead(self) -> int: ...

    @property
    def reach(self) -> int: ...

    @property
    def draft_prefill(self) -> bool: ...

    @property
    def columns(self) -> tuple[str, ...]: ...

    def step(
        self, contexts: Ints, rng: np.random.Generator, positions: int | None = None
    ) -> TreeStep: ...


class Iterating(Protocol):
    """What an iteration's scheduler reads and calls of the serving engine
    (:class:`specsim.sim.serving.loop.Engine` has these): the clock, the requests, the cost
    source, the token budget, the tree plan if any, whether the draft prefills, the
    first-token and finish times, and the plan, decode and row steps."""

    env: simpy.Environment
    req: Requests
    cost: CostSource
    budget: int | None
    tree: TreePlan | None
    draft_prefill: bool
    first_tok: NDArray[np.float64]
    finish: NDArray[np.float64]

    def choose(self, batch: Batch) -> Plan: ...

    def decode(self, rep: Replica, gam: int, chosen: Any, g: Any) -> Decoded: ...

    def tree_step(self, rep: Replica, positions: int | None = None) -> TreeStep: ...

    def decode_trees(self, rep: Replica, s: TreeStep | None = None) -> Decoded: ...

    def row(
        self,
        start: float,
        *,
        prefill_s: float,
        decoded: Decoded,
        b: int,
        admitted: int,
        energy: float,
    ) -> tuple[float, ...]: ...
