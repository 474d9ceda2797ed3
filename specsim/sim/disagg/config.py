"""A disaggregated serving run's configuration: :class:`DisaggConfig`.

Two pools of replicas (:mod:`specsim.sim.disagg`): ``prefill_replicas`` replicas of
``prefill_cost`` prefill prompts (prompts only, no speculation, their own batching under
``prefill_max_batch``, their own KV budget, paged with ``prefill_kv_block_tokens`` and
chunked under ``prefill_token_budget``); each prompt's KV cache crosses ``link``
(:class:`~specsim.sim.disagg.link.KVLink`); ``decode_replicas`` replicas of
``decode_cost`` decode, paged with ``kv_block_tokens`` (``preemption``), with the
lookahead ``policy`` (chains; drafted by ``proposer`` when one is given) or the token
trees of ``tree`` (a static or dynamic tree-serving configuration: its proposer, tree and
position budget). Each pool is served by the one serving engine (:mod:`specsim.sim.serving`)
through :meth:`DisaggConfig.prefill_serving` and :meth:`DisaggConfig.decode_engine`.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.acceptance.processes import AcceptanceProcess, IIDAcceptance
from specsim.policies.lookahead import MAX_GAMMA, FixedGamma, LookaheadPolicy
from specsim.proposers import Proposer
from specsim.sim.costs.source import CostSource, check_whole
from specsim.sim.disagg.first_step import AfterTransfer
from specsim.sim.disagg.link import KVLink
from specsim.sim.serving import paged
from specsim.sim.serving.config import ServingConfig
from specsim.sim.serving.plans import TreePlan
from specsim.sim.serving.router import Router
from specsim.sim.serving.tree_batch import TreeEngine, TreeServingFields, TreeVerify, tree_engine
from specsim.sim.serving.tree_serving import StaticTreePlan, TreeServingConfig
from specsim.sim.serving.tree_serving_dynamic import DynamicTreePlan, DynamicTreeServingConfig
from specsim.sim.workload.workload import Workload

__all__ = ["DecodeTrees", "DisaggConfig"]

# The engine configuration of a pool that drafts nothing (gamma 0) still names an
# acceptance process; nothing is proposed, so none is drawn from it.
_NO_DRAWS = IIDAcceptance(alpha=0.0)


@dataclass(frozen=True, kw_only=True)
class DecodeTrees(TreeEngine):
    """The decode pool's engine configuration under a tree plan: a
    :class:`~specsim.sim.serving.tree_batch.TreeEngine` whose cost is the decode pool's seen after
    the transfer, and whose KV capacity, when none is given, is that cost's."""

    cost: AfterTransfer

    def kv_capacity(self) -> int | None:
        if self.kv_capacity_tokens is not None:
            return self.kv_capacity_tokens
        return int(self.cost.kv_capacity_tokens())


