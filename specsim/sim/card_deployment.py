"""A card-priced cost source seen as a deployment (:class:`CardDeployment`, a part of
:class:`specsim.sim.costs.CardCost`): its :class:`~specsim.cost.deployment.Deployment`
value (what a proposer prices its drafting on), the target's pass given as sums over a
batch of different token trees, the weights and KV-cache footprints and the KV capacity
serving admission reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specsim.cost import Footprint, footprint, pass_aggregates_cost
from specsim.cost.deployment import Deployment
from specsim.sim.source import PassCost

if TYPE_CHECKING:
    from specsim.cards import HardwareCard, ModelCard
    from specsim.cost import Formats

__all__ = ["CardDeployment"]


class CardDeployment:
    """The deployment methods of :class:`specsim.sim.costs.CardCost` (on its fields
    ``target``, ``draft``, ``hardware``, ``draft_hardware``, ``tensor_parallel``,
    ``runtime``, ``weights``, ``kv``, ``group_size`` and its formats)."""

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

    def footprints(self) -> tuple[Footprint, Footprint | None]:
        """Per device, the target's memory footprint and, when it shares the target's
        accelerator, the draft's (:func:`specsim.cost.footprint`).

        The draft is counted whole on each device (conservative: its passes are
        modelled split over the target's devices, its memory is not).
        """
        target = footprint(
            self.target, tensor_parallel=self.tensor_parallel, formats=self.formats()
        )
        if self.draft is None or self.draft_hardware is not None:
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
