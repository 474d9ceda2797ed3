"""Quantities derived from pass costs: c, v(gamma) and c-hat, vectorised over their arguments.

The cost coefficient c (draft step / target step, Leviathan et al. 2023,
Definition 3.7), the verification factor v(gamma) and the operations
coefficient c-hat, each evaluated on a grid of passes (:func:`specsim.cost.grid.pass_grid`)
in one vectorised call. Tidy tables of them are in :mod:`specsim.cost.frames`.

One convention: a :class:`~specsim.cost.deployment.Deployment` first,
``verification_factor(deployment, gamma, *, batch, context)`` and
``cost_coefficient(deployment, draft, *, batch, context)`` (``draft`` a model card or any
proposer). The card-and-keyword forms that docs, notebooks and problem sets use,
``verification_factor(model, hardware, gamma, **keywords)`` and
``cost_coefficient(draft_card, deployment)``, are thin wrappers that build the deployment.

>>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb", dtype="bfloat16")
>>> round(verification_factor(dep, 3, batch=256, context=128), 2)
2.92
>>> from specsim.cards import load_hardware, load_model
>>> m7, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
>>> round(verification_factor(m7, hw, 3, batch=256, context=128, dtype="bfloat16"), 2)
2.92
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import ModelCard
from specsim.cost.checks import check_model, int_array
from specsim.cost.checks import check_positions as _check_positions
from specsim.cost.deployment import Deployment
from specsim.cost.flops import pass_flops
from specsim.cost.grid import pass_grid, step_cost_grid
from specsim.cost.model import DEFAULT_CONTEXT, HardwareLike, ModelLike, RuntimeLike
from specsim.cost.results import FloatArray, StepCostGrid
from specsim.cost.shape import verification_positions

__all__ = ["cost_coefficient", "draft_on", "verification_factor", "ops_coefficient"]


def _scalar_or_array(x: FloatArray) -> FloatArray | float:
    return float(x) if x.ndim == 0 else x


def draft_on(deployment: Deployment, draft: ModelCard, *, tensor_parallel: int = 1) -> Deployment:
    """Where a draft model runs when it has no deployment of its own: on ``deployment``'s
    hardware and stack, over ``tensor_parallel`` of its devices, in its KV format, in its
    ``dtype`` when it names one (the draft computes as the target does) and its own card's
    otherwise (:meth:`Deployment.on_model <specsim.cost.deployment.Deployment.on_model>`).

    >>> from specsim.cards import load_model
    >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb", kv="fp8")
    >>> d = draft_on(dep, load_model("llama-68m"))
    >>> d.target.slug, d.tensor_parallel, d.formats().compute, d.formats().kv_format
    ('llama-68m', 1, 'float32', 'float8')
    """
    on = deployment.on_model(draft, tensor_parallel=tensor_parallel)
    return on if deployment.dtype is None else dataclasses.replace(on, dtype=deployment.dtype)


def _draft_deployment(
    deployment: Deployment, draft: ModelCard | str, given: Deployment | None
) -> Deployment:
    """Where a draft model's steps run for c: ``given``, else :func:`draft_on` one device of
    ``deployment``'s hardware and stack; under the stack's drafting profile either way."""
    d_dep = draft_on(deployment, check_model(draft, name="draft"))
    if given is not None:
        d_dep = given
    return d_dep.drafting()  # a draft step runs under its stack's drafting profile


def _proposer_c(
    deployment: Deployment, proposer: Any, *, batch: ArrayLike, context: ArrayLike
) -> FloatArray | float:
    """c of a proposer (anything with ``draft_costs``): its one-token draft on the target's
    ``deployment`` over one target step, at one ``batch`` and each ``context``."""
    b = np.asarray(batch)
    if b.ndim or not np.issubdtype(b.dtype, np.integer):
        raise ValueError(f"batch: c of a proposer takes one integer batch, got {batch!r}")
    ctx = np.asarray(context)
    draft = proposer.draft_costs(
        [-1], deployment=deployment, batch=int(b), context=np.atleast_1d(ctx).ravel()
    )
    target = pass_grid(deployment, batch=int(b), context=ctx, new_tokens=1).time_s
    ratio = np.asarray(draft.time_s, dtype=np.float64).reshape(ctx.shape) / target
    return _scalar_or_array(np.asarray(ratio))


@overload
def cost_coefficient(
    deployment: Deployment,
    draft: Any,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    draft_deployment: Deployment | None = None,
    encoder_length: int | None = None,
    check_positions: bool = True,
) -> FloatArray | float: ...


@overload
def cost_coefficient(
    deployment: ModelCard | str,
    draft: Deployment,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    draft_deployment: Deployment | None = None,
    encoder_length: int | None = None,
    check_positions: bool = True,
) -> FloatArray | float: ...


def cost_coefficient(
    deployment: Any,
    draft: Any,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    draft_deployment: Deployment | None = None,
    encoder_length: int | None = None,
    check_positions: bool = True,
) -> FloatArray | float:
    """c = time of one draft step / time of one target step (one new token each).

    Leviathan et al. 2023, Definition 3.7 (the cost coefficient). The target runs on
    ``deployment`` (its hardware, stack, formats and tensor parallelism). ``draft`` a model
    card (or slug): the draft runs on ``draft_deployment`` when given, else on one device of
    the same hardware card with the same stack, without tensor parallelism (:func:`draft_on`),
    its step under that stack's drafting profile (:meth:`Deployment.drafting`). ``draft`` a
    proposer (anything with ``draft_costs``): its one-token draft priced by itself on
    ``deployment`` (the drafting rule, :mod:`specsim.cost.drafting`), at one integer
    ``batch``. Vectorised over ``batch`` and ``context``. A ``context`` past either model's
    ``max_position`` raises a ValueError unless ``check_positions=False`` (deliberate
    extrapolation). The older order ``cost_coefficient(draft_card, deployment)`` is the same.

    >>> from specsim.cards import load_model
    >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb", dtype="bfloat16")
    >>> round(cost_coefficient(dep, load_model("llama-68m"), context=128), 3)
    0.046
    """
    if not isinstance(deployment, Deployment) and isinstance(draft, Deployment):
        deployment, draft = draft, deployment  # the card-first order of earlier releases
    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(deployment).__name__}")
    if hasattr(draft, "draft_costs"):
        if draft_deployment is not None:
            raise TypeError(
                "draft_deployment: a proposer says where it drafts (DraftModel.draft_deployment)"
            )
        return _proposer_c(deployment, draft, batch=batch, context=context)
    d_dep = _draft_deployment(deployment, draft, draft_deployment)
    kw: dict[str, Any] = dict(
        batch=batch,
        context=context,
        new_tokens=1,
        encoder_length=encoder_length,
        check_positions=check_positions,
    )
    t_d = pass_grid(d_dep, **kw).time_s
    t_t = pass_grid(deployment, **kw)
    return _scalar_or_array(np.asarray(t_d / t_t.time_s))


def _vfactor(grid: Callable[..., StepCostGrid], gamma: ArrayLike) -> FloatArray | float:
    """v(gamma) from ``grid(new_tokens=..., verify=...)``: the gamma + 1-token verification
    over the one-token plain pass; v(0) = 1 (gamma 0 verifies nothing, its pass is the
    plain one)."""
    g = int_array("gamma", gamma, 0)
    t_1 = grid(new_tokens=1).time_s
    t_v = grid(new_tokens=verification_positions(g), verify=True).time_s
    return _scalar_or_array(np.asarray(np.where(g > 0, t_v, t_1) / t_1))


_KEYWORDS = {
    "tensor_parallel": 1,
    "dtype": None,
    "weights": None,
    "kv": None,
    "group_size": None,
    "runtime": None,
    "expert_parallel": 1,
    "expert_weights": None,
}
"""The keyword form's deployment fields and their defaults (a Deployment carries its own)."""


