"""Passes given by their aggregates: the cost terms of passes described as sums over their
sequences (:func:`pass_aggregates_cost`), the simulators' vectorised path beside
:func:`specsim.cost.model.step_cost`, for batches whose sequences verify different token
trees that no one :class:`~specsim.cost.shape.PassShape` describes. The keyword wrapper of
the kernel :func:`specsim.cost.resolved.pass_terms` (on a deployment:
:meth:`Deployment.aggregates_cost <specsim.cost.deployment.Deployment.aggregates_cost>`)."""

from __future__ import annotations

from numpy.typing import ArrayLike

from specsim.cost.checks import check_hardware, check_model, check_runtime, check_tensor_parallel
from specsim.cost.model import HardwareLike, ModelLike, RuntimeLike, keyword_deployment
from specsim.cost.resolved import pass_terms
from specsim.cost.results import PassTerms

__all__ = ["pass_aggregates_cost"]


def pass_aggregates_cost(
    model: ModelLike,
    hardware: HardwareLike,
    *,
    batch: ArrayLike,
    tokens: ArrayLike,
    context_tokens: ArrayLike,
    pairs: ArrayLike,
    dtype: str | None = None,
    tensor_parallel: int = 1,
    encoder_length: int | None = None,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    runtime: RuntimeLike = None,
    expert_parallel: int = 1,
    expert_weights: str | None = None,
    verify: bool = False,
) -> PassTerms:
    """The cost terms of passes given as sums over their sequences (no memory check).

    The model's terms depend on a pass only through ``batch``, its new
    ``tokens``, the ``context_tokens`` cached before it (summed over
    sequences) and the causal self-attention ``pairs``
    (:meth:`specsim.cost.shape.PassShape.pairs`, summed). The arguments
    broadcast, and :func:`step_cost` gives the same numbers (``verify`` as there). The
    positions of the sequences are not known here, so ``max_position`` is not checked.
    """
    model, hardware = check_model(model), check_hardware(hardware)
    tp = check_tensor_parallel(model, tensor_parallel)
    if tp.ndim:
        raise ValueError(f"tensor_parallel: expected a scalar, got {tp.tolist()!r}")
    dep = keyword_deployment(
        model,
        hardware,
        runtime=check_runtime(runtime, hardware),
        tensor_parallel=int(tp),
        dtype=dtype,
        weights=weights,
        kv=kv,
        group_size=group_size,
        expert_parallel=expert_parallel,
        expert_weights=expert_weights,
    )
    return pass_terms(
        dep.resolved(encoder_length=encoder_length),
        batch=batch,
        tokens=tokens,
        context_tokens=context_tokens,
        pairs=pairs,
        verify=verify,
    )
