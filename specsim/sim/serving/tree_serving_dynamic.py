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

**Drafting** (:func:`batch_draft_cost`). The proposer drafts every node whose children the
policy looked at, in every sequence
(:attr:`~specsim.sim.stream.tree_policies.DynamicPass.examined`), each sequence at its own
context, priced by the proposer itself through the protocol
(:func:`specsim.proposers.ragged_draft_cost_of`: a draft model, heads or a layer subset run
once per depth over the batch's frontier at that depth, under the stack's drafting profile;
a proposer without a ragged price pays its share of a pass of the batch);
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
from specsim.policies.tree_optimizer import chain_tree
from specsim.proposers import Proposer, ragged_draft_cost_of
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
    as :class:`specsim.sim.serving.tree_serving.TreeServingConfig`. Any proposer drafts, priced
    through its protocol (:func:`batch_draft_cost`)."""

    policy: ConfidenceTree
    world: NodeConfidence

    def __post_init__(self) -> None:
        for name, kind in (("policy", ConfidenceTree), ("world", NodeConfidence)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"{name}: expected a {kind.__name__}, got {value!r}")
        check_serving_fields(self)
        self.proposer.check_target(self.target)
        try:  # the proposer says how deep it drafts (a head card's heads reach so far)
            self.proposer.draft_cost(
                chain_tree(self.policy.max_depth), deployment=self.deployment, batch=1, context=1
            )
        except ValueError as err:
            raise ValueError(f"policy.max_depth: {self.policy.max_depth}: {err}") from None
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
    trees: Sequence[Sequence[int]],
    contexts: NDArray[np.int64],
    *,
    deployment: Deployment,
) -> tuple[float, float]:
    """Seconds and joules of drafting the batch's trees, sequence ``i``'s tree ``trees[i]``
    (the tree of nodes the draft ran on,
    :attr:`~specsim.sim.stream.tree_policies.DynamicPass.examined`) after ``contexts[i]`` cached
    tokens, priced by the proposer through the protocol
    (:func:`specsim.proposers.ragged_draft_cost_of` on the target's ``deployment``). Empty
    trees draft nothing."""
    d = ragged_draft_cost_of(proposer, trees, contexts, deployment=deployment)
    return float(d.time_s), float(d.energy_j)


@dataclass(eq=False)
class DynamicTreePlan:
    """The engine's plan for trees chosen per pass (:class:`specsim.sim.serving.loop.TreePlan`):
    each sequence's tree grown by ``config.policy`` on draws from ``config.world``, the batch
    sharing the position budget best first (:func:`share_budget`), drafted as
    :func:`batch_draft_cost` prices it (the proposer's own price, through the protocol)."""

    config: DynamicTreeServingConfig
    verify: TreeVerify
    deployment: Deployment
    columns: tuple[str, ...] = ("expected_tokens", "draft_positions")

    @property
    def lookahead(self) -> int:
        return self.config.policy.budget + 1

    @property
    def reach(self) -> int:
        """The deepest a tree of at most ``budget`` nodes can be: a chain of them."""
        return int(self.config.policy.budget)

    @property
    def draft_prefill(self) -> bool:
        """Whether admitted prompts are prefilled for the drafter too (always: trees draft)."""
        return True

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
        d_s, d_e = batch_draft_cost(
            cfg.proposer, [p.examined for p in passes], ctx, deployment=self.deployment
        )
        accepted = np.asarray([p.walk(rng) for p in passes], dtype=np.int64)
        nodes = np.asarray([len(p.parents) for p in passes], dtype=np.int64)
        expected = float(b + sum(p.reach() for p in passes))
        drafted = float(sum(sum(p.widths) for p in passes))
        return TreeStep(accepted, nodes, ver_s, d_s, ver_e + d_e, bound, (expected, drafted))


def simulate_dynamic_tree_serving(
    config: DynamicTreeServingConfig, rng: np.random.Generator
) -> TreeServingResult:
    """Serve the workload with a tree chosen per pass and sequence (module docstring) on the
    serving engine with a :class:`DynamicTreePlan`, and again without speculation when
    ``config.plain_twin``; every draw comes from ``rng``."""
    return serve_tree_plan(config, DynamicTreePlan, rng, count_column="draft_positions")
