"""Exact verification of a token tree: multi-step speculative sampling, and the greedy walk.

A tree of ``n`` drafted tokens hangs below the last emitted token (the root, not a
node). ``parents[i]`` is node ``i``'s parent, ``-1`` for a child of the root, in
topological order; siblings are tried in index order (their *rank*). The target's
distributions come one per position: row 0 after the root, row ``i + 1`` after node
``i`` (the tree attention mask of one pass gives them all).

**Multi-step speculative sampling** (SpecInfer, Miao et al., ASPLOS 2024,
Algorithm 2): at a reached node with target distribution ``p``, the
children are tried in rank order; child ``c``, whose token ``x`` was drawn from
``q_c``, is accepted with probability ``min(1, p(x) / q_c(x))``; on a rejection
``p <- normalize(max(0, p - q_c))``. The walk moves to an accepted child (its own
target row becomes ``p``); when every child is rejected, or at a leaf, one token is
sampled from ``p``. If each child's token was drawn from ``q_c`` given everything
tried before it, what the pass emits has exactly the target's law. Two drafting
schemes meet that condition: i.i.d. siblings (``q_c = q``, SpecInfer) and siblings
drawn *without replacement* (``q_c`` = ``q`` with the earlier siblings' tokens
removed, renormalized), which makes the same walk the recursive rejection sampling
of Jeon et al. 2024 (arXiv:2402.14160). :func:`sample_tree_tokens` draws
either and returns each node's ``q_c``.

**Greedy** (temperature 0): the walk moves to the first child whose token is the
target's argmax, and emits the argmax where none is: the longest path matching the
target's greedy continuation.

The batched form runs ``B`` independent trees of the same shape with no loop over
trees; :func:`verify_tree` is its one-tree wrapper and draws the same uniforms.

>>> import numpy as np
>>> from specsim.sampling.tree import verify_tree
>>> p = np.array([[0.1, 0.9], [0.5, 0.5], [0.5, 0.5]])  # root, after node 0, after node 1
>>> q = np.array([[1.0, 0.0], [0.0, 1.0]])  # node 0 proposes token 0, node 1 token 1
>>> out = verify_tree([-1, -1], [0, 1], q, p, np.random.default_rng(0), greedy=True)
>>> out.path, out.tokens.tolist()  # token 0 is not the argmax; token 1 is, then argmax 0
((1,), [1, 0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.sampling.cdf import inverse_cdf
from specsim.sampling.chain import (
    RESIDUAL_FLOOR,
    FloatArray,
    check_distribution,
    check_token_range,
    first_index,
)

__all__ = [
    "TreeResult",
    "BatchTreeResult",
    "tree_depths",
    "check_tree_inputs",
    "sample_tree_tokens",
    "verify_tree",
    "verify_tree_batch",
    "assemble_tree_result",
]


def tree_depths(parents: Sequence[int] | NDArray[np.int64]) -> NDArray[np.int64]:
    """Depth (from 1) of every node, or ValueError naming an entry that is not ``-1`` or an
    earlier node (a cycle, a forward edge or a missing parent)."""
    depths = np.zeros(len(parents), dtype=np.int64)
    for i, p in enumerate(parents):
        if isinstance(p, bool) or not isinstance(p, int | np.integer) or not -1 <= p < i:
            raise ValueError(
                f"parents: entry {i} must be -1 (the root) or the index of an earlier node, "
                f"got {p!r}"
            )
        depths[i] = 1 if p < 0 else depths[p] + 1
    return depths


@dataclass(frozen=True, slots=True)
class TreeResult:
    """What one tree verification emitted: the accepted path's tokens and one more.

    ``path`` holds the accepted node indices, root first; ``len(tokens) == accepted + 1``.
    """

    tokens: NDArray[np.int64]
    accepted: int
    path: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BatchTreeResult:
    """What ``B`` tree verifications emitted.

    ``tokens`` has shape ``(B, depth + 1)``; row ``b`` holds ``accepted[b] + 1`` tokens
    then ``-1`` padding. ``node[b]`` is the deepest accepted node (-1: none).
    """

    tokens: NDArray[np.int64]
    accepted: NDArray[np.int64]
    node: NDArray[np.int64]
    parents: tuple[int, ...]

    @property
    def emitted(self) -> NDArray[np.int64]:
        return self.accepted + 1

    def row(self, b: int) -> TreeResult:
        n = int(self.accepted[b])
        path: list[int] = []
        node = int(self.node[b])
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return TreeResult(self.tokens[b, : n + 1].copy(), n, tuple(reversed(path)))


def check_tree_inputs(
    parents: Sequence[int],
    draft_tokens: ArrayLike,
    draft_probs: ArrayLike | None,
    target_probs: ArrayLike,
) -> tuple[NDArray[np.int64], NDArray[np.int64], FloatArray | None, FloatArray]:
    """Validate a batch of trees; return ``(depths, tokens, q, p)`` or raise naming the input.

    Shapes: ``draft_tokens (B, n)``, ``draft_probs (B, n, V)`` (or None where no draft
    law is needed: greedy and typical acceptance), ``target_probs (B, n + 1, V)``.
    """
    depths = tree_depths(parents)
    toks = np.asarray(draft_tokens)
    n = len(depths)
    if not np.issubdtype(toks.dtype, np.integer):
        raise TypeError(f"draft_tokens: expected integer token ids, got dtype {toks.dtype}")
    if toks.ndim != 2 or toks.shape[1] != n:
        raise ValueError(
            f"draft_tokens: expected shape (batch, {n}) for {n} nodes, got {toks.shape}"
        )
    batch = toks.shape[0]
    p = check_distribution(target_probs, "target_probs")
    vocab = p.shape[-1]
    if p.shape != (batch, n + 1, vocab):
        raise ValueError(
            f"target_probs: expected shape ({batch}, {n + 1}, V) (the root and {n} nodes), "
            f"got {p.shape}"
        )
    check_token_range(toks, vocab, "draft_tokens")
    q = None
    if draft_probs is not None:
        q = check_distribution(draft_probs, "draft_probs")
        if q.shape != (batch, n, vocab):
            raise ValueError(f"draft_probs: expected shape ({batch}, {n}, {vocab}), got {q.shape}")
        q_x = np.take_along_axis(q, toks[..., None], axis=-1)[..., 0]
        if np.any(q_x <= 0.0):
            b, i = first_index(q_x <= 0.0)
            raise ValueError(
                f"draft_tokens[{b}, {i}] = {int(toks[b, i])} has draft probability 0: it "
                "cannot have been sampled from draft_probs"
            )
    return depths, toks.astype(np.int64, copy=False), q, p


def sample_tree_tokens(
    parents: Sequence[int],
    draft_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    replacement: bool = True,
) -> tuple[NDArray[np.int64], FloatArray]:
    """Draft a batch of trees: ``(tokens (B, n), law (B, n, V))``.

    ``draft_probs[b, i]`` is the draft's distribution at node ``i``'s parent context
    (siblings share it). With ``replacement`` (SpecInfer) each node draws from it; without
    (Jeon et al. 2024), from it with the earlier siblings' tokens removed, renormalized;
    ``law[b, i]`` is the distribution node ``i`` was drawn from, as :func:`verify_tree_batch`
    needs. Raises ValueError when a node has no token left to draw.
    """
    depths = tree_depths(parents)
    q = check_distribution(draft_probs, "draft_probs")
    if q.ndim != 3 or q.shape[1] != len(depths):
        raise ValueError(f"draft_probs: expected shape (batch, {len(depths)}, V), got {q.shape}")
    batch = q.shape[0]
    law = q.copy()
    tokens = np.zeros((batch, len(depths)), dtype=np.int64)
    rows = np.arange(batch)
    for i, par in enumerate(parents):
        if not replacement:
            for j in range(i):
                if parents[j] == par:  # an earlier sibling: its token is no longer drawn
                    law[rows, i, tokens[:, j]] = 0.0
            mass = law[:, i].sum(axis=-1)
            if np.any(mass <= 0.0):
                raise ValueError(
                    f"sample_tree_tokens: node {i} of row {int(np.argmax(mass <= 0.0))} has no "
                    "token left to draw without replacement (more siblings than tokens)"
                )
            law[:, i] /= mass[:, None]
        tokens[:, i] = inverse_cdf(law[:, i], np.asarray(rng.random(batch), dtype=np.float64))
    return tokens, law


def verify_tree_batch(
    parents: Sequence[int],
    draft_tokens: ArrayLike,
    draft_probs: ArrayLike | None,
    target_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    greedy: bool = False,
) -> BatchTreeResult:
    """Verify ``B`` trees of the shape ``parents`` at once (SpecInfer, Algorithm 2).

    ``draft_tokens (B, n)``; ``draft_probs (B, n, V)``, the law each node's token was
    drawn from given the siblings before it (see :func:`sample_tree_tokens`; unused and
    may be None when ``greedy``); ``target_probs (B, n + 1, V)``, row 0 at the root and
    row ``i + 1`` after node ``i``. Draws ``rng.random((B, n + 1))`` (nothing when
    ``greedy``): node ``i`` uses column ``i``, the last token column ``n``. The loop runs
    over the ``n`` nodes, each step vectorized over the trees that reached its parent.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    if draft_probs is None and not greedy:
        raise ValueError("draft_probs: needed for sampled verification (None only if greedy)")
    depths, toks, q, p = check_tree_inputs(parents, draft_tokens, draft_probs, target_probs)
    batch, n = toks.shape
    cur = np.full(batch, -1, dtype=np.int64)
    u = None if greedy else rng.random((batch, n + 1))
    resid = p[:, 0].copy()  # the (residual) target distribution at each tree's current node
    for i, par in enumerate(parents):
        rows = np.flatnonzero(cur == par)
        if rows.size == 0:
            continue
        x = toks[rows, i]
        if greedy or u is None or q is None:
            accept = x == np.argmax(p[rows, par + 1], axis=-1)
        else:
            # Accept iff u < p(x)/q(x), written without a division.
            accept = u[rows, i] * q[rows, i, x] < resid[rows, x]
            miss = rows[~accept]
            if miss.size:
                left = np.maximum(resid[miss] - q[miss, i], 0.0)
                mass = left.sum(axis=-1)
                # No leftover mass means p == q here: a rejection was impossible, keep p.
                ok = mass > RESIDUAL_FLOOR
                resid[miss[ok]] = left[ok] / mass[ok, None]
        hit = rows[accept]
        cur[hit] = i
        resid[hit] = p[hit, i + 1]
    if greedy or u is None:
        last = np.argmax(p[np.arange(batch), cur + 1], axis=-1).astype(np.int64)
    else:
        last = inverse_cdf(resid, np.asarray(u[:, n], dtype=np.float64))
    return assemble_tree_result(tuple(int(x) for x in parents), depths, toks, cur, last)


