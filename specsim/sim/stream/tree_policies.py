"""Trees chosen per pass from the draft's confidence, as in EAGLE-2.

EAGLE-2 (Li, Wei, Zhang & Zhang, "EAGLE-2: Faster Inference of Language Models with
Dynamic Draft Trees", EMNLP 2024, arXiv:2406.16858) observes that a draft token's
acceptance varies with the context and that the draft's confidence predicts it
(Section 3), and builds each pass's tree from that signal (Section 4): a node's
*value* is the product of the confidences along its path, an estimate of the
probability that the path is accepted; the nodes of highest value are expanded
layer by layer, and a rerank keeps the ``m`` nodes of highest value, a connected tree
since a child's value never exceeds its parent's.

**The world** (:class:`NodeConfidence`). The positional table
(:class:`specsim.proposers.RankAcceptance`, Sequoia's model) gives each rank and depth
a *mean* acceptance; per pass and node, the candidate's own conditional acceptance
``p`` is drawn around it, ``p ~ Beta(a * kappa, (1 - a) * kappa)`` with mean
``a = accept[d - 1][r]`` and ``concentration`` ``kappa`` (infinite: ``p = a``, no
variation, nothing for confidence to find), independently per node; the draft sees
the signal ``c = clip(p + noise * N(0, 1), 0, 1)``, the same noisy signal as the chain
processes' ``confidence`` (:mod:`specsim.acceptance.processes`). The Beta form and ``kappa``
are assumptions of this model, not measurements: how much acceptance varies per
context is not in a rank table. Because the draws are independent, a *fixed* tree in
this world has exactly the closed form of the mean table
(:func:`specsim.theory.expected_tokens_tree`): every factor of a node's reach is a
different node's draw.

**The policy** (:class:`ConfidenceTree`). Best-first over the candidates: a candidate's
predicted reach is its parent's times ``c_r prod_{s<r} (1 - c_s)`` over its earlier
siblings (the plug-in of Sequoia's reach with the confidences); starting from the
root's first child, the candidate of highest predicted reach is taken, and its first
child and its next sibling become candidates, until ``budget`` nodes are taken. This
is EAGLE-2's top-``m`` rerank by value, taken greedily so that the tree stays closed
under parents and earlier siblings (the walk tries siblings in rank order). The draft
has run on the parent of every candidate it looked at: those nodes, depth by depth,
are what drafting costs (:attr:`DynamicPass.examined`). :class:`TreeGrowth` runs the
same search a node at a time, so that the sequences of a batch can share one budget
(:mod:`specsim.sim.serving.tree_serving_dynamic`); :meth:`ConfidenceTree.build` is that search
run to the policy's budget.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from specsim.checks import check_int
from specsim.proposers import RankAcceptance

__all__ = ["NodeConfidence", "ConfidenceTree", "DynamicPass", "TreeGrowth"]


def _whole(value: object, name: str, minimum: int) -> int:
    return check_int(value, name=name, minimum=minimum)


@dataclass(frozen=True, kw_only=True)
class NodeConfidence:
    """Per-node acceptance around the rank table and the draft's signal of it (module
    docstring): ``concentration`` of the Beta law (``math.inf``: none), ``noise`` of the
    signal (0.1 by default, as :class:`specsim.acceptance.processes.IIDAcceptance`)."""

    concentration: float = 4.0
    noise: float = 0.1

    def __post_init__(self) -> None:
        k = self.concentration
        if isinstance(k, bool) or not isinstance(k, int | float) or not k > 0 or math.isnan(k):
            raise ValueError(f"concentration: expected a number > 0 (or math.inf), got {k!r}")
        n = self.noise
        if isinstance(n, bool) or not isinstance(n, int | float) or not (0 <= n < math.inf):
            raise ValueError(f"noise: expected a finite number >= 0, got {n!r}")

    def latent(self, mean: float, rng: np.random.Generator) -> float:
        """One candidate's conditional acceptance, of mean ``mean``."""
        if math.isinf(self.concentration) or mean <= 0.0 or mean >= 1.0:
            return mean
        k = self.concentration
        return float(rng.beta(mean * k, (1.0 - mean) * k))

    def signal(self, p: float, rng: np.random.Generator) -> float:
        """The draft's confidence in a candidate of acceptance ``p``."""
        if self.noise == 0.0:
            return p
        return min(1.0, max(0.0, p + self.noise * float(rng.standard_normal())))