@dataclass(frozen=True, kw_only=True)
class DisaggConfig:
    """A run on separate prefill and decode pools.

    ``prefill_cost`` / ``decode_cost``: each pool's replica (a cost source: the deployment
    it runs; the prefill pool's drafts nothing, so its draft is never priced, and its
    footprint gives the KV bytes per token the link carries). ``prefill_replicas`` and
    ``decode_replicas``: the pools' sizes (at least one each). ``max_batch``,
    ``kv_capacity_tokens``, ``kv_block_tokens``, ``preemption`` and ``router`` are the
    decode pool's; ``prefill_max_batch``, ``prefill_kv_capacity_tokens``,
    ``prefill_kv_block_tokens``, ``prefill_token_budget`` and ``prefill_router`` the
    prefill pool's (None: the decode pool's value for the batch and the router; the KV
    budgets: each cost source's own; no paging, no chunking). The decode pool has no
    token budget: it prefills nothing (its admission pass is the first decode step).

    Chains: ``policy`` picks each gamma, ``acceptance`` draws what is accepted, and
    ``proposer`` (None: ``decode_cost``'s draft model) drafts. Trees: ``tree``, a
    :class:`~specsim.sim.serving.tree_serving.TreeServingConfig` or
    :class:`~specsim.sim.serving.tree_serving_dynamic.DynamicTreeServingConfig` whose proposer,
    tree and ``position_budget`` the decode pool serves (its workload and engine fields
    are not read: the pools' are these), on ``decode_cost``, which must be its card cost
    (the same deployment and draft model); then ``policy``, ``acceptance``, ``proposer``
    and ``max_gamma`` are not given. ``plain_twin``: also decode the same requests without
    speculation (the prefill pool and the link are the same for both: they do not
    speculate).
    """

    workload: Workload
    prefill_cost: CostSource
    decode_cost: CostSource
    link: KVLink
    acceptance: AcceptanceProcess | None = None
    policy: LookaheadPolicy | None = None
    proposer: Proposer | None = None
    tree: TreeServingFields | None = None
    prefill_replicas: int = 1
    decode_replicas: int = 1
    max_batch: int = 64
    prefill_max_batch: int | None = None
    kv_capacity_tokens: int | None = None
    prefill_kv_capacity_tokens: int | None = None
    kv_block_tokens: int | None = None
    preemption: paged.Preemption = "recompute"
    prefill_kv_block_tokens: int | None = None
    prefill_token_budget: int | None = None
    max_gamma: int = MAX_GAMMA
    plain_twin: bool = True
    router: Router = "round-robin"
    prefill_router: Router | None = None

    def __post_init__(self) -> None:
        check_whole(self.prefill_replicas, "disaggregation.prefill_replicas", minimum=1)
        check_whole(self.decode_replicas, "disaggregation.decode_replicas", minimum=1)
        if not isinstance(self.link, KVLink):
            raise TypeError(f"disaggregation.link: expected a KVLink, got {self.link!r}")
        for key in ("prefill_max_batch", "prefill_kv_capacity_tokens", "prefill_token_budget"):
            value = getattr(self, key)
            if value is not None:
                check_whole(value, f"disaggregation.{key}", minimum=1)
        if self.tree is None:
            self._check_chains()
        else:
            self._check_trees()
        # Each pool's own fields are checked where its engine configuration is built.
        try:
            self.prefill_serving()
        except ValueError as exc:
            raise ValueError(f"disaggregation prefill pool: {exc}") from None
        self.decode_engine()

    def _check_chains(self) -> None:
        if self.policy is None or self.acceptance is None:
            raise ValueError(
                "disaggregation: the decode pool needs a lookahead policy and an acceptance "
                "process (chains), or a tree plan (tree)"
            )

    def _check_trees(self) -> None:
        """A tree plan replaces the chain's fields, and runs on ``decode_cost``'s cards."""
        tree = self.tree
        if not isinstance(tree, TreeServingConfig | DynamicTreeServingConfig):
            raise TypeError(
                "disaggregation tree: expected a TreeServingConfig or a "
                f"DynamicTreeServingConfig, got {type(tree).__name__}"
            )
        given = [k for k in ("policy", "acceptance", "proposer") if getattr(self, k) is not None]
        if given:
            raise ValueError(
                f"disaggregation tree: {given} are the chains' (the tree plan brings its "
                "proposer and acceptance); give one or the other"
            )
        want = tree.card_cost()
        dep = getattr(self.decode_cost, "deployment", None)
        drafter = getattr(self.decode_cost, "proposer", None)
        if dep != want.deployment or drafter != want.proposer:
            raise ValueError(
                "disaggregation decode_cost: a tree plan verifies on its own deployment "
                f"({tree.deployment.target.slug} on {tree.deployment.hardware.slug}) drafted "
                f"by {tree.proposer.name}; the decode pool's cost must be tree.card_cost()"
            )

    def prefill_serving(self) -> ServingConfig:
        """The prefill pool as a serving run: every request one token long (its prompt's
        pass, or its last chunk's, emits it and it is done), decoding plainly, no twin."""
        return ServingConfig(
            workload=self.workload,
            cost=self.prefill_cost,
            acceptance=_NO_DRAWS if self.acceptance is None else self.acceptance,
            policy=FixedGamma(gamma=0),
            max_batch=self.max_batch if self.prefill_max_batch is None else self.prefill_max_batch,
            kv_capacity_tokens=self.prefill_kv_capacity_tokens,
            max_gamma=0,
            plain_twin=False,
            kv_block_tokens=self.prefill_kv_block_tokens,
            token_budget=self.prefill_token_budget,
            replicas=self.prefill_replicas,
            router=self.router if self.prefill_router is None else self.prefill_router,
        )

    def decode_serving(self) -> ServingConfig:
        """The decode pool as a chain serving run on :class:`AfterTransfer` (its admission
        pass is the first decode step, the prompt's KV having arrived). Under a tree plan:
        the same pool decoding plainly (the plain twin's)."""
        policy = FixedGamma(gamma=0) if self.policy is None else self.policy
        return ServingConfig(
            workload=self.workload,
            cost=AfterTransfer(self.decode_cost),
            acceptance=_NO_DRAWS if self.acceptance is None else self.acceptance,
            policy=policy,
            max_batch=self.max_batch,
            kv_capacity_tokens=self.kv_capacity_tokens,
            max_gamma=self.max_gamma if self.tree is None else self.decode_trees().max_gamma,
            plain_twin=self.plain_twin,
            kv_block_tokens=self.kv_block_tokens,
            preemption=self.preemption,
            replicas=self.decode_replicas,
            router=self.router,
            proposer=self.proposer,
        )

    def decode_trees(self) -> DecodeTrees:
        """The decode pool's engine configuration under the tree plan."""
        tree = self.tree
        if tree is None:
            raise ValueError("disaggregation: no tree plan (tree) on the decode pool")
        return tree_engine(
            DecodeTrees,
            cost=AfterTransfer(self.decode_cost),
            max_batch=self.max_batch,
            position_budget=tree.position_budget,
            lookahead=self.tree_plan().lookahead,
            kv_capacity_tokens=self.kv_capacity_tokens,
            kv_block_tokens=self.kv_block_tokens,
            preemption=self.preemption,
            replicas=self.decode_replicas,
            router=self.router,
        )

    def decode_engine(self) -> ServingConfig | DecodeTrees:
        """The decode pool's engine configuration: chains, or the tree plan's."""
        return self.decode_serving() if self.tree is None else self.decode_trees()

    def tree_plan(self) -> TreePlan:
        """The decode pool's tree plan (a new one: a dynamic plan keeps state per run)."""
        tree: object = self.tree
        cost = self.decode_cost
        dep = getattr(cost, "deployment", None)
        if isinstance(tree, TreeServingConfig):
            return StaticTreePlan(tree, TreeVerify(cost), dep)  # type: ignore[arg-type]
        if isinstance(tree, DynamicTreeServingConfig):
            return DynamicTreePlan(tree, TreeVerify(cost), dep)  # type: ignore[arg-type]
        raise ValueError("disaggregation: no tree plan (tree) on the decode pool")
