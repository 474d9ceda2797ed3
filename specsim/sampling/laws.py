"""Exact output laws of tree and multi-draft verification, by enumerating every path.

``target(ctx)`` and ``draft(ctx)`` give the next-token distributions after a context
(a tuple of token ids), so ``p`` and ``q`` may depend on the context, as in
:func:`specsim.sampling.enumerate_block`. Each function returns the law of what one
pass emits, ``{token sequence: probability}``; drafting is part of the randomness
(node ``i``'s token is drawn from ``draft`` at its parent's context, i.i.d. among
siblings or without replacement). A verifier is exact when, for every length ``L``,
the first ``L`` tokens of its output, completed by target samples (:func:`extend_law`),
have the target's own law (:func:`autoregressive_law`); the tests check it to 1e-12
on many random small cases, and :func:`typical_deviation` measures, in total
variation, how far typical acceptance is from it.

Exponential in the tree: meant for proofs and teaching (depth <= 3, width <= 3,
vocabularies of a handful of tokens).

>>> import numpy as np
>>> p = lambda ctx: np.array([0.6, 0.3, 0.1])
>>> q = lambda ctx: np.array([0.2, 0.3, 0.5])
>>> law = enumerate_tree([-1, -1], p, q)  # two i.i.d. candidates below the root
>>> full = extend_law(law, p, 2)
>>> max(abs(full[s] - w) for s, w in autoregressive_law(p, 2, 3).items()) < 1e-15
True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specsim.sampling.chain import (
    Distribution,
    FloatArray,
    check_distribution,
    correction_rows,
)
from specsim.sampling.multidraft import METHODS, kseq_residual, kseq_rho
from specsim.sampling.tree import tree_depths
from specsim.sampling.typical import check_typical_parameters, typical_threshold

__all__ = [
    "TREE_METHODS",
    "autoregressive_law",
    "extend_law",
    "total_variation",
    "enumerate_tree",
    "enumerate_typical",
    "typical_deviation",
    "enumerate_multidraft",
]

TREE_METHODS = ("mss", "rrs", "greedy")
"""i.i.d. siblings (SpecInfer), siblings without replacement (recursive rejection
sampling) and the greedy walk."""

Law = dict[tuple[int, ...], float]


def _dist(f: Distribution, ctx: tuple[int, ...], name: str) -> FloatArray:
    return check_distribution(f(ctx), f"{name}{ctx}")


def autoregressive_law(
    target: Distribution, length: int, vocab: int, *, prefix: tuple[int, ...] = ()
) -> Law:
    """The target's own law of its next ``length`` tokens after ``prefix``."""
    out: Law = {}
    for seq in itertools.product(range(vocab), repeat=length):
        out[seq] = math.prod(
            float(_dist(target, prefix + seq[:j], "target")[seq[j]]) for j in range(length)
        )
    return out


def extend_law(law: Law, target: Distribution, length: int, *, prefix: tuple[int, ...] = ()) -> Law:
    """Complete each emitted sequence with target samples up to ``length`` tokens."""
    out: Law = {}
    for seq, weight in law.items():
        if len(seq) > length:
            seq = seq[:length]
        frontier = [(seq, weight)]
        while frontier and len(frontier[0][0]) < length:
            nxt = []
            for s, w in frontier:
                p = _dist(target, prefix + s, "target")
                nxt += [(s + (int(y),), w * float(p[y])) for y in np.flatnonzero(p)]
            frontier = nxt
        for s, w in frontier:
            out[s] = out.get(s, 0.0) + w
    return out


def total_variation(a: Law, b: Law) -> float:
    """``1/2 sum |a - b|`` over the union of the two laws' sequences."""
    return 0.5 * sum(abs(a.get(s, 0.0) - b.get(s, 0.0)) for s in set(a) | set(b))


def _children(parents: Sequence[int]) -> dict[int, list[int]]:
    tree_depths(parents)
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        kids.setdefault(int(par), []).append(i)
    return kids


def enumerate_tree(
    parents: Sequence[int],
    target: Distribution,
    draft: Distribution,
    *,
    method: str = "mss",
    prefix: tuple[int, ...] = (),
) -> Law:
    """The exact law of what one tree pass emits (see :mod:`specsim.sampling.tree`).

    ``method``: ``"mss"`` (siblings i.i.d. from ``draft``; SpecInfer, Algorithm 2),
    ``"rrs"`` (siblings drawn without replacement; Jeon et al. 2024) or ``"greedy"``
    (the walk that follows the target's argmax). After ``r`` rejections with i.i.d.
    siblings the residual does not depend on which tokens were rejected, so rejections
    are summed over tokens; without replacement each rejected token is its own branch.
    """
    if method not in TREE_METHODS:
        raise ValueError(f"method: expected one of {TREE_METHODS}, got {method!r}")
    walk = _TreeWalk(
        kids=_children(parents), target=target, draft=draft, method=method, prefix=prefix
    )
    walk.visit(-1, (), 1.0)
    return walk.out


