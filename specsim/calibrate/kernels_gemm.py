"""The pass of one weight GEMM: what a kernel sweep's call costs in the cost model's terms.

:func:`gemm_roofline` builds the :class:`specsim.cost.roofline.Roofline` of a pass whose only
kernel is one ``K x N`` weight GEMM (no attention, no LM head, no collectives), with a fixed
cost per call in place of the per-pass overheads; :func:`gemm_time` evaluates it with
:func:`specsim.cost.roofline.time_energy`, the function every pass of specsim goes through.
Used by :mod:`specsim.calibrate.kernels` to fit a device part's format numbers on published
kernel sweeps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specsim.cards import HardwareCard, RuntimeProfile
from specsim.cards.stack_files import device_part_for
from specsim.cost.quant import DEQUANT_TILE_ROWS, WEIGHT_FORMATS, canonical_format, vector_peak
from specsim.cost.roofline import Roofline, time_energy

__all__ = ["kernel_profile", "gemm_roofline", "gemm_time"]


def kernel_profile(hw: HardwareCard) -> RuntimeProfile:
    """The profile a sweep on ``hw`` starts from: its device part's compute and bandwidth
    fractions, no host costs, and no format tables (those are what a fit chooses)."""
    part = device_part_for(hw)
    return RuntimeProfile(
        slug=f"{part.slug}-kernel-sweep",
        name=f"one GEMM on {hw.slug} (device part {part.slug})",
        stack="kernel-sweep",
        compute_efficiency=part.compute_efficiency,
        memory_efficiency=part.memory_efficiency,
        layer_overhead_s=0.0,
        pass_overhead_s=0.0,
        sources={"device": part.source_path or part.slug},
    )


def gemm_roofline(
    hw: HardwareCard,
    profile: RuntimeProfile,
    *,
    weights: str,
    K: int,
    N: int,
    group_size: int | None = None,
    dtype: str = "float16",
    fixed_s: float = 0.0,
) -> Roofline:
    """The :class:`~specsim.cost.roofline.Roofline` of a pass whose one kernel is a
    ``K x N`` weight GEMM in format ``weights`` (its bytes per weight, its dequantization
    work on ``hw``'s vector peak, ``profile``'s fractions and format tables), with
    ``fixed_s`` per call; every other term (attention, LM head, collectives) is zero."""
    fmt = WEIGHT_FORMATS[canonical_format(weights, field="weights", known=WEIGHT_FORMATS)]
    compute = canonical_format(dtype, field="dtype", known=WEIGHT_FORMATS)
    P = hw.peak(compute) * profile.compute_efficiency
    W = hw.mem_bandwidth * profile.memory_efficiency
    ab = WEIGHT_FORMATS[compute].value_bytes  # activations in the compute dtype
    kn = float(K) * float(N)
    ops = profile.dequant_ops(fmt.name, fmt.dequant_ops) if fmt.dequantizes(compute) else 0.0
    x, sc, sm = profile.efficiencies(fmt.name)
    wbytes = kn * fmt.bytes_per_weight(d_model=K, group_size=group_size)
    zero: dict[str, Any] = dict.fromkeys(
        (
            "attention_io_bytes kv_bytes head_io_bytes head_flops allreduce_per_token_s "
            "allreduce_latency_s sampling_s attention_compute_s attention_cached_s "
            "attention_new_s head_compute_s head_memory_s head_weights_s flops_per_pair "
            "bytes_per_cached energy_per_flop_j energy_per_byte_j"
        ).split(),
        0.0,
    )
    return Roofline(
        layers=1,
        devices=1.0,
        peak=P,
        bandwidth=W,
        activation_bytes=(K + N) * ab,
        weight_bytes=wbytes,
        resident_bytes=wbytes,
        overhead_s=fixed_s,
        dequant_s=ops * kn / vector_peak(hw.peak_flops, compute) if ops else 0.0,
        dequant_tile=DEQUANT_TILE_ROWS,
        rows_log2=x,
        compute_scale=sc,
        memory_scale=sm,
        dense_compute_s=2.0 * kn / P,
        dense_memory_s=(K + N) * ab / W,
        dense_weights_s=wbytes / W,
        fixed_s=fixed_s,
        flops_per_token=2.0 * kn,
        bytes_per_token=(K + N) * ab,
        idle_w=hw.idle_power_w,
        dynamic_w=hw.max_power_w - hw.idle_power_w,
        inv_raw_peak=1.0 / hw.peak(compute),
        inv_raw_bandwidth=1.0 / hw.mem_bandwidth,
        per_operation_energy=False,
        **zero,
    )


def gemm_time(co: Roofline, rows: object) -> np.ndarray:
    """Seconds of one call of the GEMM ``co`` at each of ``rows`` (new tokens of the pass),
    by :func:`specsim.cost.roofline.time_energy`."""
    r = np.asarray(rows, dtype=np.float64)
    zero = np.zeros_like(r)
    return np.asarray(time_energy(co, r, zero, zero)[0], dtype=np.float64)
