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

Three more members are optional (:data:`OPTIONAL`), each with a documented default, so a
class written before them still runs; ask them through the functions of the same name with
``_of`` (:func:`ragged_draft_cost_of`, :func:`prefill_cost_of`,
:func:`kv_bytes_per_token_of`), which fall back to the default:

- ``ragged_draft_cost(trees, contexts, *, deployment)``: one tree per sequence (trees chosen
  per pass), as floats; default: each sequence's share of a pass of the whole batch drafting
  its tree, ``draft_cost(trees[i], batch=B, context=contexts[i]) / B``, summed (the pass
  itself when every tree is the same);
- ``prefill_cost(*, deployment, tokens, context)``: one pass of the proposer's own KV
  prefill, sequence ``i``'s ``tokens[i]`` prompt tokens after ``context[i]`` cached (a chunk,
  or a whole prompt at 0), as floats; default 0 (no KV of its own);
- ``kv_bytes_per_token(deployment)``: its own KV bytes per cached token and device; default 0.

Every shipped kind states its drafting as :class:`~specsim.cost.drafting.DraftWork` and
prices it with :func:`~specsim.cost.drafting.price_draft` (:mod:`specsim.proposers.work`):
one drafting rule under the deployment's drafting profile.

:data:`Proposer` is the protocol (an open set, not a union of the kinds that ship);
:func:`check_proposer` is how an entry point turns anything else into a TypeError naming
what is missing, instead of an AttributeError deep in a simulator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import ModelCard
from specsim.cost.drafting import DraftCost
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
    "ScalarFromArrays",
    "MEMBERS",
    "OPTIONAL",
    "ragged_draft_cost_of",
    "prefill_cost_of",
    "kv_bytes_per_token_of",
]


def reshaped_card(
    target: ModelCard, shape: Mapping[str, Any], *, slug: str, name: str
) -> ModelCard:
    """``target`` with the fields of ``shape`` replaced (a draft made of the target's own
    layers or blocks), named ``slug`` and ``name``; ``params`` is the new shape's count, every
    other field the target's, and it comes from no file. Remembered on the target's identity
    and ``slug`` (a speed trick: one card a shape, so the cost kernel's caches find it)."""
    key = (id(target), slug)
    hit = _RESHAPED.get(key)
    if hit is not None and hit[0] is target:
        return hit[1]
    # The stated-params check compares params with the shape: give the shape's own count.
    loose = dataclasses.replace(target, **shape, params_tolerance=1e9)
    card = dataclasses.replace(
        loose,
        slug=slug,
        name=name,
        params=loose.shape_params,
        params_tolerance=target.params_tolerance,
        source_path=None,
    )
    if len(_RESHAPED) >= 256:
        _RESHAPED.clear()
    _RESHAPED[key] = (target, card)
    return card


_RESHAPED: dict[tuple[int, str], tuple[ModelCard, ModelCard]] = {}


def check_acceptance(acceptance: object, where: str) -> None:
    """A TypeError naming ``where`` (the proposer) unless ``acceptance`` is a
    :class:`RankAcceptance`."""
    if not isinstance(acceptance, RankAcceptance):
        raise TypeError(
            f"{where} acceptance: expected a RankAcceptance, got {type(acceptance).__name__}"
        )


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

OPTIONAL = ("ragged_draft_cost", "prefill_cost", "kv_bytes_per_token")
"""Members a proposer may have; without them the ``*_of`` functions give their defaults."""


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
    missing += [m for m in OPTIONAL if not callable(getattr(proposer, m, _absent))]
    if missing:
        raise TypeError(
            f"{where}: {type(proposer).__name__} is not a proposer: it lacks "
            f"{', '.join(missing)} (specsim.proposers.ProposerProtocol)"
        )
    return proposer  # type: ignore[return-value]


def _absent(*args: Any, **kwargs: Any) -> None:
    """Stands for an optional member a proposer does not have (:func:`check_proposer`)."""


def ragged_draft_cost_of(
    proposer: Proposer,
    trees: Sequence[Sequence[int]],
    contexts: ArrayLike,
    *,
    deployment: Deployment,
) -> DraftCost:
    """``proposer.ragged_draft_cost`` where it has one; else the protocol's default (module
    docstring): sequence ``i``'s share of a pass of the whole batch drafting its tree."""
    own = getattr(proposer, "ragged_draft_cost", None)
    if own is not None:
        cost: DraftCost = own(trees, contexts, deployment=deployment)
        return cost
    ctx = np.asarray(contexts).tolist()
    b, t, e, f = len(trees), 0.0, 0.0, 0.0
    if len(ctx) != b:
        raise ValueError(f"contexts: expected {b} values (one per tree), got {len(ctx)}")
    for tree, c in zip(trees, ctx, strict=True):
        if len(tree):
            d = proposer.draft_cost(tree, deployment=deployment, batch=b, context=int(c))
            t, e, f = t + float(d.time_s) / b, e + float(d.energy_j) / b, f + float(d.flops) / b
    return DraftCost(t, e, f)


def prefill_cost_of(
    proposer: Proposer, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
) -> DraftCost:
    """``proposer.prefill_cost`` where it has one; else 0 (no KV of its own to prefill)."""
    own = getattr(proposer, "prefill_cost", None)
    if own is not None:
        cost: DraftCost = own(deployment=deployment, tokens=tokens, context=context)
        return cost
    return DraftCost(0.0, 0.0, 0.0)


def kv_bytes_per_token_of(proposer: Proposer, deployment: Deployment) -> float:
    """``proposer.kv_bytes_per_token`` where it has one; else 0 (no KV cache of its own)."""
    own = getattr(proposer, "kv_bytes_per_token", None)
    return 0.0 if own is None else float(own(deployment))
