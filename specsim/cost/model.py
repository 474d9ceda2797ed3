"""The cost of one forward pass: time, operations, bytes moved and energy.

A *pass* runs a model over ``new_tokens`` positions of each of ``batch``
sequences whose key/value caches already hold ``context`` tokens: a decode
step is ``new_tokens = 1``, a speculative verification pass verifies
``gamma + 1`` positions in a chain, or the nodes of a token tree
(:class:`specsim.cost.shape.PassShape`, evaluated by :func:`pass_cost`). The
model is a per-layer roofline with real-world terms (Williams, Waterman &
Patterson, "Roofline", CACM 2009; applied to LLM decoding as in Pope et al.,
"Efficiently Scaling Transformer Inference", MLSys 2023):

* **bytes**: the weights a pass reads once, whatever the batch
  (:attr:`~specsim.cards.ModelCard.decode_params`); each sequence's cached keys
  and values, ``(context + new) * layers * 2 * kv_heads * head_dim * bytes``;
  the new keys and values written; activations (each weight GEMM reads its
  input and writes its output once; element-wise work is fused). T5 decoders
  also read the cached cross-attention keys and values of the encoder output
  (``encoder_length`` tokens, default :data:`DEFAULT_ENCODER_LENGTH`).
* **flops**: ``2 * weights * tokens`` plus attention, ``4 * head_dim * heads``
  per (query, key) pair, the pairs counted causally
  (:func:`specsim.cost.shape.chain_pairs` for a chain).
* **time**: per decoder layer, ``max(flops / (peak * compute_efficiency),
  bytes / (bandwidth * memory_efficiency))`` for the weight GEMMs and again for
  attention (separate kernels), plus the same for the LM head; then
  ``layers * layer_overhead_s + pass_overhead_s``; then, under tensor
  parallelism, ``(2, or 3 with cross-attention) * layers`` ring all-reduces of
  the activations, each ``2 (tp - 1) / tp * bytes / link_bandwidth + latency``
  (Patarasuk & Yuan, JPDC 2009). Weights, heads and KV heads are split over
  ``tensor_parallel`` devices (KV heads replicated when fewer than devices,
  :mod:`specsim.cost.memory`).
* **energy**: per device, the linear utilisation power model
  ``P = idle + (max - idle) * u`` with ``u`` the busier of the compute and
  memory units as a fraction of raw peak over the pass (Fan, Weber & Barroso,
  "Power provisioning for a warehouse-sized computer", ISCA 2007); a card that
  gives ``energy_per_flop_j`` and ``energy_per_byte_j`` uses
  ``idle * time + e_flop * flops + e_byte * bytes`` instead. Totals cover all
  devices.

The kernel takes a resolved deployment (:mod:`specsim.cost.resolved`:
:meth:`Deployment.pass_cost <specsim.cost.deployment.Deployment.pass_cost>` and
:meth:`Deployment.aggregates_cost <specsim.cost.deployment.Deployment.aggregates_cost>` on
:meth:`Deployment.resolved <specsim.cost.deployment.Deployment.resolved>`). The functions
here are its thin keyword wrappers, for cards and keywords (docs, notebooks, problem
sets): each checks its keywords, builds a :class:`~specsim.cost.deployment.Deployment`
and calls the kernel on its resolved value, so both give the same numbers.

Two forms. :func:`step_cost` evaluates **one pass** whose sequences may differ:
``context`` and ``new_tokens`` are scalars or arrays of length ``batch`` (a
continuous-batching verification pass where sequence ``i`` verifies
``new_tokens[i]`` positions after ``context[i]``). :func:`step_cost_grid`
(:mod:`specsim.cost.grid`) evaluates **many homogeneous passes at once**: ``batch``, ``context``,
``new_tokens`` and ``tensor_parallel`` broadcast against each other and each
element is a separate pass in which every sequence has that context and new
token count. The grid form is vectorised (10^5 passes in milliseconds,
``benchmarks/bench_cost.py``); a homogeneous :func:`step_cost` equals the
matching grid element. The derived quantities (cost coefficient c, verification
factor v(gamma), operations coefficient c-hat) are in :mod:`specsim.cost.derived`.

>>> from specsim.cards import load_hardware, load_model
>>> m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
>>> cost = step_cost(m, hw, batch=1, context=105, new_tokens=1, dtype="bfloat16")
>>> cost.bound, 95 < 1 / cost.time_s < 115
('memory', True)
"""

