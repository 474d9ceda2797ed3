"""Many homogeneous passes at once: :func:`step_cost_grid`, the vectorised form of the model.

Element ``i`` of a grid is one pass of ``batch[i]`` sequences, each with ``context[i]``
cached and ``new_tokens[i]`` new positions in a chain, on ``tensor_parallel[i]`` devices;
the terms are those of :func:`specsim.cost.model.pass_cost` (the same roofline,
:func:`specsim.cost.model.evaluate_terms`), and a homogeneous :func:`~specsim.cost.step_cost`
equals the matching grid element. 10^5 passes take milliseconds
(``benchmarks/bench_cost.py``). :func:`pass_grid` is the grid on a
:class:`~specsim.cost.deployment.Deployment` (its resolved value, one device count);
:func:`step_cost_grid` its keyword wrapper, whose ``tensor_parallel`` may also vary over
the grid (one resolved deployment for each device count).

>>> from specsim.cards import load_hardware, load_model
>>> g = step_cost_grid(load_model("llama-2-7b"), load_hardware("a100-80gb"),
...                    batch=[1, 64], context=512, new_tokens=1)
>>> g.time_s.shape, bool(g.time_s[1] > g.time_s[0])
((2,), True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cost.checks import (
    check_hardware,
    check_model,
    check_runtime,
    check_tensor_parallel,
    int_array,
)
from specsim.cost.checks import check_positions as _check_positions
from specsim.cost.deployment import Deployment
from specsim.cost.model import HardwareLike, ModelLike, RuntimeLike, keyword_deployment
from specsim.cost.resolved import Resolved, evaluate_terms, memory_error
from specsim.cost.results import RESULT_FIELDS, StepCostGrid
from specsim.cost.shape import chain_sums

__all__ = ["pass_grid", "step_cost_grid"]


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
    resolved: Mapping[float, Resolved],
    *,
    tp: NDArray[Any],
    sums: tuple[Any, Any, Any],
    batch: NDArray[Any],
    verify: bool = False,
) -> dict[str, NDArray[np.float64]]:
    """Every result field as an array of the grid's shape, one evaluation per device count
    (``resolved``: the deployment resolved for each)."""
    T, S, R = sums
    if len(resolved) == 1:  # the usual case: one device count for the whole grid
        (r,) = resolved.values()
        terms = evaluate_terms(r, T=T, S=S, R=R, batch=batch, verify=verify)
        return {
            k: np.asarray(np.broadcast_to(getattr(terms, k), T.shape), dtype=np.float64)
            for k in RESULT_FIELDS
        }
    arrays = {k: np.empty(T.shape) for k in RESULT_FIELDS}
    for g, r in resolved.items():
        sel = tp == g
        terms = evaluate_terms(r, T=T[sel], S=S[sel], R=R[sel], batch=batch[sel], verify=verify)
        for k in RESULT_FIELDS:
            arrays[k][sel] = getattr(terms, k)
    return arrays


def _grid(
    resolved: Mapping[float, Resolved],
    arrays: tuple[NDArray[Any], ...],
    *,
    check_memory: bool,
    verify: bool,
) -> StepCostGrid:
    """The grid of passes ``arrays`` (batch, context, new tokens, devices, broadcast) on the
    deployments ``resolved`` (one for each device count), memory checked when asked."""
    B, ctx, new, tp = arrays
    r0 = next(iter(resolved.values()))
    sums = chain_sums(B, B * ctx, new, r0.encoder)
    values = _terms(resolved, tp=tp, sums=sums, batch=B, verify=verify)
    fits = values["resident_bytes"] <= r0.hardware.mem_capacity
    formats = r0.formats
    if check_memory and not fits.all():
        i = tuple(int(j) for j in np.argwhere(~fits)[0]) if fits.ndim else ()
        resident = float(values["resident_bytes"][i])
        err = memory_error(
            r0.target,
            r0.hardware,
            formats=formats,
            tp=float(tp[i]),
            B=float(B[i]),
            resident=resident,
        )
        raise ValueError(
            f"element {i} of {int((~fits).sum())} that do not fit (context {int(ctx[i])}, new "
            f"tokens {int(new[i])}): {err}"
        )
    return StepCostGrid(
        **values,
        fits=fits,
        dtype=formats.compute,
        weight_format=formats.weight_format,
        kv_format=formats.kv_format,
    )


def pass_grid(
    deployment: Deployment,
    *,
    batch: ArrayLike,
    context: ArrayLike,
    new_tokens: ArrayLike,
    encoder_length: int | None = None,
    check_memory: bool = True,
    check_positions: bool = True,
    verify: bool = False,
) -> StepCostGrid:
    """Costs of many homogeneous passes on ``deployment`` (vectorised): ``batch``,
    ``context`` and ``new_tokens`` broadcast, element ``i`` one pass of ``batch[i]``
    sequences each with ``context[i]`` cached and ``new_tokens[i]`` new tokens in a chain;
    ``check_memory``, ``check_positions`` and ``verify`` as in :func:`step_cost_grid`.

    >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb")
    >>> pass_grid(dep, batch=[1, 64], context=512, new_tokens=1).time_s.shape
    (2,)
    """
    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(deployment).__name__}")
    tp = float(deployment.tensor_parallel)
    arrays = _broadcast(batch, context, new_tokens, np.asarray(tp))
    if check_positions:
        _check_positions(deployment.target, context=arrays[1], new_tokens=arrays[2])
    r = deployment.resolved(encoder_length=encoder_length)
    return _grid({tp: r}, arrays, check_memory=check_memory, verify=verify)


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
    (:mod:`specsim.cost.stack_terms`; as in :func:`~specsim.cost.step_cost`). A keyword
    wrapper: on a deployment, :func:`pass_grid` (one pass:
    :meth:`specsim.cost.deployment.Deployment.pass_cost`).
    """
    model, hardware = check_model(model), check_hardware(hardware)
    rt = check_runtime(runtime, hardware)
    tp0 = check_tensor_parallel(model, tensor_parallel)
    arrays = _broadcast(batch, context, new_tokens, tp0)
    if check_positions:
        _check_positions(model, context=arrays[1], new_tokens=arrays[2])
    resolved = {}
    for g in np.unique(arrays[3]).tolist():  # few distinct device counts, even on a grid
        dep = keyword_deployment(
            model,
            hardware,
            runtime=rt,
            tensor_parallel=int(g),
            dtype=dtype,
            weights=weights,
            kv=kv,
            group_size=group_size,
            expert_parallel=expert_parallel,
            expert_weights=expert_weights,
        )
        resolved[float(g)] = dep.resolved(encoder_length=encoder_length)
    return _grid(resolved, arrays, check_memory=check_memory, verify=verify)
