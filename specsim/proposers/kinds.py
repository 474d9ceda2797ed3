"""The proposers that ship: a draft model, heads on the target, n-gram lookup.

Each has ``name``, ``acceptance`` (a :class:`~specsim.proposers.tables.RankAcceptance`),
``check_target(target)`` and ``draft_cost`` / ``draft_costs``: what drafting one
tree costs per pass (:class:`DraftCost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import HardwareCard, HeadCard, ModelCard
from specsim.cost import pass_aggregates_cost
from specsim.cost.checks import check_draft_pair
from specsim.proposers.tables import RankAcceptance, check_tree, frontier_widths, tree_depths

__all__ = ["DraftCost", "DraftModel", "Heads", "NGram", "Proposer"]


@dataclass(frozen=True, slots=True)
class DraftCost:
    """What drafting one tree costs per pass, over all ``batch`` sequences: seconds, joules,
    flops; floats, or arrays with one element per pass (:meth:`DraftModel.draft_costs`)."""

    time_s: Any
    energy_j: Any
    flops: Any

    def at(self, i: int) -> DraftCost:
        """Element ``i`` of an array-valued cost, as floats."""
        return DraftCost(float(self.time_s[i]), float(self.energy_j[i]), float(self.flops[i]))


def _frontier_passes(
    model: ModelCard,
    hardware: HardwareCard,
    widths: Sequence[int],
    *,
    batch: int,
    context: NDArray[np.int64],
    dtype: str | None,
    scale: float = 1.0,
) -> DraftCost:
    """Step ``d`` runs ``model`` on the depth-``d - 1`` frontier of every sequence, batched:
    ``widths[d - 1]`` new positions per sequence after ``context + d - 1`` tokens, each
    attending to that context and itself (the sums of
    ``PassShape.tree(context=context + d - 1, parents=[-1] * w, batch=batch)``, on arrays
    of contexts: :func:`specsim.cost.pass_aggregates_cost`)."""
    ctx = np.asarray(context, dtype=np.float64)
    time, energy, flops = np.zeros(ctx.shape), np.zeros(ctx.shape), np.zeros(ctx.shape)
    for d, w in enumerate(widths, start=1):
        if w == 0:
            continue
        c = ctx + (d - 1)
        t = pass_aggregates_cost(
            model,
            hardware,
            batch=batch,
            tokens=float(batch * w),
            context_tokens=batch * c,
            pairs=batch * (w * c + w),
            dtype=dtype,
        )
        time += scale * t.time_s
        energy += scale * t.energy_j
        flops += scale * t.flops
    return DraftCost(time, energy, flops)


def _contexts(context: ArrayLike) -> NDArray[np.int64]:
    arr = np.atleast_1d(np.asarray(context))
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1 or (arr < 0).any():
        raise ValueError(f"context: expected integers >= 0, got {context!r}")
    return arr.astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class DraftModel:
    """A draft language model: one draft step per depth over the frontier (batched).

    ``acceptance`` is measured for this draft/target pair (a file, or a chain's alpha
    as a one-rank table); the model card gives the cost.
    """

    card: ModelCard
    acceptance: RankAcceptance
    dtype: str | None = None

    @property
    def name(self) -> str:
        return f"draft {self.card.slug}"

    def check_target(self, target: ModelCard) -> None:
        check_draft_pair(target, self.card)

    def draft_costs(
        self,
        parents: Sequence[int],
        *,
        target: ModelCard,
        hardware: HardwareCard,
        batch: int,
        context: ArrayLike,
    ) -> DraftCost:
        """Per element of ``context``, the draft steps of one pass (arrays)."""
        self.check_target(target)
        return _frontier_passes(
            self.card,
            hardware,
            frontier_widths(parents),
            batch=batch,
            context=_contexts(context),
            dtype=self.dtype,
        )

    def draft_cost(
        self,
        parents: Sequence[int],
        *,
        target: ModelCard,
        hardware: HardwareCard,
        batch: int,
        context: int,
    ) -> DraftCost:
        return self.draft_costs(
            parents, target=target, hardware=hardware, batch=batch, context=context
        ).at(0)


@dataclass(frozen=True, kw_only=True)
class Heads:
    """Prediction heads on the target, from a head card (:class:`specsim.cards.HeadCard`).

    Cost: a head evaluation is ``card.layer_fraction`` of one target layer, a layer
    being ``1 / layers`` of the target's pass over the same positions (the LM head,
    norms and per-pass overhead spread evenly: an approximation, stated). A
    ``"parallel"`` card (Medusa) evaluates all heads once per pass on each
    sequence's last position; an ``"autoregressive"`` one (EAGLE) steps once per
    depth over the frontier. Using the card with another target is an error.
    """

    card: HeadCard
    dtype: str | None = None

    @property
    def name(self) -> str:
        return f"heads {self.card.slug}"

    @property
    def acceptance(self) -> RankAcceptance:
        src = self.card.sources
        where = src.get("accept", "") if isinstance(src, dict) else "; ".join(src)
        assumed = self.card.assumed_depths
        if assumed:
            where += f" (depths {', '.join(map(str, assumed))} assumed: see the card)"
        return RankAcceptance(
            accept=self.card.accept,
            source=f"head card {self.card.slug}: {where}",
            name=f"head card {self.card.slug}: accept",
            max_depth=self.card.max_depth,
        )

    def check_target(self, target: ModelCard) -> None:
        if target.slug != self.card.target:
            raise ValueError(
                f"head card {self.card.slug!r}: trained for target {self.card.target!r}, "
                f"cannot be used with target {target.slug!r}"
            )
        self.card.check_layer_fraction(target.decode_layer_params)

    def draft_cost(
        self,
        parents: Sequence[int],
        *,
        target: ModelCard,
        hardware: HardwareCard,
        batch: int,
        context: int,
    ) -> DraftCost:
        return self.draft_costs(
            parents, target=target, hardware=hardware, batch=batch, context=context
        ).at(0)

    def draft_costs(
        self,
        parents: Sequence[int],
        *,
        target: ModelCard,
        hardware: HardwareCard,
        batch: int,
        context: ArrayLike,
    ) -> DraftCost:
        """Per element of ``context``, the head evaluations of one pass (arrays)."""
        self.check_target(target)
        depth = max(tree_depths(parents), default=0)
        if depth > self.card.max_depth:
            raise ValueError(
                f"head card {self.card.slug!r}: the tree is {depth} deep but the card's heads "
                f"reach depth {self.card.max_depth}"
            )
        scale = self.card.layer_fraction / target.layers
        widths = (1,) if self.card.kind == "parallel" else frontier_widths(parents)
        return _frontier_passes(
            target,
            hardware,
            widths,
            batch=batch,
            context=_contexts(context),
            dtype=self.dtype,
            scale=scale,
        )


@dataclass(frozen=True, kw_only=True)
class NGram:
    """Prompt lookup (n-gram) drafting: no model, so no model cost (the CPU lookup is not
    counted); ``acceptance`` is measured from text (:mod:`specsim.proposers.ngram`)."""

    acceptance: RankAcceptance
    n: int = 2

    @property
    def name(self) -> str:
        return f"{self.n}-gram lookup"

    def check_target(self, target: ModelCard) -> None:
        del target  # text lookup drafts for any target

    def draft_costs(
        self,
        parents: Sequence[int],
        *,
        target: ModelCard,
        hardware: HardwareCard,
        batch: int,
        context: ArrayLike,
    ) -> DraftCost:
        check_tree(parents)
        zero = np.zeros(_contexts(context).shape)
        return DraftCost(zero, zero, zero)

    def draft_cost(
        self,
        parents: Sequence[int],
        *,
        target: ModelCard,
        hardware: HardwareCard,
        batch: int,
        context: int,
    ) -> DraftCost:
        return self.draft_costs(
            parents, target=target, hardware=hardware, batch=batch, context=context
        ).at(0)


Proposer = DraftModel | Heads | NGram
"""Any of the proposers that ship; each has ``name``, ``acceptance`` and ``draft_cost``."""
