"""The proposers that ship with a model behind them: a draft model and heads on the target.

Each implements :class:`~specsim.proposers.protocol.ProposerProtocol`: ``name``,
``acceptance`` (a :class:`~specsim.proposers.tables.RankAcceptance`), ``overlappable``,
``check_target(target)``, ``draft_cost`` / ``draft_costs`` (what drafting one tree costs per
pass on the target's :class:`~specsim.cost.deployment.Deployment`, :class:`DraftCost`),
``ragged_draft_cost`` (one tree per sequence), ``prefill_cost`` and ``kv_bytes_per_token``
(its own KV cache) and ``memory_bytes(deployment)``. Each states what it runs over how many
positions (:mod:`specsim.proposers.work`); the one drafting rule prices it
(:func:`specsim.cost.drafting.price_draft`). Prompt lookup is
:class:`specsim.proposers.lookup.NGram`.
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
from specsim.cost.drafting import check_draft_deployment
from specsim.cost.memory import footprint
from specsim.proposers.mtp import mtp_deployment, mtp_kv_bytes_per_token, mtp_memory_bytes
from specsim.proposers.protocol import DraftCost, Proposer, ScalarFromArrays
from specsim.proposers.tables import RankAcceptance, frontier_widths
from specsim.proposers.work import (
    frontier_passes,
    one_pass_work,
    priced,
    ragged_frontier_work,
    ragged_frontiers,
)

__all__ = [
    "DraftCost",
    "DraftModel",
    "Heads",
    "Proposer",
    "contexts",
    "contexts_of",
    "check_batch",
    "check_serialized",
]


def contexts(context: ArrayLike) -> NDArray[np.int64]:
    """``context`` as a 1-d array of integers >= 0, else a ValueError naming it."""
    arr = np.atleast_1d(np.asarray(context))
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1 or (arr < 0).any():
        raise ValueError(f"context: expected integers >= 0, got {context!r}")
    return arr.astype(np.int64)


def contexts_of(trees: Sequence[Sequence[int]], context: ArrayLike) -> NDArray[np.int64]:
    """One cached context per tree (:func:`contexts`), else a ValueError naming both counts."""
    ctx = contexts(context)
    if ctx.shape[0] != len(trees):
        raise ValueError(f"contexts: expected {len(trees)} values (one per tree), got {ctx.size}")
    return ctx


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
    one-rank table); the model card gives the cost. ``draft_deployment``: the draft's own
    deployment (its hardware, stack, formats, tensor parallelism), checked against the
    target's (:func:`specsim.cost.drafting.check_draft_deployment`); None prices it on the
    target's deployment with the draft as its model (:meth:`Deployment.on_model`: the same
    hardware, stack and KV format; the draft's own weights, in ``dtype`` when given, else its
    card's), over ``tensor_parallel`` devices: None means the target's when the draft shares
    them (``draft_placement = "shared"``) and one device otherwise. Its steps and its prompt
    prefill run under the stack's drafting profile (:mod:`specsim.cost.drafting`). A
    separate model can draft beside verification, so it is ``overlappable``; whether it does
    is the deployment's ``draft_placement``.
    """

    card: ModelCard
    acceptance: RankAcceptance
    dtype: str | None = None
    tensor_parallel: int | None = None
    draft_deployment: Deployment | None = None

    def __post_init__(self) -> None:
        given = self.draft_deployment
        if given is None:
            return
        if not isinstance(given, Deployment):
            raise TypeError(
                f"DraftModel draft_deployment: expected a Deployment, got {type(given).__name__}"
            )
        for name in ("dtype", "tensor_parallel"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"DraftModel {name}: give it in draft_deployment, the draft's own "
                    f"deployment (got {name}={getattr(self, name)!r} beside it)"
                )

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
        if self.draft_deployment is not None:
            check_draft_deployment(
                target, self.card, self.draft_deployment, where="DraftModel draft_deployment"
            )
            return self.draft_deployment
        tp = self.tensor_parallel
        if tp is None:
            tp = target.tensor_parallel if target.draft_placement == "shared" else 1
        dep = target.on_model(self.card, tensor_parallel=tp)
        return dep if self.dtype is None else dataclasses.replace(dep, dtype=self.dtype)

    def memory_bytes(self, deployment: Deployment) -> float:
        """The draft's weights per device (its KV cache grows with the batch:
        :meth:`kv_bytes_per_token` per cached token)."""
        dep = self.deployment(deployment)
        fp = footprint(self.card, tensor_parallel=dep.tensor_parallel, formats=dep.formats())
        return fp.weights_bytes

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """The draft's KV-cache bytes per device for one cached token of one sequence."""
        dep = self.deployment(deployment)
        fp = footprint(self.card, tensor_parallel=dep.tensor_parallel, formats=dep.formats())
        return fp.kv_bytes_per_token

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the draft steps of one pass (arrays): one step of the
        draft per depth over the frontier."""
        self.check_target(deployment.target)
        return frontier_passes(
            self.deployment(deployment),
            frontier_widths(parents),
            batch=check_batch(batch),
            context=contexts(context),
        )

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence (floats): per depth, one batched step over the frontiers of
        the sequences that reach it (:func:`specsim.proposers.work.ragged_frontier_work`)."""
        self.check_target(deployment.target)
        work = ragged_frontier_work(
            self.deployment(deployment), ragged_frontiers(trees), contexts_of(trees, contexts)
        )
        return priced(work)

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """The draft's own KV prefill: one pass of the draft over each sequence's new prompt
        tokens after its cached context (floats)."""
        self.check_target(deployment.target)
        return priced(one_pass_work(self.deployment(deployment), tokens, context, prefill=True))


