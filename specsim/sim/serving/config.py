"""The serving run's configuration: :class:`ServingConfig` (one frozen, keyword-only
dataclass; the loop that serves it is :mod:`specsim.sim.serving.loop`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from specsim.acceptance.processes import AcceptanceProcess
from specsim.checks import check_size
from specsim.policies.lookahead import MAX_GAMMA, LookaheadPolicy, fixed_gamma
from specsim.proposers import Proposer, check_proposer
from specsim.sim.costs.source import CostSource, check_whole
from specsim.sim.serving import paged
from specsim.sim.serving.drafting import ProposerDrafts, target_deployment
from specsim.sim.serving.router import Router, check_router
from specsim.sim.serving.scheduler import FCFS, Scheduler, check_scheduler
from specsim.sim.workload.workload import Workload

__all__ = ["ServingConfig"]


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    """A serving run.

    ``max_gamma``: the longest block (default :data:`specsim.policies.lookahead.MAX_GAMMA`); every
    request's KV reservation covers a pass of that many drafts.
    ``kv_capacity_tokens``: KV-cache budget in tokens (None: the cost source's
    own ``kv_capacity_tokens()``, the accelerator's memory left after the
    weights for a CardCost; unlimited for a source without one).
    ``plain_twin``: also serve the workload without speculation, for the
    speedup and the ``plain_*`` metrics (False: skip it, and those metrics are
    None).
    ``kv_block_tokens``: None reserves each request's whole KV footprint at
    admission; an integer pages the cache in blocks of that many tokens
    (vLLM's default is 16), and ``preemption`` ("recompute" or "swap") says
    what happens to a sequence evicted when blocks run out
    (:mod:`specsim.sim.serving.paged`). ``token_budget``: None prefills whole prompts;
    an integer caps the tokens of an iteration (chunked prefill, Sarathi-Serve).
    ``replicas`` identical replicas (each with this cost source and KV budget)
    behind ``router``: a rule's name or an object with ``route``
    (:mod:`specsim.sim.serving.router`).
    ``scheduler``: which waiting requests start, an object with ``admit``
    (:mod:`specsim.sim.serving.scheduler`; default first come, first served).
    ``proposer``: None drafts with the cost source's draft model (its ``draft_step``); a
    proposer (:class:`specsim.proposers.ProposerProtocol`: heads, n-gram lookup, a draft
    model, ...) drafts every block instead, priced by its ``draft_costs`` on the target's
    deployment (:class:`specsim.sim.serving.drafting.ProposerDrafts`; the cost source must
    be on cards). The lookahead policy still picks each gamma and ``acceptance`` still
    draws what is accepted; the cost source's draft model, if it has one, still prefills.
    """

    workload: Workload
    cost: CostSource
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    max_batch: int = 64
    kv_capacity_tokens: int | None = None
    max_gamma: int = MAX_GAMMA
    plain_twin: bool = True
    kv_block_tokens: int | None = None
    preemption: paged.Preemption = "recompute"
    token_budget: int | None = None
    replicas: int = 1
    router: Router = "round-robin"
    proposer: Proposer | None = None
    scheduler: Scheduler = FCFS

    def __post_init__(self) -> None:
        check_whole(self.max_batch, "max_batch", minimum=1)
        check_size(self.max_batch, name="max_batch", limit="batch")
        check_whole(self.max_gamma, "max_gamma", minimum=0)
        paged.check_engine(self)
        check_router(self.router, self.replicas)
        check_scheduler(self.scheduler)
        if self.kv_capacity_tokens is not None:
            check_whole(self.kv_capacity_tokens, "kv_capacity_tokens", minimum=1)
            most = self._budget
            if most is not None and self.kv_capacity_tokens > most:
                raise ValueError(
                    f"kv_capacity_tokens: {self.kv_capacity_tokens} tokens do not fit; the "
                    f"accelerator's memory holds {most} after the weights"
                )
        if not isinstance(self.plain_twin, bool):
            raise ValueError(f"plain_twin: expected true or false, got {self.plain_twin!r}")
        if self.cost.overlapped:
            raise ValueError(
                "cost: overlapped drafting (a draft accelerator) is modelled for single streams "
                "only; serve with the draft on the target's accelerator"
            )
        fixed = fixed_gamma(self.policy)
        if fixed is not None and fixed > self.max_gamma:
            raise ValueError(f"policy: gamma {fixed} exceeds max_gamma {self.max_gamma}")
        if self.proposer is not None:
            self._check_proposer()

    def _check_proposer(self) -> None:
        """The proposer drafts for this target, and can draft a chain of ``max_gamma``
        (heads reach a fixed depth): asked once here, not midway through a run."""
        deployment = target_deployment(self.cost)
        proposer = check_proposer(self.proposer)
        proposer.check_target(deployment.target)
        if self.max_gamma > 0:
            try:
                ProposerDrafts(self.cost, proposer, deployment).draft(
                    self.max_gamma, batch=1, context=1
                )
            except ValueError as exc:
                raise ValueError(f"max_gamma: {self.max_gamma}: {exc}") from None

    @cached_property
    def _budget(self) -> int | None:
        """KV tokens the accelerator holds after the weights, where the cost source knows
        (worked out once: every serve of a run reads it, and a card's footprint is slow)."""
        capacity: Callable[[], int] | None = getattr(self.cost, "kv_capacity_tokens", None)
        return None if capacity is None else int(capacity())

    def kv_capacity(self) -> int | None:
        if self.kv_capacity_tokens is not None:
            return int(self.kv_capacity_tokens)
        return self._budget
