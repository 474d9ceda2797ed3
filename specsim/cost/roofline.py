"""The arithmetic of one pass, on three aggregates of the pass.

Every term of the cost model is linear in three sums over a pass's sequences
(:class:`specsim.cost.shape.PassSums`): ``T`` new tokens, ``S`` attention
(query, key) pairs and ``R`` cached tokens read. The card-dependent constants
of those linear forms, a :class:`Roofline`, are computed once per (model card,
accelerator card, formats, tensor parallelism) and cached; :func:`time_energy`
then evaluates a pass in a few dozen float operations, on Python floats (one
pass, what the serving simulator asks thousands of times) or numpy arrays
(grids of passes). Every cost function and the simulator's cost sources go through
it: there is one formula for time and energy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile, profile_of_card
from specsim.cost.attention import AttentionCosts, attention_costs, attention_time
from specsim.cost.formats import Formats
from specsim.cost.memory import footprint
from specsim.cost.moe import allreduce_card, expert_kernel, pass_collectives, touched_experts
from specsim.cost.quant import DEQUANT_TILE_ROWS, dequant_rows, vector_peak
from specsim.cost.stack_terms import StackCosts, stack_costs, stack_terms

__all__ = ["Roofline", "attention_terms", "expert_reads", "roofline", "time_energy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Roofline:
    """Per-device constants of a pass of one model on one accelerator.

    The first group is the breakdown the cost model reports: effective ``peak`` (FLOP/s) and
    ``bandwidth`` (bytes/s); bytes and flops per token and decoder layer
    (``activation_bytes``: the weight GEMMs' inputs and outputs; ``attention_io_bytes``:
    attention's query read and output written; ``kv_bytes``: one token's keys and values); per
    token for the LM head (``head_io_bytes``, ``head_flops``); per pass (``weight_bytes``, all
    weights read; ``resident_bytes``, all weights held; ``overhead_s``). For an MoE model
    ``weight_bytes`` is what every token reads (no routed expert), and a pass adds
    ``expert_bytes`` (one routed expert over the MoE layers) per expert it touches
    (:func:`specsim.cost.moe.touched_experts`): ``experts`` > 0 marks such a model.

    The second group are the coefficients of time, flops, bytes and energy as linear forms in
    ``T``, ``S`` and ``R`` with the layers folded in, in the roofline's three kernels (dense
    GEMMs, attention, LM head), each ``max(compute, memory)``: ``*_compute_s`` per token (per
    pair for attention), ``*_memory_s`` per token (``attention_cached_s`` per cached token),
    ``*_weights_s`` once per pass.
    """

    # The breakdown (one device) ...
    layers: int
    devices: float
    peak: float
    bandwidth: float
    activation_bytes: float
    attention_io_bytes: float
    kv_bytes: float
    head_io_bytes: float
    head_flops: float
    weight_bytes: float
    resident_bytes: float
    overhead_s: float
    allreduce_per_token_s: float
    allreduce_latency_s: float
    dequant_s: float
    dequant_tile: float
    sampling_s: float
    rows_log2: tuple[float, ...]
    compute_scale: tuple[float, ...]
    memory_scale: tuple[float, ...]
    # ... and the linear forms: time (s) ...
    dense_compute_s: float
    dense_memory_s: float
    dense_weights_s: float
    attention_compute_s: float
    attention_cached_s: float
    attention_new_s: float
    head_compute_s: float
    head_memory_s: float
    head_weights_s: float
    fixed_s: float
    # ... flops and bytes ...
    flops_per_token: float
    flops_per_pair: float
    bytes_per_token: float
    bytes_per_cached: float
    # ... energy: idle power, then the utilisation model or the per-operation one.
    idle_w: float
    dynamic_w: float
    inv_raw_peak: float
    inv_raw_bandwidth: float
    per_operation_energy: bool
    energy_per_flop_j: float
    energy_per_byte_j: float
    # ... and the routed experts of an MoE model (0 for a dense one).
    experts: int = 0
    expert_bytes: float = 0.0
    expert_weights_s: float = 0.0
    moe_floor_s: float = 0.0
    model: ModelCard | None = None
    # ... and a stack profile's speculative-path constants (None: no stack).
    stack: StackCosts | None = None
    # ... and local or sparse attention layers (None: every layer global).
    attention: AttentionCosts | None = None


_Key = tuple[int, int, Formats, float, int, int]
_CACHE: dict[_Key, tuple[ModelCard, HardwareCard, RuntimeProfile | None, Roofline]] = {}


def roofline(
    model: ModelCard,
    hw: HardwareCard,
    formats: Formats,
    tp: float,
    runtime: RuntimeProfile | None = None,
    *,
    expert_parallel: int = 1,
) -> Roofline:
    """The :class:`Roofline` of ``model`` on ``tp`` devices ``hw`` under the software stack
    ``runtime`` (None: the card's own numbers, :func:`specsim.cards.profile_of_card`),
    memoized on the cards' identity. ``expert_parallel``: expert groups of an MoE model
    over the ``tp`` devices (:mod:`specsim.cost.moe`).

    A speed trick for the simulator, which evaluates passes of the same cards thousands of
    times: hashing a frozen card (all its fields) costs more than the pass. The cached entry
    holds the cards, so their ids cannot be reused."""
    key = (id(model), id(hw), formats, tp, id(runtime), expert_parallel)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is model and hit[1] is hw and hit[2] is runtime:
        return hit[3]
    if len(_CACHE) >= 256:
        _CACHE.clear()
    rt = profile_of_card(hw) if runtime is None else runtime
    co = _compute(model, hw, formats, tp, rt, ep=expert_parallel)
    _CACHE[key] = (model, hw, runtime, co)
    return co


def _dequant_s(hw: HardwareCard, formats: Formats, rt: RuntimeProfile, weights: float) -> float:
    """Seconds of dequantization per weight row of a pass over ``weights`` weights: vector
    work per weight (:mod:`specsim.cost.quant`), unless the stack's profile says what this
    format costs there (``format_dequant_ops``); 0 for unquantized weights."""
    ops = rt.dequant_ops(formats.weight_format, formats.dequant_ops) if formats.quantized else 0.0
    if not ops:
        return 0.0
    return float(ops * weights / vector_peak(hw.peak_flops, formats.compute))


def _expert_dequant_s(hw: HardwareCard, formats: Formats, rt: RuntimeProfile, *, n: float) -> float:
    """:func:`_dequant_s` of ``n`` routed-expert weights stored in ``formats.expert_format``."""
    if not formats.expert_dequant_ops:
        return 0.0
    ops = rt.dequant_ops(formats.expert_format, formats.expert_dequant_ops)
    return float(ops * n / vector_peak(hw.peak_flops, formats.compute))


@dataclass(frozen=True, slots=True)
class _PerLayer:
    """The per-token and per-layer quantities :func:`_compute` assembles (one device)."""

    act_bytes: float  # dense activations read and written, per token and layer
    q_io: float  # attention's query read and output written, per token and layer
    head_io: float  # LM head input, logits and embedding gather, per token
    w_layer: float  # weight bytes of one layer
    w_head: float  # weight bytes of the LM head and final norm
    dense_flops: float  # per token and layer
    attn_flops: float  # per (query, key) pair and layer
    head_flops: float  # per token
    weights: float  # weights of one pass (for dequantization)
    expert_bytes: float  # one routed expert over the MoE layers (0 for a dense model)
    active_routed: float  # routed-expert weights one token multiplies


def _layer_params(model: ModelCard) -> tuple[float, float, float, float]:
    """Per layer on average: weights every token reads, weights one token multiplies,
    the MLP's inner width per token; and the LM head's and final norm's weights."""
    L, moe = model.layers, model.moe_spec
    if moe is None:
        head = model.decode_params - L * model.decode_layer_params
        return model.decode_layer_params, model.decode_layer_params, model.d_ff, head
    routed = model.moe_layers * moe.top_k * model.routed_expert_params
    head = model.decode_params - model.fixed_layer_params - routed
    ffn = moe.dense_layers * model.d_ff
    ffn += model.moe_layers * (moe.top_k + moe.shared_experts) * moe.expert_ffn
    return model.fixed_layer_params / L, (model.fixed_layer_params + routed) / L, ffn / L, head


def attention_terms(model: ModelCard, tp: float) -> tuple[float, float]:
    """Per pair and layer, attention's flops; per token and layer, the elements of its
    query read and output written. MLA with absorbed up-projections (DeepSeek-V2,
    arXiv:2405.04434, Section 2.1.2): each head scores the latent and the rotary key
    (``kv_lora_rank + qk_rope_head_dim``) and sums the latent (``kv_lora_rank``)."""
    mla = model.mla_spec
    if mla is None:
        return 4.0 * model.head_dim * model.heads / tp, 2.0 * model.q_dim / tp
    per_head = mla.kv_width + mla.kv_lora_rank
    return 2.0 * per_head * model.heads / tp, per_head * model.heads / tp


def _per_layer(model: ModelCard, formats: Formats, tp: float) -> _PerLayer:
    wb, ab, d, L = formats.weights, formats.activations, model.d_model, model.layers
    encdec = model.architecture == "encoder-decoder"
    q = model.q_dim / tp
    read, active, ffn, head = _layer_params(model)
    separate = formats.expert_weights is not None  # routed experts in their own format
    ewb = wb if formats.expert_weights is None else formats.expert_weights
    routed = model.moe_layers * model.routed_expert_params
    top_k = 0 if model.moe_spec is None else model.moe_spec.top_k
    act = 4 * d + 2 * q + ((3 if model.gated_mlp else 2) * ffn) / tp
    attn_flops, q_io = attention_terms(model, tp)
    head_params = head / tp  # LM head, final norm
    return _PerLayer(
        act_bytes=(act + (2 * d + 2 * q if encdec else 0)) * ab,
        q_io=q_io * ab * (2 if encdec else 1),
        head_io=(2.0 * d + model.vocab / tp) * ab,
        w_layer=read / tp * wb,
        w_head=head_params * wb,
        dense_flops=2.0 * active / tp,
        attn_flops=attn_flops,
        head_flops=2.0 * head_params,
        weights=L * active / tp + head_params - (top_k * routed / tp if separate else 0.0),
        expert_bytes=routed / tp * ewb,
        active_routed=top_k * routed / tp if separate else 0.0,
    )


def _rates(
    x: _PerLayer, *, layers: int, kv: float, peak: float, bandwidth: float
) -> dict[str, float]:
    """The seconds per token (pair, cached token) of each kernel at the achieved ``peak``
    and ``bandwidth``, and the flops and bytes per token, pair and cached token."""
    L, P, W = layers, peak, bandwidth
    return {
        "dense_compute_s": L * x.dense_flops / P,
        "dense_memory_s": L * x.act_bytes / W,
        "dense_weights_s": L * x.w_layer / W,
        "attention_compute_s": L * x.attn_flops / P,
        "attention_cached_s": L * kv / W,
        "attention_new_s": L * (2.0 * kv + x.q_io) / W,
        "head_compute_s": x.head_flops / P,
        "head_memory_s": x.head_io / W,
        "head_weights_s": x.w_head / W,
        "flops_per_token": L * x.dense_flops + x.head_flops,
        "flops_per_pair": L * x.attn_flops,
        "bytes_per_token": 2.0 * L * kv + L * (x.act_bytes + x.q_io) + x.head_io,
        "bytes_per_cached": L * kv,
    }


def _compute(
    model: ModelCard,
    hw: HardwareCard,
    formats: Formats,
    tp: float,
    rt: RuntimeProfile,
    *,
    ep: int = 1,
) -> Roofline:
    """Weights and heads are split over ``tp`` devices, KV heads as
    :func:`specsim.cost.memory.footprint` says. Activation traffic per token and
    layer: each weight GEMM reads its input and writes its output once (inputs of
    column-parallel GEMMs are replicated).
    """
    L, x = model.layers, _per_layer(model, formats, tp)
    P = hw.peak(formats.compute) * rt.compute_efficiency
    W = hw.mem_bandwidth * rt.memory_efficiency
    fp = footprint(model, tensor_parallel=tp, formats=formats)
    kv = fp.kv_bytes_per_token_layer
    ar = allreduce_card(hw, rt.allreduce_latency_s, rt.allreduce_bandwidth)
    ring, latency = pass_collectives(
        model, hw, act_bytes=formats.activations, tp=tp, ep=ep, allreduce=ar
    )
    overhead = L * rt.layer_overhead_s + rt.pass_overhead_s
    rows_log2, compute_scale, memory_scale = rt.efficiencies(formats.weight_format)
    per_op = hw.energy_per_flop_j is not None and hw.energy_per_byte_j is not None
    return Roofline(
        layers=L,
        devices=float(tp),
        peak=P,
        bandwidth=W,
        activation_bytes=x.act_bytes,
        attention_io_bytes=x.q_io,
        kv_bytes=kv,
        head_io_bytes=x.head_io,
        head_flops=x.head_flops,
        weight_bytes=L * x.w_layer + x.w_head,
        resident_bytes=fp.weights_bytes,
        overhead_s=overhead,
        allreduce_per_token_s=ring,
        allreduce_latency_s=latency,
        dequant_s=_dequant_s(hw, formats, rt, x.weights)
        + _expert_dequant_s(hw, formats, rt, n=x.active_routed),
        dequant_tile=DEQUANT_TILE_ROWS,
        sampling_s=rt.sampling_s_per_token,
        rows_log2=rows_log2,
        compute_scale=compute_scale,
        memory_scale=memory_scale,
        fixed_s=overhead + latency,
        **_rates(x, layers=L, kv=kv, peak=P, bandwidth=W),
        idle_w=hw.idle_power_w,
        dynamic_w=hw.max_power_w - hw.idle_power_w,
        inv_raw_peak=1.0 / hw.peak(formats.compute),
        inv_raw_bandwidth=1.0 / hw.mem_bandwidth,
        per_operation_energy=per_op,
        energy_per_flop_j=hw.energy_per_flop_j if per_op else 0.0,  # type: ignore[arg-type]
        energy_per_byte_j=hw.energy_per_byte_j if per_op else 0.0,  # type: ignore[arg-type]
        experts=0 if model.moe_spec is None else model.moe_spec.experts,
        expert_bytes=x.expert_bytes,
        **expert_kernel(model, hw, formats, rt, x.expert_bytes, bandwidth=W),
        model=model if model.moe_spec is not None else None,
        stack=stack_costs(rt, L),
        attention=attention_costs(model, peak=P, bandwidth=W, pair_flops=x.attn_flops, kv_bytes=kv),
    )


def expert_reads(co: Roofline, T: Any) -> Any:
    """Routed experts (per MoE layer) a pass of ``T`` tokens reads on ``co``'s model: the
    numeric twin :func:`specsim.theory.moe.experts_touched`; 0 for a dense model."""
    if not co.experts or co.model is None:
        return 0.0 * T
    return touched_experts(co.model, T)


def time_energy(
    co: Roofline,
    T: Any,
    S: Any,
    R: Any,
    *,
    batch: Any = None,
    verify: bool = False,
    verified: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """``(time, energy, roofline time, flops, bytes)`` of passes with aggregates T, S, R
    (numbers or arrays, broadcasting): time, roofline time, flops and bytes one device's (the
    devices run in lockstep), energy the total over them: ``(idle + (max - idle) * u) * time``
    with ``u`` the busier unit's fraction of raw peak, or ``idle * time + e_flop * flops +
    e_byte * bytes`` when the card gives per-operation energies. ``batch``, ``verify`` and
    ``verified`` bring in a stack's terms (:func:`specsim.cost.stack_terms.stack_terms`).
    A bare tuple: the simulator calls this often.
    """
    host, rows, R0 = 0.0, T, R
    if co.stack is not None:
        st = stack_terms(co.stack, T=T, R=R, batch=batch, verify=verify, verified=verified)
        rows, R, host = st.rows, st.R, st.host_s
    # Builtin max and min on plain floats: a speed trick for single passes.
    scalar = type(T) is float and type(S) is float and type(R) is float
    mx: Any = max if scalar else np.maximum
    weights_s = co.dense_weights_s
    if co.experts:  # an MoE model: the routed experts this pass touches
        touched = expert_reads(co, T)
        weights_s = weights_s + co.expert_weights_s * touched
    if co.rows_log2:  # a profile whose efficiencies depend on the rows (or weight format)
        lr = np.log2(np.maximum(rows, 1.0))
        sc = np.interp(lr, co.rows_log2, co.compute_scale)
        sm = np.interp(lr, co.rows_log2, co.memory_scale)
        dense = mx(rows * co.dense_compute_s * sc, (rows * co.dense_memory_s + weights_s) * sm)
        head = mx(rows * co.head_compute_s * sc, (rows * co.head_memory_s + co.head_weights_s) * sm)
    else:
        dense = mx(rows * co.dense_compute_s, rows * co.dense_memory_s + weights_s)
        head = mx(rows * co.head_compute_s, rows * co.head_memory_s + co.head_weights_s)
    attention = mx(S * co.attention_compute_s, R * co.attention_cached_s + T * co.attention_new_s)
    if co.attention is not None:  # local or sparse layers: their own sums (cost.attention)
        attention, S, R = attention_time(co, T=T, S=S, R=R, cached=R0, batch=batch)
    roof = dense + attention + head
    if co.moe_floor_s:  # the expert kernel's fixed cost, measured per MoE layer
        roof = roof + co.moe_floor_s
    if co.dequant_s:  # weight-only quantized formats only: unquantized passes skip it
        roof = roof + co.dequant_s * dequant_rows(rows, co.dequant_tile)
    time = roof + (T * co.allreduce_per_token_s + co.fixed_s) + host
    if co.sampling_s:  # a runtime profile's sampling cost per new token
        time = time + T * co.sampling_s
    flops = rows * co.flops_per_token + S * co.flops_per_pair
    nbytes = co.weight_bytes + R * co.bytes_per_cached + rows * co.bytes_per_token
    if co.experts:
        nbytes = nbytes + co.expert_bytes * touched
    if co.per_operation_energy:
        energy = co.idle_w * time + co.energy_per_flop_j * flops + co.energy_per_byte_j * nbytes
    else:
        mn: Any = min if scalar else np.minimum
        util = mn(mx(flops * co.inv_raw_peak, nbytes * co.inv_raw_bandwidth) / time, 1.0)
        energy = (co.idle_w + co.dynamic_w * util) * time
    return time, energy * co.devices, roof, flops, nbytes
