"""The serving engine's seams: what it reads of a run's configuration
(:class:`EngineConfig`), and a plan that verifies a token tree per sequence
(:class:`TreePlan`, returning a :class:`TreeStep` each pass) beside the lookahead
policies' chains (:mod:`specsim.policies.lookahead`). The memory (reserved or paged KV), the
scheduler (whole prompts or chunked prefill) and the replicas with their router are the
configuration's fields (:class:`specsim.sim.ServingConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from specsim.sim.paged import Preemption
from specsim.sim.router import Router
from specsim.sim.source import CostSource

__all__ = ["EngineConfig", "TreePlan", "TreeStep"]

Ints = NDArray[np.int64]


class EngineConfig(Protocol):
    """What the engine reads of a run's configuration (:class:`~specsim.sim.ServingConfig`
    has these fields; so does the tree fronts' set-up, :mod:`specsim.sim.tree_batch`)."""

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
    (the scheduler's token budget; None: the plan's own limits)."""

    @property
    def lookahead(self) -> int: ...

    @property
    def draft_prefill(self) -> bool: ...

    @property
    def columns(self) -> tuple[str, ...]: ...

    def step(
        self, contexts: Ints, rng: np.random.Generator, positions: int | None = None
    ) -> TreeStep: ...
