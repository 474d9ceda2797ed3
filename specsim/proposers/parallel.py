"""Parallel drafting: one forward pass of a draft model proposes up to ``k`` tokens.

A parallel draft model (PARD, An et al. 2025, arXiv:2504.18583; P-EAGLE; DFlash's block
drafting) appends mask tokens to the last token and reads the next tokens off all of them
in **one** pass, instead of one draft step per token. Its cost per pass over ``batch``
sequences with contexts ``c`` is one pass of the draft over ``n`` new positions each:

    t_draft = pass(draft; batch, T = batch n, S = sum of causal pairs, R = batch c)

with ``n`` the tree's depth ``D`` (``pass_positions = "tree-depth"``: PARD feeds the last
token and ``D - 1`` masks) or ``k`` (``pass_positions = "k"``: a block drafter always runs
its block), priced by the target deployment's devices, stack and KV format running the
draft (:meth:`specsim.cost.deployment.Deployment.on_model`), as one draft step under the
stack's drafting profile (:mod:`specsim.cost.drafting`: the stack's draft-step host cost,
not its per-pass cost); the sums are :func:`specsim.cost.shape.chain_sums`'s (causal
attention among the masks). Its own KV cache is the draft's, prefilled over the prompt
(:meth:`ParallelDraft.prefill_cost`, by the same rule). A tree's width
costs nothing more: every node at depth ``d`` takes its candidates from position ``d``'s
distribution (top-``r`` ranks), so width shows only in acceptance. A tree deeper than ``k``
is refused. Assumptions (docs/proposers-parallel-selfspec.md): the tokens accepted in the
previous round beyond the last one, which PARD's loop also feeds, are not counted; block
drafters with bidirectional attention inside the block have ``n^2`` rather than
``n (n + 1) / 2`` pairs, which this pass under-counts by ``n (n - 1) / 2`` per sequence.

>>> from specsim.cards import load_hardware, load_model
>>> from specsim.cost.deployment import Deployment
>>> pard = ParallelDraft.from_card("pard-llama-3.2-1b-llama-3.1-8b")
>>> dep = Deployment(target=load_model("llama-3.1-8b"), hardware=load_hardware("a100-80gb"))
>>> one = pard.draft_cost([-1, 0, 1, 2], deployment=dep, batch=1, context=512)
>>> step = pard.draft_cost([-1], deployment=dep, batch=1, context=512)
>>> 1.0 < one.time_s / step.time_s < 1.1  # four tokens for about the price of one
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import ModelCard, load_model
from specsim.cards.files import SearchPath
from specsim.cards.proposer_cards import (
    PASS_POSITIONS,
    ParallelDraftCard,
    SelfSpecCard,
    load_proposer_card,
)
from specsim.checks import check_int
from specsim.cost.checks import check_draft_pair
from specsim.cost.deployment import Deployment
from specsim.cost.drafting import DraftWork
from specsim.cost.memory import footprint
from specsim.cost.shape import chain_sums
from specsim.proposers.kinds import check_batch, contexts, contexts_of
from specsim.proposers.protocol import DraftCost, ScalarFromArrays, check_acceptance
from specsim.proposers.tables import RankAcceptance, tree_depths
from specsim.proposers.work import one_pass_work, priced

__all__ = ["ParallelDraft", "card_acceptance"]


C = TypeVar("C", ParallelDraftCard, SelfSpecCard)


def card_of_kind(card: C | str, cls: type[C], *, search_path: SearchPath, kind: str) -> C:
    """``card`` when it is a ``cls``, else the proposer card its slug or path names, which
    must be a ``cls``: else a ValueError naming its kind, not ``kind``, and what takes a
    card of its kind (:func:`taken_by`)."""
    if isinstance(card, cls):
        return card
    # Anything else goes to the loader, whose TypeError names a value that is no slug or path.
    loaded = load_proposer_card(cast("str", card), search_path=search_path)
    if not isinstance(loaded, cls):
        raise ValueError(
            f"proposer card {loaded.slug!r}: kind {loaded.kind!r}, not {kind}; "
            f"{taken_by(loaded.kind)}"
        )
    return loaded


TAKEN_BY = {
    "parallel": "a 'parallel' card is a parallel draft (--parallel; ParallelDraft.from_card)",
    "self-speculation": "a 'self-speculation' card is read by --selfspec "
    "(SelfSpeculation.from_card)",
    "streaming-self-speculation": "a 'streaming-self-speculation' card is read by "
    "StreamingSelfSpec.from_card in Python (no command-line option takes it)",
}
"""What takes a proposer card of each kind, for the errors that meet a card of another."""


def taken_by(kind: str) -> str:
    """Where a proposer card of ``kind`` goes (:data:`TAKEN_BY`)."""
    return TAKEN_BY.get(kind, f"no proposer takes a card of kind {kind!r}")


def card_acceptance(card: ParallelDraftCard | SelfSpecCard) -> RankAcceptance:
    """A proposer card's acceptance table, up to its ``max_depth``, its source naming the
    card and the depths it assumes."""
    src = card.sources
    where = src.get("accept", "") if isinstance(src, dict) else "; ".join(src)
    if card.assumed_depths:
        where += f" (depths {', '.join(map(str, card.assumed_depths))} assumed: see the card)"
    return RankAcceptance(
        accept=card.accept,
        source=f"proposer card {card.slug}: {where}",
        name=f"proposer card {card.slug}: accept",
        max_depth=card.max_depth,
    )


@dataclass(frozen=True, kw_only=True)
class ParallelDraft(ScalarFromArrays):
    """A draft model proposing up to ``k`` tokens in one pass (see the module docstring).

    ``draft``: the draft's model card (its shape prices the pass); ``target``: the target
    slug the acceptance was measured for (None: any target sharing the draft's tokenizer);
    ``extra_params``: weights beyond the draft's card (mask-token embeddings).
    """

    draft: ModelCard
    k: int
    acceptance: RankAcceptance
    target: str | None = None
    pass_positions: str = "tree-depth"
    extra_params: int = 0
    label: str = ""

    def __post_init__(self) -> None:
        check_int(self.k, name="parallel draft k", minimum=1)
        if self.pass_positions not in PASS_POSITIONS:
            raise ValueError(
                f"parallel draft pass_positions: expected one of {list(PASS_POSITIONS)}, got "
                f"{self.pass_positions!r}"
            )
        bad = self.extra_params
        check_int(bad, name="parallel draft extra_params", minimum=0)
        check_acceptance(self.acceptance, "parallel draft")

    @classmethod
    def from_card(
        cls, card: ParallelDraftCard | str, *, search_path: SearchPath = None
    ) -> ParallelDraft:
        """The proposer of a ``kind = "parallel"`` card (a card or its slug or path); the draft
        model card is loaded by its slug on the same search path."""
        card = card_of_kind(
            card,
            ParallelDraftCard,
            search_path=search_path,
            kind="a parallel draft",
        )
        return cls(
            draft=load_model(card.draft, search_path=search_path),
            k=card.k,
            acceptance=card_acceptance(card),
            target=card.target,
            pass_positions=card.pass_positions,
            extra_params=card.extra_params,
            label=card.slug,
        )

    @property
    def name(self) -> str:
        return f"parallel draft {self.label or self.draft.slug} (k={self.k})"

    @property
    def overlappable(self) -> bool:
        """A separate model: on a device of its own it can draft beside verification."""
        return True

    def check_target(self, target: ModelCard) -> None:
        if self.target is not None and target.slug != self.target:
            raise ValueError(
                f"{self.name}: its acceptance was measured for target {self.target!r}, cannot "
                f"be used with target {target.slug!r}"
            )
        check_draft_pair(target, self.draft)

    def positions(self, parents: Sequence[int]) -> int:
        """New positions of the one draft pass for the tree ``parents`` (0 for no tree)."""
        depth = max(tree_depths(parents), default=0)
        if depth > self.k:
            raise ValueError(
                f"{self.name}: the tree is {depth} deep but one pass proposes at most "
                f"k = {self.k} tokens"
            )
        if depth == 0:
            return 0
        return depth if self.pass_positions == "tree-depth" else self.k

    def deployment(self, target: Deployment) -> Deployment:
        """Where the draft runs: the target's deployment with the draft as its model
        (:meth:`Deployment.on_model`: its own weights and dtype, the target's devices, stack
        and KV format)."""
        return target.on_model(self.draft)

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the one draft pass of ``parents`` (arrays)."""
        self.check_target(deployment.target)
        n, b, ctx = self.positions(parents), check_batch(batch), contexts(context)
        if n == 0:
            return priced(None, ctx.shape)
        tokens, pairs, cached = chain_sums(b, b * ctx.astype(np.float64), n)
        shape = (1, *ctx.shape)  # one draft step, per context
        work = DraftWork(
            deployment=self.deployment(deployment),
            batch=b,
            tokens=np.broadcast_to(tokens, shape),
            context_tokens=np.broadcast_to(cached, shape),
            pairs=np.broadcast_to(pairs, shape),
        )
        return priced(work)

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence (floats): the one draft pass in which sequence ``i`` runs its
        tree's :meth:`positions` after its context."""
        self.check_target(deployment.target)
        ctx = contexts_of(trees, contexts)
        n = np.array([self.positions(t) for t in trees], dtype=np.int64)
        return priced(one_pass_work(self.deployment(deployment), n, ctx))

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """The draft's own KV prefill: one pass of the draft over each sequence's new prompt
        tokens after its cached context (floats)."""
        self.check_target(deployment.target)
        return priced(one_pass_work(self.deployment(deployment), tokens, context, prefill=True))

    def memory_bytes(self, deployment: Deployment) -> float:
        """Draft weights (and ``extra_params``) per device in the draft's weight format.

        Its KV cache grows with batch and context, which this call does not know:
        :meth:`kv_bytes_per_token` gives it per cached token of one sequence.
        """
        dep = self.deployment(deployment)
        fm = dep.formats()
        fp = footprint(self.draft, tensor_parallel=dep.tensor_parallel, formats=fm)
        return fp.weights_bytes + self.extra_params / dep.tensor_parallel * fm.weights

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """The draft's KV-cache bytes per device for one cached token of one sequence."""
        dep = self.deployment(deployment)
        fp = footprint(self.draft, tensor_parallel=dep.tensor_parallel, formats=dep.formats())
        return fp.kv_bytes_per_token
