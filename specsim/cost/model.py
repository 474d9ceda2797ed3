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
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile
from specsim.checks import check_size
from specsim.cost.attention import attention_time, kv_held
from specsim.cost.checks import (
    check_hardware,
    check_model,
    check_runtime,
    check_tensor_parallel,
    int_array,
)
from specsim.cost.checks import check_positions as _check_positions
from specsim.cost.formats import Formats, resolve_formats
from specsim.cost.memory import footprint
from specsim.cost.moe import check_expert_parallel
from specsim.cost.quant import dequant_rows
from specsim.cost.results import RESULT_FIELDS, PassTerms, StepCost
from specsim.cost.roofline import expert_reads, roofline, time_energy
from specsim.cost.shape import PassShape
from specsim.cost.stack_terms import check_stack_tree, stack_terms

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_ENCODER_LENGTH",
    "encoder_tokens",
    "pass_cost",
    "step_cost",
    "evaluate_terms",
    "memory_error",
]

DEFAULT_CONTEXT = 512
"""Context (tokens already cached per sequence) used when a derived quantity is not given one."""

DEFAULT_ENCODER_LENGTH = 512
"""Encoder length a T5 decoder cross-attends to, unless given (Raffel et al., JMLR 2020)."""

ModelLike = ModelCard | str | os.PathLike[str]
"""A model card, or its slug or ``.toml`` path (:func:`specsim.cards.load_model`)."""
HardwareLike = HardwareCard | str | os.PathLike[str]
"""An accelerator card, or its slug or ``.toml`` path (:func:`specsim.cards.load_hardware`)."""
RuntimeLike = RuntimeProfile | str | os.PathLike[str] | None
"""A runtime profile, a stack's or profile's slug or path, or None (the card's own numbers)."""


def encoder_tokens(model: ModelCard, encoder_length: int | None) -> float:
    """Encoder tokens each sequence cross-attends to: 0 for a decoder-only model, else
    ``encoder_length`` (default :data:`DEFAULT_ENCODER_LENGTH`); a ValueError otherwise."""
    if model.architecture == "decoder":
        if encoder_length not in (None, 0):
            raise ValueError(
                f"encoder_length: model {model.slug!r} is decoder-only, got {encoder_length!r}"
            )
        return 0.0
    e = DEFAULT_ENCODER_LENGTH if encoder_length is None else encoder_length
    return float(int_array("encoder_length", e, 1))


# The core ---------------------------------------------------------------------------------
def evaluate_terms(
    model: ModelCard,
    hw: HardwareCard,
    *,
    formats: Formats,
    tp: float,
    T: Any,
    S: Any,
    R: Any,
    runtime: RuntimeProfile | None = None,
    expert_parallel: int = 1,
    batch: Any = None,
    verify: bool = False,
    verified: Any = None,
) -> PassTerms:
    """All terms of passes on ``tp`` devices from their aggregates (numbers or arrays).

    T, S, R as in :class:`specsim.cost.shape.PassSums`. The pass also writes the
    keys and values of its T new tokens and reads them back. Time and energy come
    from :func:`specsim.cost.roofline.time_energy`; the rest is their breakdown. ``batch`` and
    ``verify`` (and ``verified``, the new tokens that verify drafts: None, all of them) bring in
    a stack's terms (:mod:`specsim.cost.stack_terms`), shown as
    ``stack_time_s`` (part of ``overhead_time_s``) and ``padded_tokens``.
    Arrays are combined with scalar coefficients only, so a grid of 10^5 passes
    makes few temporaries (a performance choice: fresh large temporaries cost
    page faults).
    """
    co, R0, S0 = roofline(model, hw, formats, tp, runtime, expert_parallel=expert_parallel), R, S
    L = co.layers
    time, energy, roof, flops, nbytes = time_energy(
        co, T, S, R, batch=batch, verify=verify, verified=verified
    )
    act = L * (co.activation_bytes + co.attention_io_bytes) + co.head_io_bytes  # per token
    host, rows = 0.0 * T, T + 0.0 * T
    if co.stack is not None:  # the stack's terms, as time_energy priced them
        st = stack_terms(co.stack, T=T, R=R, batch=batch, verify=verify, verified=verified)
        host, rows, R = st.host_s + 0.0 * T, st.rows + 0.0 * T, st.R
    if co.attention is not None:  # local or sparse layers read fewer keys
        R = attention_time(co, T=T, S=S0, R=R, cached=R0, batch=batch)[2]
    return PassTerms(
        time_s=time,
        flops=flops * tp,
        bytes=nbytes * tp,
        energy_j=energy,
        weight_bytes=(co.weight_bytes + co.expert_bytes * expert_reads(co, T)) * tp,
        kv_bytes=(R + 2 * T) * (L * co.kv_bytes) * tp,
        activation_bytes=T * act * tp,
        compute_time_s=flops / co.peak,
        memory_time_s=nbytes / co.bandwidth,
        roofline_time_s=roof,
        overhead_time_s=co.overhead_s + T * co.sampling_s + host,
        allreduce_time_s=T * co.allreduce_per_token_s + co.allreduce_latency_s,
        dequant_time_s=co.dequant_s * dequant_rows(rows, co.dequant_tile)
        if co.dequant_s
        else 0.0 * T,
        resident_bytes=co.resident_bytes + kv_held(co, tokens=R0 + T, batch=batch),
        stack_time_s=host,
        padded_tokens=rows,
    )


