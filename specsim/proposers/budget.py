"""Draft KV budgets for long context: a draft that attends to a fixed number of cached tokens.

At 32k-128k tokens of context a decode step is bound by reading the KV cache, and that
read grows with batch x context while the weights are read once per pass. A draft that
attends to a fixed **KV budget** ``B`` per sequence (a sliding window, or StreamingLLM's
attention sinks plus a recent window: Xiao et al., ICLR 2024) reads ``B`` cached tokens per
step whatever the context, so as the batch grows the target's verification costs about
one plain step (both are KV-bound) while the draft stays cheap, and the speedup can *rise*
with batch (MagicDec, Sadhukhan et al. 2024, arXiv:2408.11049, Sections 3-4; TriForce,
Sun et al. 2024, arXiv:2404.11912, with a retrieval-based KV budget).

Two proposers:

- :class:`KVBudget`: any proposer (a draft model, heads, an MTP module, a parallel draft)
  with its draft steps priced at a context of ``budget`` tokens instead of the sequence's:
  step ``d`` reads the ``budget`` tokens kept at the start of the round plus the ``d - 1``
  drafted in it (the window slides once the round's tokens are accepted). Its acceptance is
  given explicitly, since attending to less changes what the draft proposes.
- :class:`StreamingSelfSpec`: self-speculation with a sparse/streaming KV draft (MagicDec's
  StreamingLLM self-speculation; TriForce's retrieval draft): the target itself, all its
  layers and its own weights, attending to ``budget`` cached tokens per step. It adds no
  weights and cannot overlap verification (one model, one set of devices); its budget KV
  cache is ``budget`` tokens per sequence (:meth:`StreamingSelfSpec.budget_kv_bytes`).

A budget larger than a context it is asked to draft at is an error naming both (the
budget would then be the whole context: no budget at all, which is the plain draft).

>>> from specsim.cards import load_model
>>> from specsim.cost.deployment import Deployment
>>> from specsim.proposers import RankAcceptance
>>> dep = Deployment(target=load_model("llama-3.1-8b"), hardware="h100-sxm")
>>> acc = RankAcceptance(accept=((0.8,),) * 4)
>>> sd = StreamingSelfSpec(target="llama-3.1-8b", budget=512, acceptance=acc)
>>> at_32k = sd.draft_cost([-1], deployment=dep, batch=64, context=32768).time_s
>>> at_128k = sd.draft_cost([-1], deployment=dep, batch=64, context=131072).time_s
>>> at_32k == at_128k  # the draft step reads 512 cached tokens at any context
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import ModelCard
from specsim.cards.files import SearchPath
from specsim.cards.proposer_cards import StreamingSelfSpecCard, load_proposer_card
from specsim.cost.deployment import Deployment
from specsim.cost.memory import footprint
from specsim.proposers.kinds import DraftModel, contexts, contexts_of
from specsim.proposers.parallel import taken_by
from specsim.proposers.protocol import (
    DraftCost,
    Proposer,
    ScalarFromArrays,
    check_acceptance,
    check_proposer,
    kv_bytes_per_token_of,
    prefill_cost_of,
    ragged_draft_cost_of,
)
from specsim.proposers.tables import RankAcceptance, tree_depths
from specsim.proposers.work import priced

__all__ = ["KVBudget", "StreamingSelfSpec", "budget_contexts", "check_budget_size"]


def check_budget_size(budget: object, *, where: str) -> int:
    """``budget`` as an int >= 1, else a ValueError naming ``where``."""
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
        raise ValueError(
            f"{where}: expected a KV budget in tokens, an integer >= 1, got {budget!r}"
        )
    return int(budget)


def budget_contexts(context: ArrayLike, budget: int, *, where: str) -> NDArray[np.int64]:
    """The contexts a budgeted draft step attends to: ``min(context, budget)``, which is
    ``budget`` for every context the budget fits in; a context shorter than the budget is
    a ValueError naming both and ``where`` (the proposer)."""
    ctx = contexts(context)
    short = ctx[ctx < budget]
    if short.size:
        raise ValueError(
            f"{where}: KV budget {budget} is larger than the context {int(short[0])}: a "
            "budget must be at most the context it drafts at (use the plain draft there)"
        )
    return np.minimum(ctx, budget)


@dataclass(frozen=True, kw_only=True)
class KVBudget(ScalarFromArrays):
    """``proposer`` drafting over a KV budget of ``budget`` tokens (module docstring).

    ``acceptance``: the budgeted draft's own (attending to less changes its proposals; pass
    ``proposer.acceptance`` to assume it does not, and say so)."""

    proposer: Proposer
    budget: int
    acceptance: RankAcceptance

    def __post_init__(self) -> None:
        check_proposer(self.proposer, where="KVBudget proposer")
        check_budget_size(self.budget, where="KVBudget budget")
        check_acceptance(self.acceptance, "KVBudget")

    @property
    def name(self) -> str:
        return f"{self.proposer.name}, KV budget {self.budget}"

    @property
    def overlappable(self) -> bool:
        return self.proposer.overlappable

    def check_target(self, target: ModelCard) -> None:
        self.proposer.check_target(target)

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``: the inner proposer's draft at ``min(context, budget)``."""
        kept = budget_contexts(context, self.budget, where=self.name)
        return self.proposer.draft_costs(parents, deployment=deployment, batch=batch, context=kept)

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence: the inner proposer's at ``min(context, budget)``."""
        kept = budget_contexts(contexts_of(trees, contexts), self.budget, where=self.name)
        return ragged_draft_cost_of(self.proposer, trees, kept, deployment=deployment)

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """The inner proposer's prefill (it reads the whole prompt to keep its budget)."""
        return prefill_cost_of(self.proposer, deployment=deployment, tokens=tokens, context=context)

    def memory_bytes(self, deployment: Deployment) -> float:
        """The inner proposer's weights (its KV cache is ``budget`` tokens per sequence)."""
        return self.proposer.memory_bytes(deployment)

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """The inner proposer's KV per cached token: an upper bound, as a sequence keeps at
        most ``budget`` tokens of it (the per-token memory model does not know the cap)."""
        return kv_bytes_per_token_of(self.proposer, deployment)


