"""Quantities derived from pass costs, over grids of batch, context and gamma.

The cost coefficient c (draft step / target step), the verification factor
v(gamma) and the operations coefficient c-hat, each vectorised over its
arguments (they are also importable from :mod:`specsim.cost`); and tidy tables
of them: each ``*_frame`` function evaluates :mod:`specsim.cost` on a grid in
one vectorised call and returns a pandas DataFrame with one row per
configuration, ready for :mod:`specsim.plots` or a study. Configurations whose
weights and KV cache do not fit on the accelerator are left out (and counted
in ``df.attrs``).

>>> from specsim.cards import load_hardware, load_model
>>> df = verification_frame(load_model("llama-2-7b"), load_hardware("a100-80gb"),
...                         gammas=(3,), batches=(1, 256), context=128)
>>> df[["gamma", "batch", "tokens"]].values.tolist()
[[3, 1, 4], [3, 256, 1024]]
>>> df.v.round(2).tolist(), df.bound.tolist()
([1.0, 2.92], ['memory', 'compute'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard
from specsim.cost import (
    DEFAULT_CONTEXT,
    FloatArray,
    _int_array,
    pass_flops,
    ridge_tokens,
    step_cost_grid,
)

__all__ = [
    "DEFAULT_BATCHES",
    "cost_coefficient",
    "verification_factor",
    "ops_coefficient",
    "verification_frame",
    "cost_coefficient_frame",
]

DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""Batch sizes swept when none are given (powers of two)."""


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
) -> FloatArray | float:
    """c = time of one draft step / time of one target step (one new token each).

    Leviathan et al. 2023, Definition 3.7 (the cost coefficient). The draft runs
    on ``draft_hardware`` (default: the target's) without tensor parallelism;
    the target with ``tensor_parallel``. ``dtype`` None uses each card's own.
    Vectorised over ``batch``, ``context`` and ``tensor_parallel``.
    """
    d_hw = hardware if draft_hardware is None else draft_hardware
    t_d = step_cost_grid(
        draft,
        d_hw,
        batch=batch,
        context=context,
        new_tokens=1,
        dtype=dtype,
        encoder_length=encoder_length,
    ).time_s
    t_t = step_cost_grid(
        target,
        hardware,
        batch=batch,
        context=context,
        new_tokens=1,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        encoder_length=encoder_length,
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
) -> FloatArray | float:
    """v(gamma) = time(gamma + 1 new tokens) / time(1 new token), same batch and context.

    Near 1 while the pass is memory-bound (the weights are read once either
    way); towards ``gamma + 1`` once ``batch * (gamma + 1)`` passes
    :func:`ridge_tokens`. Vectorised over ``gamma``, ``batch``, ``context``.
    """
    g = _int_array("gamma", gamma, 0)
    kw: dict[str, Any] = dict(
        batch=batch,
        context=context,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        encoder_length=encoder_length,
    )
    t_v = step_cost_grid(model, hardware, new_tokens=g + 1, **kw).time_s
    t_1 = step_cost_grid(model, hardware, new_tokens=1, **kw).time_s
    return _scalar_or_array(np.asarray(t_v / t_1))


def ops_coefficient(
    draft: ModelCard,
    target: ModelCard,
    *,
    context: ArrayLike = DEFAULT_CONTEXT,
    encoder_length: int | None = None,
) -> FloatArray | float:
    """c-hat = draft flops per token / target flops per token (batch 1, one new token).

    The operations analogue of the cost coefficient (Leviathan et al. 2023,
    Section 3.4, the ratio of arithmetic operations per token).
    """
    fd = pass_flops(draft, context=context, encoder_length=encoder_length)
    ft = pass_flops(target, context=context, encoder_length=encoder_length)
    return _scalar_or_array(np.asarray(np.asarray(fd) / np.asarray(ft)))


