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
  (draft weights, head weights; 0 for a lookup).

:data:`Proposer` is the protocol (an open set, not a union of the kinds that ship);
:func:`check_proposer` is how an entry point turns anything else into a TypeError naming
what is missing, instead of an AttributeError deep in a simulator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import ModelCard
from specsim.proposers.tables import RankAcceptance

if TYPE_CHECKING:
    from specsim.cost.deployment import Deployment

__all__ = [
    "DraftCost",
    "ProposerProtocol",
    "Proposer",
    "check_proposer",
    "check_acceptance",
    "reshaped_card",
    "frontier_passes",
    "ScalarFromArrays",
    "MEMBERS",
]


@dataclass(frozen=True, slots=True)
class DraftCost:
    """What drafting one tree costs per pass, over all ``batch`` sequences: seconds, joules,
    flops; floats, or arrays with one element per pass
    (:meth:`specsim.proposers.DraftModel.draft_costs`)."""

    time_s: Any
    energy_j: Any
    flops: Any

    def at(self, i: int) -> DraftCost:
        """Element ``i`` of an array-valued cost, as floats."""
        return DraftCost(float(self.time_s[i]), float(self.energy_j[i]), float(self.flops[i]))


def reshaped_card(
    target: ModelCard, shape: Mapping[str, Any], *, slug: str, name: str
) -> ModelCard:
    """``target`` with the fields of ``shape`` replaced (a draft made of the target's own
    layers or blocks), named ``slug`` and ``name``; ``params`` is the new shape's count, every
    other field the target's, and it comes from no file."""
    # The stated-params check compares params with the shape: give the shape's own count.
    loose = dataclasses.replace(target, **shape, params_tolerance=1e9)
    return dataclasses.replace(
        loose,
        slug=slug,
        name=name,
        params=loose.shape_params,
        params_tolerance=target.params_tolerance,
        source_path=None,
    )


def check_acceptance(acceptance: object, where: str) -> None:
    """A TypeError naming ``where`` (the proposer) unless ``acceptance`` is a
    :class:`RankAcceptance`."""
    if not isinstance(acceptance, RankAcceptance):
        raise TypeError(
            f"{where} acceptance: expected a RankAcceptance, got {type(acceptance).__name__}"
        )


def frontier_passes(
    deployment: Deployment,
    widths: Sequence[int],
    *,
    batch: int,
    context: NDArray[np.float64] | NDArray[np.int64],
    scale: float = 1.0,
) -> DraftCost:
    """Per element of ``context``: step ``d`` runs ``deployment``'s model once over the
    depth-``d`` frontier of every sequence, batched: ``widths[d - 1]`` new positions per
    sequence after ``context + d - 1`` tokens, each attending to that context and itself
    (the sums of ``PassShape.tree(context=context + d - 1, parents=[-1] * w, batch=batch)``,
    on arrays of contexts: :meth:`Deployment.aggregates_cost`), each step's cost times
    ``scale``. A draft model, an MTP block and a self-speculative layer subset all draft
    this way; they differ only in the model ``deployment`` carries."""
    ctx = np.asarray(context, dtype=np.float64)
    time, energy, flops = np.zeros(ctx.shape), np.zeros(ctx.shape), np.zeros(ctx.shape)
    for d, w in enumerate(widths, start=1):
        if w == 0:
            continue
        c = ctx + (d - 1)
        t = deployment.aggregates_cost(
            batch=batch,
            tokens=float(batch * w),
            context_tokens=batch * c,
            pairs=batch * (w * c + w),
        )
        time += scale * t.time_s
        energy += scale * t.energy_j
        flops += scale * t.flops
    return DraftCost(time, energy, flops)


MEMBERS = (
    "name",
    "acceptance",
    "overlappable",
    "check_target",
    "draft_costs",
    "draft_cost",
    "memory_bytes",
)
"""What a proposer must have (the protocol's members), in the order the docstring gives."""


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


class ScalarFromArrays:
    """Mixin of the shipped proposers: ``draft_cost`` at one context is element 0 of
    ``draft_costs`` at the one-element array of it (the kind defines ``draft_costs``)."""

    __slots__ = ()

    def draft_cost(
        self: Proposer, parents: Sequence[int], *, deployment: Deployment, batch: int, context: int
    ) -> DraftCost:
        return self.draft_costs(parents, deployment=deployment, batch=batch, context=context).at(0)


Proposer = ProposerProtocol
"""Any source of drafted tokens: the shipped kinds (:mod:`specsim.proposers.kinds`,
:mod:`specsim.proposers.lookup`) or a user's class with the protocol's members."""


def check_proposer(proposer: object, *, where: str = "proposer") -> ProposerProtocol:
    """``proposer`` when it has every member of the protocol (:data:`MEMBERS`), else a
    TypeError naming its type and what it lacks (``where``: the field or flag it came from).

    >>> check_proposer(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: proposer: object is not a proposer: it lacks name, acceptance, ...
    """
    missing = [m for m in MEMBERS if not hasattr(proposer, m)]
    calls = ("check_target", "draft_costs", "draft_cost", "memory_bytes")
    missing += [m for m in calls if m not in missing and not callable(getattr(proposer, m))]
    if missing:
        raise TypeError(
            f"{where}: {type(proposer).__name__} is not a proposer: it lacks "
            f"{', '.join(missing)} (specsim.proposers.ProposerProtocol)"
        )
    return proposer  # type: ignore[return-value]
