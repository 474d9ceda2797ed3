"""A card-priced cost source seen as a deployment and priced from sums
(:class:`CardDeployment`, a part of :class:`specsim.sim.costs.costs.CardCost`): its
:class:`~specsim.cost.deployment.Deployment` value (what a proposer prices its drafting
on), the target's pass given as sums over a batch of different token trees, and the
closed-form sums of uniform iterations that CardCost's speed paths evaluate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from specsim.cost import (
    Footprint,
    Formats,
    PassShape,
    Roofline,
    chain_sums,
    encoder_tokens,
    footprint,
    roofline,
    step_cost_grid,
    time_energy,
    verification_positions,
)
from specsim.cost.checks import check_tensor_parallel
from specsim.cost.deployment import Deployment
from specsim.cost.derived import draft_on
from specsim.cost.drafting import check_draft_deployment as _check_draft_deployment
from specsim.cost.results import StepCostGrid
from specsim.sim.costs.source import PassCost

if TYPE_CHECKING:
    from specsim.cards import HardwareCard, ModelCard

__all__ = [
    "CardDeployment",
    "OnDeployment",
    "Kernel",
    "NO_DRAFT",
    "check_draft_deployment",
    "kernel",
    "one_sequence_grid",
    "pass_cost_on",
    "passes",
    "verifies",
    "verify_grid",
]

NO_DRAFT = "CardCost draft: this cost source has no draft model (gamma > 0 needs one)"


def check_draft_deployment(deployment: Deployment, draft: ModelCard, given: Deployment) -> None:
    """A CardCost's ``draft_deployment`` against its deployment and draft
    (:func:`specsim.cost.drafting.check_draft_deployment`, where it lives)."""
    _check_draft_deployment(deployment, draft, given, where="CardCost draft_deployment")


class Kernel(NamedTuple):
    """What a pass of one model on one accelerator needs, computed once per cost source."""

    roofline: Roofline  # the roofline constants (specsim.cost.roofline)
    encoder: float  # encoder tokens cross-attended per sequence (0 for decoders)
    devices: float  # tensor-parallel devices the pass runs on


def kernel(dep: Deployment) -> Kernel:
    """The roofline constants of passes on ``dep``."""
    tp = float(dep.tensor_parallel)
    co = roofline(
        dep.target,
        dep.hardware,
        dep.formats(),
        tp,
        dep.runtime,
        expert_parallel=dep.expert_parallel,
    )
    return Kernel(co, encoder_tokens(dep.target, None), tp)


def pass_cost_on(
    dep: Deployment, shape: PassShape, *, verify: bool | None, verified: int | None = None
) -> PassCost:
    sc = dep.pass_cost(shape, verify=verify, verified=verified)
    return PassCost(time_s=sc.time_s, flops=sc.flops, bytes=sc.bytes, energy_j=sc.energy_j)


def verifies(shape: PassShape) -> bool | None:
    """Whether the target's pass of ``shape`` verifies drafted tokens: a chain pass when some
    sequence verifies more than its one new position (gamma > 0); a token tree always (None:
    :func:`specsim.cost.pass_cost`'s own rule)."""
    return None if shape.parents is not None else shape.tokens > shape.batch


def one_sequence_grid(
    dep: Deployment, *, new_tokens: Any, context: NDArray[np.int64], verify: bool = False
) -> StepCostGrid:
    """One-sequence passes on ``dep`` over contexts (:func:`specsim.cost.step_cost_grid`)."""
    return step_cost_grid(
        dep.target,
        dep.hardware,
        batch=1,
        context=context,
        new_tokens=new_tokens,
        verify=verify,
        **dep.keywords(),
    )


def verify_grid(
    dep: Deployment, gamma: NDArray[np.int64], context: NDArray[np.int64]
) -> tuple[NDArray[np.float64], ...]:
    """Time, flops and energy of one-sequence verification blocks drafting ``gamma`` after
    ``context`` (broadcasting): a verification where ``gamma > 0``, a plain pass where it is
    0 (each grid evaluated only when some block needs it)."""
    pos, drafted = verification_positions(gamma), np.asarray(gamma) > 0

    def fields(verify: bool) -> tuple[NDArray[np.float64], ...]:
        g = one_sequence_grid(dep, new_tokens=pos, context=context, verify=verify)
        return tuple(
            np.asarray(getattr(g, k), dtype=float) for k in ("time_s", "flops", "energy_j")
        )

    if not drafted.any():
        return fields(False)
    ver = fields(True)
    if drafted.all():
        return ver
    return tuple(np.where(drafted, v, p) for v, p in zip(ver, fields(False), strict=True))


def passes(
    co: Roofline, T: Any, S: Any, R: Any, *, batch: Any, verify: Any, verified: Any = None
) -> tuple[Any, Any]:
    """Time and energy of passes (numbers or arrays) that verify drafted tokens where
    ``verify`` (a bool, or a bool array of the passes' shape), ``verified`` of their new tokens
    (None: all ``T``): both evaluations only where the passes differ. An element without
    sequences (``batch`` 0, masked out by the caller) is evaluated at batch 1: a stack's terms
    divide by the batch."""
    batch = np.maximum(batch, 1.0)
    v = np.asarray(verify)
    if v.ndim == 0 or v.all() or not v.any():
        ver = bool(v.all())
        t, e = time_energy(co, T, S, R, batch=batch, verify=ver, verified=verified)[:2]
        return t, e
    t1, e1 = time_energy(co, T, S, R, batch=batch, verify=True, verified=verified)[:2]
    t0, e0 = time_energy(co, T, S, R, batch=batch)[:2]
    return np.where(v, t1, t0), np.where(v, e1, e0)


class OnDeployment:
    """The target and hardware cards of a ``deployment`` field (a cost source's, a tree
    config's)."""

    deployment: Deployment

    @property
    def target(self) -> ModelCard:
        """The deployment's target card."""
        return self.deployment.target

    @property
    def hardware(self) -> HardwareCard:
        """The target's hardware card (where admission counts the KV cache)."""
        return self.deployment.hardware


class CardDeployment(OnDeployment):
    """The deployment, memory and pass-sum methods of :class:`specsim.sim.costs.costs.CardCost` (on
    its fields ``deployment``, ``draft`` and ``draft_deployment`` and its roofline kernels)."""

    deployment: Deployment
    draft: ModelCard | None
    draft_deployment: Deployment | None

    if TYPE_CHECKING:  # CardCost's own

        @property
        def _kernels(self) -> tuple[Any, Any]: ...

    @property
    def tensor_parallel(self) -> int:
        """The target's tensor-parallel degree."""
        return self.deployment.tensor_parallel

    @property
    def overlapped(self) -> bool:
        """Whether drafting runs beside verification (placement ``overlapped``)."""
        return self.deployment.draft_placement == "overlapped"

    def formats(self, *, draft: bool = False) -> Formats:
        """The :class:`~specsim.cost.Formats` of the target's passes, or the draft's."""
        return (self.drafting() if draft else self.deployment).formats()

    def drafting(self) -> Deployment:
        """Where the draft runs: ``draft_deployment`` when given; else, placed ``shared``, the
        target's devices and stack, split over the target's tensor parallelism when that
        splits the draft's heads and on one device otherwise (replicated, as vLLM's
        ``speculative_draft_tensor_parallel_size = 1``); placed ``own-device`` or
        ``overlapped``, one device of the same hardware card and stack
        (:func:`specsim.cost.derived.draft_on`: in the deployment's ``dtype`` when it names
        one, its own card's otherwise). A ValueError without a draft model."""
        if self.draft is None:
            raise ValueError(NO_DRAFT)
        if self.draft_deployment is not None:
            return self.draft_deployment
        dep = self.deployment
        tp = dep.tensor_parallel if dep.draft_placement == "shared" else 1
        try:
            check_tensor_parallel(self.draft, tp)
        except ValueError:  # the draft's heads do not split that way: one device each
            tp = 1
        return draft_on(dep, self.draft, tensor_parallel=tp)

    def aggregate_pass(
        self, *, batch: int, tokens: float, context_tokens: float, pairs: float
    ) -> PassCost:
        """The target's pass given as sums over its sequences
        (:meth:`specsim.cost.deployment.Deployment.aggregates_cost`): a batch whose sequences
        verify different token trees, which no one :class:`~specsim.cost.PassShape`
        describes."""
        sc = self.deployment.aggregates_cost(
            batch=batch,
            tokens=tokens,
            context_tokens=context_tokens,
            pairs=pairs,
            verify=tokens > batch,  # some sequence verifies more than its root
        )
        return PassCost(
            time_s=float(sc.time_s),
            flops=float(sc.flops),
            bytes=float(sc.bytes),
            energy_j=float(sc.energy_j),
        )

    def _uniform(self, b: Any, sc: Any, gamma: int) -> tuple[Any, Any, Any]:
        """Time, energy and draft time of uniform iterations (floats or arrays)."""
        (tl, te, _), draft = self._kernels
        T, S, R = chain_sums(b, sc, verification_positions(float(gamma)), te)
        time, energy, _, _, _ = time_energy(tl, T, S, R, batch=b, verify=gamma > 0)
        d_time = 0.0
        if gamma > 0:
            if draft is None:
                raise ValueError(NO_DRAFT)
            dl, de, _ = draft
            _, s0, r0 = chain_sums(b, sc, 1.0, de)
            for j in range(gamma):  # draft step j: one token per sequence after j drafted
                jb = j * b
                t, e, _, _, _ = time_energy(dl, b, s0 + jb, r0 + jb, batch=b)
                d_time += t
                energy += e
        return time + d_time, energy, d_time

    def _times(self, b: float, sc: float, max_gamma: int) -> NDArray[np.float64]:
        """The same sums as :meth:`iteration` per gamma, on Python floats (a speed trick: a third
        of the time on arrays; the same operations, so the same floats; tests check it)."""
        (tl, te, _), draft = self._kernels
        times = [
            time_energy(
                tl, *chain_sums(b, sc, verification_positions(float(g)), te), batch=b, verify=g > 0
            )[0]
            for g in range(max_gamma + 1)
        ]
        if max_gamma > 0 and draft is not None:
            dl, de, _ = draft
            acc = 0.0  # the draft steps' cumulative sum, in order
            for j in range(max_gamma):  # draft step j: every sequence's context j tokens on
                acc += time_energy(dl, *chain_sums(b, sc + float(j) * b, 1.0, de), batch=b)[0]
                times[j + 1] += acc
        return np.array(times, dtype=np.float64)

    def footprints(self) -> tuple[Footprint, Footprint | None]:
        """Per device, the target's memory footprint and, when it shares the target's
        devices (placement ``shared``), the draft's (:func:`specsim.cost.footprint`).

        The draft is counted whole on each device (conservative: its passes are
        modelled split over the target's devices, its memory is not).
        """
        target = footprint(
            self.target, tensor_parallel=self.tensor_parallel, formats=self.formats()
        )
        if self.draft is None or self.deployment.draft_placement != "shared":
            return target, None
        return target, footprint(self.draft, tensor_parallel=1, formats=self.formats(draft=True))

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of one sequence on one device, target and draft together."""
        target, draft = self.footprints()
        return target.kv_bytes_per_token + (0.0 if draft is None else draft.kv_bytes_per_token)

    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens one device holds after the weights: the serving admission budget.

        Raises ValueError when the weights leave no room.
        """
        target, draft = self.footprints()
        weights = target.weights_bytes + (0.0 if draft is None else draft.weights_bytes)
        free = self.hardware.mem_capacity - weights
        if free <= 0:
            raise ValueError(
                f"cost: the weights ({weights / 1e9:.1f} GB per device) leave no "
                f"room for a KV cache on {self.hardware.slug} "
                f"({self.hardware.mem_capacity / 1e9:.1f} GB)"
            )
        return int(free / self.kv_bytes_per_token())
