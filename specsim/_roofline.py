"""The arithmetic of one pass of :mod:`specsim.cost`, on three aggregates of the pass.

Every term of the cost model is linear in three sums over a pass's sequences:
``T`` new tokens, ``S`` attention (query, key) pairs and ``R`` cached tokens
read. The card-dependent constants of those linear forms are computed once per
(model card, accelerator card, dtype, tensor parallelism) and cached;
:func:`time_energy` then evaluates a pass in a few dozen float operations, on
Python floats (one pass, what the serving simulator asks thousands of times) or
numpy arrays (grids of passes). :func:`specsim.cost.step_cost`,
:func:`specsim.cost.step_cost_grid` and the simulator's cost sources all go
through it: there is one formula for time and energy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.cards import DTYPE_BYTES, HardwareCard, ModelCard

__all__ = ["Coefficients", "coefficients", "time_energy"]

Linear = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Coefficients:
    """Per-device constants of a pass on given cards.

    ``terms``: the per-token, per-layer quantities (bytes, flops) that the cost
    breakdown reports. ``linear``: the constants of time, flops, bytes and
    energy as linear forms in ``T``, ``S`` and ``R`` (layers folded in), in the
    order :func:`time_energy` unpacks them.
    """

    terms: dict[str, float]
    linear: Linear


_CACHE: dict[tuple[int, int, str, float], tuple[ModelCard, HardwareCard, Coefficients]] = {}


def coefficients(model: ModelCard, hw: HardwareCard, dtype: str, tp: float) -> Coefficients:
    """Memoized :func:`_compute`, keyed on the cards' identity.

    A speed trick for the simulator, which evaluates passes of the same cards
    thousands of times: hashing a frozen card (all its fields) costs more than
    the pass. The cached entry holds the cards, so their ids cannot be reused.
    """
    key = (id(model), id(hw), dtype, tp)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is model and hit[1] is hw:
        return hit[2]
    if len(_CACHE) >= 256:
        _CACHE.clear()
    coeffs = _compute(model, hw, dtype, tp)
    _CACHE[key] = (model, hw, coeffs)
    return coeffs


def _compute(model: ModelCard, hw: HardwareCard, dtype: str, tp: float) -> Coefficients:
    """Weights and heads are split over ``tp`` devices; KV heads too, but never below one
    per device. Activation traffic per token and layer: each weight GEMM reads its input
    and writes its output once (inputs of column-parallel GEMMs are replicated).
    """
    b, d, L = DTYPE_BYTES[dtype], model.d_model, model.layers
    encdec = model.architecture == "encoder-decoder"
    q = model.q_dim / tp
    act = 4 * d + 2 * q + ((3 if model.gated_mlp else 2) * model.d_ff) / tp
    layer_params = model.decode_layer_params / tp
    head_params = (model.decode_params - L * model.decode_layer_params) / tp  # LM head, norm
    k = {
        "b": b,
        "P": hw.peak(dtype) * hw.compute_efficiency,
        "W": hw.mem_bandwidth * hw.memory_efficiency,
        "w_layer": layer_params * b,  # weight bytes per layer
        "w_head": head_params * b,
        "dense_flops": 2.0 * layer_params,  # per token per layer
        "attn_flops": 4.0 * model.head_dim * model.heads / tp,  # per (query, key) pair
        "head_flops": 2.0 * head_params,  # per token
        "act": (act + (2 * d + 2 * q if encdec else 0)) * b,  # dense activations, per token
        "q_io": 2.0 * q * b * (2 if encdec else 1),  # attention reads q, writes its output
        "kv": 2.0 * model.head_dim * max(model.kv_heads / tp, 1.0) * b,  # per token per layer
        "head_io": (2.0 * d + model.vocab / tp) * b,  # head input, logits, embedding gather
        "n_allreduce": float(L * (3 if encdec else 2)),
        "overhead_s": L * hw.layer_overhead_s + hw.pass_overhead_s,
        "weights_resident": model.shape_params / tp * b,
    }
    P, W = k["P"], k["W"]
    ring, latency = 0.0, 0.0
    if tp > 1:  # ring all-reduces of the activations (Patarasuk & Yuan, JPDC 2009)
        ring = k["n_allreduce"] * 2.0 * (tp - 1) / tp * d * b / hw.interconnect_bandwidth
        latency = k["n_allreduce"] * hw.interconnect_latency_s
    k["allreduce_per_token_s"], k["allreduce_latency_s"] = ring, latency
    linear = (
        # roofline: max(compute, memory) for the weight GEMMs, attention and the LM head
        L * k["dense_flops"] / P, L * k["act"] / W, L * k["w_layer"] / W,
        L * k["attn_flops"] / P, L * k["kv"] / W, L * (2.0 * k["kv"] + k["q_io"]) / W,
        k["head_flops"] / P, k["head_io"] / W, k["w_head"] / W,
        # overheads: all-reduce per token, fixed per pass
        ring, k["overhead_s"] + latency,
        # flops and bytes of one device
        L * k["dense_flops"] + k["head_flops"], L * k["attn_flops"],
        L * k["w_layer"] + k["w_head"], L * k["kv"],
        2.0 * L * k["kv"] + L * (k["act"] + k["q_io"]) + k["head_io"],
        # energy: idle power, then the utilisation model or the per-flop/per-byte one
        # (-1 marks a card that gives no per-operation energies)
        hw.idle_power_w, hw.max_power_w - hw.idle_power_w,
        1.0 / hw.peak(dtype), 1.0 / hw.mem_bandwidth,
        -1.0 if hw.energy_per_flop_j is None else hw.energy_per_flop_j,
        -1.0 if hw.energy_per_byte_j is None else hw.energy_per_byte_j,
        float(tp),
    )  # fmt: skip
    return Coefficients(terms=k, linear=linear)


def time_energy(linear: Linear, T: Any, S: Any, R: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``(time, energy, roofline time, flops, bytes)`` of passes with aggregates T, S, R.

    Time and roofline time are one device's (all devices run in lockstep);
    flops and bytes are one device's; energy is the total over the devices.
    Numbers or arrays (broadcasting). Energy uses the utilisation power model
    ``(idle + (max - idle) * u) * time`` with ``u`` the busier unit's fraction
    of raw peak, or ``idle * time + e_flop * flops + e_byte * bytes`` when the
    card gives per-flop and per-byte energies.
    """
    (dc, dm, dm0, ac, am, at, hc, hm, hm0, xt, x0, fT, fS, b0, bR, bT,
     idle, span, inv_peak, inv_bw, e_flop, e_byte, tp) = linear  # fmt: skip
    # Builtin max and min on plain floats: a speed trick for single passes.
    scalar = type(T) is float and type(S) is float and type(R) is float
    mx: Any = max if scalar else np.maximum
    mn: Any = min if scalar else np.minimum
    dense = mx(T * dc, T * dm + dm0)
    roofline = dense + mx(S * ac, R * am + T * at) + mx(T * hc, T * hm + hm0)
    time = roofline + (T * xt + x0)
    flops = T * fT + S * fS
    nbytes = b0 + R * bR + T * bT
    if e_flop < 0.0 or e_byte < 0.0:
        util = mn(mx(flops * inv_peak, nbytes * inv_bw) / time, 1.0)
        energy = (idle + span * util) * time
    else:
        energy = idle * time + e_flop * flops + e_byte * nbytes
    return time, energy * tp, roofline, flops, nbytes
