"""Serving with trees chosen per pass from the draft's confidence (EAGLE-2), the batch's
trees sharing one verified-position budget.

The loop is the one serving engine's (:mod:`specsim.sim.serving`, through
:func:`specsim.sim.serving.tree_batch.serve_trees` with a :class:`DynamicTreePlan`: continuous
batching, first-come first-served admission, one prefill pass per iteration for the
admitted prompts, a KV limit reserved up front or a paged cache with preemption,
replicas behind a router). Each decoding iteration, every running sequence grows
its own tree with the EAGLE-2-like policy of :mod:`specsim.sim.stream.tree_policies`
(:class:`~specsim.sim.stream.tree_policies.ConfidenceTree`; Li et al., "EAGLE-2", EMNLP 2024,
arXiv:2406.16858, Section 4): the candidates' acceptances are drawn around the rank table
for this sequence's context (:class:`~specsim.sim.stream.tree_policies.NodeConfidence`) and the
draft's confidences predict each candidate's reach, the probability that it lies on the
accepted path. All the batch's trees are verified in one target pass with a tree mask,
each sequence at its own context (:class:`specsim.sim.serving.tree_batch.TreeVerify`), and each
sequence's walk is sampled on its own tree (children tried in rank order, SpecInfer).

**Sharing the budget** (:func:`share_budget`). A pass of ``B`` sequences verifies each
sequence's root, ``B`` positions; with ``position_budget = P`` the other ``P - B``
positions go to nodes, **best first across the batch**: the batch repeatedly takes, among
every sequence's next candidate, the one of highest predicted reach, until ``P - B`` nodes
are taken or no tree can grow (each at most the policy's ``budget`` nodes, ``max_depth``
deep; ties to the earlier sequence). A node's predicted reach is its predicted share of
an accepted token, so the taken nodes' sum is the iteration's predicted accepted tokens,
and best first is EAGLE-2's rerank to the top values applied to the batch's union of
candidates. It takes exactly the ``P - B`` candidates of highest predicted reach whenever
predicted reach falls along each sequence's candidate order: a child's never exceeds its
parent's; a later sibling's does not exceed an earlier one's when the confidence does not
rise with rank. Each sequence's tree is then the first nodes of the tree the policy would
build for it alone, so without a binding budget a sequence verifies what the single-stream
simulator (:func:`specsim.sim.stream.tree_stream.simulate_dynamic_tree_stream`) would.
Sequences with few promising candidates give their share to those with many: the budget follows the
confidence, not the batch's head count. When ``P = B`` nothing is drafted.

**Drafting** (:func:`batch_draft_cost`). The draft runs once per depth over the batch's
frontier at that depth: every node whose children the policy looked at, in every
sequence (:attr:`~specsim.sim.stream.tree_policies.DynamicPass.examined`), one batched step
per depth, each sequence at its own context. This is
:class:`~specsim.proposers.DraftModel`'s and the heads' pricing
(:mod:`specsim.proposers.kinds`) with widths that differ between sequences;
``tests/sim/serving/test_tree_serving_dynamic.py`` checks that it equals the proposer's own
``draft_cost`` when the trees and contexts are the same.

**Counted** per iteration: the serving columns, ``accepted`` nodes (before the cut at
requests' ends), ``budget_bound``, ``expected_tokens`` (the batch's tokens on average
given each tree's drawn acceptances, ``sum_i 1 + reach_i``) and ``draft_positions``
(positions the draft ran on). ``draft_tokens`` is the nodes verified over the batch;
verified nodes off the accepted paths are ``positions_wasted``, as for chains.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from specsim.cost.deployment import Deployment
from specsim.proposers import DraftModel, Heads, Proposer
from specsim.sim.serving.drafting import proposer_draft_costs
from specsim.sim.serving.tree_batch import (
    TreeServingFields,
    TreeServingResult,
    TreeStep,
    TreeVerify,
    check_serving_fields,
    check_tree_stack,
)
from specsim.sim.serving.tree_serving import serve_tree_plan
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence, TreeGrowth

__all__ = [
    "DynamicTreePlan",
    "DynamicTreeServingConfig",
    "batch_draft_cost",
    "protocol_draft_cost",
    "share_budget",
    "simulate_dynamic_tree_serving",
]


@dataclass(frozen=True, kw_only=True)
class DynamicTreeServingConfig(TreeServingFields):
    """A serving run with EAGLE-2-like trees (module docstring): the ``workload``, the
    ``policy`` that grows each sequence's tree, the ``world`` of per-context acceptances,
    the ``proposer`` (rank table and drafting cost), the ``target`` and ``hardware`` cards;
    ``max_batch``, ``position_budget`` (positions per iteration over the batch, roots
    included; None: each tree up to the policy's budget), ``kv_capacity_tokens`` (None: no
    limit; each request reserves prompt, output and ``policy.budget + 1`` positions) and
    ``plain_twin``, and the engine's fields (paged KV, replicas, the target's deployment),
    as :class:`specsim.sim.serving.tree_serving.TreeServingConfig`. A proposer other than a
    :class:`~specsim.proposers.DraftModel`, heads or n-gram is priced by its
    ``draft_costs`` (:func:`protocol_draft_cost`)."""

    policy: ConfidenceTree
    world: NodeConfidence

    def __post_init__(self) -> None:
        for name, kind in (("policy", ConfidenceTree), ("world", NodeConfidence)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"{name}: expected a {kind.__name__}, got {value!r}")
        check_serving_fields(self)
        self.proposer.check_target(self.target)
        heads = self.proposer.card if isinstance(self.proposer, Heads) else None
        if heads is not None and self.policy.max_depth > heads.max_depth:
            raise ValueError(
                f"policy.max_depth: {self.policy.max_depth} is deeper than head card "
                f"{heads.slug!r} reaches ({heads.max_depth})"
            )
        ranks = self.policy.max_rank or max(len(r) for r in self.proposer.acceptance.accept)
        if self.policy.budget > 1 and ranks > 1:  # the policy may grow a node two children
            check_tree_stack(self.deployment, (-1, 0, 0), where="policy")


def share_budget(growths: Sequence[TreeGrowth], nodes: int | None) -> bool:
    """Grow the batch's trees best first across the batch (module docstring) until ``nodes``
    are taken (None: until no tree can grow); True when ``nodes`` stopped a tree that could
    still grow (the budget was binding)."""
    heap = [(-g.best, i) for i, g in enumerate(growths) if g.best is not None]
    heapq.heapify(heap)
    taken = 0
    while heap and (nodes is None or taken < nodes):
        _, i = heapq.heappop(heap)
        g = growths[i]
        g.take()
        taken += 1
        if g.best is not None:
            heapq.heappush(heap, (-g.best, i))
    return bool(heap)


def batch_draft_cost(
    proposer: Proposer,
    widths: Sequence[Sequence[int]],
    contexts: NDArray[np.int64],
    *,
    deployment: Deployment,
) -> tuple[float, float]:
    """Seconds and joules of drafting the batch's trees, given by their frontier ``widths``
    (:func:`specsim.proposers.frontier_widths` of the tree of nodes the draft ran on, as
    :attr:`~specsim.sim.stream.tree_policies.DynamicPass.widths`), sequence
    ``i`` after ``contexts[i]`` cached tokens: per depth ``d``, one batched step of the draft
    model (of the target scaled by ``layer_fraction / layers`` for heads; a parallel head
    card once per sequence) over the frontier ``w_i`` of each sequence that has one, at
    ``c_i = contexts[i] + d - 1``: ``tokens = sum w_i``, ``context_tokens = sum c_i``,
    ``pairs = sum w_i (c_i + 1)``, on the proposer's own deployment
    (:meth:`DraftModel.deployment <specsim.proposers.DraftModel.deployment>`, from the target's
    ``deployment``: its stack, formats and parallelism). Empty widths draft nothing."""
    if isinstance(proposer, DraftModel):
        dep, scale, parallel = proposer.deployment(deployment), 1.0, False
    elif not isinstance(proposer, Heads):
        raise TypeError(
            f"proposer: batch_draft_cost prices a DraftModel's or Heads' frontier per depth; "
            f"{type(proposer).__name__} is none of these "
            "(price it by its draft_costs: protocol_draft_cost)"
        )
    else:
        target = deployment.target
        dep, scale = proposer.deployment(deployment), proposer.card.layer_fraction / target.layers
        parallel = proposer.card.kind == "parallel"
    fronts = [((1,) if parallel else tuple(x)) if len(x) else () for x in widths]
    depth = max((len(x) for x in fronts), default=0)
    if depth == 0:
        return 0.0, 0.0
    w = np.zeros((len(fronts), depth))  # sequence by depth
    for i, x in enumerate(fronts):
        w[i, : len(x)] = x
    c = np.asarray(contexts, dtype=np.float64)[:, None] + np.arange(depth)  # c_i at depth d
    active = w > 0
    # All depths in one call (the cost broadcasts); a depth nobody drafts costs nothing.
    steps = dep.aggregates_cost(
        batch=active.sum(axis=0),
        tokens=w.sum(axis=0),
        context_tokens=(c * active).sum(axis=0),
        pairs=(w * (c + 1.0)).sum(axis=0),
    )
    used = active.any(axis=0)
    time = scale * float(np.sum(np.asarray(steps.time_s) * used))
    energy = scale * float(np.sum(np.asarray(steps.energy_j) * used))
    return time, energy


@dataclass(eq=False)
class DynamicTreePlan:
    """The engine's plan for trees chosen per pass (:class:`specsim.sim.serving.loop.TreePlan`):
    each sequence's tree grown by ``config.policy`` on draws from ``config.world``, the batch
    sharing the position budget best first (:func:`share_budget`), drafted as
    :func:`batch_draft_cost` prices it (a proposer of another kind: :func:`protocol_draft_cost`)."""

    config: DynamicTreeServingConfig
    verify: TreeVerify
    deployment: Deployment
    columns: tuple[str, ...] = ("expected_tokens", "draft_positions")

    @property
    def lookahead(self) -> int:
        return self.config.policy.budget + 1

    @property
    def draft_prefill(self) -> bool:
        return isinstance(self.config.proposer, DraftModel)

    def step(
        self, contexts: NDArray[np.int64], rng: np.random.Generator, positions: int | None = None
    ) -> TreeStep:
        cfg, b, ctx = self.config, len(contexts), contexts
        acc = cfg.proposer.acceptance
        most = [p for p in (cfg.position_budget, positions) if p is not None]
        room = min(most) - b if most else None
        if room == 0:  # roots only: nothing to draft
            zero = np.zeros(b, dtype=np.int64)
            ver_s, ver_e = self.verify([()] * b, ctx)
            return TreeStep(zero, zero, ver_s, 0.0, ver_e, True, (float(b), 0.0))
        growths = [cfg.policy.grow(acc, cfg.world, rng) for _ in range(b)]
        bound = share_budget(growths, room)
        passes = [g.result() for g in growths]
        ver_s, ver_e = self.verify([p.parents for p in passes], ctx)
        if isinstance(cfg.proposer, DraftModel | Heads):
            d_s, d_e = batch_draft_cost(
                cfg.proposer, [p.widths for p in passes], ctx, deployment=self.deployment
            )
        else:
            d_s, d_e = protocol_draft_cost(
                cfg.proposer, [p.parents for p in passes], ctx, deployment=self.deployment
            )
        accepted = np.asarray([p.walk(rng) for p in passes], dtype=np.int64)
        nodes = np.asarray([len(p.parents) for p in passes], dtype=np.int64)
        expected = float(b + sum(p.reach() for p in passes))
        drafted = float(sum(sum(p.widths) for p in passes))
        return TreeStep(accepted, nodes, ver_s, d_s, ver_e + d_e, bound, (expected, drafted))


def protocol_draft_cost(
    proposer: object,
    trees: Sequence[tuple[int, ...]],
    contexts: NDArray[np.int64],
    *,
    deployment: Deployment,
) -> tuple[float, float]:
    """Seconds and joules of drafting a batch of different trees with a proposer known only
    by its protocol (``draft_costs``, :mod:`specsim.proposers.protocol`): sequence ``i``'s
    share of a pass of the whole batch drafting its tree, ``draft_costs(trees[i], batch=B,
    context=contexts[i]) / B``, summed (the pass itself when every tree is the same)."""
    b, t, e = len(trees), 0.0, 0.0
    for tree, c in zip(trees, contexts.tolist(), strict=True):
        if tree:
            d = proposer_draft_costs(proposer, tree, deployment=deployment, batch=b, context=c).at(
                0
            )
            t, e = t + float(d.time_s) / b, e + float(d.energy_j) / b
    return t, e


def simulate_dynamic_tree_serving(
    config: DynamicTreeServingConfig, rng: np.random.Generator
) -> TreeServingResult:
    """Serve the workload with a tree chosen per pass and sequence (module docstring) on the
    serving engine with a :class:`DynamicTreePlan`, and again without speculation when
    ``config.plain_twin``; every draw comes from ``rng``."""
    return serve_tree_plan(config, DynamicTreePlan, rng, count_column="draft_positions")
