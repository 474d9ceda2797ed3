"""What the serving engine asks a proposer (:mod:`specsim.proposers.protocol`): checked once,
so that a proposer lacking part of the protocol is a TypeError naming what it lacks, never
an AttributeError from deep inside a pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from numpy.typing import ArrayLike

from specsim.cost.deployment import Deployment
from specsim.proposers import DraftCost, check_proposer

__all__ = ["proposer_draft_costs"]


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
