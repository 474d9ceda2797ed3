"""What the serving engine asks a proposer (:mod:`specsim.proposers.protocol`): checked once,
so that a proposer lacking part of the protocol is a TypeError naming what it lacks, never
an AttributeError from deep inside a pass.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from numpy.typing import ArrayLike

from specsim.cost.deployment import Deployment
from specsim.proposers import DraftCost

__all__ = ["PROTOCOL", "check_proposer", "proposer_draft_costs"]

PROTOCOL = ("name", "acceptance", "check_target", "draft_costs")
"""What serving reads of a proposer (:class:`specsim.proposers.protocol.ProposerProtocol`)."""


def check_proposer(proposer: object, name: str = "proposer") -> None:
    """A TypeError naming ``name`` and the protocol members ``proposer`` lacks."""
    lacks = [m for m in PROTOCOL if not hasattr(proposer, m)]
    if lacks:
        raise TypeError(
            f"{name}: {type(proposer).__name__} is not a proposer: it lacks "
            f"{', '.join(lacks)} (specsim.proposers.protocol.ProposerProtocol)"
        )


_TAKES: dict[type, bool] = {}  # per proposer type: draft_costs takes deployment=


def _takes_deployment(kind: type) -> bool:
    if kind not in _TAKES:
        fn = getattr(kind, "draft_costs")  # noqa: B009 - checked by check_proposer
        _TAKES[kind] = "deployment" in inspect.signature(fn).parameters
    return _TAKES[kind]


def proposer_draft_costs(
    proposer: Any,
    parents: Sequence[int],
    *,
    deployment: Deployment,
    batch: int,
    context: ArrayLike,
) -> DraftCost:
    """``proposer.draft_costs`` on the target's ``deployment``: what drafting the token tree
    ``parents`` costs per pass over ``batch`` sequences, per element of ``context``; a
    TypeError naming what a proposer lacks (:func:`check_proposer`)."""
    check_proposer(proposer)
    return _draft_costs(proposer, parents, deployment=deployment, batch=batch, context=context)


def _draft_costs(
    proposer: Any,
    parents: Sequence[int],
    *,
    deployment: Deployment,
    batch: int,
    context: ArrayLike,
) -> DraftCost:
    """The protocol's call, or the shipped kinds' older one."""
    if _takes_deployment(type(proposer)):
        out: DraftCost = proposer.draft_costs(
            parents, deployment=deployment, batch=batch, context=context
        )
        return out
    # TEMPORARY: until kinds.py takes deployment= (the shipped kinds still take the cards).
    old: DraftCost = proposer.draft_costs(
        parents,
        target=deployment.target,
        hardware=deployment.hardware,
        batch=batch,
        context=context,
    )
    return old
