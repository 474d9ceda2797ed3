"""The proposers that ship with a model behind them: a draft model and heads on the target.

Each implements :class:`~specsim.proposers.protocol.ProposerProtocol`: ``name``,
``acceptance`` (a :class:`~specsim.proposers.tables.RankAcceptance`), ``overlappable``,
``check_target(target)``, ``draft_cost`` / ``draft_costs`` (what drafting one tree costs per
pass on the target's :class:`~specsim.cost.deployment.Deployment`, :class:`DraftCost`) and
``memory_bytes(deployment)``. Prompt lookup is :class:`specsim.proposers.lookup.NGram`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import HeadCard, ModelCard
from specsim.checks import check_int
from specsim.cost.checks import check_draft_pair
from specsim.cost.deployment import Deployment
from specsim.cost.memory import footprint
from specsim.proposers.mtp import mtp_draft_costs, mtp_memory_bytes
from specsim.proposers.protocol import DraftCost, Proposer, ScalarFromArrays, frontier_passes
from specsim.proposers.tables import RankAcceptance, frontier_widths, tree_depths

__all__ = [
    "DraftCost",
    "DraftModel",
    "Heads",
    "Proposer",
    "contexts",
    "check_batch",
    "check_serialized",
]


def contexts(context: ArrayLike) -> NDArray[np.int64]:
    """``context`` as a 1-d array of integers >= 0, else a ValueError naming it."""
    arr = np.atleast_1d(np.asarray(context))
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1 or (arr < 0).any():
        raise ValueError(f"context: expected integers >= 0, got {context!r}")
    return arr.astype(np.int64)


def check_serialized(deployment: Deployment, *, where: str) -> None:
    """A ValueError unless drafting is serialized with verification on ``deployment``: the
    single-stream pricing (``where``) adds draft and verification times, so an
    ``"overlapped"`` placement, which would hide one behind the other, is not modelled
    there and must not be silently priced as if it were not chosen."""
    if deployment.draft_placement == "overlapped":
        raise ValueError(
            f"{where}: deployment draft_placement 'overlapped' is not modelled here (drafting "
            "is priced serialized with verification); use 'shared' or 'own-device'"
        )


def check_batch(batch: int) -> int:
    """``batch`` as an int >= 1, else a ValueError naming it."""
    return check_int(batch, name="batch", minimum=1)


@dataclass(frozen=True, kw_only=True)
class DraftModel(ScalarFromArrays):
    """A draft language model: one draft step per depth over the frontier (batched).

    ``acceptance`` is measured for this draft/target pair (a file, or a chain's alpha as a
    one-rank table); the model card gives the cost, priced on the target's deployment with
    the draft as its model (:meth:`Deployment.on_model`: the same hardware, stack and KV
    format; the draft's own weights, in ``dtype`` when given, else its card's).
    ``tensor_parallel``: the draft's devices; None means the target's when the draft
    shares them (``draft_placement = "shared"``) and one device otherwise. A separate model
    can draft beside verification, so it is ``overlappable``; whether it does is the
    deployment's ``draft_placement``.
    """

    card: ModelCard
    acceptance: RankAcceptance
    dtype: str | None = None
    tensor_parallel: int | None = None

    @property
    def name(self) -> str:
        return f"draft {self.card.slug}"

    @property
    def overlappable(self) -> bool:
        return True

    def check_target(self, target: ModelCard) -> None:
        check_draft_pair(target, self.card)

    def deployment(self, target: Deployment) -> Deployment:
        """Where the draft runs, from the target's deployment (class docstring)."""
        tp = self.tensor_parallel
        if tp is None:
            tp = target.tensor_parallel if target.draft_placement == "shared" else 1
        dep = target.on_model(self.card, tensor_parallel=tp)
        return dep if self.dtype is None else dataclasses.replace(dep, dtype=self.dtype)

    def memory_bytes(self, deployment: Deployment) -> float:
        """The draft's weights per device (its KV cache grows with the batch: the serving
        memory model adds ``footprint(...).kv_bytes_per_token`` per cached token)."""
        dep = self.deployment(deployment)
        fp = footprint(self.card, tensor_parallel=dep.tensor_parallel, formats=dep.formats())
        return fp.weights_bytes

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the draft steps of one pass (arrays), under the stack's
        drafting profile (:meth:`Deployment.drafting
        <specsim.cost.deployment.Deployment.drafting>`)."""
        self.check_target(deployment.target)
        return frontier_passes(
            self.deployment(deployment).drafting(),
            frontier_widths(parents),
            batch=check_batch(batch),
            context=contexts(context),
        )


@dataclass(frozen=True, kw_only=True)
class Heads(ScalarFromArrays):
    """Prediction heads on the target, from a head card (:class:`specsim.cards.HeadCard`).

    Cost: a head evaluation is ``card.layer_fraction`` of one target layer, a layer
    being ``1 / layers`` of the target's pass over the same positions on the target's
    deployment (its stack, formats and parallelism; the LM head, norms and per-pass overhead
    spread evenly: an approximation, stated). A ``"parallel"`` card (Medusa) evaluates all
    heads once per pass on each sequence's last position; an ``"autoregressive"`` one
    (EAGLE, MTP modules) steps once per depth over the frontier. Heads read the target's
    last hidden state, so they cannot draft beside its verification (not
    ``overlappable``). Using the card with another target is an error.
    """

    card: HeadCard
    dtype: str | None = None

    @property
    def name(self) -> str:
        return f"heads {self.card.slug}"

    @property
    def overlappable(self) -> bool:
        return False

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

    def deployment(self, target: Deployment) -> Deployment:
        """Where the heads run: the target's deployment, in the card's ``dtype`` when given."""
        deployment = target
        return (
            deployment if self.dtype is None else dataclasses.replace(deployment, dtype=self.dtype)
        )

    def memory_bytes(self, deployment: Deployment) -> float:
        """The heads' weights per device: ``layer_fraction`` of a target decoder layer in the
        target's weight format (an upper bound where a card counts a shared LM head)."""
        self.check_target(deployment.target)
        dep = self.deployment(deployment)
        if self.card.kind == "mtp":
            return mtp_memory_bytes(dep)
        weights = self.card.layer_fraction * deployment.target.decode_layer_params
        return weights * dep.formats().weights / dep.tensor_parallel

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the head evaluations of one pass (arrays)."""
        target = deployment.target
        self.check_target(target)
        depth = max(tree_depths(parents), default=0)
        if depth > self.card.max_depth:
            raise ValueError(
                f"head card {self.card.slug!r}: the tree is {depth} deep but the card's heads "
                f"reach depth {self.card.max_depth}"
            )
        widths = (1,) if self.card.kind == "parallel" else frontier_widths(parents)
        if self.card.kind == "mtp":
            ctx = contexts(context)
            return mtp_draft_costs(
                self.deployment(deployment), widths, batch=check_batch(batch), context=ctx
            )
        return frontier_passes(
            self.deployment(deployment),
            widths,
            batch=check_batch(batch),
            context=contexts(context),
            scale=self.card.layer_fraction / target.layers,
        )
