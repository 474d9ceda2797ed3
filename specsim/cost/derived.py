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

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard
from specsim.cost.checks import check_model, int_array
from specsim.cost.checks import check_positions as _check_positions
from specsim.cost.deployment import Deployment
from specsim.cost.flops import pass_flops
from specsim.cost.grid import step_cost_grid
from specsim.cost.model import DEFAULT_CONTEXT, RuntimeLike
from specsim.cost.results import FloatArray
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


def cost_coefficient(
    draft: ModelCard,
    deployment: Deployment,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    draft_deployment: Deployment | None = None,
    encoder_length: int | None = None,
    check_positions: bool = True,
) -> FloatArray | float:
    """c = time of one draft step / time of one target step (one new token each).

    Leviathan et al. 2023, Definition 3.7 (the cost coefficient). The target runs on
    ``deployment`` (its hardware, stack, formats and tensor parallelism); the draft on
    ``draft_deployment`` when given, else on one device of the same hardware card with the
    same stack, without tensor parallelism (:func:`draft_on`); the draft step under that
    stack's drafting profile (:meth:`Deployment.drafting`). Vectorised over ``batch``
    and ``context``. A ``context`` past either model's ``max_position`` raises a
    ValueError unless ``check_positions=False`` (deliberate extrapolation).

    >>> from specsim.cards import load_model
    >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb", dtype="bfloat16")
    >>> round(cost_coefficient(load_model("llama-68m"), dep, context=128), 3)
    0.046
    """
    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(deployment).__name__}")
    d_dep = draft_on(deployment, check_model(draft, name="draft"))
    if draft_deployment is not None:
        d_dep = draft_deployment
    d_dep = d_dep.drafting()  # a draft step runs under its stack's drafting profile
    kw: dict[str, Any] = dict(
        batch=batch,
        context=context,
        new_tokens=1,
        encoder_length=encoder_length,
        check_positions=check_positions,
    )
    t_d = step_cost_grid(d_dep.target, d_dep.hardware, **kw, **d_dep.keywords()).time_s
    t_t = step_cost_grid(deployment.target, deployment.hardware, **kw, **deployment.keywords())
    return _scalar_or_array(np.asarray(t_d / t_t.time_s))


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
    ``max_position`` raises a ValueError unless ``check_positions=False``. The
    ``gamma + 1``-token pass is a verification (``verify=True``: a stack's speculative terms,
    :mod:`specsim.cost.stack_terms`, at ``batch``), the one-token pass a plain decode.

    The functional kernel, on cards and keywords; on a deployment, the same ratio is
    ``dep.pass_cost(PassShape.chain(context=c, new=gamma + 1))`` over ``new=1``
    (:meth:`specsim.cost.deployment.Deployment.pass_cost`, which ``keywords()`` feeds here).
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
    t_1 = step_cost_grid(model, hardware, new_tokens=1, **kw).time_s
    pos = verification_positions(g)
    t_v = step_cost_grid(model, hardware, new_tokens=pos, verify=True, **kw).time_s
    # v(0) = 1: gamma 0 verifies nothing, its pass is the plain one.
    return _scalar_or_array(np.asarray(np.where(g > 0, t_v, t_1) / t_1))


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
