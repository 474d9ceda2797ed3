r"""Token trees and several drafts: expected tokens per pass, the operations bill, best-of-k.

**Trees.** A pass drafts a tree of ``n`` candidate tokens below the last emitted
token (the root, not a node here) and verifies them in one target pass. The tree is
``parents``: entry ``i`` is the index of node ``i``'s parent, ``-1`` for a child of
the root, in topological order (a parent before its children). A node's *depth*
counts from 1 (children of the root); its *rank* is its order among its siblings,
from 0. Verification walks down from the root; at each reached node the children are
tried in rank order (SpecInfer's multi-step speculative sampling, Miao et al.,
ASPLOS 2024, Algorithm 2). Sequoia (Chen et al. 2024, arXiv:2402.12374, Section 3,
the positional acceptance assumption) models the walk by one number per position:
``accept[d-1][r]`` is the probability that the rank-``r`` child of a reached node at
depth ``d-1`` is accepted *given that ranks 0..r-1 were rejected*. The child is then
reached with probability ``a_v = accept[d-1][r] * prod_{s<r} (1 - accept[d-1][s])``,
a node with probability ``prod_{u on its path} a_u``, and a pass emits

.. math:: E = 1 + \sum_{v} \prod_{u \preceq v} a_u

tokens on average (the accepted path plus one token from the target; Sequoia,
Section 3, the expected accepted length of a tree). :func:`expected_tokens_tree` is the numeric
form, :func:`tree_polynomial` the sympy polynomial, and :func:`derive` proves the
chain ``parents = [-1, 0, ..., gamma-2]`` with ``accept[d][0] = alpha`` gives the
geometric series ``(1 - alpha^(gamma+1)) / (1 - alpha)`` of Leviathan et al. 2023,
Equation (1).

>>> expected_tokens_tree([-1, 0, 1], [[0.5], [0.5], [0.5]])  # a chain: 1 + .5 + .25 + .125
1.875
>>> expected_tokens_tree([-1, -1], [[0.5, 0.5]])  # a star: 1 + (1 - (1 - .5)(1 - .5))
1.75

**Several drafts** (one position, ``k`` candidates): :func:`kseq_acceptance` (SpecTr's
k-sequential selection, closed form), :func:`mss_acceptance` (k i.i.d. candidates
under SpecInfer's residual updates, a recursion), :func:`rrs_acceptance` (candidates
drawn without replacement, recursive rejection sampling, exact enumeration) and
:func:`optimal_multidraft_acceptance` (the best any exact verifier can do, by a
min-cut over token subsets). They live in :mod:`specsim.theory.multidraft`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from specsim.theory._checks import FloatArray, as_real, check_nonnegative
from specsim.theory.tree_shape import tree_depths_ranks, tree_draft_positions
from specsim.theory.tree_symbolic import SEQUOIA, accept_symbol, derive, tree_polynomial

__all__ = [
    "tree_depths_ranks",
    "expected_tokens_tree",
    "expected_tokens_tree_array",
    "tree_reach",
    "accept_from_marginal",
    "tree_positions_per_token",
    "tree_ops_factor",
    "tree_draft_positions",
    "tree_polynomial",
    "accept_symbol",
    "derive",
    "SEQUOIA",
]


def _accept_table(accept: ArrayLike, where: str) -> FloatArray:
    try:
        a = as_real(accept, "accept", where)
    except ValueError:  # a ragged list of rows
        raise ValueError(f"{where}: accept must be a rectangular table [depth-1][rank]") from None
    if a.ndim < 2:
        raise ValueError(f"{where}: accept must be 2-D, accept[depth-1][rank], got shape {a.shape}")
    bad = ~((a >= 0.0) & (a <= 1.0))
    if np.any(bad):
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{where}: accept{list(at)} = {float(a[at])!r} is not a probability in [0, 1]"
        )
    return a


def accept_from_marginal(marginal: ArrayLike) -> FloatArray:
    """Conditional acceptance ``accept[d][r]`` from Sequoia's marginal per-rank acceptance.

    ``marginal[d][r]`` is the probability that the rank-``r`` child of a reached node at
    depth ``d + 1`` is the accepted one (Sequoia's ``p_r`` per depth; Chen et al. 2024,
    Section 3); the ranks of a depth are exclusive, so each row must sum to at most 1
    (ValueError naming the depth otherwise). Returns ``m_r / (1 - sum_{s<r} m_s)``
    (0 where nothing is left), the form :func:`expected_tokens_tree` takes.

    >>> accept_from_marginal([[0.5, 0.25, 0.125]]).tolist()
    [[0.5, 0.5, 0.5]]
    """
    m = _accept_table(marginal, "accept_from_marginal")
    sums = m.sum(axis=-1)
    if np.any(sums > 1.0 + 1e-12):
        at = tuple(int(i) for i in np.argwhere(sums > 1.0 + 1e-12)[0])
        raise ValueError(
            f"accept_from_marginal: the ranks of depth {at[-1] + 1} sum to {float(sums[at])!r} "
            "> 1; at most one candidate per node is accepted, so they must sum below one"
        )
    left = 1.0 - (np.cumsum(m, axis=-1) - m)
    return np.where(left > 1e-15, np.minimum(m / np.where(left > 1e-15, left, 1.0), 1.0), 0.0)


def tree_reach(parents: Sequence[int], accept: ArrayLike) -> FloatArray:
    """Probability that each node is on the accepted path, shape ``(..., n)``.

    ``accept`` has shape ``(..., D, R)``: leading axes broadcast (many acceptance
    tables at once), ``D`` at least the tree's depth, ``R`` at least its widest
    sibling group. Node ``v`` of depth ``d`` and rank ``r`` is reached with
    probability ``reach(parent) * accept[d-1][r] * prod_{s<r} (1 - accept[d-1][s])``
    (Sequoia, Chen et al. 2024, Section 3).
    """
    where = "tree_reach"
    depths, ranks = tree_depths_ranks(parents)
    a = _accept_table(accept, where)
    n = len(depths)
    out = np.empty((*a.shape[:-2], n))
    if n == 0:
        return out
    need_d, need_r = max(depths), max(ranks) + 1
    if a.shape[-2] < need_d or a.shape[-1] < need_r:
        i = next(i for i in range(n) if depths[i] > a.shape[-2] or ranks[i] >= a.shape[-1])
        raise ValueError(
            f"{where}: accept has shape {a.shape[-2:]} (depths x ranks) but node {i} sits at "
            f"depth {depths[i]}, rank {ranks[i]}; the tree needs at least ({need_d}, {need_r})"
        )
    # Unconditional probability that rank r is the accepted child of a reached node.
    rejected_before = np.cumprod(1.0 - a, axis=-1)
    first = np.ones((*a.shape[:-1], 1))
    before = np.concatenate([first, rejected_before[..., :-1]], axis=-1)
    edge = a * before
    for i, (p, d, r) in enumerate(zip(parents, depths, ranks, strict=True)):
        step = edge[..., d - 1, r]
        out[..., i] = step if p < 0 else out[..., p] * step
    return out


def expected_tokens_tree_array(parents: Sequence[int], accept: ArrayLike) -> FloatArray:
    """:func:`expected_tokens_tree` over leading axes of ``accept`` (shape ``(..., D, R)``)."""
    return 1.0 + tree_reach(parents, accept).sum(axis=-1)


def expected_tokens_tree(parents: Sequence[int], accept: ArrayLike) -> float:
    r"""Expected tokens one verification pass of the tree ``parents`` emits.

    :math:`E = 1 + \sum_v \prod_{u \preceq v} a_u` with
    :math:`a_u = p_{d,r} \prod_{s<r} (1 - p_{d,s})`, ``p_{d,r} = accept[d-1][r]`` the
    probability that the rank-``r`` candidate at depth ``d`` is accepted given that the
    candidates before it at that node were rejected. Assumes Sequoia's positional
    acceptance (Chen et al. 2024, arXiv:2402.12374, Section 3): the acceptance of a
    candidate depends only on its depth and rank, not on the tokens. ``1 <= E <= n + 1``
    for ``n`` nodes; an empty tree gives 1 (plain decoding). A chain with
    ``accept[d][0] = alpha`` gives Leviathan et al.'s Equation (1).

    >>> round(expected_tokens_tree([-1, 0, 0, 1], [[0.8, 0.0], [0.6, 0.5], [0.7, 0.0]]), 4)
    2.776
    """
    a = np.asarray(accept) if not isinstance(accept, np.ndarray) else accept
    if a.ndim != 2:
        raise ValueError(
            f"expected_tokens_tree: accept must be 2-D, accept[depth-1][rank], got shape "
            f"{a.shape}; use expected_tokens_tree_array for leading axes"
        )
    return float(expected_tokens_tree_array(parents, a))


def tree_positions_per_token(parents: Sequence[int], accept: ArrayLike) -> float:
    """Target positions verified per emitted token: ``(n + 1) / E``.

    A tree pass computes the root (the last emitted token) and its ``n`` nodes; ``E``
    tokens come out on average (renewal-reward over a long generation). For a chain it
    is ``(gamma + 1)/E``, the target part of Theorem 3.11 of Leviathan et al. 2023.
    """
    n = len(tree_depths_ranks(parents)[0])
    return (n + 1.0) / expected_tokens_tree(parents, accept)


def tree_ops_factor(parents: Sequence[int], accept: ArrayLike, c_hat: float) -> float:
    r"""Arithmetic per emitted token over plain decoding's, for a tree.

    :math:`(\hat c \, m + n + 1) / E`, with ``n`` nodes verified (plus the root),
    ``m`` = :func:`tree_draft_positions` draft runs and ``E`` =
    :func:`expected_tokens_tree`. It generalizes Theorem 3.11 of Leviathan et al. 2023
    (Section 3.4), :math:`(\gamma\hat c + \gamma + 1)/E`, which is the chain's case
    (``m = n = gamma``). ``c_hat`` is the draft's arithmetic per token over the target's.

    >>> round(tree_ops_factor([-1, 0, 1, 2, 3], [[0.2]] * 5, 0.0), 4)  # Theorem 3.11's 4.8003
    4.8003
    """
    ch = float(check_nonnegative(c_hat, "c_hat", "tree_ops_factor"))
    n = len(tree_depths_ranks(parents)[0])
    m = tree_draft_positions(parents)
    return (ch * m + n + 1.0) / expected_tokens_tree(parents, accept)
