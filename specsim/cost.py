"""The cost of one forward pass: time, operations, bytes moved and energy.

A *pass* runs a model over ``new_tokens`` positions of each of ``batch``
sequences whose key/value caches already hold ``context`` tokens: a decode
step is ``new_tokens = 1``, a speculative verification pass is
``new_tokens = gamma + 1``. The model is a per-layer roofline with real-world
terms (Williams, Waterman & Patterson, "Roofline", CACM 2009; applied to LLM
decoding as in Pope et al., "Efficiently Scaling Transformer Inference",
MLSys 2023):

* **bytes**: the weights a pass reads once, whatever the batch
  (:attr:`~specsim.cards.ModelCard.decode_params`); each sequence's cached keys
  and values, ``(context + new) * layers * 2 * kv_heads * head_dim * bytes``;
  the new keys and values written; activations (each weight GEMM reads its
  input and writes its output once; element-wise work is fused). T5 decoders
  also read the cached cross-attention keys and values of the encoder output
  (``encoder_length`` tokens, default :data:`DEFAULT_ENCODER_LENGTH`).
* **flops**: ``2 * weights * tokens`` plus attention, ``4 * head_dim * heads``
  per (query, key) pair, the pairs counted causally (``context * new +
  new * (new + 1) / 2`` per sequence).
* **time**: per decoder layer, ``max(flops / (peak * compute_efficiency),
  bytes / (bandwidth * memory_efficiency))`` for the weight GEMMs and again for
  attention (separate kernels), plus the same for the LM head; then
  ``layers * layer_overhead_s + pass_overhead_s``; then, under tensor
  parallelism, ``(2, or 3 with cross-attention) * layers`` ring all-reduces of
  the activations, each ``2 (tp - 1) / tp * bytes / link_bandwidth + latency``
  (Patarasuk & Yuan, JPDC 2009). Weights, heads and KV heads are split over
  ``tensor_parallel`` devices (KV heads replicated when fewer than devices).
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
evaluates **many homogeneous passes at once**: ``batch``, ``context``,
``new_tokens`` and ``tensor_parallel`` broadcast against each other and each
element is a separate pass in which every sequence has that context and new
token count. The grid form is vectorised (10^5 passes in milliseconds,
``benchmarks/bench_cost.py``); a homogeneous :func:`step_cost` equals the
matching grid element. The derived quantities (cost coefficient c, verification
factor v(gamma), operations coefficient c-hat) are in :mod:`specsim.costgrid`
and can be imported from here as well.

>>> from specsim.cards import load_hardware, load_model
>>> m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
>>> cost = step_cost(m, hw, batch=1, context=105, new_tokens=1, dtype="bfloat16")
>>> cost.bound, 95 < 1 / cost.time_s < 115
('memory', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim import _roofline
from specsim.cards import DTYPE_BYTES, HardwareCard, ModelCard

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_ENCODER_LENGTH",
    "StepCost",
    "StepCostGrid",
    "step_cost",
    "step_cost_grid",
    "pass_flops",
    "ridge_tokens",
    "pass_aggregates_cost",
]

DEFAULT_CONTEXT = 512
"""Context (tokens already cached per sequence) used when a derived quantity is not given one."""

DEFAULT_ENCODER_LENGTH = 512
"""Encoder output length a T5 decoder cross-attends to, unless given: T5's pre-training input
length (Raffel et al., JMLR 2020)."""

FloatArray = NDArray[np.float64]
_FIELDS = (
    "time_s",
    "flops",
    "bytes",
    "energy_j",
    "weight_bytes",
    "kv_bytes",
    "activation_bytes",
    "compute_time_s",
    "memory_time_s",
    "roofline_time_s",
    "overhead_time_s",
    "allreduce_time_s",
    "resident_bytes",
)


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """Cost of one pass. Flops, bytes and energy are totals over all tensor-parallel devices.

    ``time_s = roofline_time_s + overhead_time_s + allreduce_time_s``;
    ``compute_time_s`` and ``memory_time_s`` are one device's whole-pass flops
    and bytes at effective peak (their max is a lower bound on the roofline
    time, which takes the max per kernel). ``bound`` names the larger of the
    two. ``resident_bytes`` is one device's weights plus KV cache.
    """

    time_s: float
    flops: float
    bytes: float
    energy_j: float
    bound: str
    weight_bytes: float
    kv_bytes: float
    activation_bytes: float
    compute_time_s: float
    memory_time_s: float
    roofline_time_s: float
    overhead_time_s: float
    allreduce_time_s: float
    resident_bytes: float
    batch: int
    tokens: int
    tensor_parallel: int
    dtype: str

    @property
    def time_per_token_s(self) -> float:
        """Seconds per new token of the pass."""
        return self.time_s / self.tokens

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON output)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, kw_only=True)
class StepCostGrid:
    """Costs of many homogeneous passes: each field is an array of the broadcast shape."""

    time_s: FloatArray
    flops: FloatArray
    bytes: FloatArray
    energy_j: FloatArray
    weight_bytes: FloatArray
    kv_bytes: FloatArray
    activation_bytes: FloatArray
    compute_time_s: FloatArray
    memory_time_s: FloatArray
    roofline_time_s: FloatArray
    overhead_time_s: FloatArray
    allreduce_time_s: FloatArray
    resident_bytes: FloatArray
    fits: NDArray[np.bool_]
    dtype: str

    @property
    def compute_bound(self) -> NDArray[np.bool_]:
        """True where compute time exceeds memory time."""
        return self.compute_time_s > self.memory_time_s

    @property
    def bound(self) -> NDArray[np.str_]:
        """``"compute"`` or ``"memory"`` per element."""
        return np.where(self.compute_bound, "compute", "memory")


# Input checks ------------------------------------------------------------------------------
def _int_array(name: str, value: ArrayLike, minimum: int) -> NDArray[np.float64]:
    """``value`` as a float64 array of integers >= minimum, or a ValueError/TypeError naming it."""
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name}: expected integer(s), got {value!r} (dtype {arr.dtype})")
    out = arr.astype(np.float64)
    if np.issubdtype(arr.dtype, np.integer):  # integers need only the range check
        bad = arr < minimum
    else:
        bad = ~np.isfinite(out) | (out != np.round(out)) | (out < minimum)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" at index {idx}" if arr.ndim else ""
        raise ValueError(
            f"{name}: expected finite integer(s) >= {minimum}, got {arr[idx]!r}{where}"
        )
    return out


def _dtype(model: ModelCard, dtype: str | None) -> str:
    dt = model.dtype if dtype is None else dtype
    if not isinstance(dt, str) or dt not in DTYPE_BYTES:
        raise ValueError(f"dtype: unknown dtype {dt!r}; known: {sorted(DTYPE_BYTES)}")
    return dt


def _encoder_length(model: ModelCard, encoder_length: int | None) -> float:
    if model.architecture == "decoder":
        if encoder_length not in (None, 0):
            raise ValueError(
                f"encoder_length: model {model.slug!r} is decoder-only, got {encoder_length!r}"
            )
        return 0.0
    e = DEFAULT_ENCODER_LENGTH if encoder_length is None else encoder_length
    return float(_int_array("encoder_length", e, 1))


# The core ---------------------------------------------------------------------------------
def _evaluate(
    model: ModelCard, hw: HardwareCard, *, dtype: str, tp: float, T: Any, S: Any, R: Any
) -> dict[str, Any]:
    """All terms of passes on ``tp`` devices from their aggregates (numbers or arrays).

    T: new tokens in the pass; S: attention (query, key) pairs, self (causal) plus
    cross; R: tokens cached before the pass whose keys and values are read
    (self-attention context plus encoder tokens). The pass also writes the keys and
    values of its T new tokens and reads them back. Time and energy come from
    :func:`specsim._roofline.time_energy`; the rest is their breakdown. Arrays are
    combined with scalar coefficients only, so a grid of 10^5 passes makes few
    temporaries (a performance choice: fresh large temporaries cost page faults).
    """
    co = _roofline.coefficients(model, hw, dtype, tp)
    k, L = co.terms, model.layers
    time, energy, roofline, flops, nbytes = _roofline.time_energy(co.linear, T, S, R)
    kv = (R + 2 * T) * (L * k["kv"])
    allreduce = T * k["allreduce_per_token_s"] + k["allreduce_latency_s"]
    return {
        "time_s": time,
        "flops": flops * tp,
        "bytes": nbytes * tp,
        "energy_j": energy,
        "weight_bytes": (L * k["w_layer"] + k["w_head"]) * tp + 0.0 * T,
        "kv_bytes": kv * tp,
        "activation_bytes": T * (L * (k["act"] + k["q_io"]) + k["head_io"]) * tp,
        "compute_time_s": flops / k["P"],
        "memory_time_s": nbytes / k["W"],
        "roofline_time_s": roofline,
        "overhead_time_s": k["overhead_s"] + 0.0 * T,
        "allreduce_time_s": allreduce,
        "resident_bytes": k["weights_resident"] + (R + T) * (L * k["kv"]),
    }


def _memory_error(
    model: ModelCard, hw: HardwareCard, *, dtype: str, tp: float, B: float, resident: float
) -> ValueError:
    weights = model.shape_params / tp * DTYPE_BYTES[dtype]
    return ValueError(
        f"model {model.slug!r} does not fit on {hw.slug!r}: weights {weights / 1e9:.2f} GB per "
        f"device (tensor_parallel={int(tp)}, {dtype}) + KV cache {(resident - weights) / 1e9:.2f} "
        f"GB for batch {int(B)} = {resident / 1e9:.2f} GB > memory {hw.mem_capacity / 1e9:.2f} GB"
    )


def step_cost(
    model: ModelCard,
    hardware: HardwareCard,
    *,
    batch: int,
    context: ArrayLike,
    new_tokens: ArrayLike,
    dtype: str | None = None,
    tensor_parallel: int = 1,
    encoder_length: int | None = None,
) -> StepCost:
    """Cost of one pass over ``batch`` sequences (see the module docstring for the model).

    ``context`` and ``new_tokens`` are scalars (every sequence alike) or arrays
    of length ``batch``. ``dtype`` defaults to the model card's. Raises
    ValueError for bad numbers, an unknown dtype, or a model whose weights and
    KV cache exceed the accelerator's memory (the message gives the sizes in GB).
    """
    B = _int_array("batch", batch, 1)
    tp = _int_array("tensor_parallel", tensor_parallel, 1)
    if B.ndim or tp.ndim:
        raise ValueError(
            f"batch and tensor_parallel must be scalars in step_cost (use step_cost_grid for "
            f"arrays), got batch={batch!r}, tensor_parallel={tensor_parallel!r}"
        )
    n_seq = int(B)
    ctx = _int_array("context", context, 0)
    new = _int_array("new_tokens", new_tokens, 1)
    for name, arr in (("context", ctx), ("new_tokens", new)):
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != n_seq):
            raise ValueError(
                f"{name}: expected a scalar or an array of length batch={n_seq}, got shape "
                f"{arr.shape}"
            )
    ctx, new = np.broadcast_to(ctx, (n_seq,)), np.broadcast_to(new, (n_seq,))
    dt = _dtype(model, dtype)
    e = _encoder_length(model, encoder_length)
    T = float(new.sum())
    S = float((new * ctx + new * (new + 1) / 2).sum()) + T * e
    terms = _evaluate(
        model, hardware, dtype=dt, tp=float(tp), T=T, S=S, R=float(ctx.sum()) + n_seq * e
    )
    values = {k: float(terms[k]) for k in _FIELDS}
    if values["resident_bytes"] > hardware.mem_capacity:
        raise _memory_error(
            model, hardware, dtype=dt, tp=float(tp), B=n_seq, resident=values["resident_bytes"]
        )
    bound = "compute" if values["compute_time_s"] > values["memory_time_s"] else "memory"
    return StepCost(
        **values, bound=bound, batch=n_seq, tokens=int(new.sum()), tensor_parallel=int(tp), dtype=dt
    )


def step_cost_grid(
    model: ModelCard,
    hardware: HardwareCard,
    *,
    batch: ArrayLike,
    context: ArrayLike,
    new_tokens: ArrayLike,
    dtype: str | None = None,
    tensor_parallel: ArrayLike = 1,
    encoder_length: int | None = None,
    check_memory: bool = True,
) -> StepCostGrid:
    """Costs of many homogeneous passes at once (vectorised).

    ``batch``, ``context``, ``new_tokens`` and ``tensor_parallel`` broadcast
    together; element ``i`` is one pass of ``batch[i]`` sequences, each with
    ``context[i]`` cached and ``new_tokens[i]`` new tokens. With
    ``check_memory`` (default) any element that does not fit raises a
    ValueError naming it; without, :attr:`StepCostGrid.fits` marks them.
    """
    B = _int_array("batch", batch, 1)
    ctx = _int_array("context", context, 0)
    new = _int_array("new_tokens", new_tokens, 1)
    tp = _int_array("tensor_parallel", tensor_parallel, 1)
    try:
        B, ctx, new, tp = np.broadcast_arrays(B, ctx, new, tp)
    except ValueError as exc:
        raise ValueError(
            f"batch, context, new_tokens, tensor_parallel: shapes {np.shape(batch)}, "
            f"{np.shape(context)}, {np.shape(new_tokens)}, {np.shape(tensor_parallel)} do not "
            "broadcast"
        ) from exc
    dt = _dtype(model, dtype)
    e = _encoder_length(model, encoder_length)
    T = B * new
    S = B * (new * ctx + new * (new + 1) / 2) + T * e
    R = B * (ctx + e)
    groups = np.unique(tp)
    if groups.size == 1:  # the usual case: one device count for the whole grid
        terms = _evaluate(model, hardware, dtype=dt, tp=float(groups[0]), T=T, S=S, R=R)
        arrays = {
            k: np.asarray(np.broadcast_to(terms[k], T.shape), dtype=np.float64) for k in _FIELDS
        }
    else:
        arrays = {k: np.empty(T.shape) for k in _FIELDS}
        for g in groups:
            sel = tp == g
            terms = _evaluate(model, hardware, dtype=dt, tp=float(g), T=T[sel], S=S[sel], R=R[sel])
            for k in _FIELDS:
                arrays[k][sel] = terms[k]
    fits = arrays["resident_bytes"] <= hardware.mem_capacity
    if check_memory and not fits.all():
        i = tuple(int(j) for j in np.argwhere(~fits)[0]) if fits.ndim else ()
        raise ValueError(
            f"element {i} of {int((~fits).sum())} that do not fit (context {int(ctx[i])}, new "
            f"tokens {int(new[i])}): "
            + str(
                _memory_error(
                    model,
                    hardware,
                    dtype=dt,
                    tp=float(tp[i]),
                    B=float(B[i]),
                    resident=float(arrays["resident_bytes"][i]),
                )
            )
        )
    return StepCostGrid(**arrays, fits=fits, dtype=dt)


# Hardware-free and ridge quantities -------------------------------------------------------
def pass_flops(
    model: ModelCard,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    new_tokens: ArrayLike = 1,
    encoder_length: int | None = None,
) -> FloatArray | float:
    """Floating-point operations of homogeneous passes (hardware-independent), broadcasting."""
    B = _int_array("batch", batch, 1)
    ctx = _int_array("context", context, 0)
    new = _int_array("new_tokens", new_tokens, 1)
    e = _encoder_length(model, encoder_length)
    T = B * new
    S = B * (new * ctx + new * (new + 1) / 2) + T * e
    # 2 flops per weight read per token (decode_params: layers, final norm, LM head), plus
    # 4 * head_dim per head and (query, key) pair, as in specsim._roofline with tp = 1.
    out = T * (2.0 * model.decode_params) + S * (4.0 * model.layers * model.head_dim * model.heads)
    return float(out) if np.ndim(out) == 0 else np.asarray(out)


def ridge_tokens(hardware: HardwareCard, dtype: str) -> float:
    """Tokens per pass at which the weight GEMMs turn compute-bound.

    Reading ``W`` weights costs ``W * bytes / (bandwidth * memory_efficiency)``;
    multiplying them by ``n`` tokens costs ``2 W n / (peak * compute_efficiency)``;
    they are equal at ``n* = bytes * peak * ce / (2 * bandwidth * me)``, the
    accelerator's ridge point (Williams et al. 2009) in tokens.
    """
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype] * hardware.ridge_intensity(dtype) / 2.0


def pass_aggregates_cost(
    model: ModelCard,
    hardware: HardwareCard,
    *,
    batch: ArrayLike,
    tokens: ArrayLike,
    context_tokens: ArrayLike,
    pairs: ArrayLike,
    dtype: str | None = None,
    tensor_parallel: int = 1,
    encoder_length: int | None = None,
) -> dict[str, Any]:
    """The cost terms of passes given as sums over their sequences (no memory check).

    The model's terms depend on a pass only through ``batch``, its new
    ``tokens``, the ``context_tokens`` cached before it (summed over
    sequences) and the causal self-attention ``pairs``
    (``new * context + new * (new + 1) / 2``, summed). The simulator forms
    these sums itself so that a serving iteration costs one call; the
    arguments broadcast, and :func:`step_cost` gives the same numbers.
    """
    dt = _dtype(model, dtype)
    e = _encoder_length(model, encoder_length)

    def num(x: ArrayLike) -> Any:
        # Plain numbers stay Python floats: 0-d arrays would make every term slow.
        return float(x) if isinstance(x, int | float) else np.asarray(x, dtype=np.float64)

    B, T = num(batch), num(tokens)
    S = num(pairs) + T * e
    R = num(context_tokens) + B * e
    return _evaluate(model, hardware, dtype=dt, tp=float(tensor_parallel), T=T, S=S, R=R)


_DERIVED = ("cost_coefficient", "verification_factor", "ops_coefficient")


def __getattr__(name: str) -> Any:
    """Derived quantities (c, v, c-hat) live in :mod:`specsim.costgrid`; importable from here too.

    Imported lazily because :mod:`specsim.costgrid` imports this module.
    """
    if name in _DERIVED:
        from specsim import costgrid

        return getattr(costgrid, name)
    raise AttributeError(f"module 'specsim.cost' has no attribute {name!r}")