def verification_frame(
    model: ModelCard,
    hardware: HardwareCard,
    *,
    gammas: Sequence[int] = (1, 3, 7),
    batches: Sequence[int] = DEFAULT_BATCHES,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
    tensor_parallel: int = 1,
    encoder_length: int | None = None,
) -> pd.DataFrame:
    """v(gamma) = time(gamma + 1 new tokens) / time(1 new token) over gamma x batch.

    Columns: model, hardware, dtype, context, tensor_parallel, gamma, batch,
    tokens (``batch * (gamma + 1)``, the tokens of the verification pass), v,
    bound (of the verification pass), time_1_s, time_v_s, ridge_tokens
    (:func:`specsim.cost.ridge_tokens`, the same on every row).
    """
    g = np.asarray(gammas, dtype=np.int64).reshape(-1, 1)
    b = np.asarray(batches, dtype=np.int64).reshape(1, -1)
    kw = dict(
        batch=b,
        context=context,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        encoder_length=encoder_length,
        check_memory=False,
    )
    if g.size == 0 or b.size == 0:
        raise ValueError(f"gammas and batches must be non-empty, got {gammas!r}, {batches!r}")
    verify = step_cost_grid(model, hardware, new_tokens=g + 1, **kw)  # type: ignore[arg-type]
    single = step_cost_grid(model, hardware, new_tokens=1, **kw)  # type: ignore[arg-type]
    gg, bb = np.broadcast_arrays(g, b)
    df = pd.DataFrame(
        {
            "model": model.slug,
            "hardware": hardware.slug,
            "dtype": verify.dtype,
            "context": int(context),
            "tensor_parallel": int(tensor_parallel),
            "gamma": gg.ravel(),
            "batch": bb.ravel(),
            "tokens": (bb * (gg + 1)).ravel(),
            "v": (verify.time_s / np.broadcast_to(single.time_s, verify.time_s.shape)).ravel(),
            "bound": verify.bound.ravel(),
            "time_1_s": np.broadcast_to(single.time_s, verify.time_s.shape).ravel(),
            "time_v_s": verify.time_s.ravel(),
            "ridge_tokens": ridge_tokens(hardware, verify.dtype),
        }
    )
    keep = verify.fits.ravel()
    out = df[keep].reset_index(drop=True)
    out.attrs["dropped_not_fitting"] = int((~keep).sum())
    return out


def cost_coefficient_frame(
    drafts: Sequence[ModelCard],
    target: ModelCard,
    hardware: HardwareCard,
    *,
    batches: Sequence[int] = (1, 4, 16, 64),
    contexts: Sequence[int] = (128, 512, 2048),
    draft_hardware: HardwareCard | None = None,
    tensor_parallel: int = 1,
    dtype: str | None = None,
    encoder_length: int | None = None,
) -> pd.DataFrame:
    """c(draft, target) over drafts x batch x context, with c-hat and the parameter ratio.

    Columns: draft, target, hardware, draft_hardware, batch, context, c (time
    ratio of one step each), c_hat (flops-per-token ratio,
    :func:`specsim.cost.ops_coefficient`), param_ratio (stated parameters,
    draft / target), draft_time_s, target_time_s.
    """
    d_hw = hardware if draft_hardware is None else draft_hardware
    b = np.asarray(batches, dtype=np.int64).reshape(-1, 1)
    c = np.asarray(contexts, dtype=np.int64).reshape(1, -1)
    if b.size == 0 or c.size == 0 or not drafts:
        raise ValueError("drafts, batches and contexts must be non-empty")
    bb, cc = np.broadcast_arrays(b, c)
    t_target = step_cost_grid(
        target,
        hardware,
        batch=b,
        context=c,
        new_tokens=1,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        encoder_length=encoder_length,
        check_memory=False,
    )
    frames = []
    for draft in drafts:
        t_draft = step_cost_grid(
            draft,
            d_hw,
            batch=b,
            context=c,
            new_tokens=1,
            dtype=dtype,
            encoder_length=encoder_length,
            check_memory=False,
        )
        c_hat = np.broadcast_to(
            ops_coefficient(draft, target, context=c, encoder_length=encoder_length), bb.shape
        )
        df = pd.DataFrame(
            {
                "draft": draft.slug,
                "target": target.slug,
                "hardware": hardware.slug,
                "draft_hardware": d_hw.slug,
                "batch": bb.ravel(),
                "context": cc.ravel(),
                "c": (t_draft.time_s / t_target.time_s).ravel(),
                "c_hat": np.asarray(c_hat).ravel(),
                "param_ratio": draft.params / target.params,
                "draft_time_s": t_draft.time_s.ravel(),
                "target_time_s": t_target.time_s.ravel(),
            }
        )
        frames.append(df[(t_draft.fits & t_target.fits).ravel()])
    out = pd.concat(frames, ignore_index=True)
    out.attrs["dropped_not_fitting"] = len(drafts) * bb.size - len(out)
    return out
