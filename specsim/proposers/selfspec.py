"""Self-speculation: the target drafts with some of its own layers (LayerSkip, SWIFT, Draft&Verify).

The draft is the target with only its first ``E`` decoder layers (early exit: LayerSkip,
Elhoushi et al., ACL 2024, Section 4) or with a set of layers skipped (Draft&Verify, Zhang
et al., ACL 2024; SWIFT, Xia et al., ICLR 2025), followed by the target's final norm and
LM head (or an exit head of its own). It runs on the target's devices with the target's
weights and formats, and its KV cache is the target's own for the layers it runs
(LayerSkip shares it), so it adds no memory but an optional exit head, and it cannot
overlap verification (one model, one set of devices).

Cost: one draft step per depth over the depth's frontier (as a draft model drafts a
tree), each step a pass of the target's deployment over the ``E`` kept layers:

    t_step(d) = pass(target with E of L layers; batch, w_d new positions after c + d - 1)

priced by the drafting rule (:func:`specsim.cost.drafting.price_draft`) on the target's
deployment, its weight and KV formats and its tensor and expert parallelism, with a model
card that has ``E`` layers (every other field the target's), so weights, KV reads,
per-layer overheads and all-reduces scale with ``E / L`` while the LM head does not; each
step pays the stack's draft-step host cost, not its per-pass cost. With ``E = L`` and no
stack a draft step costs one target step. Not credited
(docs/proposers-parallel-selfspec.md): LayerSkip's verification reuses the draft layers'
KV and exit query cache, so its verification pass is cheaper than the full target pass the
simulators price; skipping attention and MLP sublayers separately (SWIFT) is not
modelled, only whole layers.

>>> from specsim.cards import load_hardware, load_model
>>> from specsim.cost.deployment import Deployment
>>> ls = SelfSpeculation.from_card("layerskip-llama-2-7b-e8")
>>> dep = Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"))
>>> draft = ls.draft_cost([-1], deployment=dep, batch=1, context=512).time_s
>>> from specsim.cost.shape import PassShape
>>> step = dep.pass_cost(PassShape.chain(context=512, new=1)).time_s
>>> 8 / 32 < draft / step < 0.5  # a quarter of the layers, plus the whole LM head
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import ModelCard
from specsim.cards.files import SearchPath
from specsim.cards.proposer_cards import SelfSpecCard
from specsim.checks import check_int
from specsim.cost.deployment import Deployment
from specsim.proposers.kinds import check_batch, contexts, contexts_of
from specsim.proposers.parallel import card_acceptance, card_of_kind
from specsim.proposers.protocol import (
    DraftCost,
    ScalarFromArrays,
    check_acceptance,
    reshaped_card,
)
from specsim.proposers.tables import RankAcceptance, frontier_widths
from specsim.proposers.work import (
    frontier_passes,
    priced,
    ragged_frontier_work,
    ragged_frontiers,
)

__all__ = ["SelfSpeculation", "early_exit_card"]


def early_exit_card(target: ModelCard, layers: int) -> ModelCard:
    """``target`` with ``layers`` decoder layers (1 <= layers <= target.layers): the draft's
    shape, every other field the target's; ``params`` is the shape's count."""
    check_int(
        layers, name="layers", minimum=1, maximum=target.layers, why=f"target {target.slug!r}"
    )
    if layers == target.layers:
        return target
    return reshaped_card(
        target,
        {"layers": layers},
        slug=f"{target.slug}-first-{layers}-layers",
        name=f"{target.name}, first {layers} of {target.layers} layers",
    )


@dataclass(frozen=True, kw_only=True)
class SelfSpeculation(ScalarFromArrays):
    """The target drafting with ``exit_layer`` layers or with ``skip_layers`` skipped.

    ``target``: the slug of the target (the acceptance is that checkpoint's);
    ``exit_head_params``: weights of an exit head of its own (0: the LM head is shared).
    Build it from a card with :meth:`from_card`; ``card`` keeps the layer checks' names.
    """

    target: str
    acceptance: RankAcceptance
    card: SelfSpecCard

    def __post_init__(self) -> None:
        if not isinstance(self.card, SelfSpecCard):
            raise TypeError(
                f"self-speculation card: expected a SelfSpecCard, got {type(self.card).__name__}"
            )
        check_acceptance(self.acceptance, "self-speculation")

    @classmethod
    def from_card(
        cls, card: SelfSpecCard | str, *, search_path: SearchPath = None
    ) -> SelfSpeculation:
        """The proposer of a ``kind = "self-speculation"`` card (a card, slug or path)."""
        card = card_of_kind(
            card,
            SelfSpecCard,
            search_path=search_path,
            kind="self-speculation",
        )
        return cls(target=card.target, acceptance=card_acceptance(card), card=card)

    @property
    def name(self) -> str:
        c = self.card
        kept = f"exit at layer {c.exit_layer}" if c.exit_layer else f"{len(c.skip_layers)} skipped"
        return f"self-speculation {c.slug} ({kept})"

    @property
    def overlappable(self) -> bool:
        """The draft is the target on its own devices: it waits for verification."""
        return False

    def check_target(self, target: ModelCard) -> None:
        if target.slug != self.target:
            raise ValueError(
                f"{self.name}: drafts with the layers of target {self.target!r}, cannot be "
                f"used with target {target.slug!r}"
            )
        self.card.draft_layers(target.layers)

    def draft_model(self, target: ModelCard) -> ModelCard:
        """The card that prices one draft step: ``target`` with the draft's layers."""
        self.check_target(target)
        return early_exit_card(target, self.card.draft_layers(target.layers))

    def deployment(self, target: Deployment) -> Deployment:
        """Where a draft step runs: ``target``'s deployment, its formats and parallelism,
        with :meth:`draft_model` (the draft's layers) as its model."""
        return dataclasses.replace(target, target=self.draft_model(target.target))

    def _check_depth(self, depth: int) -> None:
        if depth > self.card.max_depth:
            raise ValueError(
                f"{self.card.source_path or self.name}: the tree is {depth} deep but the "
                f"card's field 'max_depth' is {self.card.max_depth}"
            )

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the draft steps of one pass (arrays)."""
        widths = frontier_widths(parents)
        self._check_depth(len(widths))
        b, ctx = check_batch(batch), contexts(context).astype(np.float64)
        # Same weights, formats, stack and devices: only the layer count changes.
        return frontier_passes(self.deployment(deployment), widths, batch=b, context=ctx)

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence (floats): per depth, one batched step of the draft layers
        over the frontiers of the sequences that reach it."""
        fronts = ragged_frontiers(trees)
        self._check_depth(max((len(f) for f in fronts), default=0))
        ctx = contexts_of(trees, contexts)
        return priced(ragged_frontier_work(self.deployment(deployment), fronts, ctx))

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """0: the draft layers' KV cache is the target's own, prefilled by the target."""
        del deployment, tokens, context
        return priced(None)

    def memory_bytes(self, deployment: Deployment) -> float:
        """Only an exit head of its own, per device, in the deployment's weight format: the
        draft's weights and KV cache are the target's."""
        fm = deployment.formats()
        return self.card.exit_head_params / deployment.tensor_parallel * fm.weights

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """0: the draft layers' KV cache is the target's own (LayerSkip shares it)."""
        del deployment
        return 0.0
