"""The tree optimizer: the token tree that emits the most tokens per second on a machine.

Sequoia (Chen et al. 2024, arXiv:2402.12374, Section 3.2) finds, by dynamic
programming, the tree of at most ``n`` nodes that maximizes the expected tokens
per pass under the positional acceptance model (acceptance by depth and rank,
:class:`specsim.proposers.RankAcceptance`), then picks ``n`` for one GPU at
batch 1. Here the same program (:func:`best_trees`) gives the best tree for
every node count and depth bound, and each candidate is priced on the cards at
the batch it will run at on one :class:`~specsim.cost.deployment.Deployment` (the
target, hardware, runtime profile, weight and KV formats and tensor parallelism the user
chose): the target's verification pass of the tree
(:meth:`Deployment.pass_cost <specsim.cost.deployment.Deployment.pass_cost>` of
:func:`specsim.proposers.verify_shape`) plus the proposer's drafting on the same deployment
(one draft step per depth over the frontier, one head evaluation, or a host lookup).
:func:`optimize_tree` returns the candidate with the most emitted tokens per second, and
for comparison the best chain, the best full k-ary tree (k = 2, 3, 4) of the same budget,
and no speculation.

**The program.** Write ``P[d][r]`` for the probability that the rank-``r``
child at depth ``d`` is *the* accepted one (the conditional acceptance times
the rejection of the ranks before it). A node reached with probability ``x``
contributes ``x`` expected tokens, so a forest hanging below one node at depth
``d - 1`` with ``m`` nodes is worth ``G[d][m] = H_0(m)``, where, over the
ranks, ``H_r(m) = max(0, max_{1<=s<=m} P[d][r] (1 + G[d + 1][s - 1]) +
H_{r + 1}(m - s))``: the rank-``r`` child takes a subtree of ``s`` nodes and the
later ranks share the rest (Sequoia's recursion, with the depth kept in the
state because acceptance here may depend on depth). The best tree of at most
``n`` nodes emits ``1 + G[1][n]`` tokens per pass; ties keep the smaller tree.

As the batch grows, verification stops being free: the pass turns compute
bound, each verified node costs time, and the best tree shrinks towards a
chain and then to no speculation (``docs/proposers.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.checks import check_int, check_size
from specsim.cost.deployment import Deployment
from specsim.cost.stack_terms import check_stack_tree
from specsim.proposers import (
    DraftCost,
    Proposer,
    RankAcceptance,
    check_proposer,
    check_tree,
    tree_depths,
    verify_shape,
)
from specsim.proposers.kinds import check_serialized
from specsim.theory.token_trees import expected_tokens_tree

__all__ = [
    "TreePlan",
    "TreeOptimum",
    "best_trees",
    "chain_tree",
    "kary_tree",
    "check_budget",
    "tree_tokens",
    "evaluate_tree",
    "optimize_tree",
    "tree_refusal",
    "KARY",
]

KARY = (2, 3, 4)
"""The branching factors of the fixed k-ary trees compared with the best tree."""


def chain_tree(n: int) -> tuple[int, ...]:
    """The chain of ``n`` drafted tokens: ``(-1, 0, 1, ..., n - 2)``."""
    return tuple(range(-1, n - 1))


def kary_tree(k: int, n: int) -> tuple[int, ...]:
    """The first ``n`` nodes, breadth first, of the full ``k``-ary tree (node ``i``'s parent
    is ``i // k - 1``): each node's ``k`` children are its draft's top ``k`` tokens."""
    if k < 1:
        raise ValueError(f"k: expected an integer >= 1, got {k!r}")
    return tuple(i // k - 1 for i in range(n))


def check_budget(parents: Sequence[int], budget: int) -> tuple[int, ...]:
    """``parents`` checked (:func:`specsim.proposers.check_tree`) and within ``budget`` nodes,
    else a ValueError naming the budget and the tree's size."""
    tree = check_tree(parents)
    check_int(budget, name="budget", minimum=0)
    if len(tree) > budget:
        raise ValueError(
            f"budget: {budget} verified nodes per sequence is smaller than the tree's "
            f"{len(tree)} nodes"
        )
    return tree


def tree_tokens(parents: Sequence[int], acceptance: RankAcceptance) -> float:
    """Expected tokens per pass of ``parents`` (:func:`specsim.theory.expected_tokens_tree`)."""
    tree = check_tree(parents)
    if not tree:
        return 1.0
    return expected_tokens_tree(list(tree), acceptance.node_table(tree))


def _marginals(acceptance: RankAcceptance, depths: int, ranks: int) -> NDArray[np.float64]:
    a = acceptance.table(depths, ranks)
    before = np.concatenate([np.ones((depths, 1)), np.cumprod(1.0 - a, axis=1)[:, :-1]], axis=1)
    return a * before


def _program(P: NDArray[np.float64], budget: int) -> list[NDArray[np.int64]]:
    """The choices of the dynamic program (module docstring) for depths ``1..len(P)``:
    ``choice[d - 1][r, m]`` is the subtree size of the rank-``r`` child when ``m`` nodes
    remain for ranks ``r, r + 1, ...`` at depth ``d`` (0: no more children)."""
    depths, ranks = P.shape
    M = budget + 1
    G = np.zeros(M)  # the level below the deepest allowed: nothing
    choices: list[NDArray[np.int64]] = [np.zeros((ranks, M), dtype=np.int64)] * depths
    m_idx, s_idx = np.meshgrid(np.arange(M), np.arange(M), indexing="ij")
    valid = (s_idx >= 1) & (s_idx <= m_idx)
    rest = np.where(valid, m_idx - s_idx, 0)
    for d in range(depths - 1, -1, -1):
        H = np.zeros(M)
        choice = np.zeros((ranks, M), dtype=np.int64)
        for r in range(ranks - 1, -1, -1):
            gain = np.zeros(M)
            gain[1:] = P[d, r] * (1.0 + G[:-1])  # the rank-r child with a subtree of s nodes
            cand = np.where(valid, gain[s_idx] + H[rest], -np.inf)
            best = cand.argmax(axis=1)  # the first maximum: the smallest subtree
            value = cand[np.arange(M), best]
            take = value > 0.0  # else stop: no child of rank r (nor of later ranks)
            choice[r] = np.where(take, best, 0)
            H = np.where(take, value, 0.0)
        choices[d] = choice
        G = H
    return choices


def _build(choices: list[NDArray[np.int64]], n: int) -> tuple[int, ...]:
    """The tree the choices give for ``n`` nodes, listed breadth first."""
    nodes: list[tuple[int, int]] = []  # (parent, depth) in creation order
    kids: dict[int, list[int]] = {}
    stack = [(-1, 1, n)]  # (parent node, depth of its children, nodes for its subtree)
    while stack:
        parent, d, m = stack.pop()
        if d > len(choices):
            continue
        for r in range(choices[d - 1].shape[0]):
            s = int(choices[d - 1][r, m])
            if s == 0:
                break
            nodes.append((parent, d))
            kids.setdefault(parent, []).append(len(nodes) - 1)
            stack.append((len(nodes) - 1, d + 1, s - 1))
            m -= s
    order, frontier = [], [-1]
    while frontier:  # breadth first, siblings in rank order
        nxt = []
        for v in frontier:
            for c in kids.get(v, []):
                order.append(c)
                nxt.append(c)
        frontier = nxt
    index = {old: new for new, old in enumerate(order)}
    return tuple(-1 if nodes[v][0] < 0 else index[nodes[v][0]] for v in order)


def best_trees(
    acceptance: RankAcceptance, *, budget: int, max_depth: int | None = None
) -> list[tuple[int, ...]]:
    """The best tree (most expected tokens per pass) for every node count ``0..budget`` and
    every depth bound ``1..max_depth`` (default: the budget), without repeats.

    >>> acc = RankAcceptance(accept=((0.8, 0.5),))
    >>> max(best_trees(acc, budget=3), key=lambda t: tree_tokens(t, acc))
    (-1, 0, 1)
    """
    check_budget((), budget)
    depth = budget if max_depth is None else min(budget, max_depth)
    if depth < 1:
        return [()]
    ranks = min(budget, acceptance.ranks)
    P = _marginals(acceptance, depth, ranks)
    out: dict[tuple[int, ...], None] = {(): None}
    for bound in range(1, depth + 1):
        choices = _program(P[:bound], budget)
        for n in range(1, budget + 1):
            out.setdefault(_build(choices, n), None)
    return list(out)


@dataclass(frozen=True, kw_only=True)
class TreePlan:
    """One tree priced at one batch: per pass, the expected tokens per sequence, the target's
    verification and the drafting (seconds, joules), and what follows from them."""

    kind: str
    parents: tuple[int, ...]
    batch: int
    tokens_per_pass: float
    verify_s: float
    draft_s: float
    energy_j: float

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return max(tree_depths(self.parents), default=0)

    @property
    def time_s(self) -> float:
        return self.verify_s + self.draft_s

    @property
    def tokens_per_s(self) -> float:
        """Emitted tokens per second over the batch."""
        return self.batch * self.tokens_per_pass / self.time_s

    @property
    def energy_per_token_j(self) -> float:
        return self.energy_j / (self.batch * self.tokens_per_pass)

    @property
    def discarded_share(self) -> float:
        """Verified positions off the accepted path over positions verified: the pass verifies
        the root and ``n`` nodes and keeps ``E - 1`` of the nodes on average."""
        return (self.nodes - (self.tokens_per_pass - 1.0)) / (self.nodes + 1.0)

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "parents": list(self.parents),
            "nodes": self.nodes,
            "depth": self.depth,
            "batch": self.batch,
            "tokens_per_pass": self.tokens_per_pass,
            "verify_s": self.verify_s,
            "draft_s": self.draft_s,
            "time_s": self.time_s,
            "tokens_per_s": self.tokens_per_s,
            "energy_per_token_j": self.energy_per_token_j,
            "discarded_share": self.discarded_share,
        }


def evaluate_tree(
    parents: Sequence[int],
    *,
    proposer: Proposer,
    deployment: Deployment,
    batch: int,
    context: int = 512,
    budget: int | None = None,
    kind: str = "tree",
) -> TreePlan:
    """``parents`` priced at ``batch`` on ``deployment``: its expected tokens (the proposer's
    acceptance), the target's tree pass and the proposer's draft cost (none for the empty
    tree), both under the deployment's stack, formats and parallelism."""
    tree = check_tree(parents) if budget is None else check_budget(parents, budget)
    check_proposer(proposer)
    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(deployment).__name__}")
    check_serialized(deployment, where="evaluate_tree")
    proposer.check_target(deployment.target)  # a head card for another target: an error
    # The empty tree verifies nothing: a plain pass, without the stack's speculative terms.
    ver = deployment.pass_cost(verify_shape(tree, context=context, batch=batch), verify=bool(tree))
    draft = DraftCost(0.0, 0.0, 0.0)
    if tree:
        draft = proposer.draft_cost(tree, deployment=deployment, batch=batch, context=context)
    return TreePlan(
        kind=kind,
        parents=tree,
        batch=batch,
        verify_s=ver.time_s,
        draft_s=draft.time_s,
        tokens_per_pass=tree_tokens(tree, proposer.acceptance),
        energy_j=ver.energy_j + draft.energy_j,
    )


