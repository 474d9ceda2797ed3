"""The shape of a verification pass: which positions a pass computes and what each attends to.

A pass runs a model over the *new* positions of ``batch`` sequences whose
key/value caches already hold ``context`` tokens each. A speculative
verification pass over ``gamma`` drafted tokens computes
:func:`verification_positions` ``(gamma) = gamma + 1`` positions: the last
accepted token and the drafts, in a chain. Tree verification (SpecInfer,
Miao et al., ASPLOS 2024; Medusa, Cai et al., ICML 2024) computes the nodes of
a token tree in one pass; the tree changes only which earlier positions each
new position attends to: its cached context, its ancestors and itself. A node
at depth ``d`` (the root at depth 1) therefore has ``context + d`` (query, key)
pairs, and a chain of ``n`` positions is the tree whose depths are ``1..n``.

The roofline (:mod:`specsim.cost.roofline`) needs three sums over a pass's
sequences, :class:`PassSums`: ``T`` new positions, ``S`` attention (query, key)
pairs and ``R`` cached tokens read. This module is the one place they are
formed, for one pass of any shape (:class:`PassShape`) and, on plain floats or
broadcasting arrays, for the homogeneous chains that grids of passes and the
simulator's fast paths evaluate (:func:`chain_sums`).

>>> PassShape.chain(context=[100, 7], gamma=3).sums()
PassSums(tokens=8.0, pairs=448.0, cached=107.0)
>>> tree = PassShape.tree(context=100, parents=[-1, 0, 0, 1, 1, 2, 3, 3, 4, 5])
>>> tree.tokens, tree.depths
(10, (1, 2, 2, 3, 3, 3, 4, 4, 4, 4))
>>> tree.sums()
PassSums(tokens=10.0, pairs=1030.0, cached=100.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.checks import check_int

__all__ = [
    "check_tree",
    "tree_depths",
    "PassShape",
    "PassSums",
    "verification_positions",
    "chain_pairs",
    "chain_pairs_exact",
    "chain_sums",
    "tree_pairs",
]


class PassSums(NamedTuple):
    """The three aggregates of a pass the roofline is linear in (numbers or arrays).

    ``tokens`` (T): new positions computed; ``pairs`` (S): attention
    (query, key) pairs, causal self-attention plus cross-attention;
    ``cached`` (R): tokens cached before the pass whose keys and values are
    read (self-attention context plus encoder tokens).
    """

    tokens: Any
    pairs: Any
    cached: Any


def verification_positions(gamma: Any) -> Any:
    """Positions a chain verification pass computes after drafting ``gamma`` tokens: gamma + 1.

    The last accepted token (whose successor the target samples when every
    draft is rejected) and the ``gamma`` drafts (Leviathan et al., ICML 2023,
    Algorithm 1). Numbers or arrays.
    """
    return gamma + 1


def chain_sums(batch: Any, context_sum: Any, new: Any, encoder: Any = 0.0) -> tuple[Any, Any, Any]:
    """``(T, S, R)`` of a pass in which each of ``batch`` sequences verifies ``new`` positions.

    ``context_sum`` is the sum of their contexts; ``encoder`` the encoder
    tokens each sequence cross-attends to (0 for decoder-only models). The
    causal self-attention pairs are ``new * context_sum + batch * new * (new +
    1) / 2``: position ``j`` (from 1) of a chain attends to its sequence's
    cached context and to ``j`` new positions, itself included; each new
    position also attends to the ``encoder`` tokens. This is the only place the
    chain formula is written (:func:`tree_pairs`, with :func:`chain_pairs_exact`, its
    integer twin, beside it). Plain floats stay floats (the simulator's fast paths
    evaluate a pass this way); arrays broadcast (grids of homogeneous passes,
    ``context_sum`` then being ``batch * context``). The fields of
    :class:`PassSums`, as a bare tuple: a speed trick, the serving simulator
    forms several per iteration.
    """
    tokens = batch * new
    pairs = tree_pairs(context_sum, new, batch * (new * (new + 1) / 2)) + tokens * encoder
    return tokens, pairs, context_sum + batch * encoder


def tree_pairs(context: Any, new: Any, own: Any) -> Any:
    """Attention (query, key) pairs of ``new`` positions after ``context`` cached tokens, each
    attending to all of them, plus ``own``, the pairs among the new positions: ``new *
    context + own``. ``own`` is ``n (n + 1) / 2`` for a chain of ``n`` (:func:`chain_pairs`),
    the sum of the depths for a token tree (:meth:`PassShape.pairs`), and ``w`` for ``w``
    siblings of one tree level, which attend to themselves only. Every pair count in the
    package goes through this function or its siblings here. Numbers or arrays."""
    return new * context + own


def chain_pairs(context: Any, new: Any, batch: Any = 1) -> Any:
    """Causal (query, key) pairs of ``batch`` chains of ``new`` positions after ``context``
    (the sum of their contexts), from :func:`chain_sums`. Numbers or broadcasting arrays."""
    return chain_sums(batch, context, new)[1]


def chain_pairs_exact(context: Any, new: Any, batch: Any = 1) -> Any:
    """:func:`chain_pairs` on integers (Python ints or integer arrays), in integer arithmetic
    (``n (n + 1)`` is even): exact at any size, for sums the simulator keeps as integers.

    >>> chain_pairs_exact(100, 3, batch=2), chain_pairs(100, 3, batch=2)
    (312, 312.0)
    """
    return tree_pairs(context, new, batch * (new * (new + 1) // 2))


def _totals(context: Any, new: NDArray[np.int64], pairs: Any, encoder: float) -> PassSums:
    """Sums over sequences of per-sequence contexts, new positions and self-attention pairs."""
    T = float(new.sum())
    S = float(pairs.sum()) + T * encoder
    return PassSums(T, S, float(np.sum(context)) + new.shape[0] * encoder)


def check_tree(parents: Sequence[int], *, name: str = "parents") -> tuple[int, ...]:
    """``parents`` as a tuple of ints when it is a token tree; else a ValueError naming the fault.

    The one validator of token trees (the proposers, the optimizer and the simulators
    call it; :mod:`specsim.sampling` and :mod:`specsim.theory` import nothing from the
    package, so they keep their own minimal check). A token tree lists each node's parent
    index (``-1``: a child of the root, the last emitted token). The faults named: an
    entry that is not an integer, a **missing parent** (an index outside the tree), a
    **cycle** (following parents from a node comes back to it), and a parent listed
    after its child (the tree must be in topological order, as :class:`PassShape` takes
    it). The empty tree is a tree (no speculation).

    >>> check_tree([-1, 0, 0])
    (-1, 0, 0)
    """
    if isinstance(parents, str | bytes):
        raise ValueError(f"{name}: expected a sequence of parent indices, got {parents!r}")
    # A speed trick (the serving engine checks a tree per sequence and pass): plain ints
    # each naming an earlier node or the root make a tree; anything else takes the checks
    # below, which name the fault.
    if all(type(p) is int and -1 <= p < i for i, p in enumerate(parents)):
        return tuple(parents)
    out: list[int] = []
    for i, p in enumerate(parents):
        out.append(check_int(p, name=f"{name}: entry {i}", why="a parent index"))
    n = len(out)
    for i, p in enumerate(out):
        if p < -1 or p >= n:
            raise ValueError(
                f"{name}: node {i} names a missing parent {p} (the tree has nodes 0..{n - 1}; "
                "-1 is the root)"
            )
    for i in range(n):
        seen, j = {i}, out[i]
        while j != -1:
            if j in seen:
                raise ValueError(f"{name}: node {i} is on a cycle (its parents come back to {j})")
            seen.add(j)
            j = out[j]
    for i, p in enumerate(out):
        if p >= i:
            raise ValueError(
                f"{name}: node {i}'s parent {p} comes after it; list parents before children"
            )
    return tuple(out)


def tree_depths(parents: Sequence[int]) -> tuple[int, ...]:
    """Depth of each node (the root's children at depth 1) of a token tree (:func:`check_tree`)."""
    depths: list[int] = []
    for p in check_tree(parents):
        depths.append(1 if p < 0 else depths[p] + 1)
    return tuple(depths)


def _depths(parents: Sequence[int]) -> tuple[int, ...]:
    depths = tree_depths(parents)
    if not depths:
        raise ValueError("parents: expected at least one position, got none")
    return depths


def _integers(name: str, value: ArrayLike, minimum: int) -> NDArray[np.int64]:
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer) or arr.ndim > 1:
        raise TypeError(f"{name}: expected an integer or a 1-d array of integers, got {value!r}")
    if arr.size and int(arr.min()) < minimum:
        raise ValueError(f"{name}: expected integers >= {minimum}, got {value!r}")
    return arr.astype(np.int64)


