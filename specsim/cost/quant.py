"""Weight and KV-cache formats: bytes per element and the dequantization work of a format.

A *weight format* says how a model's weights are stored and therefore how many
bytes a pass reads per weight, including the scales and zero points that
quantized formats keep beside the values:

===========  ===================================================  ==================
format       layout                                               bytes per weight
===========  ===================================================  ==================
``fp32``     IEEE single                                          4
``bf16``     bfloat16 (``fp16`` alike)                            2
``fp8``      one byte (e4m3), one scale per tensor                1
``int8``     int8, one bf16 scale per output channel of ``K``     ``1 + 2 / K``
             inputs (gpt-fast ``WeightOnlyInt8Linear``)
``int4``     two 4-bit values a byte, one bf16 scale and one      ``0.5 + 4 / g``
             bf16 zero point per group of ``g`` inputs
             (gpt-fast ``WeightOnlyInt4Linear``, ``scales_and_zeros``)
``q8_0``     ggml ``block_q8_0``: fp16 ``d`` + 32 int8 = 34 B     ``34 / 32 = 1.0625``
             per block of 32
``q4_0``     ggml ``block_q4_0``: fp16 ``d`` + 16 B of nibbles    ``18 / 32 = 0.5625``
             = 18 B per block of 32
``q4_K``     ggml ``block_q4_K``: fp16 ``d``, ``dmin``, 12 B of   ``144 / 256 = 0.5625``
             6-bit scales and mins, 128 B of nibbles = 144 B
             per super-block of 256
``mxfp4``    OCP MX: 32 FP4 (E2M1) values + one E8M0 scale        ``17 / 32 = 0.53125``
             = 17 B per block of 32
``nvfp4``    NVIDIA NVFP4: 16 FP4 (E2M1) values + one E4M3        ``9 / 16 = 0.5625``
             scale = 9 B per block of 16 (plus one FP32 scale
             per tensor, not counted)
===========  ===================================================  ==================

The ggml blocks are those of ``ggml/src/ggml-common.h`` in llama.cpp
(https://github.com/ggml-org/llama.cpp), whose ``static_assert`` s give the sizes
above; ``K`` is taken as the model's ``d_model`` (the input width of every weight
GEMM but the MLP's down projection, whose larger ``d_ff`` makes its overhead
smaller: the difference is below 0.05% of the bytes).

A *weight-only* format (``int8``, ``int4``, ``fp8`` on a compute dtype other than
``float8``, and the ggml blocks) multiplies in the compute dtype after turning
each weight back into it: that work is :attr:`WeightFormat.dequant_ops`
operations per weight and per row (new token) of the pass, run on the
accelerator's vector units (:func:`vector_peak`), and it adds to the dense
kernels' roofline time instead of hiding under the weight reads: this is why
verifying ``gamma + 1`` tokens with quantized weights costs more than one
(v(gamma) > 1 at batch 1). Beyond :data:`DEQUANT_TILE_ROWS` rows a kernel
reuses each dequantized tile, so the work grows by one tile's worth per
``DEQUANT_TILE_ROWS`` further rows (:func:`dequant_rows`). The work per weight and
row below is a default fitted on one stack (gpt-fast on an A100); a device part or runtime
profile gives its own kernels' (Marlin's, fitted by rows on published kernel sweeps:
:mod:`specsim.calibrate.kernels`, ``models/stacks/devices/a100.toml``), a runtime profile
its own stack's (``format_dequant_ops`` of :class:`specsim.cards.RuntimeProfile`:
eager PyTorch's dynamic int8 on CPU dequantizes nothing, its CPU int4 kernel costs over a
hundred times the default, ``models/runtime/cpu-xeon-eager-rows.toml``).

>>> WEIGHT_FORMATS["q4_K"].bytes_per_weight(d_model=4096, group_size=None)
0.5625
>>> WEIGHT_FORMATS["int4"].bytes_per_weight(d_model=4096, group_size=32)
0.625
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "WeightFormat",
    "WEIGHT_FORMATS",
    "KV_FORMATS",
    "FORMAT_ALIASES",
    "DEFAULT_INT4_GROUP_SIZE",
    "DEQUANT_TILE_ROWS",
    "VECTOR_FRACTION",
    "canonical_format",
    "dequant_rows",
    "vector_peak",
]

DEFAULT_INT4_GROUP_SIZE = 128
"""Group size of ``int4`` when none is given: gpt-fast's ``quantize.py --groupsize`` default
(128), also the usual GPTQ and AWQ setting."""

DEQUANT_TILE_ROWS = 16.0
"""Rows of a pass that each pay the full dequantization work before a kernel reuses a
dequantized weight tile. ASSUMPTION, not measured: the 16 rows of the ``m16n8k16`` tensor-core
MMA tile (NVIDIA PTX ISA, warp-level matrix instructions) that Marlin-like kernels feed from
one dequantized register tile (Frantar et al., "MARLIN", arXiv:2408.11743, 2024, report
near-ideal weight-only speedups up to batch 16-32). Replace by a measured profile. The
published Marlin sweeps by rows (:mod:`specsim.calibrate.kernels`) show no per-row growth at
all up to 64 rows, so they identify no tile either."""

VECTOR_FRACTION = 1.0 / 16.0
"""Fraction of the compute dtype's peak taken as the vector (non-matrix) peak on a card that
gives no ``float32`` peak: the A100's FP32 CUDA-core peak over its BF16 tensor peak,
19.5 / 312 = 1/16 (A100 datasheet); the H100 SXM's is 67 / 989.5 = 1/14.8."""