def memory_error(
    model: ModelCard, hw: HardwareCard, *, formats: Formats, tp: float, B: float, resident: float
) -> ValueError:
    weights = footprint(model, tensor_parallel=tp, formats=formats).weights_bytes
    what = formats.compute if not formats.quantized else f"{formats.weight_format} weights"
    return ValueError(
        f"model {model.slug!r} does not fit on {hw.slug!r}: weights {weights / 1e9:.2f} GB per "
        f"device (tensor_parallel={int(tp)}, {what}) + KV cache {(resident - weights) / 1e9:.2f} "
        f"GB for batch {int(B)} = {resident / 1e9:.2f} GB > memory {hw.mem_capacity / 1e9:.2f} GB"
    )


def _check_shape(model: ModelCard, rt: RuntimeProfile | None, shape: PassShape) -> bool:
    """A pass shape the model and the stack can run (a TypeError, a ValueError); is it a tree?"""
    if not isinstance(shape, PassShape):
        raise TypeError(f"shape: expected a PassShape, got {type(shape).__name__}")
    tree = shape.parents is not None
    check_stack_tree(rt, parents=shape.parents)
    depth = shape.new if not tree else max(shape.depths or (0,))
    _check_positions(model, context=shape.context, new_tokens=depth)
    return tree


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
    tree = _check_shape(model, rt, shape)
    fm = resolve_formats(
        model, dtype, weights=weights, kv=kv, group_size=group_size, expert_weights=expert_weights
    )
    ep = check_expert_parallel(
        model, expert_parallel, tensor_parallel=int(tp), name="expert_parallel"
    )
    T, S, R = shape.sums(encoder_tokens(model, encoder_length))
    terms = evaluate_terms(
        model,
        hardware,
        formats=fm,
        tp=float(tp),
        T=T,
        S=S,
        R=R,
        runtime=rt,
        expert_parallel=ep,
        batch=float(shape.batch),
        verify=tree if verify is None else bool(verify),
        verified=None if verified is None else float(verified),
    )
    values = {k: float(getattr(terms, k)) for k in RESULT_FIELDS}
    if (resident := values["resident_bytes"]) > hardware.mem_capacity:
        raise memory_error(
            model, hardware, formats=fm, tp=float(tp), B=shape.batch, resident=resident
        )
    bound = "compute" if values["compute_time_s"] > values["memory_time_s"] else "memory"
    return StepCost(
        **values,
        bound=bound,
        batch=shape.batch,
        tokens=shape.tokens,
        tensor_parallel=int(tp),
        dtype=fm.compute,
        weight_format=fm.weight_format,
        kv_format=fm.kv_format,
    )


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
    A functional kernel: on a deployment, :meth:`specsim.cost.deployment.Deployment.pass_cost`.
    """
    model, hardware = check_model(model), check_hardware(hardware)
    B = int_array("batch", batch, 1)
    tp = check_tensor_parallel(model, tensor_parallel)
    if B.ndim or tp.ndim:
        raise ValueError(
            f"batch and tensor_parallel must be scalars in step_cost (use step_cost_grid for "
            f"arrays), got batch={B.tolist()!r}, tensor_parallel={tp.tolist()!r}"
        )
    n_seq = check_size(int(B), name="batch", limit="batch")
    ctx = int_array("context", context, 0)
    new = int_array("new_tokens", new_tokens, 1)
    for name, arr in (("context", ctx), ("new_tokens", new)):
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != n_seq):
            raise ValueError(
                f"{name}: expected a scalar or an array of length batch={n_seq}, got shape "
                f"{arr.shape}"
            )
    shape = PassShape.chain(context=ctx.astype(np.int64), new=new.astype(np.int64), batch=n_seq)
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