def _default(value: Any, default: Any) -> bool:
    """Whether a keyword was left at its default (a plain ``1`` or ``None``)."""
    return value is default or (type(value) is int and value == default)


@overload
def verification_factor(
    model: Deployment,
    hardware: ArrayLike,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    encoder_length: int | None = None,
    check_positions: bool = True,
) -> FloatArray | float: ...


@overload
def verification_factor(
    model: ModelLike,
    hardware: HardwareLike,
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
) -> FloatArray | float: ...


def verification_factor(
    model: Any,
    hardware: Any = None,
    gamma: ArrayLike | None = None,
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

    ``verification_factor(deployment, gamma, *, batch, context)``: the target's passes on a
    :class:`~specsim.cost.deployment.Deployment`. Near 1 while the pass is memory-bound (the
    weights are read once either way); towards ``gamma + 1`` once ``batch * (gamma + 1)``
    passes :func:`ridge_tokens`; above 1 at batch 1 for weight-only quantized ``weights``,
    whose dequantization grows with the rows (:mod:`specsim.cost.quant`). Vectorised over
    ``gamma``, ``batch``, ``context``. A ``context + gamma + 1`` past the model's
    ``max_position`` raises a ValueError unless ``check_positions=False``. The
    ``gamma + 1``-token pass is a verification (``verify=True``: a stack's speculative terms,
    :mod:`specsim.cost.stack_terms`, at ``batch``), the one-token pass a plain decode.

    The keyword form ``verification_factor(model, hardware, gamma, **keywords)`` builds the
    deployment from cards and keywords (``tensor_parallel`` may then vary over the grid,
    :func:`specsim.cost.step_cost_grid`); with a Deployment those keywords are its fields,
    and passing them is a TypeError.
    """
    kw: dict[str, Any] = dict(
        batch=batch, context=context, encoder_length=encoder_length, check_positions=check_positions
    )
    fields: dict[str, Any] = dict(
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        weights=weights,
        kv=kv,
        group_size=group_size,
        runtime=runtime,
        expert_parallel=expert_parallel,
        expert_weights=expert_weights,
    )
    if isinstance(model, Deployment):
        if gamma is None:
            gamma, hardware = hardware, None
        given = [k for k, d in _KEYWORDS.items() if not _default(fields[k], d)]
        if hardware is not None or given or gamma is None:
            raise TypeError(
                "verification_factor(deployment, gamma, *, batch, context): a Deployment "
                f"carries its hardware and formats (got {', '.join(given) or 'a third argument'})"
            )
        return _vfactor(lambda **x: pass_grid(model, **kw, **x), gamma)
    if gamma is None:
        raise TypeError("verification_factor(model, hardware, gamma): gamma is missing")
    kw |= fields
    return _vfactor(lambda **x: step_cost_grid(model, hardware, **kw, **x), gamma)


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