@dataclass(frozen=True, kw_only=True)
class Heads(ScalarFromArrays):
    """Prediction heads on the target, from a head card (:class:`specsim.cards.HeadCard`).

    Cost: a head evaluation is ``card.layer_fraction`` of one target layer's work, a layer
    being ``1 / layers`` of the target's pass over the same positions on the target's
    deployment (its formats and parallelism; the LM head and norms spread evenly: an
    approximation, stated), run as a draft step under the stack's drafting profile: it pays
    the stack's draft-step host cost in full, never its per-pass cost (the drafting rule,
    :mod:`specsim.cost.drafting`). An MTP module (``kind = "mtp"``) is priced from the
    target's shape instead (:mod:`specsim.proposers.mtp`). A ``"parallel"`` card (Medusa)
    evaluates all heads once per pass on each sequence's last position; an
    ``"autoregressive"`` one (EAGLE, MTP modules) steps once per depth over the frontier.
    Heads read the target's last hidden state, so they cannot draft beside its verification
    (not ``overlappable``). Using the card with another target is an error. ``given``: an
    acceptance measured for these heads in place of the card's published one (None: the
    card's).
    """

    card: HeadCard
    dtype: str | None = None
    given: RankAcceptance | None = None

    @property
    def name(self) -> str:
        return f"heads {self.card.slug}"

    @property
    def overlappable(self) -> bool:
        return False

    @property
    def acceptance(self) -> RankAcceptance:
        if self.given is not None:
            return self.given
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

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """The heads' own KV-cache bytes per device and cached token: none for heads read off
        the target's last hidden state (``"parallel"``, Medusa); one target layer's for an
        EAGLE-like head (one decoder layer of the target's attention shape); the MTP block's
        one layer (:func:`specsim.proposers.mtp.mtp_kv_bytes_per_token`)."""
        self.check_target(deployment.target)
        dep = self.deployment(deployment)
        if self.card.kind == "parallel":
            return 0.0
        if self.card.kind == "mtp":
            return mtp_kv_bytes_per_token(dep)
        fp = footprint(dep.target, tensor_parallel=dep.tensor_parallel, formats=dep.formats())
        return fp.kv_bytes_per_token_layer

    def runs_on(self, deployment: Deployment) -> tuple[Deployment, float]:
        """Where a head step runs and its share of that model's pass: an MTP module on the
        target's deployment with its block card (:func:`specsim.proposers.mtp.mtp_block_card`,
        the whole pass); other heads ``layer_fraction / layers`` of the target's pass."""
        dep = self.deployment(deployment)
        if self.card.kind == "mtp":
            return mtp_deployment(dep), 1.0
        return dep, self.card.layer_fraction / deployment.target.layers

    def _check_depth(self, depth: int) -> None:
        if depth > self.card.max_depth:
            raise ValueError(
                f"head card {self.card.slug!r}: the tree is {depth} deep but the card's heads "
                f"reach depth {self.card.max_depth}"
            )

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the head evaluations of one pass (arrays): once per pass
        for ``"parallel"`` heads, once per depth over the frontier otherwise."""
        self.check_target(deployment.target)
        fronts = frontier_widths(parents)
        self._check_depth(len(fronts))
        widths = (1,) if self.card.kind == "parallel" else fronts
        dep, scale = self.runs_on(deployment)
        ctx = contexts(context)
        return frontier_passes(dep, widths, batch=check_batch(batch), context=ctx, scale=scale)

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence (floats): per depth, one batched head step over the frontiers
        of the sequences that reach it (``"parallel"`` heads: one evaluation per sequence)."""
        self.check_target(deployment.target)
        fronts = ragged_frontiers(trees)  # a tree's frontier has one width per depth
        self._check_depth(max((len(f) for f in fronts), default=0))
        if self.card.kind == "parallel":
            fronts = [(1,) if f else () for f in fronts]
        dep, scale = self.runs_on(deployment)
        return priced(ragged_frontier_work(dep, fronts, contexts_of(trees, contexts), scale=scale))

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """The heads' own KV prefill (floats): none for ``"parallel"`` heads (no KV); one
        head evaluation (an MTP block's pass) over each sequence's new prompt tokens."""
        self.check_target(deployment.target)
        if self.card.kind == "parallel":
            return priced(None)
        dep, scale = self.runs_on(deployment)
        return priced(one_pass_work(dep, tokens, context, scale=scale, prefill=True))
