"""A resolved deployment: what the cost kernel takes, and the kernel itself.

A :class:`~specsim.cost.deployment.Deployment` names its cards by slug or path and its
formats by name; every pass needs them as cards, :class:`~specsim.cost.formats.Formats`,
checked integers and a stack's constants. :func:`specsim.cost.deployment.resolve` does that
once and returns a frozen :class:`Resolved` (remembered: :meth:`Deployment.resolved
<specsim.cost.deployment.Deployment.resolved>` asks it once per deployment, and a copy of
a deployment over the same cards finds the same value), so a plan that prices the same
deployment thousands of times resolves its formats once. The kernel is two functions of
it: :func:`pass_terms` (passes given as sums over their sequences, numbers or arrays) and
:func:`pass_cost` (one :class:`~specsim.cost.shape.PassShape`); both evaluate
:func:`evaluate_terms`, the one formula (:mod:`specsim.cost.roofline`).

>>> from specsim.cost.deployment import Deployment
>>> r = Deployment(target="llama-2-7b", hardware="a100-80gb", weights="int4").resolved()
>>> r.formats.weight_format, r.tensor_parallel, r.runtime.slug
('int4', 1, 'a100-80gb-card')
>>> pass_cost(r, PassShape.chain(context=512, new=4)).tokens
4
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile
from specsim.cost.attention import attention_time, kv_held
from specsim.cost.checks import check_positions, int_array
from specsim.cost.formats import Formats
from specsim.cost.memory import footprint
from specsim.cost.quant import dequant_rows
from specsim.cost.results import RESULT_FIELDS, PassTerms, StepCost
from specsim.cost.roofline import Roofline, expert_reads, roofline, time_energy
from specsim.cost.shape import PassShape
from specsim.cost.stack_terms import StackCosts, check_stack_tree, stack_terms

__all__ = [
    "DEFAULT_ENCODER_LENGTH",
    "Resolved",
    "pass_terms",
    "pass_cost",
    "evaluate_terms",
    "encoder_tokens",
    "memory_error",
    "number",
]

DEFAULT_ENCODER_LENGTH = 512
"""Encoder length a T5 decoder cross-attends to, unless given (Raffel et al., JMLR 2020)."""


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


@dataclass(frozen=True, kw_only=True, eq=False)
class Resolved:
    """A deployment resolved for the kernel: the ``target``, ``hardware`` and ``runtime``
    cards (``runtime`` the hardware card's own profile when the deployment names none), its
    ``formats``, the ``tensor_parallel`` and ``expert_parallel`` degrees as checked integers,
    the stack's per-pass constants ``stack`` (None without a stack profile) and the
    ``encoder`` tokens each sequence cross-attends to (0 for a decoder-only model).

    Built by :func:`specsim.cost.deployment.resolve`, never by hand: its fields are checked
    there. Compared by
    identity (a value remembered, not a record)."""

    target: ModelCard
    hardware: HardwareCard
    runtime: RuntimeProfile
    formats: Formats
    tensor_parallel: int
    expert_parallel: int
    stack: StackCosts | None
    encoder: float

    @cached_property
    def roofline(self) -> Roofline:
        """The per-device constants of its passes (:func:`specsim.cost.roofline.roofline`),
        computed on first use, so that a deployment whose passes are never priced is never
        asked for them."""
        return roofline(
            self.target,
            self.hardware,
            self.formats,
            float(self.tensor_parallel),
            self.runtime,
            expert_parallel=self.expert_parallel,
        )

    def step_host_s(self, batch: Any) -> Any:
        """The host seconds of one pass over ``batch`` sequences that do not scale with the
        model's work: the profile's per-pass cost and, on a stack, its per-sequence host
        work (:class:`~specsim.cost.stack_terms.StackCosts`). A drafting profile's
        (:meth:`specsim.cards.RuntimeProfile.drafting`) is the host cost of a draft step."""
        seq = 0.0 if self.stack is None else self.stack.sequence_s
        return self.runtime.pass_overhead_s + seq * batch


def number(x: ArrayLike) -> Any:
    """A plain number as a Python float, anything else as a float64 array (0-d arrays would
    make every term slow)."""
    return float(x) if isinstance(x, int | float) else np.asarray(x, dtype=np.float64)


def evaluate_terms(
    r: Resolved, *, T: Any, S: Any, R: Any, batch: Any, verify: bool = False, verified: Any = None
) -> PassTerms:
    """All terms of passes on ``r`` from their aggregates (numbers or arrays).

    T, S, R as in :class:`specsim.cost.shape.PassSums` (the encoder's share included). The
    pass also writes the keys and values of its T new tokens and reads them back. Time and
    energy come from :func:`specsim.cost.roofline.time_energy`; the rest is their breakdown.
    ``batch`` and ``verify`` (and ``verified``, the new tokens that verify drafts: None, all
    of them) bring in a stack's terms (:mod:`specsim.cost.stack_terms`), shown as
    ``stack_time_s`` (part of ``overhead_time_s``) and ``padded_tokens``. Arrays are combined
    with scalar coefficients only, so a grid of 10^5 passes makes few temporaries (a
    performance choice: fresh large temporaries cost page faults).
    """
    co, R0, S0, tp = r.roofline, R, S, float(r.tensor_parallel)
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
    """The ValueError of passes of ``model`` that do not fit on ``hw`` (the sizes in GB)."""
    weights = footprint(model, tensor_parallel=tp, formats=formats).weights_bytes
    what = formats.compute if not formats.quantized else f"{formats.weight_format} weights"
    return ValueError(
        f"model {model.slug!r} does not fit on {hw.slug!r}: weights {weights / 1e9:.2f} GB per "
        f"device (tensor_parallel={int(tp)}, {what}) + KV cache {(resident - weights) / 1e9:.2f} "
        f"GB for batch {int(B)} = {resident / 1e9:.2f} GB > memory {hw.mem_capacity / 1e9:.2f} GB"
    )


def pass_terms(
    r: Resolved,
    *,
    batch: ArrayLike,
    tokens: ArrayLike,
    context_tokens: ArrayLike,
    pairs: ArrayLike,
    verify: bool = False,
    verified: ArrayLike | None = None,
) -> PassTerms:
    """The terms of passes on ``r`` given as sums over their sequences (no memory check).

    A pass depends only on its ``batch``, its new ``tokens``, the ``context_tokens`` cached
    before it (summed over sequences) and the causal self-attention ``pairs``
    (:meth:`specsim.cost.shape.PassShape.pairs`, summed); the arguments broadcast (numbers
    or arrays, one pass an element). ``verify``: the passes verify drafted tokens, so a
    stack's speculative terms apply, over ``verified`` of their new tokens (None: all).
    The positions of the sequences are not known here, so ``max_position`` is not checked.
    """
    e = r.encoder
    B, T = number(batch), number(tokens)
    S, R = number(pairs), number(context_tokens)
    if e:  # an encoder-decoder target: every new token cross-attends to the encoder's output
        S, R = S + T * e, R + B * e
    v = None if verified is None else number(verified)
    return evaluate_terms(r, T=T, S=S, R=R, batch=B, verify=verify, verified=v)


def check_shape(r: Resolved, shape: PassShape) -> bool:
    """A pass shape ``r``'s model and stack can run (a TypeError, a ValueError); is it a tree?"""
    if not isinstance(shape, PassShape):
        raise TypeError(f"shape: expected a PassShape, got {type(shape).__name__}")
    tree = shape.parents is not None
    check_stack_tree(r.runtime, parents=shape.parents)
    depth = shape.new if not tree else max(shape.depths or (0,))
    check_positions(r.target, context=shape.context, new_tokens=depth)
    return tree


def pass_cost(
    r: Resolved, shape: PassShape, *, verify: bool | None = None, verified: int | None = None
) -> StepCost:
    """One pass of ``shape`` on ``r``: chains or a token tree (a ValueError naming the sizes
    when it does not fit in the devices' memory).

    ``verify`` (None: ``shape`` is a tree): a stack's speculative terms apply, over
    ``verified`` of its new tokens (None: all; not prefill chunks); a tree a stack cannot
    verify fails, and so does a pass past the model's ``max_position``.
    """
    tree = check_shape(r, shape)
    T, S, R = shape.sums(r.encoder)
    terms = evaluate_terms(
        r,
        T=T,
        S=S,
        R=R,
        batch=float(shape.batch),
        verify=tree if verify is None else bool(verify),
        verified=None if verified is None else float(verified),
    )
    values = {k: float(getattr(terms, k)) for k in RESULT_FIELDS}
    fm, tp = r.formats, float(r.tensor_parallel)
    if (resident := values["resident_bytes"]) > r.hardware.mem_capacity:
        raise memory_error(
            r.target, r.hardware, formats=fm, tp=tp, B=shape.batch, resident=resident
        )
    bound = "compute" if values["compute_time_s"] > values["memory_time_s"] else "memory"
    return StepCost(
        **values,
        bound=bound,
        batch=shape.batch,
        tokens=shape.tokens,
        tensor_parallel=r.tensor_parallel,
        dtype=fm.compute,
        weight_format=fm.weight_format,
        kv_format=fm.kv_format,
    )