from __future__ import annotations

import os

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile
from specsim.checks import check_size
from specsim.cost.checks import (
    check_hardware,
    check_model,
    check_runtime,
    check_tensor_parallel,
    int_array,
)
from specsim.cost.deployment import Deployment
from specsim.cost.moe import check_expert_parallel
from specsim.cost.resolved import (
    DEFAULT_ENCODER_LENGTH,
    encoder_tokens,
    evaluate_terms,
    memory_error,
)
from specsim.cost.resolved import pass_cost as kernel_pass_cost
from specsim.cost.results import StepCost
from specsim.cost.shape import PassShape

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_ENCODER_LENGTH",
    "encoder_tokens",
    "pass_cost",
    "step_cost",
    "chain_shape",
    "evaluate_terms",
    "memory_error",
    "keyword_deployment",
]

DEFAULT_CONTEXT = 512
"""Context (tokens already cached per sequence) used when a derived quantity is not given one."""

ModelLike = ModelCard | str | os.PathLike[str]
"""A model card, or its slug or ``.toml`` path (:func:`specsim.cards.load_model`)."""
HardwareLike = HardwareCard | str | os.PathLike[str]
"""An accelerator card, or its slug or ``.toml`` path (:func:`specsim.cards.load_hardware`)."""
RuntimeLike = RuntimeProfile | str | os.PathLike[str] | None
"""A runtime profile, a stack's or profile's slug or path, or None (the card's own numbers)."""


def keyword_deployment(
    model: ModelCard,
    hardware: HardwareCard,
    *,
    runtime: RuntimeProfile | None,
    tensor_parallel: int,
    dtype: str | None = None,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    expert_parallel: int = 1,
    expert_weights: str | None = None,
) -> Deployment:
    """The :class:`~specsim.cost.deployment.Deployment` the keyword wrappers price on: cards
    and a runtime already checked, ``tensor_parallel`` a checked degree; the expert
    parallelism is checked here under its keyword's name (``expert_parallel``), the formats
    by the deployment (their own messages)."""
    check_expert_parallel(
        model, expert_parallel, tensor_parallel=tensor_parallel, name="expert_parallel"
    )
    return Deployment(
        target=model,
        hardware=hardware,
        runtime=runtime,
        dtype=dtype,
        weights=weights,
        kv=kv,
        group_size=group_size,
        tensor_parallel=tensor_parallel,
        expert_parallel=expert_parallel,
        expert_weights=expert_weights,
    )


def pass_cost(
    model: ModelLike,
    hardware: HardwareLike,
    shape: PassShape,
    *,
    dtype: str | None = None,
    tensor_parallel: int = 1,
    encoder_length: int | None = None,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    runtime: RuntimeLike = None,
    expert_parallel: int = 1,
    expert_weights: str | None = None,
    verify: bool | None = None,
    verified: int | None = None,
) -> StepCost:
    """Cost of one pass of any :class:`~specsim.cost.shape.PassShape`: chains or a token tree.

    ``verify`` (None: ``shape`` is a tree): a stack's speculative terms apply, over ``verified``
    of its new tokens (None: all; not prefill chunks); a tree a stack cannot verify fails.
    The keyword wrapper of the kernel :func:`specsim.cost.resolved.pass_cost` (on a
    deployment: :meth:`Deployment.pass_cost <specsim.cost.deployment.Deployment.pass_cost>`).

    >>> from specsim.cards import load_hardware, load_model
    >>> m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    >>> tree = PassShape.tree(context=512, parents=[-1, 0, 0, 1, 1, 2, 2, 3, 4, 5])
    >>> pass_cost(m, hw, tree).tokens, pass_cost(m, hw, tree).bound
    (10, 'memory')
    """
    model, hardware = check_model(model), check_hardware(hardware)
    rt = check_runtime(runtime, hardware)
    tp = check_tensor_parallel(model, tensor_parallel)
    if tp.ndim:
        raise ValueError(f"tensor_parallel: expected a scalar, got {tp.tolist()!r}")
    dep = keyword_deployment(
        model,
        hardware,
        runtime=rt,
        tensor_parallel=int(tp),
        dtype=dtype,
        weights=weights,
        kv=kv,
        group_size=group_size,
        expert_parallel=expert_parallel,
        expert_weights=expert_weights,
    )
    r = dep.resolved(encoder_length=encoder_length)
    return kernel_pass_cost(r, shape, verify=verify, verified=verified)


