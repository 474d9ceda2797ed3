"""Number formats of a pass: the compute dtype and the byte widths of what it moves.

Weights, the KV cache and activations each carry their own width, so that a
quantized format for one of them (int8 weights with a bfloat16 KV cache, say)
changes one value instead of every caller. Today every card and pass names one
dtype and :meth:`Formats.of` gives all three the same width.

>>> Formats.of("bfloat16")
Formats(compute='bfloat16', weights=2.0, kv=2.0, activations=2.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.cards import DTYPE_BYTES, ModelCard

__all__ = ["Formats", "resolve_dtype"]


def resolve_dtype(model: ModelCard, dtype: str | None) -> str:
    """``dtype``, or the model card's when None; a ValueError for an unknown one."""
    dt = model.dtype if dtype is None else dtype
    if not isinstance(dt, str) or dt not in DTYPE_BYTES:
        raise ValueError(f"dtype: unknown dtype {dt!r}; known: {sorted(DTYPE_BYTES)}")
    return dt


@dataclass(frozen=True, slots=True, kw_only=True)
class Formats:
    """``compute``: the dtype whose peak FLOP/s the matrix units run at; ``weights``,
    ``kv`` and ``activations``: bytes per element of each."""

    compute: str
    weights: float
    kv: float
    activations: float

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
