"""A lookahead the user fixed for a plan's option: a chain of ``k`` drafted tokens, or a
named tree shape, evaluated as given instead of searched by the tree optimizer.

``k = K`` is :func:`specsim.policies.tree_optimizer.chain_tree` of ``K`` nodes. A tree is
one of the shapes the project already builds, written as one string (:func:`parse_tree`):

- ``"K-ary:D"``: the full ``K``-ary tree of ``D`` levels (``K + K**2 + ... + K**D``
  nodes, breadth first, :func:`~specsim.policies.tree_optimizer.kary_tree`), as a
  simulate config's ``[tree] shape = "k-ary"``; ``"binary:D"`` is ``"2-ary:D"``;
- ``"sequoia:N"``: Sequoia's tree of at most ``N`` nodes for the option's own acceptance
  (the dynamic program of :func:`~specsim.policies.tree_optimizer.best_trees`: the most
  expected tokens per pass of that size, whatever the machine);
- a parents list, ``"-1,0,0,1"`` (``-1`` the root), as a ``[tree] parents``.

:func:`fixed_tree` gives an option's tree, and refuses, naming the option and why, one that
the option cannot draft (deeper than its proposer reaches) or the stack cannot verify (a
branching tree on a stack without tree masks).
"""

from __future__ import annotations

from typing import Any

from specsim.checks import check_size
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import (
    best_trees,
    chain_tree,
    evaluate_tree,
    kary_tree,
    tree_refusal,
    tree_tokens,
)
from specsim.proposers import Proposer, check_tree, tree_depths

__all__ = ["SHAPES", "check_lookahead", "describe", "fixed_tree", "parse_tree"]

SHAPES = "'K-ary:D' (e.g. '2-ary:3'), 'binary:D', 'sequoia:N' or a parents list '-1,0,0,1'"
"""The tree shapes a plan takes, in words (errors and ``--help`` quote it)."""


def check_lookahead(k: Any, tree: Any) -> None:
    """``k`` (an integer >= 1, at most a tree's node limit) and ``tree`` (a shape of
    :data:`SHAPES`), at most one of them given; a ValueError naming ``k`` or ``tree``."""
    if k is not None and tree is not None:
        raise ValueError(f"k, tree: give one lookahead (k = {k!r} or tree = {tree!r}), not both")
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int):
            raise ValueError(f"k: expected an integer >= 1 (drafted tokens), got {k!r}")
        check_size(k, name="k", limit="tree_nodes")
    if tree is not None:
        if not isinstance(tree, str):
            raise ValueError(f"tree: expected a shape, one of {SHAPES}; got {tree!r}")
        if not tree.startswith("sequoia:"):
            parse_tree(tree)  # a fixed shape fails here; Sequoia's needs the acceptance
        else:
            _count(tree.partition(":")[2], tree, what="nodes")


def _count(text: str, tree: str, *, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"tree: {tree!r}: expected a whole number of {what} after ':'") from None
    return check_size(n, name=f"tree: {tree!r}: {what}", limit="tree_nodes")


def parse_tree(tree: str, proposer: Proposer | None = None) -> tuple[int, ...]:
    """The parents of the shape ``tree`` (module docstring); a Sequoia tree needs the
    ``proposer`` whose acceptance it is built for. A ValueError naming ``tree``."""
    name, sep, rest = tree.strip().partition(":")
    if sep and name == "sequoia":
        if proposer is None:
            raise ValueError(f"tree: {tree!r}: a Sequoia tree is built for an acceptance")
        n = _count(rest, tree, what="nodes")
        acc = proposer.acceptance
        trees = best_trees(acc, budget=n, max_depth=min(n, acc.max_depth or n))
        return max(trees, key=lambda t: (tree_tokens(t, acc), -len(t)))
    if sep and (name == "binary" or name.endswith("-ary")):
        k = 2 if name == "binary" else _count(name.removesuffix("-ary"), tree, what="children")
        depth = _count(rest, tree, what="levels")
        nodes = sum(k**d for d in range(1, depth + 1))
        check_size(nodes, name=f"tree: {tree!r}: nodes", limit="tree_nodes")
        return kary_tree(k, nodes)
    try:
        parents = tuple(int(p) for p in tree.replace(" ", "").strip("[]").split(","))
        out = check_tree(parents)
    except (TypeError, ValueError):
        raise ValueError(f"tree: expected one of {SHAPES}; got {tree!r}") from None
    if not out:
        raise ValueError(f"tree: {tree!r} drafts nothing; drop the option to plan without it")
    return out


def describe(k: int | None, tree: str | None) -> str:
    """``"k = 3"`` or ``"tree = '2-ary:3'"``: how the lookahead was given."""
    return f"k = {k}" if k is not None else f"tree = {tree!r}"


def fixed_tree(
    k: int | None, tree: str | None, proposer: Proposer, deployment: Deployment, *, label: str
) -> tuple[int, ...] | None:
    """The option's fixed tree (None: none fixed, the optimizer searches), checked: a
    ValueError beginning ``k:`` or ``tree:`` naming the option ``label`` and why it cannot
    use it (its proposer drafts less deep; the stack verifies chains only; any other
    refusal of pricing it on ``deployment``)."""
    if k is None and tree is None:
        return None
    given = describe(k, tree)
    key = "k" if k is not None else "tree"
    parents = chain_tree(k) if k is not None else parse_tree(str(tree), proposer)
    depth = max(tree_depths(parents))
    deepest = proposer.acceptance.max_depth
    if deepest is not None and depth > deepest:
        raise ValueError(
            f"{key}: {label} cannot use {given}: that drafts {depth} deep, past the {deepest} "
            f"its card reaches; give a lookahead at most {deepest} deep or drop the option"
        )
    refusal = tree_refusal(deployment)
    if refusal and parents != chain_tree(len(parents)):
        raise ValueError(f"{key}: {label} cannot use {given}, a branching tree: {refusal}")
    try:
        evaluate_tree(parents, proposer=proposer, deployment=deployment, batch=1, context=1)
    except ValueError as exc:
        raise ValueError(f"{key}: {label} cannot use {given}: {exc}") from None
    return parents