@dataclass(frozen=True, kw_only=True)
class TreeOptimum:
    """The best tree at one batch and, for comparison, the best chain, the best full k-ary
    tree of the same budget and no speculation. ``chains_only``: why the deployment's stack
    verifies chains only (:func:`tree_refusal`; empty when it verifies trees): then the
    search was over chains, and ``kary`` is no speculation and left out of :meth:`plans`."""

    best: TreePlan
    chain: TreePlan
    kary: TreePlan
    none: TreePlan
    chains_only: str = ""

    def plans(self) -> tuple[TreePlan, ...]:
        if self.chains_only:
            return (self.best, self.chain, self.none)
        return (self.best, self.chain, self.kary, self.none)


def tree_refusal(deployment: Deployment) -> str:
    """Why ``deployment``'s stack cannot verify a token tree (batch expansion, no tree mask:
    :func:`specsim.cost.stack_terms.check_stack_tree`'s message), or ``""`` when it can.

    >>> tree_refusal(Deployment(target="llama-2-7b", hardware="a40", runtime="vllm-v0"))[:45]
    "runtime: stack 'vllm-v0' verifies by batch ex"
    """
    try:  # the smallest branching tree: a root and two children
        check_stack_tree(deployment.runtime, parents=(-1, 0, 0))
    except ValueError as exc:
        return str(exc)
    return ""


