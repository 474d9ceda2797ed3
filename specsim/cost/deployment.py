"""The deployment: the one value that says what runs where.

A :class:`Deployment` names the target model card, the hardware card, the software
stack's runtime profile, the weight and KV-cache formats (with the weight group size),
the tensor-parallel degree and where a draft runs (:data:`PLACEMENTS`). Every entry
point (``cost``, ``tree``, ``simulate``, capacity, studies, sweeps, calibration's
predictions) takes one instead of restating these fields as keywords.

Its methods are the only way the layers above price a pass on it: :meth:`pass_cost`
for one :class:`~specsim.cost.shape.PassShape`, :meth:`aggregates_cost` for passes
given as sums (the simulators' vectorised path), and :meth:`on_model` for the same
devices, stack and formats running another model (a draft model, a target with
layers skipped).

>>> from specsim.cards import load_hardware, load_model
>>> dep = Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"))
>>> from specsim.cost.shape import PassShape
>>> dep.pass_cost(PassShape.chain(context=512, new=5)).tokens
5
>>> dep.on_model(load_model("llama-68m")).target.slug
'llama-68m'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile
from specsim.cost.checks import check_hardware, check_model, check_runtime
from specsim.cost.formats import Formats, resolve_formats
from specsim.cost.model import pass_aggregates_cost, pass_cost
from specsim.cost.results import PassTerms, StepCost
from specsim.cost.shape import PassShape

__all__ = ["PLACEMENTS", "Deployment", "Placement"]

Placement = Literal["shared", "own-device", "overlapped"]
PLACEMENTS: tuple[str, ...] = ("shared", "own-device", "overlapped")
"""Where a draft runs: on the target's devices, serialized with verification
(``shared``); on a device of its own, still waiting for each verification
(``own-device``); or on its own device drafting the next block while the target
verifies (``overlapped``)."""


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """What runs where: target, hardware, stack, formats, parallelism, draft placement.

    ``runtime`` None means the hardware card's own numbers
    (:func:`specsim.cards.profile_of_card`); a slug or path is loaded. ``dtype`` None
    means the target card's compute dtype; ``weights``/``kv`` None keep ``dtype``
    (:func:`specsim.cost.resolve_formats`).
    """

    target: ModelCard
    hardware: HardwareCard
    runtime: RuntimeProfile | None = None
    dtype: str | None = None
    weights: str | None = None
    kv: str | None = None
    group_size: int | None = None
    tensor_parallel: int = 1
    draft_placement: Placement = "shared"

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", check_model(self.target))
        object.__setattr__(self, "hardware", check_hardware(self.hardware))
        object.__setattr__(self, "runtime", check_runtime(self.runtime, self.hardware))
        tp = self.tensor_parallel
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"deployment tensor_parallel: expected an integer >= 1, got {tp!r}")
        if self.draft_placement not in PLACEMENTS:
            raise ValueError(
                f"deployment draft_placement: expected one of {', '.join(PLACEMENTS)}, "
                f"got {self.draft_placement!r}"
            )
        self.formats()  # an unknown format or a bad group size fails here

    def formats(self) -> Formats:
        """The compute dtype and the byte widths of this deployment's passes."""
        return resolve_formats(
            self.target, self.dtype, weights=self.weights, kv=self.kv, group_size=self.group_size
        )

    def on_model(self, model: ModelCard, *, tensor_parallel: int | None = None) -> Deployment:
        """The same hardware, stack and KV format running ``model`` (a draft, a pruned
        target). Weight formats are the target's only when ``model`` is the target; a
        different model keeps its own dtype (its card's), as drafts ship."""
        same = model.slug == self.target.slug
        return dataclasses.replace(
            self,
            target=model,
            dtype=self.dtype if same else None,
            weights=self.weights if same else None,
            group_size=self.group_size if same else None,
            tensor_parallel=self.tensor_parallel if tensor_parallel is None else tensor_parallel,
        )

    def pass_cost(self, shape: PassShape) -> StepCost:
        """One pass of ``shape`` on this deployment (:func:`specsim.cost.pass_cost`)."""
        return pass_cost(
            self.target,
            self.hardware,
            shape,
            dtype=self.dtype,
            tensor_parallel=self.tensor_parallel,
            weights=self.weights,
            kv=self.kv,
            group_size=self.group_size,
            runtime=self.runtime,
        )

    def aggregates_cost(
        self, *, batch: ArrayLike, tokens: ArrayLike, context_tokens: ArrayLike, pairs: ArrayLike
    ) -> PassTerms:
        """Passes given as sums over their sequences (:func:`specsim.cost.pass_aggregates_cost`)."""
        return pass_aggregates_cost(
            self.target,
            self.hardware,
            batch=batch,
            tokens=tokens,
            context_tokens=context_tokens,
            pairs=pairs,
            dtype=self.dtype,
            tensor_parallel=self.tensor_parallel,
            weights=self.weights,
            kv=self.kv,
            group_size=self.group_size,
            runtime=self.runtime,
        )