@dataclass(frozen=True)
class _TreeWalk:
    """The walk of :func:`enumerate_tree` over every path of one tree pass, summing each
    emitted sequence's probability into ``out``."""

    kids: dict[int, list[int]]
    target: Distribution
    draft: Distribution
    method: str
    prefix: tuple[int, ...]
    out: Law = field(default_factory=dict)

    def emit(self, ctx: tuple[int, ...], weight: float, probs: FloatArray) -> None:
        """``ctx`` followed by each token of ``probs``, with ``weight`` times its probability."""
        for y in np.flatnonzero(probs):
            key = ctx + (int(y),)
            self.out[key] = self.out.get(key, 0.0) + weight * float(probs[y])

    def visit(self, node: int, ctx: tuple[int, ...], weight: float) -> None:
        """Every path on from ``node`` reached with probability ``weight`` after ``ctx``."""
        p = _dist(self.target, self.prefix + ctx, "target")
        below = self.kids.get(node, [])
        if not below:
            self.emit(
                ctx, weight, np.eye(p.size)[int(np.argmax(p))] if self.method == "greedy" else p
            )
            return
        q = _dist(self.draft, self.prefix + ctx, "draft")
        if p.shape != q.shape:
            raise ValueError(f"target{ctx} and draft{ctx} have shapes {p.shape} and {q.shape}")
        if self.method == "greedy":
            y = int(np.argmax(p))
            miss = weight
            for child in below:  # the first child whose token is y wins
                self.visit(child, ctx + (y,), miss * float(q[y]))
                miss *= 1.0 - float(q[y])
            self.emit(ctx, miss, np.eye(p.size)[y])
        elif self.method == "mss":
            resid, w = p, weight
            for child in below:
                for x in np.flatnonzero(np.minimum(q, resid)):
                    self.visit(child, ctx + (int(x),), w * float(min(q[x], resid[x])))
                w *= 1.0 - float(np.minimum(q, resid).sum())
                if w <= 0.0:
                    return
                resid = correction_rows(resid, q)
            self.emit(ctx, w, resid)
        else:
            self.siblings(below, 0, ctx, (), p, q, weight)

    def siblings(
        self,
        below: list[int],
        r: int,
        ctx: tuple[int, ...],
        removed: tuple[int, ...],
        resid: FloatArray,
        q: FloatArray,
        weight: float,
    ) -> None:
        """Without replacement: sibling ``r`` of ``below`` drawn once ``removed`` were
        rejected (the residual now ``resid``), or the correction when none is left."""
        if r == len(below):
            self.emit(ctx, weight, resid)
            return
        law = q.copy()
        law[list(removed)] = 0.0
        mass = law.sum()
        if mass <= 0.0:
            raise ValueError(
                f"draft{self.prefix + ctx}: node {below[r]} has no token left to draw "
                "without replacement"
            )
        law /= mass
        after = correction_rows(resid, law)
        for x in np.flatnonzero(law):
            keep = float(min(law[x], resid[x]))
            if keep > 0.0:
                self.visit(below[r], ctx + (int(x),), weight * keep)
            if law[x] - keep > 0.0:
                self.siblings(
                    below, r + 1, ctx, removed + (int(x),), after, q, weight * float(law[x] - keep)
                )


