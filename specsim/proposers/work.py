"""What the shipped proposers run, stated as :class:`~specsim.cost.drafting.DraftWork`.

A proposer says only what it runs over how many positions; :func:`specsim.cost.drafting.
price_draft` prices it under the deployment's drafting profile (the one drafting rule).
The shapes of work the kinds share:

- :func:`frontier_work`: one step per depth over the depth's frontier, batched over every
  sequence drafting the same tree (a draft model, an EAGLE head or MTP module, a
  self-speculative layer subset), per element of an array of contexts;
- :func:`ragged_frontier_work`: the same when each sequence drafts a tree of its own (trees
  chosen per pass): step ``d`` runs every sequence that has a depth-``d`` frontier;
- :func:`one_pass_work`: one pass in which sequence ``i`` runs ``n_i`` new positions after
  ``c_i`` cached tokens (a parallel drafter's one pass, a proposer's own KV prefill).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cost.deployment import Deployment
from specsim.cost.drafting import DraftCost, DraftWork, price_draft
from specsim.cost.shape import chain_pairs, tree_pairs
from specsim.proposers.tables import frontier_widths

__all__ = [
    "frontier_work",
    "frontier_passes",
    "ragged_frontier_work",
    "ragged_frontiers",
    "one_pass_work",
    "priced",
    "zero_cost",
    "lengths",
]


def zero_cost(shape: tuple[int, ...] = ()) -> DraftCost:
    """Nothing drafted: zeros of ``shape`` (floats for ``()``)."""
    if not shape:
        return DraftCost(0.0, 0.0, 0.0)
    return DraftCost(np.zeros(shape), np.zeros(shape), np.zeros(shape))


def priced(work: DraftWork | None, shape: tuple[int, ...] = ()) -> DraftCost:
    """:func:`~specsim.cost.drafting.price_draft` of ``work``, or zeros of ``shape`` for none."""
    return zero_cost(shape) if work is None else price_draft(work)


def frontier_work(
    deployment: Deployment,
    widths: Sequence[int],
    *,
    batch: int,
    context: NDArray[np.float64] | NDArray[np.int64],
    scale: float = 1.0,
) -> DraftWork | None:
    """Step ``d`` runs ``deployment``'s model once over the depth-``d`` frontier of every
    sequence, batched: ``widths[d - 1]`` new positions per sequence after ``context + d - 1``
    tokens, each attending to that context and itself (the sums of
    ``PassShape.tree(context=context + d - 1, parents=[-1] * w, batch=batch)``), per element
    of ``context`` (axis 1); each step ``scale`` of that model's pass. None when nothing is
    drafted. A draft model, an MTP block and a self-speculative layer subset all draft this
    way; they differ only in the model ``deployment`` carries."""
    ctx = np.asarray(context, dtype=np.float64)
    steps = [(d, w) for d, w in enumerate(widths, start=1) if w]
    if not steps:
        return None
    c = np.stack([ctx + (d - 1) for d, _ in steps])  # each step after the d - 1 drafted
    w = np.array([[float(w)] for _, w in steps])
    return DraftWork(
        deployment=deployment,
        batch=batch,
        tokens=np.broadcast_to(batch * w, c.shape),
        context_tokens=batch * c,
        pairs=batch * tree_pairs(c, w, w),  # siblings: each its context and itself
        scale=scale,
    )


def frontier_passes(
    deployment: Deployment,
    widths: Sequence[int],
    *,
    batch: int,
    context: NDArray[np.float64] | NDArray[np.int64],
    scale: float = 1.0,
) -> DraftCost:
    """Per element of ``context``, the draft steps of :func:`frontier_work`, priced
    (arrays; zeros when nothing is drafted)."""
    work = frontier_work(deployment, widths, batch=batch, context=context, scale=scale)
    return priced(work, np.shape(context))


def ragged_frontiers(
    trees: Sequence[Sequence[int]], *, once: bool = False
) -> list[tuple[int, ...]]:
    """Each tree's frontier widths (:func:`~specsim.proposers.tables.frontier_widths`); with
    ``once``, one position for any tree at all (heads evaluated once per pass)."""
    if once:
        return [(1,) if len(t) else () for t in trees]
    return [frontier_widths(t) if len(t) else () for t in trees]


def ragged_frontier_work(
    deployment: Deployment,
    fronts: Sequence[Sequence[int]],
    contexts: ArrayLike,
    *,
    scale: float = 1.0,
) -> DraftWork | None:
    """Per depth ``d``, one batched step over the frontier ``w_i`` of each sequence that has
    one, at ``c_i = contexts[i] + d - 1``: ``tokens = sum w_i``, ``context_tokens = sum c_i``,
    ``pairs = sum w_i (c_i + 1)``, ``batch`` the sequences drafting at that depth (``fronts``:
    each sequence's frontier widths, :func:`ragged_frontiers`). None when nothing is drafted."""
    depth = max((len(x) for x in fronts), default=0)
    if depth == 0:
        return None
    w = np.zeros((len(fronts), depth))  # sequence by depth
    for i, x in enumerate(fronts):
        w[i, : len(x)] = x
    c = np.asarray(contexts, dtype=np.float64)[:, None] + np.arange(depth)  # c_i at depth d
    active = w > 0
    return DraftWork(
        deployment=deployment,
        batch=active.sum(axis=0),
        tokens=w.sum(axis=0),
        context_tokens=(c * active).sum(axis=0),
        pairs=tree_pairs(c, w, w).sum(axis=0),
        scale=scale,
    )


def lengths(name: str, values: ArrayLike, size: int | None = None) -> NDArray[np.int64]:
    """``values`` as a 1-d array of integers >= 0 (of ``size`` elements when given, a scalar
    broadcast to them), else a ValueError naming ``name``."""
    arr = np.asarray(values)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer) or arr.ndim > 1:
        raise ValueError(f"{name}: expected integers, got {values!r}")
    if (arr < 0).any():
        raise ValueError(f"{name}: expected integers >= 0, got {values!r}")
    if size is not None:
        if arr.ndim and arr.shape[0] != size:
            raise ValueError(f"{name}: expected {size} values (one per sequence), got {arr.size}")
        arr = np.broadcast_to(arr, (size,))
    return np.atleast_1d(arr).astype(np.int64)


def one_pass_work(
    deployment: Deployment,
    new: ArrayLike,
    contexts: ArrayLike,
    *,
    scale: float = 1.0,
    prefill: bool = False,
) -> DraftWork | None:
    """One pass of ``deployment``'s model in which sequence ``i`` runs ``new[i]`` positions
    (a causal chain) after ``contexts[i]`` cached tokens; sequences with none sit out. None
    when no sequence runs any. ``prefill``: the positions are prompt tokens of the
    proposer's own KV."""
    n = lengths("tokens" if prefill else "positions", new)
    ctx = lengths("context", contexts, n.size)
    run = n > 0
    if not run.any():
        return None
    n, ctx = n[run].astype(np.float64), ctx[run].astype(np.float64)
    return DraftWork(
        deployment=deployment,
        batch=[float(n.size)],
        tokens=[float(n.sum())],
        context_tokens=[float(ctx.sum())],
        pairs=[float(np.sum(chain_pairs(ctx, n)))],
        scale=scale,
        prefill=prefill,
    )
