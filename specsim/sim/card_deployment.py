"""A card-priced cost source seen as a deployment and priced from sums
(:class:`CardDeployment`, a part of :class:`specsim.sim.costs.CardCost`): its
:class:`~specsim.cost.deployment.Deployment` value (what a proposer prices its drafting
on), the target's pass given as sums over a batch of different token trees, and the
closed-form sums of uniform iterations that CardCost's speed paths evaluate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost import chain_sums, time_energy, verification_positions
from specsim.cost.checks import check_tensor_parallel
from specsim.cost.deployment import Deployment
from specsim.cost.derived import draft_on
from specsim.sim.source import PassCost

if TYPE_CHECKING:
    from specsim.cards import ModelCard

__all__ = ["CardDeployment", "NO_DRAFT", "check_draft_deployment"]

NO_DRAFT = "CardCost draft: this cost source has no draft model (gamma > 0 needs one)"


def check_draft_deployment(deployment: Deployment, draft: ModelCard, given: Deployment) -> None:
    """A CardCost's ``draft_deployment`` against its deployment and draft: the draft's own
    deployment must run the draft, in the same placement; a ``shared`` one on the target's
    hardware card. A ValueError naming the field otherwise."""
    if given.target.slug != draft.slug:
        raise ValueError(
            f"CardCost draft_deployment.target: expected the draft {draft.slug!r}, "
            f"got {given.target.slug!r}"
        )
    if given.draft_placement != deployment.draft_placement:
        raise ValueError(
            f"CardCost draft_deployment.draft_placement: {given.draft_placement!r} disagrees "
            f"with the deployment's {deployment.draft_placement!r}"
        )
    if given.draft_placement == "shared" and given.hardware.slug != deployment.hardware.slug:
        raise ValueError(
            f"CardCost draft_deployment.hardware: a shared draft runs on the target's "
            f"{deployment.hardware.slug!r}, got {given.hardware.slug!r} (place it 'own-device' "
            "or 'overlapped')"
        )


class CardDeployment:
    """The deployment and pass-sum methods of :class:`specsim.sim.costs.CardCost` (on its
    fields ``deployment``, ``draft`` and ``draft_deployment`` and its roofline kernels)."""

    deployment: Deployment
    draft: ModelCard | None
    draft_deployment: Deployment | None

    if TYPE_CHECKING:  # CardCost's own

        @property
        def _kernels(self) -> tuple[Any, Any]: ...

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
            batch=batch, tokens=tokens, context_tokens=context_tokens, pairs=pairs
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
        time, energy, _, _, _ = time_energy(tl, T, S, R)
        d_time = 0.0
        if gamma > 0:
            if draft is None:
                raise ValueError(NO_DRAFT)
            dl, de, _ = draft
            _, s0, r0 = chain_sums(b, sc, 1.0, de)
            for j in range(gamma):  # draft step j: one token per sequence after j drafted
                jb = j * b
                t, e, _, _, _ = time_energy(dl, b, s0 + jb, r0 + jb)
                d_time += t
                energy += e
        return time + d_time, energy, d_time

    def _times(self, b: float, sc: float, max_gamma: int) -> NDArray[np.float64]:
        """The same sums as :meth:`iteration` per gamma, on Python floats (a speed trick: a third
        of the time on arrays; the same operations, so the same floats; tests check it)."""
        (tl, te, _), draft = self._kernels
        times = [
            time_energy(tl, *chain_sums(b, sc, verification_positions(float(g)), te))[0]
            for g in range(max_gamma + 1)
        ]
        if max_gamma > 0 and draft is not None:
            dl, de, _ = draft
            acc = 0.0  # the draft steps' cumulative sum, in order
            for j in range(max_gamma):  # draft step j: every sequence's context j tokens on
                acc += time_energy(dl, *chain_sums(b, sc + float(j) * b, 1.0, de))[0]
                times[j + 1] += acc
        return np.array(times, dtype=np.float64)
