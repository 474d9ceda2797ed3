"""Passes given by their aggregates: the cost terms of passes described as sums over their
sequences (:func:`pass_aggregates_cost`), the simulators' vectorised path beside
:func:`specsim.cost.model.step_cost`, for batches whose sequences verify different token
trees that no one :class:`~specsim.cost.shape.PassShape` describes."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from specsim.cost.checks import check_hardware, check_model, check_runtime, check_tensor_parallel
from specsim.cost.formats import resolve_formats
from specsim.cost.model import HardwareLike, ModelLike, RuntimeLike, encoder_tokens, evaluate_terms
from specsim.cost.moe import check_expert_parallel
from specsim.cost.results import PassTerms

__all__ = ["pass_aggregates_cost"]


def _number(x: ArrayLike) -> Any:
    # Plain numbers stay Python floats: 0-d arrays would make every term slow.
    return float(x) if isinstance(x, int | float) else np.asarray(x, dtype=np.float64)


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
    formats = resolve_formats(
        model, dtype, weights=weights, kv=kv, group_size=group_size, expert_weights=expert_weights
    )
    e = encoder_tokens(model, encoder_length)
    B, T = _number(batch), _number(tokens)
    S = _number(pairs) + T * e
    R = _number(context_tokens) + B * e
    rt = check_runtime(runtime, hardware)
    ep = check_expert_parallel(
        model, expert_parallel, tensor_parallel=int(tp), name="expert_parallel"
    )
    return evaluate_terms(
        model,
        hardware,
        formats=formats,
        tp=float(tp),
        T=T,
        S=S,
        R=R,
        runtime=rt,
        expert_parallel=ep,
        batch=B,
        verify=verify,
    )
