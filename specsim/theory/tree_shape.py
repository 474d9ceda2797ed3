"""The shape of a token tree given as ``parents``: each node's depth and rank, and the
positions the draft runs on (:mod:`specsim.theory.token_trees` has the conventions)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["tree_depths_ranks", "tree_draft_positions"]


def tree_depths_ranks(parents: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Depth (from 1) and rank among siblings (from 0) of every node of ``parents``.

    Raises ValueError naming the entry for a parent that is not ``-1`` or an earlier
    node (which covers cycles, self-loops and missing parents) and TypeError for a
    non-integer entry.

    >>> tree_depths_ranks([-1, -1, 0, 0, 1])
    ((1, 1, 2, 2, 2), (0, 1, 0, 1, 0))
    """
    if isinstance(parents, str | bytes) or not isinstance(parents, Sequence | np.ndarray):
        raise TypeError(f"parents: expected a sequence of parent indices, got {parents!r}")
    depths: list[int] = []
    ranks: list[int] = []
    children: dict[int, int] = {}
    for i, p in enumerate(parents):
        if isinstance(p, bool) or not isinstance(p, int | np.integer):
            raise TypeError(f"parents: entry {i} must be an integer, got {p!r}")
        if not -1 <= p < i:
            what = "a cycle or a forward edge" if p >= i else "a missing parent"
            raise ValueError(
                f"parents: entry {i} is {int(p)}: {what}; each parent must be -1 (the root) "
                f"or the index of an earlier node"
            )
        depths.append(1 if p < 0 else depths[p] + 1)
        ranks.append(children.get(int(p), 0))
        children[int(p)] = ranks[-1] + 1
    return tuple(depths), tuple(ranks)


def tree_draft_positions(parents: Sequence[int]) -> int:
    """Positions the draft runs on to propose the tree: the root and every inner node.

    A chain of ``gamma`` drafts runs the draft ``gamma`` times (Leviathan et al. 2023,
    Section 3.4); a tree runs it on each position that has children (batched by depth
    in practice, the same arithmetic).
    """
    tree_depths_ranks(parents)
    return len(set(int(p) for p in parents))
