"""Many homogeneous passes at once: :func:`step_cost_grid`, the vectorised form of the model.

Element ``i`` of a grid is one pass of ``batch[i]`` sequences, each with ``context[i]``
cached and ``new_tokens[i]`` new positions in a chain, on ``tensor_parallel[i]`` devices;
the terms are those of :func:`specsim.cost.model.pass_cost` (the same roofline,
:func:`specsim.cost.model.evaluate_terms`), and a homogeneous :func:`~specsim.cost.step_cost`
equals the matching grid element. 10^5 passes take milliseconds
(``benchmarks/bench_cost.py``).

>>> from specsim.cards import load_hardware, load_model
>>> g = step_cost_grid(load_model("llama-2-7b"), load_hardware("a100-80gb"),
...                    batch=[1, 64], context=512, new_tokens=1)
>>> g.time_s.shape, bool(g.time_s[1] > g.time_s[0])
((2,), True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile
from specsim.cost.checks import (
    check_hardware,
    check_model,
    check_runtime,
    check_tensor_parallel,
    int_array,
)
from specsim.cost.checks import check_positions as _check_positions
from specsim.cost.formats import Formats, resolve_formats
from specsim.cost.model import (
    HardwareLike,
    ModelLike,
    RuntimeLike,
    encoder_tokens,
    evaluate_terms,
    memory_error,
)
from specsim.cost.moe import check_expert_parallel
from specsim.cost.results import RESULT_FIELDS, StepCostGrid
from specsim.cost.shape import chain_sums

__all__ = ["step_cost_grid"]


def _broadcast(
    batch: ArrayLike, context: ArrayLike, new_tokens: ArrayLike, tp: NDArray[np.float64]
) -> tuple[NDArray[Any], ...]:
    B = int_array("batch", batch, 1)
    ctx = int_array("context", context, 0)
    new = int_array("new_tokens", new_tokens, 1)
    try:
        return tuple(np.broadcast_arrays(B, ctx, new, tp))
    except ValueError as exc:
        raise ValueError(
            f"batch, context, new_tokens, tensor_parallel: shapes {np.shape(batch)}, "
            f"{np.shape(context)}, {np.shape(new_tokens)}, {np.shape(tp)} do not broadcast"
        ) from exc


def _terms(
    model: ModelCard,
    hardware: HardwareCard,
    *,
    formats: Formats,
    tp: NDArray[Any],
    sums: tuple[Any, Any, Any],
    runtime: RuntimeProfile | None,
    ep: int = 1,
    batch: NDArray[Any] | None = None,
    verify: bool = False,
) -> dict[str, NDArray[np.float64]]:
    """Every result field as an array of the grid's shape, one evaluation per device count
    (each of which ``ep`` expert groups must split, :func:`check_expert_parallel`)."""
    T, S, R = sums
    groups = np.unique(tp)
    for t in groups.astype(int).tolist():
        check_expert_parallel(model, ep, tensor_parallel=t, name="expert_parallel")
    if groups.size == 1:  # the usual case: one device count for the whole grid
        terms = evaluate_terms(
            model,
            hardware,
            formats=formats,
            tp=float(groups[0]),
            T=T,
            S=S,
            R=R,
            runtime=runtime,
            expert_parallel=ep,
            batch=batch,
            verify=verify,
        )
        return {
            k: np.asarray(np.broadcast_to(getattr(terms, k), T.shape), dtype=np.float64)
            for k in RESULT_FIELDS
        }
    arrays = {k: np.empty(T.shape) for k in RESULT_FIELDS}
    for g in groups:
        sel = tp == g
        terms = evaluate_terms(
            model,
            hardware,
            formats=formats,
            tp=float(g),
            T=T[sel],
            S=S[sel],
            R=R[sel],
            runtime=runtime,
            expert_parallel=ep,
            batch=None if batch is None else batch[sel],
            verify=verify,
        )
        for k in RESULT_FIELDS:
            arrays[k][sel] = getattr(terms, k)
    return arrays


def step_cost_grid(
    model: ModelLike,
    hardware: HardwareLike,
    *,
    batch: ArrayLike,
    context: ArrayLike,
    new_tokens: ArrayLike,
    dtype: str | None = None,
    tensor_parallel: ArrayLike = 1,
    encoder_length: int | None = None,
    check_memory: bool = True,
    check_positions: bool = True,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    runtime: RuntimeLike = None,
    expert_parallel: int = 1,
    expert_weights: str | None = None,
    verify: bool = False,
) -> StepCostGrid:
    """Costs of many homogeneous passes at once (vectorised).

    ``batch``, ``context``, ``new_tokens`` and ``tensor_parallel`` broadcast
    together; element ``i`` is one pass of ``batch[i]`` sequences, each with
    ``context[i]`` cached and ``new_tokens[i]`` new tokens. With
    ``check_memory`` (default) any element that does not fit raises a
    ValueError naming it; without, :attr:`StepCostGrid.fits` marks them. Every
    ``tensor_parallel`` must split the model's heads, as in :func:`step_cost`; with
    ``check_positions`` (default), every ``context + new_tokens`` must also be within the
    model's ``max_position`` (:func:`~specsim.cost.checks.check_positions`), else a ValueError
    naming the element: a cost past the positions a model was made for is not a cost of
    that model. ``check_positions=False`` is for deliberate extrapolation only. ``verify``: the
    passes verify drafted tokens, so a stack's speculative terms apply
    (:mod:`specsim.cost.stack_terms`; as in :func:`~specsim.cost.step_cost`). A functional
    kernel: on a deployment, ``step_cost_grid(dep.target, dep.hardware, ..., **dep.keywords())``
    (one pass: :meth:`specsim.cost.deployment.Deployment.pass_cost`).
    """
    model, hardware = check_model(model), check_hardware(hardware)
    rt = check_runtime(runtime, hardware)
    tp0 = check_tensor_parallel(model, tensor_parallel)
    B, ctx, new, tp = _broadcast(batch, context, new_tokens, tp0)
    if check_positions:
        _check_positions(model, context=ctx, new_tokens=new)
    formats = resolve_formats(
        model, dtype, weights=weights, kv=kv, group_size=group_size, expert_weights=expert_weights
    )
    sums = chain_sums(B, B * ctx, new, encoder_tokens(model, encoder_length))
    arrays = _terms(
        model,
        hardware,
        formats=formats,
        tp=tp,
        sums=sums,
        runtime=rt,
        ep=expert_parallel,
        batch=B,
        verify=verify,
    )
    fits = arrays["resident_bytes"] <= hardware.mem_capacity
    if check_memory and not fits.all():
        i = tuple(int(j) for j in np.argwhere(~fits)[0]) if fits.ndim else ()
        resident = float(arrays["resident_bytes"][i])
        err = memory_error(
            model, hardware, formats=formats, tp=float(tp[i]), B=float(B[i]), resident=resident
        )
        raise ValueError(
            f"element {i} of {int((~fits).sum())} that do not fit (context {int(ctx[i])}, new "
            f"tokens {int(new[i])}): {err}"
        )
    return StepCostGrid(
        **arrays,
        fits=fits,
        dtype=formats.compute,
        weight_format=formats.weight_format,
        kv_format=formats.kv_format,
    )
