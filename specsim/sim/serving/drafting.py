"""What the serving engine asks a proposer (:mod:`specsim.proposers.protocol`): checked once,
so that a proposer lacking part of the protocol is a TypeError naming what it lacks, never
an AttributeError from deep inside a pass; and a chain iteration drafted by a proposer
(:class:`ProposerDrafts`), so that chain serving (any lookahead policy) drafts with heads,
n-gram lookup or any other proposer, not only with the cost source's draft model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cost import verification_positions
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import chain_tree
from specsim.proposers import DraftCost, Proposer, check_proposer
from specsim.sim.costs.source import MEMO, CostSource, IterationCost

__all__ = ["ProposerDrafts", "proposer_draft_costs", "target_deployment"]

Ints = NDArray[np.int64]


def proposer_draft_costs(
    proposer: object,
    parents: Sequence[int],
    *,
    deployment: Deployment,
    batch: int,
    context: ArrayLike,
) -> DraftCost:
    """``proposer.draft_costs`` on the target's ``deployment``: what drafting the token tree
    ``parents`` costs per pass over ``batch`` sequences, per element of ``context``; a
    TypeError naming what a proposer lacks (:func:`specsim.proposers.check_proposer`)."""
    return check_proposer(proposer).draft_costs(
        parents, deployment=deployment, batch=batch, context=context
    )


def target_deployment(cost: CostSource, *, where: str = "proposer") -> Deployment:
    """The target's deployment a cost source on cards prices (what a proposer drafts on);
    a ValueError naming ``where`` for a source without one (a proposer prices its drafting
    on the target's cards, stack and formats, which such a source does not have)."""
    got = getattr(cost, "deployment", None)
    if got is None or callable(got):
        raise ValueError(
            f"{where}: a proposer prices its drafting on the target's deployment; the cost "
            f"source {type(cost).__name__} has none (use a cost source on cards)"
        )
    if not isinstance(got, Deployment):
        raise TypeError(
            f"{where}: {type(cost).__name__}.deployment is a {type(got).__name__}, not a Deployment"
        )
    return got


class ProposerDrafts:
    """Chain iterations drafted by ``proposer`` and verified on ``cost``: the target's pass
    over each sequence's ``gamma_i + 1`` positions (``cost.verify``), plus, for each gamma
    the batch drafts, that share of the batch of a pass of the proposer drafting a chain of
    gamma tokens (``draft_costs(chain_tree(gamma), batch=B, context=c)``, the batch's mean
    cached context ``c``, rounded, as the tree engine prices a pass,
    :class:`specsim.sim.serving.tree_serving.StaticTreePlan`). When every sequence drafts the same
    gamma this is the proposer's own pass over the batch, so a chain at a fixed gamma costs
    what the width-one tree of that depth costs on the serving engine. The cost source's own
    draft step is never used, and ``cost`` here is the engine's source with the proposer's
    own KV prefill beside each admission's (``cost.with_proposer``, where the source has one:
    :meth:`specsim.sim.CardCost.with_proposer`)."""

    def __init__(self, cost: CostSource, proposer: Proposer, deployment: Deployment) -> None:
        self.proposer = check_proposer(proposer)
        own = getattr(cost, "with_proposer", None)
        self.cost, self.deployment = cost if own is None else own(self.proposer), deployment
        self.memo: dict[tuple[int, int, int], tuple[float, float]] = {}

    def draft(self, gamma: int, *, batch: int, context: int) -> tuple[float, float]:
        """Seconds and joules of one pass of the proposer drafting ``gamma`` tokens for each
        of ``batch`` sequences at ``context`` (remembered: a run asks the same ones often)."""
        key = (gamma, batch, context)
        got = self.memo.get(key)
        if got is None:
            if len(self.memo) >= MEMO:  # bounded, as a Remembers source is
                self.memo.clear()
            d = proposer_draft_costs(
                self.proposer,
                chain_tree(gamma),
                deployment=self.deployment,
                batch=batch,
                context=context,
            ).at(0)
            got = self.memo[key] = (float(d.time_s), float(d.energy_j))
        return got

    def __call__(self, gamma: Ints, context: Ints) -> IterationCost:
        """The iteration in which sequence ``i``, ``context[i]`` tokens cached, drafts
        ``gamma[i]`` (:class:`~specsim.sim.costs.source.IterationCost`)."""
        ver = self.cost.verify(verification_positions(gamma), context)
        b = gamma.shape[0]
        mean = int(round(float(context.sum()) / b)) if b else 0
        t = e = 0.0
        values, counts = np.unique(gamma[gamma > 0], return_counts=True)
        for g, n in zip(values.tolist(), counts.tolist(), strict=True):
            d_t, d_e = self.draft(g, batch=b, context=mean)
            t, e = t + d_t * n / b, e + d_e * n / b
        return IterationCost(ver.time_s + t, (ver.energy_j or 0.0) + e, t)

    def times(self, contexts: Ints, size: int) -> NDArray[np.float64]:
        """Iteration times for gammas ``0..size`` at ``contexts`` (a batch-wide policy's
        table, :class:`specsim.sim.costs.source.BatchWide`)."""
        ones = np.ones(contexts.shape[0], dtype=np.int64)
        return np.array([self(g * ones, contexts).time_s for g in range(size + 1)])