@dataclass(frozen=True)
class DynamicPass:
    """One pass's tree: ``parents`` (topological, siblings in rank order), each node's
    acceptance ``accept`` (given its earlier siblings rejected) and ``predicted`` reach,
    and ``examined``: the tree of every candidate looked at (the chosen nodes first), whose
    inner nodes the draft ran on; ``widths``: ``frontier_widths(examined)``
    (:func:`specsim.proposers.frontier_widths`), the draft's positions per depth, counted as
    the tree grew (a speed trick: that function re-checks the tree)."""

    parents: tuple[int, ...]
    accept: tuple[float, ...]
    predicted: tuple[float, ...]
    examined: tuple[int, ...]
    widths: tuple[int, ...] = ()

    def reach(self) -> float:
        """Expected accepted nodes of this tree given its nodes' acceptances:
        ``sum_v prod_{u on the path} p_u prod_{earlier siblings s} (1 - p_s)``."""
        reach: list[float] = []
        left: dict[int, float] = {}
        for p, a in zip(self.parents, self.accept, strict=True):
            before = left.get(p, 1.0)
            reach.append((1.0 if p < 0 else reach[p]) * before * a)
            left[p] = before * (1.0 - a)
        return math.fsum(reach)

    def walk(self, rng: np.random.Generator) -> int:
        """Accepted nodes of one verification: children tried in rank order (SpecInfer)."""
        u = rng.random(len(self.parents))
        reached = [False] * len(self.parents)
        taken: set[int] = set()
        for i, (p, a) in enumerate(zip(self.parents, self.accept, strict=True)):
            if p in taken or not (p < 0 or reached[p]):
                continue
            if u[i] < a:
                reached[i] = True
                taken.add(p)
        return sum(reached)


class TreeGrowth:
    """One pass's tree grown a node at a time (the policy's best-first search, module
    docstring), so that several sequences can share one budget
    (:mod:`specsim.sim.serving.tree_serving_dynamic`): :attr:`best` is the predicted reach of the
    candidate :meth:`take` would add next (None: nothing left to add within the
    policy's ``budget``, ``max_depth`` and ranks); :meth:`result` is the pass so far.
    Candidates' acceptances and signals are drawn from ``rng`` as they are looked at."""

    def __init__(
        self,
        policy: ConfidenceTree,
        acceptance: RankAcceptance,
        world: NodeConfidence,
        rng: np.random.Generator,
    ) -> None:
        self.policy, self.acceptance, self.world, self.rng = policy, acceptance, world, rng
        self.ranks = acceptance.ranks if policy.max_rank is None else policy.max_rank
        self.parents: list[int] = []
        self.accept: list[float] = []
        self.predicted: list[float] = []
        self.depths: list[int] = []
        self.heap: list[tuple[float, int, int, int, int, float, float, float]] = []
        self.count = 0
        self._offer(-1, 1, 0, 1.0, 1.0)

    def _offer(self, parent: int, depth: int, rank: int, reach: float, left: float) -> None:
        if depth > self.policy.max_depth or rank >= self.ranks:
            return
        p = self.world.latent(self.acceptance.conditional(depth, rank), self.rng)
        c = self.world.signal(p, self.rng)
        value = reach * left * c
        # Ties (and zero values) by creation order: earlier candidates first.
        heapq.heappush(
            self.heap, (-value, self.count, parent, depth, rank, reach, left * (1 - c), p)
        )
        self.count += 1

    @property
    def best(self) -> float | None:
        if not self.heap or len(self.parents) >= self.policy.budget:
            return None
        return -self.heap[0][0]

    def take(self) -> None:
        """Add the best candidate; its first child and next sibling become candidates."""
        if self.best is None:
            raise ValueError("take: the tree is full (budget reached or no candidate left)")
        value, _, parent, depth, rank, reach, left_after, p = heapq.heappop(self.heap)
        node = len(self.parents)
        self.parents.append(parent)
        self.accept.append(p)
        self.predicted.append(-value)
        self.depths.append(depth)
        self._offer(node, depth + 1, 0, -value, 1.0)  # its first child
        self._offer(parent, depth, rank + 1, reach, left_after)  # its next sibling

    def result(self) -> DynamicPass:
        """The tree grown so far, with what the draft looked at (:class:`DynamicPass`)."""
        waiting = sorted(h[2] for h in self.heap)
        examined = tuple(self.parents) + tuple(waiting)
        widths = [0] * (max(self.depths, default=0) + (1 if waiting else 0))
        for node in set(self.parents) | set(waiting):  # the nodes with children looked at
            widths[0 if node < 0 else self.depths[node]] += 1
        while widths and widths[-1] == 0:
            widths.pop()
        return DynamicPass(
            tuple(self.parents), tuple(self.accept), tuple(self.predicted), examined, tuple(widths)
        )


@dataclass(frozen=True, kw_only=True)
class ConfidenceTree:
    """EAGLE-2's dynamic tree: at most ``budget`` nodes of highest predicted reach, at most
    ``max_depth`` deep, at most ``max_rank`` candidates per node (default: the table's
    ranks), chosen per pass from the confidences (module docstring)."""

    budget: int
    max_depth: int = 8
    max_rank: int | None = None

    def __post_init__(self) -> None:
        _whole(self.budget, "budget", 1)
        _whole(self.max_depth, "max_depth", 1)
        if self.max_rank is not None:
            _whole(self.max_rank, "max_rank", 1)

    def grow(
        self, acceptance: RankAcceptance, world: NodeConfidence, rng: np.random.Generator
    ) -> TreeGrowth:
        """A tree to grow node by node (:class:`TreeGrowth`), its first candidate drawn."""
        return TreeGrowth(self, acceptance, world, rng)

    def build(
        self, acceptance: RankAcceptance, world: NodeConfidence, rng: np.random.Generator
    ) -> DynamicPass:
        """Draw the candidates' acceptances and signals as they are looked at, and choose."""
        growth = self.grow(acceptance, world, rng)
        while growth.best is not None:
            growth.take()
        return growth.result()
