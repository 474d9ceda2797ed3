"""Quantities derived from pass costs: c, v(gamma) and c-hat, vectorised over their arguments.

The cost coefficient c (draft step / target step, Leviathan et al. 2023,
Definition 3.7), the verification factor v(gamma) and the operations
coefficient c-hat, each evaluated by :mod:`specsim.cost.model` on a grid in
one vectorised call. Tidy tables of them are in :mod:`specsim.cost.frames`.

>>> from specsim.cards import load_hardware, load_model
>>> m7, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
>>> round(verification_factor(m7, hw, 3, batch=256, context=128, dtype="bfloat16"), 2)
2.92
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard
from specsim.cost.checks import check_model, int_array
from specsim.cost.checks import check_positions as _check_positions
from specsim.cost.flops import pass_flops
from specsim.cost.grid import step_cost_grid
from specsim.cost.model import DEFAULT_CONTEXT, RuntimeLike
from specsim.cost.results import FloatArray
from specsim.cost.shape import verification_positions

__all__ = ["cost_coefficient", "verification_factor", "ops_coefficient"]


def _scalar_or_array(x: FloatArray) -> FloatArray | float:
    return float(x) if x.ndim == 0 else x


def cost_coefficient(
    draft: ModelCard,
    target: ModelCard,
    hardware: HardwareCard,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    draft_hardware: HardwareCard | None = None,
    tensor_parallel: ArrayLike = 1,
    dtype: str | None = None,
    encoder_length: int | None = None,
    check_positions: bool = True,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    draft_weights: str | None = None,
    draft_group_size: int | None = None,
    runtime: RuntimeLike = None,
    draft_runtime: RuntimeLike = None,
) -> FloatArray | float:
    """c = time of one draft step / time of one target step (one new token each).

    Leviathan et al. 2023, Definition 3.7 (the cost coefficient). The draft runs
    on ``draft_hardware`` (default: the target's) without tensor parallelism;
    the target with ``tensor_parallel``. ``dtype`` None uses each card's own.
    Vectorised over ``batch``, ``context`` and ``tensor_parallel``. A ``context``
    past either model's ``max_position`` raises a ValueError unless
    ``check_positions=False`` (deliberate extrapolation). ``weights``, ``kv`` and
    ``group_size`` are the target's formats (:func:`specsim.cost.resolve_formats`);
    ``draft_weights`` and ``draft_group_size`` the draft's (its KV cache in ``kv`` too);
    ``runtime`` and ``draft_runtime`` the software stacks' profiles (None: each card's own;
    the draft on the target's hardware shares ``runtime`` unless given its own).
    """
    d_hw = hardware if draft_hardware is None else draft_hardware
    kw: dict[str, Any] = dict(
        batch=batch,
        context=context,
        new_tokens=1,
        dtype=dtype,
        encoder_length=encoder_length,
        check_positions=check_positions,
    )
    d_rt = runtime if draft_runtime is None and draft_hardware is None else draft_runtime
    d_fmt: dict[str, Any] = {"weights": draft_weights, "group_size": draft_group_size}
    t_fmt: dict[str, Any] = {"weights": weights, "group_size": group_size}
    t_d = step_cost_grid(draft, d_hw, kv=kv, runtime=d_rt, **d_fmt, **kw).time_s
    t_t = step_cost_grid(
        target, hardware, tensor_parallel=tensor_parallel, kv=kv, runtime=runtime, **t_fmt, **kw
    ).time_s
    return _scalar_or_array(np.asarray(t_d / t_t))


def verification_factor(
    model: ModelCard,
    hardware: HardwareCard,
    gamma: ArrayLike,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    tensor_parallel: ArrayLike = 1,
    dtype: str | None = None,
    encoder_length: int | None = None,
    check_positions: bool = True,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    runtime: RuntimeLike = None,
    expert_parallel: int = 1,
    expert_weights: str | None = None,
) -> FloatArray | float:
    """v(gamma) = time(gamma + 1 new tokens) / time(1 new token), same batch and context.

    Near 1 while the pass is memory-bound (the weights are read once either
    way); towards ``gamma + 1`` once ``batch * (gamma + 1)`` passes
    :func:`ridge_tokens`; above 1 at batch 1 for weight-only quantized ``weights``, whose
    dequantization grows with the rows (:mod:`specsim.cost.quant`). Vectorised over
    ``gamma``, ``batch``, ``context``. A ``context + gamma + 1`` past the model's
    ``max_position`` raises a ValueError unless ``check_positions=False``.
    """
    g = int_array("gamma", gamma, 0)
    kw: dict[str, Any] = dict(
        batch=batch,
        context=context,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        encoder_length=encoder_length,
        check_positions=check_positions,
        weights=weights,
        kv=kv,
        group_size=group_size,
        runtime=runtime,
        expert_parallel=expert_parallel,
        expert_weights=expert_weights,
    )
    t_v = step_cost_grid(model, hardware, new_tokens=verification_positions(g), **kw).time_s
    t_1 = step_cost_grid(model, hardware, new_tokens=1, **kw).time_s
    return _scalar_or_array(np.asarray(t_v / t_1))


def ops_coefficient(
    draft: ModelCard,
    target: ModelCard,
    *,
    context: ArrayLike = DEFAULT_CONTEXT,
    encoder_length: int | None = None,
    check_positions: bool = True,
) -> FloatArray | float:
    """c-hat = draft flops per token / target flops per token (batch 1, one new token).

    The operations analogue of the cost coefficient (Leviathan et al. 2023,
    Section 3.4, the ratio of arithmetic operations per token). A ``context`` past
    either model's ``max_position`` raises a ValueError unless ``check_positions=False``.
    """
    if check_positions:
        for card in (check_model(draft), check_model(target)):
            _check_positions(card, context=context, new_tokens=1)
    fd = pass_flops(draft, context=context, encoder_length=encoder_length)
    ft = pass_flops(target, context=context, encoder_length=encoder_length)
    return _scalar_or_array(np.asarray(np.asarray(fd) / np.asarray(ft)))
