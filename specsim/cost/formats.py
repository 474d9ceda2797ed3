"""Number formats of a pass: the compute dtype and the byte widths of what it moves.

Weights, the KV cache and activations each carry their own width, so that a
quantized format for one of them (int4 weights with a bfloat16 KV cache, say)
changes one value instead of every caller. :meth:`Formats.of` gives all three
the width of one dtype (what a pass names when it names only ``dtype``, the
behaviour before weight formats); :func:`resolve_formats` builds the formats of
``dtype`` with ``weights``, ``kv`` and ``group_size`` (:mod:`specsim.cost.quant`).

>>> f = Formats.of("bfloat16")
>>> f.weights, f.kv, f.activations, f.weight_format, f.dequant_ops
(2.0, 2.0, 2.0, 'bfloat16', 0.0)
>>> from specsim.cards import load_model
>>> f = resolve_formats(load_model("llama-2-7b"), "float16", weights="int4", group_size=32)
>>> f.weights, f.kv, f.weight_format
(0.625, 2.0, 'int4')
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.cards import DTYPE_BYTES, ModelCard
from specsim.checks import check_int
from specsim.cost.quant import (
    DEFAULT_INT4_GROUP_SIZE,
    KV_FORMATS,
    WEIGHT_FORMATS,
    canonical_format,
)

__all__ = ["Formats", "resolve_dtype", "resolve_formats"]


def resolve_dtype(model: ModelCard, dtype: str | None) -> str:
    """``dtype``, or the model card's when None; a ValueError for an unknown one."""
    dt = model.dtype if dtype is None else dtype
    if not isinstance(dt, str) or dt not in DTYPE_BYTES:
        raise ValueError(f"dtype: unknown dtype {dt!r}; known: {sorted(DTYPE_BYTES)}")
    return dt


@dataclass(frozen=True, slots=True, kw_only=True)
class Formats:
    """``compute``: the dtype whose peak FLOP/s the matrix units run at; ``weights``,
    ``kv`` and ``activations``: bytes per element of each (scales and zero points of a
    quantized weight format included); ``weight_format`` and ``kv_format``: their names;
    ``group_size``: the quantization group of a grouped format; ``dequant_ops``: vector
    operations per weight and per row to turn a weight-only format back into ``compute``
    (0 when the matrix units consume the weights as stored). ``expert_weights``,
    ``expert_format`` and ``expert_dequant_ops``: the same for the routed experts of an MoE
    model stored in a format of their own (gpt-oss's MXFP4 experts beside bf16
    attention); None and "" when they share ``weights``."""

    compute: str
    weights: float
    kv: float
    activations: float
    weight_format: str = ""
    kv_format: str = ""
    group_size: int | None = None
    dequant_ops: float = 0.0
    expert_weights: float | None = None
    expert_format: str = ""
    expert_dequant_ops: float = 0.0

    def __post_init__(self) -> None:
        if not self.weight_format:
            object.__setattr__(self, "weight_format", self.compute)
        if not self.kv_format:
            object.__setattr__(self, "kv_format", self.compute)

    @property
    def quantized(self) -> bool:
        """True when the weights are not stored in the compute dtype's own width and format."""
        return self.weight_format != self.compute

    @classmethod
    def of(cls, dtype: str) -> Formats:
        """Every tensor in ``dtype`` (what a card or a pass names today); memoized."""
        hit = _OF.get(dtype)
        if hit is None:
            if dtype not in DTYPE_BYTES:
                raise ValueError(f"dtype: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
            b = DTYPE_BYTES[dtype]
            hit = _OF[dtype] = cls(compute=dtype, weights=b, kv=b, activations=b)
        return hit


_OF: dict[str, Formats] = {}


def _check_group(model: ModelCard, fmt: str, g: int, what: str) -> None:
    for name in ("d_model", "d_ff"):
        width = getattr(model, name)
        if width % g:
            raise ValueError(
                f"group_size: {what} {g} of weight format {fmt!r} does not divide the hidden "
                f"size {name}={width} of model {model.slug!r}"
            )


def _expert_format(model: ModelCard, *, dt: str, name: str) -> dict[str, float | str | None]:
    """The ``expert_*`` fields of :class:`Formats` for routed experts stored in ``name``."""
    moe = model.moe_spec
    if moe is None:
        raise ValueError(
            f"expert_weights: {name!r} needs an MoE target; {model.slug} has no experts"
        )
    e = canonical_format(name, field="expert_weights", known=WEIGHT_FORMATS)
    spec = WEIGHT_FORMATS[e]
    group = spec.block if spec.block is not None else None
    if spec.grouped:
        group = DEFAULT_INT4_GROUP_SIZE
    if group is not None:
        for what, width in (("d_model", model.d_model), ("moe.expert_ffn", moe.expert_ffn)):
            if width % group:
                raise ValueError(
                    f"expert_weights: blocks of {group} of {e!r} do not divide {what}={width} "
                    f"of model {model.slug!r}"
                )
    return {
        "expert_weights": spec.bytes_per_weight(d_model=model.d_model, group_size=group),
        "expert_format": e,
        "expert_dequant_ops": spec.dequant_ops if spec.dequantizes(dt) else 0.0,
    }


def resolve_formats(
    model: ModelCard,
    dtype: str | None,
    *,
    weights: str | None = None,
    kv: str | None = None,
    group_size: int | None = None,
    expert_weights: str | None = None,
) -> Formats:
    """The formats of a pass of ``model``: compute and activations in ``dtype`` (the model
    card's when None), weights in ``weights`` and the KV cache in ``kv`` (both ``dtype``
    when None: then the result is :meth:`Formats.of`, the behaviour before formats).

    ``group_size`` is for ``int4`` (default
    :data:`~specsim.cost.quant.DEFAULT_INT4_GROUP_SIZE`) and must divide the model's
    ``d_model`` and ``d_ff``; a ggml block format's block length must too. An unknown
    format, a group size on a format without groups, or one that does not divide: a
    ValueError naming it. ``expert_weights`` stores an MoE model's routed experts in a
    format of their own (default group or block size), the rest in ``weights``.
    """
    dt = resolve_dtype(model, dtype)
    if weights is None and kv is None and group_size is None and expert_weights is None:
        return Formats.of(dt)
    experts = {} if expert_weights is None else _expert_format(model, dt=dt, name=expert_weights)
    w = canonical_format(dt if weights is None else weights, field="weights", known=WEIGHT_FORMATS)
    k = canonical_format(dt if kv is None else kv, field="kv", known=KV_FORMATS)
    spec = WEIGHT_FORMATS[w]
    if group_size is not None:
        check_int(group_size, name="group_size", minimum=1)
        if not spec.grouped and spec.block != group_size:
            raise ValueError(
                f"group_size: weight format {w!r} has no group size to set "
                f"(got {group_size}); it applies to 'int4'"
                + (f" ({w!r} has fixed blocks of {spec.block})" if spec.block else "")
            )
    if spec.grouped:
        group_size = DEFAULT_INT4_GROUP_SIZE if group_size is None else group_size
        _check_group(model, w, group_size, "group size")
    elif spec.block is not None:
        group_size = spec.block
        _check_group(model, w, spec.block, "block length")
    return Formats(
        compute=dt,
        weights=spec.bytes_per_weight(d_model=model.d_model, group_size=group_size),
        kv=KV_FORMATS[k],
        activations=DTYPE_BYTES[dt],
        weight_format=w,
        kv_format=k,
        group_size=group_size,
        dequant_ops=spec.dequant_ops if spec.dequantizes(dt) else 0.0,
        **experts,  # type: ignore[arg-type]
    )
