"""The one drafting rule: what a proposer runs, priced under the deployment's drafting profile.

A proposer (:mod:`specsim.proposers`) states only what it runs over how many positions, a
:class:`DraftWork`: the deployment the work runs on (a draft model's card, an MTP block,
the target with layers skipped; their formats and parallelism) and, per draft step, the
sums of the pass it runs (``batch`` sequences, new ``tokens``, cached ``context_tokens``,
attention ``pairs``), with ``scale``, a step's share of that model's pass (heads:
``layer_fraction / layers`` of the target's). :func:`price_draft` prices every kind alike:

* each step runs on ``deployment.drafting()``
  (:meth:`Deployment.drafting <specsim.cost.deployment.Deployment.drafting>`: the stack's
  drafting profile, :meth:`specsim.cards.RuntimeProfile.drafting`), so it pays the stack's
  draft-step host cost, :meth:`StackProfile.draft_step_host_s
  <specsim.cards.stack.StackProfile.draft_step_host_s>` (``draft_step_overhead_s``, and a
  separate drafter's per-sequence work), never the stack's per-pass host cost, and its
  layers launch as ``draft_graphs`` says;
* ``scale`` shrinks the step's model work (roofline, per-layer launches, all-reduces), not
  that host cost: a head's step inside the target's step costs the stack's draft step
  however small the head (the accelerators idle meanwhile: the host seconds are charged
  their idle power);
* a deployment without a stack has no draft-step cost of its own: its drafting profile is
  its own (:meth:`~specsim.cards.RuntimeProfile.drafting`) and a step costs ``scale`` of
  that pass, fixed costs included, as before this rule.

Steps are summed in order, one array axis 0 (a batch's steps: one pass per step), after
the sums of each pass are formed by the proposer. A prefill (``prefill=True``: the
proposer's own KV prefill, one pass an element) is priced by the same rule: the engines
prefill a draft's KV where they draft it (inside the target's step, or as a pass of the
proposer's own worker).

>>> from specsim.cost.deployment import Deployment
>>> from specsim.cost.shape import PassShape
>>> dep = Deployment(target="llama-3.1-8b", hardware="h100-sxm", runtime="sglang")
>>> one = DraftWork(deployment=dep, batch=[1], tokens=[1], context_tokens=[512], pairs=[513],
...                 scale=1.9 / 32)
>>> step = dep.pass_cost(PassShape.chain(context=512, new=1)).time_s  # 1.43 ms host in it
>>> round(price_draft(one).time_s / step, 3)  # 1.9 / 32 of the work, the draft step's host
0.062
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cost.deployment import Deployment
from specsim.cost.resolved import pass_terms

if TYPE_CHECKING:
    from specsim.cards import ModelCard

__all__ = ["DraftCost", "DraftWork", "price_draft", "check_draft_deployment"]


@dataclass(frozen=True, slots=True)
class DraftCost:
    """What drafting costs per pass, over all its sequences: seconds, joules, flops; floats,
    or arrays with one element per pass (:meth:`specsim.proposers.DraftModel.draft_costs`)."""

    time_s: Any
    energy_j: Any
    flops: Any

    def at(self, i: int) -> DraftCost:
        """Element ``i`` of an array-valued cost, as floats."""
        return DraftCost(float(self.time_s[i]), float(self.energy_j[i]), float(self.flops[i]))


@dataclass(frozen=True, kw_only=True)
class DraftWork:
    """What a proposer runs, given as sums per draft step (module docstring).

    ``deployment``: where it runs (a :class:`~specsim.cost.deployment.Deployment` whose
    target is the model that drafts). ``batch``, ``tokens``, ``context_tokens`` and
    ``pairs``: numbers or arrays that broadcast, axis 0 the draft steps (one pass each),
    any further axis the contexts a proposer is priced at; a step of no tokens drafts
    nothing and costs nothing. ``scale``: a step's share of that model's pass, in (0, 1]
    (heads: ``layer_fraction / layers``; may exceed 1 for a head larger than a layer).
    ``prefill``: the proposer's own KV prefill (every element a pass of at least one token),
    not draft steps. A ValueError or TypeError names a bad field."""

    deployment: Deployment
    batch: ArrayLike
    tokens: ArrayLike
    context_tokens: ArrayLike
    pairs: ArrayLike
    scale: float = 1.0
    prefill: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.deployment, Deployment):
            got = type(self.deployment).__name__
            raise TypeError(f"draft work deployment: expected a Deployment, got {got}")
        s = self.scale
        if (
            isinstance(s, bool)
            or not isinstance(s, int | float)
            or not (math.isfinite(s) and s > 0)
        ):
            raise ValueError(f"draft work scale: expected a finite number > 0, got {s!r}")
        try:
            arrays = np.broadcast_arrays(
                *(np.asarray(getattr(self, k), dtype=np.float64) for k in _SUMS)
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"draft work {', '.join(_SUMS)}: {exc}") from None
        for name, a in zip(_SUMS, arrays, strict=True):
            if a.ndim == 0:
                raise ValueError(f"draft work {name}: expected one value per step (axis 0)")
            if not np.isfinite(a).all() or (a < 0).any():
                raise ValueError(f"draft work {name}: expected finite numbers >= 0")
        if self.prefill and (arrays[1] < 1).any():
            raise ValueError("draft work tokens: a prefill pass computes at least one token")

    def sums(self) -> tuple[NDArray[np.float64], ...]:
        """``(batch, tokens, context_tokens, pairs)`` as float arrays of one broadcast shape."""
        arrays = (np.asarray(getattr(self, k), dtype=np.float64) for k in _SUMS)
        return tuple(np.broadcast_arrays(*arrays))


_SUMS = ("batch", "tokens", "context_tokens", "pairs")


def _total(x: NDArray[np.float64], host: NDArray[np.float64], scale: float) -> Any:
    """``sum over steps of scale (x - host) + host``: the steps' work scaled, their host
    seconds not. One step axis (a batch's steps): numpy's sum, a float; more axes: the
    steps added in order, an array. (The two orders of the two paths this rule replaces,
    the ragged batch's and the per-context frontier's, kept so that seeded runs on a
    deployment without a stack do not move by a rounding.)"""
    if x.ndim == 1:
        return scale * float(np.sum(x - host)) + float(np.sum(host))
    total = np.zeros(x.shape[1:])
    for d in range(x.shape[0]):
        total += scale * (x[d] - host[d]) + host[d]
    return total


def price_draft(work: DraftWork) -> DraftCost:
    """Seconds, joules and flops of ``work`` under its deployment's drafting profile, summed
    over its steps (module docstring): floats for one step axis, else arrays of the
    remaining shape (one element per context)."""
    if not isinstance(work, DraftWork):
        raise TypeError(f"work: expected a DraftWork, got {type(work).__name__}")
    r = work.deployment.drafting().resolved()
    B, T, C, P = work.sums()
    active = T > 0
    terms = pass_terms(r, batch=np.maximum(B, 1.0), tokens=T, context_tokens=C, pairs=P)
    time, energy, flops = (
        np.asarray(x, dtype=np.float64) for x in (terms.time_s, terms.energy_j, terms.flops)
    )
    host = np.zeros(T.shape)
    if r.stack is not None:  # a stack's draft step: its host seconds are not scaled
        host = np.broadcast_to(r.step_host_s(B), T.shape).astype(np.float64)
    if not active.all():  # a step nobody drafts costs nothing
        time, energy, flops, host = (np.where(active, x, 0.0) for x in (time, energy, flops, host))
    idle = r.hardware.idle_power_w * r.tensor_parallel  # the devices wait for the host
    s = float(work.scale)
    return DraftCost(
        _total(time, host, s), _total(energy, idle * host, s), _total(flops, 0.0 * host, s)
    )


def check_draft_deployment(
    deployment: Deployment, draft: ModelCard, given: Deployment, *, where: str
) -> None:
    """A draft's own deployment ``given`` against the target's ``deployment`` and the
    ``draft`` card: it must run the draft, in the same placement; a ``shared`` one on the
    target's hardware card. A ValueError naming ``where`` (the field) and the part.

    >>> from specsim.cost.deployment import Deployment
    >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb")
    >>> own = Deployment(target="llama-68m", hardware="a40")
    >>> check_draft_deployment(dep, own.target, own, where="draft_deployment")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: draft_deployment.hardware: a shared draft runs on the target's 'a100-80gb', ...
    """
    if given.target.slug != draft.slug:
        raise ValueError(
            f"{where}.target: expected the draft {draft.slug!r}, got {given.target.slug!r}"
        )
    if given.draft_placement != deployment.draft_placement:
        raise ValueError(
            f"{where}.draft_placement: {given.draft_placement!r} disagrees with the "
            f"deployment's {deployment.draft_placement!r}"
        )
    if given.draft_placement == "shared" and given.hardware.slug != deployment.hardware.slug:
        raise ValueError(
            f"{where}.hardware: a shared draft runs on the target's "
            f"{deployment.hardware.slug!r}, got {given.hardware.slug!r} (place it 'own-device' "
            "or 'overlapped')"
        )
