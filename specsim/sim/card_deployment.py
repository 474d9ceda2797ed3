"""A card-priced cost source seen as a deployment and priced from sums
(:class:`CardDeployment`, a part of :class:`specsim.sim.costs.CardCost`): its
:class:`~specsim.cost.deployment.Deployment` value (what a proposer prices its drafting
on), the target's pass given as sums over a batch of different token trees, and the
closed-form sums of uniform iterations that CardCost's speed paths evaluate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost import chain_sums, pass_aggregates_cost, time_energy, verification_positions
from specsim.cost.deployment import Deployment
from specsim.sim.source import PassCost

if TYPE_CHECKING:
    from specsim.cards import HardwareCard, ModelCard
    from specsim.cost import Formats

__all__ = ["CardDeployment"]


class CardDeployment:
    """The deployment and pass-sum methods of :class:`specsim.sim.costs.CardCost` (on its
    fields ``target``, ``draft``, ``hardware``, ``draft_hardware``, ``tensor_parallel``,
    ``runtime``, ``weights``, ``kv``, ``group_size``, its formats and its roofline
    kernels)."""

    target: ModelCard
    draft: ModelCard | None
    hardware: HardwareCard
    draft_hardware: HardwareCard | None
    tensor_parallel: int
    runtime: Any
    weights: str | None
    kv: str | None
    group_size: int | None

    if TYPE_CHECKING:  # CardCost's own

        def formats(self, *, draft: bool = False) -> Formats: ...

        def _format_kw(self, *, draft: bool) -> dict[str, Any]: ...

        @property
        def _kernels(self) -> tuple[Any, Any]: ...

    def _draft_model(self) -> tuple[ModelCard, HardwareCard, int]:
        if self.draft is None:
            raise ValueError("this cost source has no draft model")
        if self.draft_hardware is not None:
            return self.draft, self.draft_hardware, 1
        return self.draft, self.hardware, self.tensor_parallel

    def aggregate_pass(
        self, *, batch: int, tokens: float, context_tokens: float, pairs: float
    ) -> PassCost:
        """The target's pass given as sums over its sequences
        (:func:`specsim.cost.pass_aggregates_cost`): a batch whose sequences verify different
        token trees, which no one :class:`~specsim.cost.PassShape` describes."""
        sc = pass_aggregates_cost(
            self.target,
            self.hardware,
            batch=batch,
            tokens=tokens,
            context_tokens=context_tokens,
            pairs=pairs,
            tensor_parallel=self.tensor_parallel,
            **self._format_kw(draft=False),
        )
        return PassCost(
            time_s=float(sc.time_s),
            flops=float(sc.flops),
            bytes=float(sc.bytes),
            energy_j=float(sc.energy_j),
        )

    def deployment(self) -> Deployment:
        """The target's :class:`~specsim.cost.deployment.Deployment`: its cards, stack,
        formats and tensor parallelism (what a proposer prices its drafting on)."""
        f = self.formats()
        return Deployment(
            target=self.target,
            hardware=self.hardware,
            runtime=self.runtime,
            dtype=f.compute,
            weights=self.weights,
            kv=self.kv,
            group_size=self.group_size,
            tensor_parallel=self.tensor_parallel,
        )

    def _uniform(self, b: Any, sc: Any, gamma: int) -> tuple[Any, Any, Any]:
        """Time, energy and draft time of uniform iterations (floats or arrays)."""
        (tl, te, _), draft = self._kernels
        T, S, R = chain_sums(b, sc, verification_positions(float(gamma)), te)
        time, energy, _, _, _ = time_energy(tl, T, S, R)
        d_time = 0.0
        if gamma > 0:
            if draft is None:
                raise ValueError("this cost source has no draft model")
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
