"""The proposer protocol: what every source of drafted tokens says about itself.

A proposer (ARCHITECTURE.md) says how it drafts and what that costs, and nothing
else: the simulators, the tree optimizer and the capacity search ask only these
questions, so a new proposer is one module and a card, with no edit elsewhere.

- ``name``: a label for tables and figures;
- ``acceptance``: a :class:`~specsim.proposers.tables.RankAcceptance`, the
  probability that the rank-``r`` child of an accepted node at depth ``d`` is
  accepted (a chain's alpha is the one-rank case);
- ``overlappable``: whether its drafting can run beside the target's
  verification (a separate model on its own device can; heads that read the
  target's last hidden state cannot);
- ``check_target(target)``: a ValueError naming both if it cannot draft for
  ``target`` (a head card trained for another model, a draft with another
  vocabulary);
- ``draft_costs(parents, *, deployment, batch, context)``: what drafting the token
  tree ``parents`` costs per pass over ``batch`` sequences, for each element of
  ``context`` (arrays); ``deployment`` is the *target's*
  :class:`~specsim.cost.deployment.Deployment` (its devices, stack and formats),
  from which the proposer prices its own work;
- ``draft_cost(...)``: the same at one integer context, as floats;
- ``memory_bytes(deployment)``: the bytes per device it adds beside the target
  (draft weights and KV cache, head weights; 0 for a lookup).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from numpy.typing import ArrayLike

from specsim.cards import ModelCard
from specsim.proposers.tables import RankAcceptance

if TYPE_CHECKING:
    from specsim.cost.deployment import Deployment
    from specsim.proposers.kinds import DraftCost

__all__ = ["ProposerProtocol"]


@runtime_checkable
class ProposerProtocol(Protocol):
    """Any source of drafted tokens (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def acceptance(self) -> RankAcceptance: ...

    @property
    def overlappable(self) -> bool: ...

    def check_target(self, target: ModelCard) -> None: ...

    def draft_costs(
        self,
        parents: Sequence[int],
        *,
        deployment: Deployment,
        batch: int,
        context: ArrayLike,
    ) -> DraftCost: ...

    def draft_cost(
        self,
        parents: Sequence[int],
        *,
        deployment: Deployment,
        batch: int,
        context: int,
    ) -> DraftCost: ...

    def memory_bytes(self, deployment: Deployment) -> float: ...