def enumerate_typical(
    parents: Sequence[int],
    target: Distribution,
    draft: Distribution,
    *,
    epsilon: float,
    delta: float,
    prefix: tuple[int, ...] = (),
    max_assignments: int = 200_000,
) -> Law:
    """The exact law of what typical acceptance (Medusa; NOT exact) emits on a tree.

    Every assignment of draft tokens to the nodes is enumerated (node ``i`` i.i.d. from
    ``draft`` at its parent's context), then the rule of
    :func:`specsim.sampling.typical.typical_tree_batch` picks the node. Raises ValueError
    past ``max_assignments`` assignments.
    """
    eps, dl = check_typical_parameters(epsilon, delta)
    depths = tree_depths(parents)
    vocab = _dist(target, prefix, "target").size
    if vocab ** len(depths) > max_assignments:
        raise ValueError(
            f"enumerate_typical: {vocab}^{len(depths)} token assignments exceed "
            f"max_assignments = {max_assignments}"
        )
    out: Law = {}

    def ctx_of(i: int, toks: tuple[int, ...]) -> tuple[int, ...]:
        path = []
        while i >= 0:
            path.append(toks[i])
            i = parents[i]
        return tuple(reversed(path))

    def assign(toks: tuple[int, ...], weight: float) -> None:
        i = len(toks)
        if i < len(depths):
            q = _dist(
                draft, prefix + (ctx_of(parents[i], toks) if parents[i] >= 0 else ()), "draft"
            )
            for x in np.flatnonzero(q):
                assign(toks + (int(x),), weight * float(q[x]))
            return
        ok: list[bool] = []
        best, best_depth = -1, 0
        for j, par in enumerate(parents):
            ctx = ctx_of(par, toks) if par >= 0 else ()
            p = _dist(target, prefix + ctx, "target")
            passes = p[toks[j]] > typical_threshold(p, epsilon=eps, delta=dl)
            ok.append(bool(passes) and (par < 0 or ok[par]))
            if ok[-1] and depths[j] > best_depth:
                best, best_depth = j, int(depths[j])
        ctx = ctx_of(best, toks) if best >= 0 else ()
        p = _dist(target, prefix + ctx, "target")
        for y in np.flatnonzero(p):
            key = ctx + (int(y),)
            out[key] = out.get(key, 0.0) + weight * float(p[y])

    assign((), 1.0)
    return out


def typical_deviation(
    parents: Sequence[int],
    target: Distribution,
    draft: Distribution,
    *,
    epsilon: float,
    delta: float,
    prefix: tuple[int, ...] = (),
) -> float:
    """Total variation between typical acceptance's output and the target's law.

    Both over the first ``depth + 1`` tokens (the output completed by target samples):
    0 for an exact verifier, and here the exact price of typical acceptance's speed.
    """
    depth = int(tree_depths(parents).max(initial=0))
    vocab = _dist(target, prefix, "target").size
    law = enumerate_typical(parents, target, draft, epsilon=epsilon, delta=delta, prefix=prefix)
    return total_variation(
        extend_law(law, target, depth + 1, prefix=prefix),
        autoregressive_law(target, depth + 1, vocab, prefix=prefix),
    )


def enumerate_multidraft(
    target: Distribution,
    draft: Distribution,
    k: int,
    length: int,
    *,
    method: str = "kseq",
    prefix: tuple[int, ...] = (),
) -> Law:
    """The exact law of :func:`specsim.sampling.multidraft.verify_multidraft_batch`'s output.

    ``k`` independent drafts of ``length`` tokens from ``draft``; at each position the
    alive drafts' next tokens are i.i.d., every ordered tuple of them is enumerated and
    the selection (``"kseq"`` or ``"mss"``) summed into (selected token, drafts left).
    """
    for name, value, low in (("k", k, 1), ("length", length, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    out: Law = {}

    def emit(ctx: tuple[int, ...], weight: float, probs: FloatArray) -> None:
        total = float(probs.sum())
        for y in np.flatnonzero(probs):
            key = ctx + (int(y),)
            out[key] = out.get(key, 0.0) + weight * float(probs[y]) / total

    def step(ctx: tuple[int, ...], m: int, weight: float) -> None:
        p = _dist(target, prefix + ctx, "target")
        if len(ctx) == length:
            emit(ctx, weight, p)
            return
        q = _dist(draft, prefix + ctx, "draft")
        if method == "kseq":
            rho = float(kseq_rho(p, q, m))
            chances = [np.minimum(1.0, p / (rho * np.where(q > 0, q, 1.0)))] * m
            final = kseq_residual(p, q, np.array(float(m)), np.array(rho))
        else:
            rs = [p]
            for _ in range(m):
                rs.append(correction_rows(rs[-1], q))
            chances = [np.minimum(1.0, r / np.where(q > 0, q, 1.0)) for r in rs[:m]]
            final = rs[m]
        moves: dict[tuple[int, int], float] = {}
        rejected = 0.0
        for cand in itertools.product(np.flatnonzero(q), repeat=m):
            w = math.prod(float(q[x]) for x in cand)
            for i, x in enumerate(cand):
                a = float(chances[i][x])
                if a > 0.0:
                    key = (int(x), sum(1 for z in cand if z == x))
                    moves[key] = moves.get(key, 0.0) + w * a
                w *= 1.0 - a
            rejected += w
        if rejected > 0.0:
            emit(ctx, weight * rejected, final)
        for (y, left), w in moves.items():
            step(ctx + (y,), left, weight * w)

    step((), k, 1.0)
    return out