# Fitted with the A100-80GB card's other parameters fixed (models/hardware/a100-80gb.toml):
# the gpt-fast README's batch-1 decode of Llama-2-7B on that GPU, 104.9 tok/s in bf16,
# 155.58 tok/s with int8 and 196.80 tok/s with int4 (G=32) weights
# (https://github.com/pytorch-labs/gpt-fast/blob/main/README.md, Benchmarks). With the bytes
# above the roofline predicts 177.1 and 238.8 tok/s; the time missing per pass (0.78 ms and
# 0.89 ms), spread over the 6.61e9 weights a decode step reads at the card's FP32 peak of
# 19.5e12 op/s, is the work below (2.304 and 2.637 op per weight and row).
# tests/cost/test_cost_anchors.py reproduces both rates. Batch-1 data cannot tell per-row work from
# a lower achieved bandwidth of the quantized kernels: charging it per row is the assumption
# that makes v(gamma) grow. These stay the defaults as the numbers of gpt-fast's own kernels
# (tinygemm, inductor's int8 dequantize-and-multiply; the gpt-fast profile is every GPU card's
# default), which no published sweep by rows covers. Kernels that were swept by rows carry
# their own numbers in their device parts (specsim.calibrate.kernels, models/measured/kernels):
# Marlin, vLLM's int4/int8 kernel, pays no work per row on the A100 (int4, 1-64 rows) and the
# H100 (int4 and int8, 1-4 rows), models/stacks/devices/a100.toml and h100-sxm.toml.
_INT8_OPS = 2.30
_INT4_OPS = 2.64


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightFormat:
    """One weight format: ``value_bytes`` per weight, its scale overhead, and its dequant work.

    ``block`` (ggml formats) is the fixed block length, ``block_bytes`` its size;
    ``grouped`` formats (``int4``) take a group size; ``channel_scale_bytes`` is one
    scale per output channel (``int8``); ``group_meta_bytes`` the scale and zero point of a
    group. ``dequant_ops`` is the work per weight and row when the format is not the
    compute dtype's own; ``native`` names the compute dtype that consumes it directly.
    """

    name: str
    value_bytes: float
    dequant_ops: float = 0.0
    native: str | None = None
    grouped: bool = False
    group_meta_bytes: float = 0.0
    channel_scale_bytes: float = 0.0
    block: int | None = None
    block_bytes: float = 0.0
    source: str = ""

    def bytes_per_weight(self, *, d_model: int, group_size: int | None) -> float:
        """Bytes one weight costs, scales and zero points included (table above)."""
        if self.block is not None:
            return self.block_bytes / self.block
        if self.grouped:
            g = DEFAULT_INT4_GROUP_SIZE if group_size is None else group_size
            return self.value_bytes + self.group_meta_bytes / g
        return self.value_bytes + self.channel_scale_bytes / d_model

    def dequantizes(self, compute: str) -> bool:
        """Whether a pass computing in ``compute`` must dequantize these weights."""
        return self.dequant_ops > 0.0 and self.native != compute