@dataclass(frozen=True, kw_only=True)
class StreamingSelfSpec(ScalarFromArrays):
    """The target drafting for itself over a KV budget of ``budget`` tokens.

    ``target``: the slug of the target (the acceptance is that model's with that budget);
    ``max_depth``: the deepest draft the acceptance covers."""

    target: str
    budget: int
    acceptance: RankAcceptance
    max_depth: int = 8

    def __post_init__(self) -> None:
        check_budget_size(self.budget, where="StreamingSelfSpec budget")
        check_acceptance(self.acceptance, "StreamingSelfSpec")
        d = self.max_depth
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"StreamingSelfSpec max_depth: expected an integer >= 1, got {d!r}")

    @classmethod
    def from_card(
        cls, card: StreamingSelfSpecCard | str, *, context: float, search_path: SearchPath = None
    ) -> StreamingSelfSpec:
        """The proposer of a ``kind = "streaming-self-speculation"`` card (a card, slug or
        path) at ``context`` tokens: its budget, its measured per-token acceptance read at
        that context (:meth:`StreamingSelfSpecCard.accept_at`) at every depth."""
        if not isinstance(card, StreamingSelfSpecCard):
            loaded = load_proposer_card(card, search_path=search_path)
            if not isinstance(loaded, StreamingSelfSpecCard):
                raise ValueError(
                    f"proposer card {loaded.slug!r}: kind {loaded.kind!r}, not "
                    f"streaming-self-speculation; {taken_by(loaded.kind)}"
                )
            card = loaded
        src = card.sources.get("accept", "") if isinstance(card.sources, dict) else ""
        depths = ", ".join(map(str, card.assumed_depths))
        acceptance = RankAcceptance(
            accept=card.accept_rows(context),
            source=f"proposer card {card.slug} at context {context:g}: {src} (depths {depths} "
            "assumed: see the card)",
            name=f"proposer card {card.slug}: accept at context {context:g}",
            max_depth=card.max_depth,
        )
        return cls(
            target=card.target, budget=card.budget, acceptance=acceptance, max_depth=card.max_depth
        )

    @property
    def name(self) -> str:
        return f"streaming self-speculation {self.target} (KV budget {self.budget})"

    @property
    def overlappable(self) -> bool:
        """The draft is the target on its own devices: it waits for verification."""
        return False

    def check_target(self, target: ModelCard) -> None:
        if target.slug != self.target:
            raise ValueError(
                f"{self.name}: drafts with target {self.target!r}, cannot be used with target "
                f"{target.slug!r}"
            )

    def own(self, deployment: Deployment) -> DraftModel:
        """The target as its own draft model on its devices and formats (its steps are
        then a draft model's, under the drafting rule)."""
        self.check_target(deployment.target)
        return DraftModel(
            card=deployment.target,
            acceptance=self.acceptance,
            tensor_parallel=deployment.tensor_parallel,
        )

    def _check_depth(self, trees: Sequence[Sequence[int]]) -> None:
        depth = max((max(tree_depths(t), default=0) for t in trees), default=0)
        if depth > self.max_depth:
            raise ValueError(
                f"{self.name}: the tree is {depth} deep but max_depth is {self.max_depth}"
            )

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``: one target step per depth over the frontier, at
        ``min(context, budget)`` cached tokens, on the target's own devices and formats."""
        own = self.own(deployment)
        self._check_depth([parents])
        kept = budget_contexts(context, self.budget, where=self.name)
        return own.draft_costs(parents, deployment=deployment, batch=batch, context=kept)

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence (floats): the target's steps at ``min(context, budget)``."""
        own = self.own(deployment)
        self._check_depth(trees)
        kept = budget_contexts(contexts_of(trees, contexts), self.budget, where=self.name)
        return own.ragged_draft_cost(trees, kept, deployment=deployment)

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """0: the budget KV is kept from the target's own, which the target prefills."""
        del deployment, tokens, context
        return priced(None)

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """0 per cached token: the budget cache is ``budget`` tokens per sequence whatever
        the context (:meth:`budget_kv_bytes`)."""
        del deployment
        return 0.0

    def memory_bytes(self, deployment: Deployment) -> float:
        """0: the draft's weights are the target's (its KV budget is per sequence:
        :meth:`budget_kv_bytes`)."""
        self.check_target(deployment.target)
        return 0.0

    def budget_kv_bytes(self, deployment: Deployment) -> float:
        """Bytes per device of one sequence's budget KV cache: ``budget`` tokens of the
        target's KV (in the deployment's KV format)."""
        fp = footprint(
            deployment.target,
            tensor_parallel=deployment.tensor_parallel,
            formats=deployment.formats(),
        )
        return self.budget * fp.kv_bytes_per_token
