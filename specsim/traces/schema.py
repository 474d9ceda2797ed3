"""The column schema of measurement traces: every kind, column, type and unit.

Kept apart from :mod:`specsim.traces.io` (reading and writing) so that the schema
is data a reader can take in at a glance; ``docs/traces.md`` is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SCHEMA_VERSION", "KINDS", "REQUIRED_META", "Column", "SCHEMAS"]

SCHEMA_VERSION = 1
"""Version of the column layout; readers refuse traces from a newer version."""

REQUIRED_META = ("schema_version", "kind", "device_name", "date")
"""Keys every sidecar must have. Others (``dtype``, ``torch``, ``transformers``,
``specsim``, ``command``, ``threads``, ``seed``, ``sessions``...) are optional."""

_DTYPES = ("int", "float", "str", "bool")


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One column of a trace kind: name, type, unit and meaning.

    ``dtype`` is ``"int"``, ``"float"``, ``"str"`` or ``"bool"``. A ``nullable``
    column may be empty (read as NaN for floats, ``""`` for strings); ``low`` is
    an inclusive floor checked on read and write.
    """

    name: str
    dtype: str
    unit: str
    doc: str
    nullable: bool = False
    low: float | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"Column {self.name!r}: dtype {self.dtype!r} not in {_DTYPES}")
        if self.nullable and self.dtype in ("int", "bool"):
            raise ValueError(f"Column {self.name!r}: only float and str columns may be nullable")


def _c(name: str, dtype: str, unit: str, doc: str, **kw: Any) -> Column:
    return Column(name=name, dtype=dtype, unit=unit, doc=doc, **kw)


_MODEL = _c("model", "str", "", "slug of the model card timed")
_DTYPE = _c("dtype", "str", "", "parameter and activation dtype (float32, bfloat16, ...)")
_DEVICE = _c("device", "str", "", "device kind the pass ran on (cpu, cuda)")
_BATCH = _c("batch", "int", "sequences", "sequences per forward pass", low=1)
_TEMP = _c("temperature", "float", "", "sampling temperature; 0 means greedy (argmax)", low=0.0)
_PROMPT = _c("prompt_len", "int", "tokens", "prompt length before decoding", low=1)
_RUN = _c("run_id", "str", "", "identifier of one decoding run (shared by all its rows)")
_TARGET = _c("target", "str", "", "slug of the target model card")
_CONTEXT = _c("context", "int", "tokens", "tokens in the KV cache before the pass", low=0)


def _secs(name: str, doc: str) -> Column:
    return Column(name=name, dtype="float", unit="s", doc=doc, low=0.0)


SCHEMAS: dict[str, tuple[Column, ...]] = {
    "passes": (
        _MODEL,
        _DTYPE,
        _DEVICE,
        _BATCH,
        _CONTEXT,
        _c("source_len", "int", "tokens", "encoder tokens attended to (0: decoder-only)", low=0),
        _c("new_tokens", "int", "tokens", "tokens fed per sequence in this pass", low=1),
        _c("repeat", "int", "", "index of the repeated timing (0-based)", low=0),
        _secs("time_s", "wall time of the forward pass"),
        _c(
            "peak_mem_bytes",
            "float",
            "bytes",
            "peak device memory allocated over this configuration's passes (weights and KV "
            "cache included); empty where not measured",
            nullable=True,
            low=0.0,
        ),
        _c(
            "energy_j",
            "float",
            "J",
            "device energy per pass, averaged over a loop of passes; empty where not measured",
            nullable=True,
            low=0.0,
        ),
    ),
    "specdec": (
        _RUN,
        _TARGET,
        _c("draft", "str", "", "slug of the draft model card"),
        _DTYPE,
        _DEVICE,
        _TEMP,
        _c("gamma", "int", "tokens", "tokens drafted per block", low=1),
        _BATCH,
        _PROMPT,
        _c("vocab", "int", "tokens", "shared vocabulary size of target and draft", low=1),
        _c("block", "int", "", "index of the speculative block in the run (0-based)", low=0),
        _c("seq", "int", "", "sequence (row of the batch) this row describes", low=0),
        _c(
            "context", "int", "tokens", "tokens committed before the block (prompt included)", low=1
        ),
        _c(
            "accepted", "int", "tokens", "draft tokens this sequence's verification accepted", low=0
        ),
        _c("emitted", "int", "tokens", "tokens appended to every sequence by the block", low=1),
        _secs("draft_s", "wall time of the gamma draft passes and sampling"),
        _secs("target_s", "wall time of the target pass over gamma+1 tokens"),
        _secs("verify_s", "wall time of the target probabilities, verification and cache rollback"),
    ),
    "positions": (
        _RUN,
        _c("block", "int", "", "index of the speculative block in the run", low=0),
        _c("seq", "int", "", "sequence (row of the batch)", low=0),
        _c("position", "int", "", "drafted position in the block (1..gamma)", low=1),
        _c("alpha", "float", "", "sum_x min(p(x), q(x)) at this position", low=0.0),
        _c("accepted", "bool", "", "whether this position's draft token was accepted"),
        _c("reached", "bool", "", "whether every earlier position was accepted"),
        _secs(
            "draft_pass_s", "wall time of the draft pass proposing this position, sampling included"
        ),
    ),
    "autoregressive": (
        _RUN,
        _MODEL,
        _DTYPE,
        _DEVICE,
        _TEMP,
        _BATCH,
        _PROMPT,
        _c("step", "int", "", "index of the decoding step (0-based)", low=0),
        _CONTEXT,
        _secs("forward_s", "wall time of the one-token forward pass"),
        _secs("sample_s", "wall time of the softmax, host transfer and sampling"),
    ),
    "assisted": (
        _RUN,
        _TARGET,
        _c(
            "draft",
            "str",
            "",
            "slug of the assistant model; empty for plain generation",
            nullable=True,
        ),
        _DTYPE,
        _DEVICE,
        _TEMP,
        _BATCH,
        _PROMPT,
        _c("vocab", "int", "tokens", "shared vocabulary size", low=1),
        _c("schedule", "str", "", "num_assistant_tokens_schedule (none for plain generation)"),
        _c(
            "num_assistant_tokens",
            "int",
            "tokens",
            "assistant tokens per block at the start (0 for plain generation)",
            low=0,
        ),
        _c("repeat", "int", "", "index of the repeated generation (0-based)", low=0),
        _c("new_tokens", "int", "tokens", "tokens generated per sequence", low=1),
        _secs("time_s", "wall time of generate(), prefill included"),
        _c("target_passes", "int", "", "forward passes of the target model", low=1),
        _c("draft_passes", "int", "", "forward passes of the assistant model", low=0),
    ),
    "ceilings": (
        _DTYPE,
        _DEVICE,
        _c("op", "str", "", "matmul (n x n by n x n) or copy (device to device)"),
        _c("size", "int", "", "n for matmul; bytes per buffer for copy", low=1),
        _c("repeat", "int", "", "index of the repeated timing", low=0),
        _secs("time_s", "wall time of one operation"),
        _c("flops", "float", "FLOP", "floating-point operations of one operation", low=0.0),
        _c("bytes", "float", "B", "bytes read plus written by one operation", low=0.0),
        _c(
            "rate",
            "float",
            "FLOP/s or B/s",
            "flops/time_s for matmul, bytes/time_s for copy",
            low=0.0,
        ),
    ),
}

KINDS: tuple[str, ...] = tuple(SCHEMAS)