def chain_shape(*, batch: int, context: ArrayLike, new_tokens: ArrayLike) -> PassShape:
    """The chains of one pass over ``batch`` sequences (at most the ``batch`` size limit,
    :data:`specsim.checks.LIMITS`), ``context`` and ``new_tokens`` scalars or arrays of
    length ``batch``, as :func:`step_cost` takes them; a ValueError naming the argument.

    >>> chain_shape(batch=2, context=[10, 20], new_tokens=3).tokens
    6
    """
    B = int_array("batch", batch, 1)
    if B.ndim:
        raise ValueError(f"batch: expected a scalar, got {B.tolist()!r}")
    n_seq = check_size(int(B), name="batch", limit="batch")
    ctx = int_array("context", context, 0)
    new = int_array("new_tokens", new_tokens, 1)
    for name, arr in (("context", ctx), ("new_tokens", new)):
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != n_seq):
            raise ValueError(
                f"{name}: expected a scalar or an array of length batch={n_seq}, got shape "
                f"{arr.shape}"
            )
    return PassShape.chain(context=ctx.astype(np.int64), new=new.astype(np.int64), batch=n_seq)


def step_cost(
    model: ModelLike,
    hardware: HardwareLike,
    *,
    batch: int,
    context: ArrayLike,
    new_tokens: ArrayLike,
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
) -> StepCost:
    """Cost of one pass over ``batch`` sequences (see the module docstring for the model).

    ``context`` and ``new_tokens`` are scalars (every sequence alike) or arrays
    of length ``batch``: chains, a :meth:`PassShape.chain <specsim.cost.shape.PassShape.chain>`
    given to :func:`pass_cost`. ``dtype`` defaults to the model card's. Raises
    ValueError for bad numbers, an unknown dtype, or a model whose weights and
    KV cache exceed the accelerator's memory (the message gives the sizes in GB), a
    ``tensor_parallel`` that does not split the heads
    (:func:`~specsim.cost.checks.check_tensor_parallel`) or a ``context + new_tokens``
    beyond the model's ``max_position`` (:func:`~specsim.cost.checks.check_positions`).
    ``model`` and ``hardware`` may be slugs (or card paths) instead of cards.
    A keyword wrapper: on a deployment,
    :meth:`specsim.cost.deployment.Deployment.pass_cost`.
    """
    model, hardware = check_model(model), check_hardware(hardware)
    B = int_array("batch", batch, 1)
    tp = check_tensor_parallel(model, tensor_parallel)
    if B.ndim or tp.ndim:
        raise ValueError(
            f"batch and tensor_parallel must be scalars in step_cost (use step_cost_grid for "
            f"arrays), got batch={B.tolist()!r}, tensor_parallel={tp.tolist()!r}"
        )
    shape = chain_shape(batch=batch, context=context, new_tokens=new_tokens)
    return pass_cost(
        model,
        hardware,
        shape,
        dtype=dtype,
        tensor_parallel=int(tp),
        encoder_length=encoder_length,
        weights=weights,
        kv=kv,
        group_size=group_size,
        runtime=runtime,
        expert_parallel=expert_parallel,
        expert_weights=expert_weights,
        verify=verify,
    )