def _fit(name: str, arr: NDArray[np.int64], batch: int) -> NDArray[np.int64]:
    """One value per sequence, read-only (a broadcast view)."""
    if arr.ndim and arr.shape[0] != batch:
        raise ValueError(f"{name}: expected {batch} values (one per sequence), got {arr.shape[0]}")
    return np.broadcast_to(arr, (batch,))


@dataclass(frozen=True, slots=True, eq=False)
class PassShape:
    """One verification pass: each sequence's context and new positions, chain or tree.

    ``context[i]``: tokens sequence ``i`` has cached; ``new[i]``: positions it
    computes in this pass; ``parents``: None for chains, or the token tree
    every sequence verifies (``parents[j]`` is the index of node ``j``'s parent,
    -1 for a root; then ``new[i] == len(parents)``). Build it with
    :meth:`chain`, :meth:`tree` or :meth:`prefill`; the arrays are read-only
    (and shapes compare by identity, as they hold arrays).
    """

    context: NDArray[np.int64]
    new: NDArray[np.int64]
    parents: tuple[int, ...] | None = None

    @classmethod
    def chain(
        cls,
        *,
        context: ArrayLike,
        gamma: ArrayLike | None = None,
        new: ArrayLike | None = None,
        batch: int | None = None,
    ) -> PassShape:
        """Chains: ``new`` positions per sequence, or :func:`verification_positions` of ``gamma``.

        ``context``, ``gamma`` and ``new`` are integers (every sequence alike,
        ``batch`` of them, default 1) or arrays of one value per sequence.
        """
        if (gamma is None) == (new is None):
            raise ValueError(f"give exactly one of gamma and new, got gamma={gamma!r}, new={new!r}")
        if gamma is not None:
            name, n = "gamma", verification_positions(_integers("gamma", gamma, 0))
        else:
            name, n = "new", _integers("new", new, 1)  # type: ignore[arg-type]
        ctx = _integers("context", context, 0)
        size = batch
        if size is None:
            size = max(ctx.size if ctx.ndim else 1, n.size if n.ndim else 1)
        return cls(context=_fit("context", ctx, size), new=_fit(name, n, size))

    @classmethod
    def tree(
        cls, *, context: ArrayLike, parents: Sequence[int], batch: int | None = None
    ) -> PassShape:
        """Every sequence verifies the token tree ``parents`` (see the class docstring).

        ``parents=[-1, 0, 1, ..., n - 2]`` is the chain of ``n`` positions.
        """
        depths = _depths(parents)
        ctx = _integers("context", context, 0)
        size = batch if batch is not None else (ctx.size if ctx.ndim else 1)
        n = np.int64(len(depths))
        return cls(
            context=_fit("context", ctx, size),
            new=np.broadcast_to(n, (size,)),
            parents=tuple(int(p) for p in parents),
        )

    @classmethod
    def prefill(cls, prompts: ArrayLike) -> PassShape:
        """A prefill: each prompt's tokens as a chain on an empty cache."""
        p = _integers("prompts", prompts, 1)
        return cls.chain(context=0, new=p, batch=p.size if p.ndim else 1)

    @property
    def batch(self) -> int:
        """Sequences in the pass."""
        return int(self.context.shape[0])

    @property
    def tokens(self) -> int:
        """New positions over all sequences (T)."""
        return int(self.new.sum())

    @property
    def depths(self) -> tuple[int, ...] | None:
        """Depth of each tree node (the root 1), or None for chains."""
        return None if self.parents is None else _depths(self.parents)

    def pairs(self) -> NDArray[np.float64]:
        """Per sequence, causal self-attention (query, key) pairs.

        A chain: :func:`chain_pairs`. A tree: ``new * context`` plus the sum of
        the nodes' depths (each node attends to its ancestors and itself).
        """
        if self.parents is None:
            return np.asarray(chain_pairs(self.context, self.new), dtype=np.float64)
        own = float(sum(_depths(self.parents)))
        return np.asarray(tree_pairs(self.context, self.new, own), dtype=np.float64)

    def sums(self, encoder: float = 0.0) -> PassSums:
        """:class:`PassSums` of the pass; ``encoder``: tokens each sequence cross-attends to."""
        return _totals(self.context, self.new, self.pairs(), encoder)