def assemble_tree_result(
    parents: tuple[int, ...],
    depths: NDArray[np.int64],
    toks: NDArray[np.int64],
    cur: NDArray[np.int64],
    last: NDArray[np.int64],
) -> BatchTreeResult:
    """The padded token rows of ``B`` trees whose deepest accepted nodes are ``cur``
    (-1: none) and whose last emitted tokens are ``last``."""
    batch = toks.shape[0]
    depth = int(depths.max()) if depths.size else 0
    accepted = np.where(cur >= 0, depths[np.maximum(cur, 0)] if depths.size else 0, 0)
    out = np.full((batch, depth + 1), -1, dtype=np.int64)
    up = np.asarray(parents, dtype=np.int64)
    node = cur.copy()
    for _ in range(depth):
        m = np.flatnonzero(node >= 0)
        out[m, depths[node[m]] - 1] = toks[m, node[m]]
        node[m] = up[node[m]]
    out[np.arange(batch), accepted] = last
    return BatchTreeResult(out, accepted.astype(np.int64), cur, parents)


def verify_tree(
    parents: Sequence[int],
    draft_tokens: ArrayLike,
    draft_probs: ArrayLike | None,
    target_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    greedy: bool = False,
) -> TreeResult:
    """Verify one tree: :func:`verify_tree_batch` on a batch of one (same uniforms).

    ``draft_tokens (n,)``, ``draft_probs (n, V)`` (or None when ``greedy``),
    ``target_probs (n + 1, V)``.
    """
    toks = np.asarray(draft_tokens)
    if toks.ndim != 1:
        raise ValueError(f"draft_tokens: expected shape (n,), got {toks.shape}")
    q = None if draft_probs is None else np.asarray(draft_probs, dtype=np.float64)[None]
    out = verify_tree_batch(
        parents,
        toks[None].astype(np.int64) if toks.size == 0 else toks[None],
        q,
        np.asarray(target_probs)[None],
        rng,
        greedy=greedy,
    )
    return out.row(0)
