"""Serving many requests with token trees: continuous batching under a verified-position budget.

One accelerator (or ``replicas`` behind a ``router``) serves a workload
(``workload.sample(rng)``: arrival, prompt and output length per request) on the one
serving engine of :mod:`specsim.sim.serving`, with a tree plan (:class:`StaticTreePlan`,
run by :func:`specsim.sim.serving.tree_batch.serve_trees`). Every iteration:

1. waiting requests are admitted first-come first-served while the batch has room
   (``max_batch``, at most ``position_budget`` sequences: each needs its root, and, with
   ``kv_capacity_tokens``, while their KV reservations fit); the
   admitted prompts are prefilled in one target pass (and the proposer's own KV prefill,
   its ``prefill_cost``: a draft model's pass, none for n-gram lookup), which gives each its
   first token (TTFT); a one-token request is then done;
2. every running sequence verifies the token tree ``parents`` (acceptance by depth and
   rank, :class:`~specsim.proposers.RankAcceptance`), all of them in **one** target pass
   with a tree attention mask, priced by :func:`specsim.cost.pass_aggregates_cost` on the
   sums of :func:`specsim.proposers.verify_shape` over the batch (each sequence at its own
   context), after the proposer drafts the batch's trees (its ``draft_cost`` at the batch,
   at the batch's mean context rounded: drafting's context term is the small one);
3. each sequence's acceptance walk is sampled
   (:func:`specsim.sim.stream.tree_stream.sample_tree_accepts`: children tried in rank order,
   SpecInfer's multi-step verification, Miao et al.,
   ASPLOS 2024) and its accepted path plus one token is emitted, cut at the request's last
   token; finished requests leave.

**The position budget.** A pass of ``B`` sequences verifying ``n`` nodes each computes
``B (n + 1)`` positions. With ``position_budget = P`` and ``B (n + 1) > P``, every
sequence's tree is cut to the same ``k = P // B - 1`` nodes (:func:`prune_tree`): nodes
are taken greedily in order of decreasing reach, the probability that the node is on the
accepted path (:func:`specsim.theory.token_trees.tree_reach`, Sequoia's positional model, Chen
et al. 2024, Section 3), among the nodes whose parent and earlier sibling are already
taken. A node's reach never exceeds its parent's, so for tables whose acceptance falls
with rank this is simply the ``k`` nodes of highest reach; the closure keeps every
node's depth and rank, so the pruned tree's tokens per pass are its own closed form.

**What is counted** per iteration (:data:`specsim.sim.results.records.ITERATION_COLUMNS`, plus
``nodes`` per sequence, ``accepted`` nodes over the batch before the cut at requests'
ends, and ``budget_bound``): ``positions`` verified, ``positions_wasted`` (off the
accepted paths, or past a request's end), ``emitted``. With ``plain_twin`` (the default)
the same requests are also served without speculation
(:func:`specsim.sim.serving.tree_batch.plain_twin`), so ``metrics()`` carries ``speedup`` and
``tpot_speedup``. The KV limit is reserve-up-front admission, or a paged cache with
preemption given ``kv_block_tokens``; ``token_budget`` prefills prompts in chunks
(:mod:`specsim.sim.serving.tree_batch`). Trees chosen
per pass (EAGLE-2) are served by :mod:`specsim.sim.serving.tree_serving_dynamic`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost.deployment import Deployment
from specsim.cost.shape import tree_depths
from specsim.proposers import RankAcceptance, check_tree
from specsim.sim.costs.source import check_whole
from specsim.sim.serving.drafting import proposer_draft_costs
from specsim.sim.serving.plans import TreePlan
from specsim.sim.serving.tree_batch import (
    TreeServingFields,
    TreeServingResult,
    TreeStep,
    TreeVerify,
    batch_cap,
    check_serving_fields,
    check_tree_stack,
    plain_twin,
    serve_trees,
)
from specsim.sim.stream.tree_stream import sample_tree_accepts
from specsim.theory.token_trees import tree_reach

__all__ = [
    "StaticTreePlan",
    "TreeServingConfig",
    "TreeServingResult",
    "prune_tree",
    "simulate_tree_serving",
]


def prune_tree(parents: Sequence[int], acceptance: RankAcceptance, k: int) -> tuple[int, ...]:
    """``parents`` cut to ``k`` nodes: greedily the node of highest reach among those whose
    parent and earlier sibling are kept (ties: the earlier node), renumbered in the original
    order (so topological, siblings in rank order). ``k >= len(parents)``: the tree itself.

    >>> acc = RankAcceptance(accept=((0.8, 0.5), (0.6, 0.3)))
    >>> prune_tree((-1, -1, 0, 0, 1), acc, 3)  # reach .8, .1, .48, .096, .06
    (-1, -1, 0)
    """
    tree = check_tree(parents)
    check_whole(k, "k", minimum=0)
    if k >= len(tree):
        return tree
    reach = tree_reach(list(tree), acceptance.node_table(tree))
    first: dict[int, int] = {}  # each node's first child
    after: dict[int, int] = {}  # each node's next sibling
    last: dict[int, int] = {}
    for i, p in enumerate(tree):
        if p in last:
            after[last[p]] = i
        else:
            first[p] = i
        last[p] = i
    keep: list[int] = []
    heap = [(-float(reach[first[-1]]), first[-1])] if tree else []
    while heap and len(keep) < k:
        _, i = heapq.heappop(heap)
        keep.append(i)
        for j in (first.get(i), after.get(i)):
            if j is not None:
                heapq.heappush(heap, (-float(reach[j]), j))
    keep.sort()
    index = {old: new for new, old in enumerate(keep)}
    return tuple(-1 if tree[i] < 0 else index[tree[i]] for i in keep)


@dataclass(frozen=True, kw_only=True)
class TreeServingConfig(TreeServingFields):
    """A tree-serving run (module docstring): the ``workload``, the tree ``parents`` each
    sequence verifies, the ``proposer`` (its acceptance and drafting cost), the ``target``
    and ``hardware`` cards, ``max_batch`` sequences at most and ``position_budget``
    verified positions per iteration at most (None: no limit; at least 2, the root and one
    node of one sequence). ``kv_capacity_tokens``: KV tokens the batch may hold (None: no
    limit; each request reserves its prompt, its output and one pass's tree at admission).
    ``plain_twin``: also serve the same requests without speculation, for ``speedup``.
    The engine's fields (:class:`~specsim.sim.serving.tree_batch.TreeServingFields`):
    ``kv_block_tokens`` and ``preemption`` (a paged cache; a pass is sized by the whole
    tree), ``token_budget`` (chunked prefill), ``replicas`` behind ``router``, and the
    target's ``tensor_parallel``, ``runtime``, ``weights``, ``kv`` and ``group_size``, as for
    :class:`specsim.sim.ServingConfig` and :class:`specsim.sim.CardCost`."""

    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", check_tree(self.parents))
        check_serving_fields(self)
        self.proposer.check_target(self.target)
        check_tree_stack(self.deployment, self.parents, where="parents")

    def nodes(self, batch: int) -> int:
        """Nodes per sequence in a pass of ``batch`` sequences (the budget's cut)."""
        n = len(self.parents)
        if self.position_budget is None:
            return n
        return min(n, self.position_budget // batch - 1)

    @property
    def batch_cap(self) -> int:
        """Sequences at most: ``max_batch``, and one root each within the budget."""
        return batch_cap(self.max_batch, self.position_budget)


@dataclass(eq=False)
class StaticTreePlan:
    """The engine's plan for a static tree (:class:`specsim.sim.serving.loop.TreePlan`):
    every sequence verifies ``config.parents``, cut to the position budget's share
    (:func:`prune_tree`), drafted by the proposer at the batch's mean context, rounded
    (drafting's context term is the small one)."""

    config: TreeServingConfig
    verify: TreeVerify
    deployment: Deployment
    pruned: dict[int, tuple[int, ...]] = field(default_factory=dict)
    columns: tuple[str, ...] = ("nodes",)

    @property
    def lookahead(self) -> int:
        return len(self.config.parents) + 1

    @property
    def reach(self) -> int:
        """The tree's depth (0 for plain decoding)."""
        return max(tree_depths(self.config.parents), default=0)

    @property
    def draft_prefill(self) -> bool:
        """Whether admitted prompts are prefilled for the drafter too (a tree drafts)."""
        return bool(self.config.parents)

    def step(
        self, contexts: NDArray[np.int64], rng: np.random.Generator, positions: int | None = None
    ) -> TreeStep:
        cfg, b = self.config, len(contexts)
        k = cfg.nodes(b) if positions is None else min(cfg.nodes(b), positions // b - 1)
        if k not in self.pruned:
            self.pruned[k] = prune_tree(cfg.parents, cfg.proposer.acceptance, k)
        tree = self.pruned[k]
        ver_s, ver_e = self.verify([tree] * b, contexts)
        d_t = d_e = 0.0
        if tree:
            mean = int(round(float(contexts.sum()) / b))
            d = proposer_draft_costs(
                cfg.proposer, tree, deployment=self.deployment, batch=b, context=mean
            ).at(0)
            d_t, d_e = float(d.time_s), float(d.energy_j)
        a = sample_tree_accepts(tree, cfg.proposer.acceptance, passes=b, rng=rng)
        nodes = np.full(b, k, dtype=np.int64)
        return TreeStep(a, nodes, ver_s, d_t, ver_e + d_e, k < len(cfg.parents), (float(k),))


def simulate_tree_serving(config: TreeServingConfig, rng: np.random.Generator) -> TreeServingResult:
    """Serve the workload (module docstring) on the serving engine with a
    :class:`StaticTreePlan`, and again without speculation when ``config.plain_twin``; every
    draw comes from ``rng``."""
    return serve_tree_plan(config, StaticTreePlan, rng, count_column="nodes")


def serve_tree_plan(
    config: TreeServingFields,
    plan: Callable[[Any, TreeVerify, Deployment], TreePlan],
    rng: np.random.Generator,
    *,
    count_column: str,
) -> TreeServingResult:
    """Serve ``config``'s workload on the serving engine under
    ``plan(config, TreeVerify(cost), cost.deployment)`` (``cost`` the config's card cost),
    and again without speculation when ``config.plain_twin``; the iteration column
    ``count_column`` (a count of positions) comes back as integers. Every draw comes from
    ``rng``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    cfg: Any = config
    table = cfg.workload.sample(rng).reset_index(drop=True)
    cost = cfg.card_cost()
    req, it = serve_trees(cfg, plan(cfg, TreeVerify(cost), cost.deployment), table, rng)
    it[count_column] = it[count_column].astype(np.int64)
    twin = plain_twin(cfg, table, rng) if cfg.plain_twin else (None, None)
    return TreeServingResult(
        requests=req, iterations=it, requests_plain=twin[0], iterations_plain=twin[1]
    )