def optimize_tree(
    *,
    proposer: Proposer,
    deployment: Deployment,
    batch: int,
    budget: int = 32,
    context: int = 512,
    max_depth: int = 12,
    candidates: Sequence[tuple[int, ...]] | None = None,
) -> TreeOptimum:
    """The tree of at most ``budget`` nodes and ``max_depth`` depths with the most emitted
    tokens per second at ``batch`` on ``deployment`` (see the module docstring).
    ``candidates``: the best trees from :func:`best_trees`, when already computed for this
    acceptance and budget (they do not depend on the machine or the batch). On a stack that
    verifies chains only (:func:`tree_refusal`) the search is over chains and no speculation,
    and the result says why (``chains_only``)."""
    check_size(batch, name="batch", limit="batch")
    check_size(budget, name="budget", limit="tree_nodes")
    check_int(max_depth, name="max_depth", minimum=1)
    check_budget((), budget)
    acc = check_proposer(proposer).acceptance
    depth = max_depth if acc.max_depth is None else min(max_depth, acc.max_depth)
    trees = (
        list(candidates)
        if candidates is not None
        else best_trees(acc, budget=budget, max_depth=depth)
    )
    kw: dict[str, Any] = {
        "proposer": proposer,
        "deployment": deployment,
        "batch": int(batch),
        "context": context,
        "budget": budget,
    }

    def top(kind: str, pool: Sequence[tuple[int, ...]]) -> TreePlan:
        plans = [evaluate_tree(t, kind=kind, **kw) for t in pool]
        return max(plans, key=lambda p: (p.tokens_per_s, -p.nodes))

    chains = [chain_tree(n) for n in range(1, min(budget, depth) + 1)]
    karys = [
        kary_tree(k, n)
        for k in KARY
        for n in range(k, budget + 1)
        if max(tree_depths(kary_tree(k, n))) <= depth
    ]
    none = evaluate_tree((), kind="no speculation", **kw)
    # The program's trees maximize tokens per pass; a chain, a k-ary tree or nothing can
    # still be faster where drafting's cost grows with the frontier, so all compete.
    pool = [t for t in trees if max(tree_depths(t), default=0) <= depth]
    refusal = tree_refusal(deployment)
    if refusal:  # the stack verifies chains only: no branching tree competes
        pool, karys = [], []
    return TreeOptimum(
        best=top("best tree", list(dict.fromkeys([*pool, *chains, *karys, ()]))),
        chain=top("best chain", chains or [()]),
        kary=top("best k-ary", karys or [()]),
        none=none,
        chains_only=refusal,
    )