_GGML = "ggml/src/ggml-common.h in https://github.com/ggml-org/llama.cpp"
_AS_INT8 = "dequant work: assumed equal to int8's (gpt-fast fit), not measured for ggml kernels"
_AS_INT4 = "dequant work: assumed equal to int4's (gpt-fast fit), not measured for ggml kernels"

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "float32": WeightFormat(name="float32", value_bytes=4.0, source="IEEE 754 single"),
    "float16": WeightFormat(name="float16", value_bytes=2.0, source="IEEE 754 half"),
    "bfloat16": WeightFormat(name="bfloat16", value_bytes=2.0, source="bfloat16"),
    "float8": WeightFormat(
        name="float8",
        value_bytes=1.0,
        dequant_ops=_INT8_OPS,
        native="float8",
        source="FP8 e4m3, one scale per tensor; native on a float8 compute dtype, else "
        "weight-only with int8's dequant work (assumption)",
    ),
    "int8": WeightFormat(
        name="int8",
        value_bytes=1.0,
        channel_scale_bytes=2.0,
        dequant_ops=_INT8_OPS,
        native="int8",
        source="gpt-fast quantize.py WeightOnlyInt8Linear: int8 weights, bf16 scale per "
        "output channel; dequant work fitted to gpt-fast's int8 Llama-2-7B decode on A100",
    ),
    "int4": WeightFormat(
        name="int4",
        value_bytes=0.5,
        grouped=True,
        group_meta_bytes=4.0,
        dequant_ops=_INT4_OPS,
        source="gpt-fast quantize.py WeightOnlyInt4Linear: packed 4-bit weights, "
        "scales_and_zeros (bf16 scale and zero) per group; dequant work fitted to gpt-fast's "
        "int4 G=32 Llama-2-7B decode on A100",
    ),
    "q8_0": WeightFormat(
        name="q8_0",
        value_bytes=1.0,
        block=32,
        block_bytes=34.0,
        dequant_ops=_INT8_OPS,
        source=f"block_q8_0 (ggml_half d; int8_t qs[32]) in {_GGML}; {_AS_INT8}",
    ),
    "q4_0": WeightFormat(
        name="q4_0",
        value_bytes=0.5,
        block=32,
        block_bytes=18.0,
        dequant_ops=_INT4_OPS,
        source=f"block_q4_0 (ggml_half d; uint8_t qs[16]) in {_GGML}; {_AS_INT4}",
    ),
    "q4_K": WeightFormat(
        name="q4_K",
        value_bytes=0.5,
        block=256,
        block_bytes=144.0,
        dequant_ops=_INT4_OPS,
        source=f"block_q4_K (ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]) in "
        f"{_GGML}; {_AS_INT4}",
    ),
    "mxfp4": WeightFormat(
        name="mxfp4",
        value_bytes=0.5,
        block=32,
        block_bytes=17.0,
        dequant_ops=_INT4_OPS,
        source="OCP Microscaling Formats (MX) Specification v1.0, 2023: MXFP4 = 32 E2M1 "
        "elements sharing one E8M0 scale; gpt-oss ships its experts so (gpt-oss README). "
        "No card has an FP4 peak, so it is weight-only here, with int4's dequant work "
        "(assumption)",
    ),
    "nvfp4": WeightFormat(
        name="nvfp4",
        value_bytes=0.5,
        block=16,
        block_bytes=9.0,
        dequant_ops=_INT4_OPS,
        source="NVIDIA, 'Introducing NVFP4 for Efficient and Accurate Low-Precision "
        "Inference' (technical blog, 2025): 16 E2M1 elements sharing one FP8 E4M3 scale, "
        "plus a per-tensor FP32 scale; weight-only here with int4's dequant work "
        "(assumption), as mxfp4",
    ),
}
"""The weight formats a pass may name (canonical names; see :data:`FORMAT_ALIASES`)."""

KV_FORMATS: dict[str, float] = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "float8": 1.0,  # FP8 KV cache (vLLM kv_cache_dtype="fp8"), per-tensor scale
    "int8": 1.0,
}
"""Bytes per element of the KV-cache formats a pass may name."""

FORMAT_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8": "float8",
    "q4_k": "q4_K",
}
"""Short names accepted for the canonical ones (``--weights fp16`` is ``float16``)."""


def canonical_format(name: object, *, field: str, known: dict[str, Any]) -> str:
    """The canonical name of format ``name`` for ``field`` (``weights`` or ``kv``), else a
    ValueError naming the field, the value and the known names."""
    if not isinstance(name, str):
        raise TypeError(f"{field}: expected a format name, got {name!r}")
    canon = FORMAT_ALIASES.get(name, name)
    if canon not in known:
        names = sorted(set(known) | {a for a, c in FORMAT_ALIASES.items() if c in known})
        raise ValueError(f"{field}: unknown format {name!r}; known: {names}")
    return canon


def vector_peak(peak_flops: dict[str, float], compute: str) -> float:
    """The vector (non-matrix) op/s that dequantization runs at: the card's ``float32`` peak
    (CUDA cores on NVIDIA GPUs), else :data:`VECTOR_FRACTION` of the compute dtype's."""
    fp32 = peak_flops.get("float32")
    return float(fp32) if fp32 else float(peak_flops[compute]) * VECTOR_FRACTION


def dequant_rows(T: Any, tile: float) -> Any:
    """Rows that pay full dequantization in a pass of ``T`` rows: ``T`` up to ``tile``, then
    one more per ``tile`` further rows (numbers or arrays)."""
    if type(T) is float:
        return T if T <= tile else tile + (T - tile) / tile
    return np.where(T <= tile, T, tile + (T - tile) / tile)
