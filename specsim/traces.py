"""Measurement traces: tidy CSV tables with a JSON sidecar of metadata.

A trace is one table of one *kind* (``passes``, ``specdec``, ``positions``,
``autoregressive``, ``assisted``, ``ceilings``) written as ``<name>.csv`` with
its metadata in ``<name>.json`` beside it (device name, dtype, library
versions, date, command line, threads, seed). Every row is one observation;
every column has one type and one unit, listed in :data:`SCHEMAS` and in
``docs/traces.md``, so measurements from any stack (vLLM, a custom server)
can be brought in the same format and read by calibration like ours.

Reading validates: a missing column, a value of the wrong type, an empty
required value or a value below a column's floor raises :class:`ValueError`
naming the file, the column and the line. Extra columns are kept.

Writing is incremental so that an interrupted measurement keeps what it
finished: :func:`start_trace` creates (or reopens) a trace and returns the rows
already there; :func:`append_rows` appends one completed block of rows with a
single write followed by ``fsync``. This module uses only pandas and numpy, so
traces can be read where torch is not installed.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "SCHEMA_VERSION",
    "KINDS",
    "REQUIRED_META",
    "Column",
    "SCHEMAS",
    "Trace",
    "trace_paths",
    "read_trace",
    "read_traces",
    "write_trace",
    "start_trace",
    "append_rows",
    "replace_rows",
    "validate_frame",
]

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
        _MODEL, _DTYPE, _DEVICE, _BATCH, _CONTEXT,
        _c("source_len", "int", "tokens", "encoder tokens attended to (0: decoder-only)", low=0),
        _c("new_tokens", "int", "tokens", "tokens fed per sequence in this pass", low=1),
        _c("repeat", "int", "", "index of the repeated timing (0-based)", low=0),
        _secs("time_s", "wall time of the forward pass"),
        _c("peak_mem_bytes", "float", "bytes",
           "peak device memory allocated over this configuration's passes (weights and KV "
           "cache included); empty where not measured", nullable=True, low=0.0),
        _c("energy_j", "float", "J", "device energy per pass, averaged over a loop of passes; "
           "empty where not measured", nullable=True, low=0.0),
    ),
    "specdec": (
        _RUN, _TARGET, _c("draft", "str", "", "slug of the draft model card"),
        _DTYPE, _DEVICE, _TEMP,
        _c("gamma", "int", "tokens", "tokens drafted per block", low=1),
        _BATCH, _PROMPT,
        _c("vocab", "int", "tokens", "shared vocabulary size of target and draft", low=1),
        _c("block", "int", "", "index of the speculative block in the run (0-based)", low=0),
        _c("seq", "int", "", "sequence (row of the batch) this row describes", low=0),
        _c("context", "int", "tokens", "tokens committed before the block (prompt included)",
           low=1),
        _c("accepted", "int", "tokens", "draft tokens this sequence's verification accepted",
           low=0),
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
        _secs("draft_pass_s",
              "wall time of the draft pass proposing this position, sampling included"),
    ),
    "autoregressive": (
        _RUN, _MODEL, _DTYPE, _DEVICE, _TEMP, _BATCH, _PROMPT,
        _c("step", "int", "", "index of the decoding step (0-based)", low=0),
        _CONTEXT,
        _secs("forward_s", "wall time of the one-token forward pass"),
        _secs("sample_s", "wall time of the softmax, host transfer and sampling"),
    ),
    "assisted": (
        _RUN, _TARGET,
        _c("draft", "str", "", "slug of the assistant model; empty for plain generation",
           nullable=True),
        _DTYPE, _DEVICE, _TEMP, _BATCH, _PROMPT,
        _c("vocab", "int", "tokens", "shared vocabulary size", low=1),
        _c("schedule", "str", "", "num_assistant_tokens_schedule (none for plain generation)"),
        _c("num_assistant_tokens", "int", "tokens", "assistant tokens per block at the start "
           "(0 for plain generation)", low=0),
        _c("repeat", "int", "", "index of the repeated generation (0-based)", low=0),
        _c("new_tokens", "int", "tokens", "tokens generated per sequence", low=1),
        _secs("time_s", "wall time of generate(), prefill included"),
        _c("target_passes", "int", "", "forward passes of the target model", low=1),
        _c("draft_passes", "int", "", "forward passes of the assistant model", low=0),
    ),
    "ceilings": (
        _DTYPE, _DEVICE,
        _c("op", "str", "", "matmul (n x n by n x n) or copy (device to device)"),
        _c("size", "int", "", "n for matmul; bytes per buffer for copy", low=1),
        _c("repeat", "int", "", "index of the repeated timing", low=0),
        _secs("time_s", "wall time of one operation"),
        _c("flops", "float", "FLOP", "floating-point operations of one operation", low=0.0),
        _c("bytes", "float", "B", "bytes read plus written by one operation", low=0.0),
        _c("rate", "float", "FLOP/s or B/s", "flops/time_s for matmul, bytes/time_s for copy",
           low=0.0),
    ),
}

KINDS: tuple[str, ...] = tuple(SCHEMAS)


@dataclass(frozen=True, slots=True)
class Trace:
    """One trace table: its kind, its rows and its sidecar metadata."""

    kind: str
    data: pd.DataFrame
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_kind(self.kind, "Trace.kind")


def _check_kind(kind: object, where: str) -> str:
    if kind not in SCHEMAS:
        raise ValueError(f"{where}: unknown trace kind {kind!r}; expected one of {KINDS}")
    return str(kind)


def trace_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The (CSV, JSON sidecar) pair for a trace path given with or without ``.csv``."""
    p = Path(path)
    csv_path = p if p.suffix == ".csv" else p.with_name(p.name + ".csv")
    return csv_path, csv_path.with_suffix(".json")


def _read_meta(json_path: Path, kind: str | None) -> dict[str, Any]:
    if not json_path.exists():
        raise ValueError(f"{json_path}: the metadata sidecar of this trace is missing")
    try:
        meta = json.loads(json_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{json_path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{json_path}: expected a JSON object, got {type(meta).__name__}")
    for key in REQUIRED_META:
        if key not in meta:
            raise ValueError(f"{json_path}: metadata key {key!r} is missing")
    version = meta["schema_version"]
    if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise ValueError(
            f"{json_path}: schema_version {version!r} is not one this reader knows "
            f"(1..{SCHEMA_VERSION})"
        )
    _check_kind(meta["kind"], f"{json_path}: kind")
    if kind is not None and meta["kind"] != kind:
        raise ValueError(f"{json_path}: holds a {meta['kind']!r} trace, not {kind!r}")
    return meta


def _convert(raw: pd.Series, col: Column, source: str) -> pd.Series:
    """Convert one column read as strings (or any values) to its schema type."""
    text = raw.astype(object).map(lambda v: "" if v is None or v is pd.NA else v)
    text = text.map(lambda v: "" if isinstance(v, float) and np.isnan(v) else v)
    empty = text.map(lambda v: isinstance(v, str) and v.strip() == "")

    def fail(i: int, why: str) -> ValueError:
        return ValueError(
            f"{source}: column {col.name!r}, row {i} (line {i + 2}): {why} "
            f"(got {raw.iloc[i]!r}; expected {col.dtype}{', unit ' + col.unit if col.unit else ''})"
        )

    if not col.nullable and bool(empty.any()):
        raise fail(int(np.argmax(empty.to_numpy())), "empty value in a required column")
    if col.dtype == "str":
        out = text.map(lambda v: v if isinstance(v, str) else str(v)).astype(object)
        return pd.Series(out.to_numpy(dtype=object), index=raw.index, name=col.name, dtype=object)
    if col.dtype == "bool":
        table = {"true": True, "false": False, "1": True, "0": False}
        values = []
        for i, v in enumerate(text):
            if isinstance(v, bool | np.bool_):
                values.append(bool(v))
            elif str(v).strip().lower() in table:
                values.append(table[str(v).strip().lower()])
            else:
                raise fail(i, "not a boolean")
        return pd.Series(values, index=raw.index, name=col.name, dtype=bool)
    if any(isinstance(v, bool | np.bool_) for v in text):
        i = next(i for i, v in enumerate(text) if isinstance(v, bool | np.bool_))
        raise fail(i, "a boolean where a number is expected")
    num = pd.to_numeric(text.where(~empty, None), errors="coerce").astype(float)
    bad = num.isna() & ~empty
    if bool(bad.any()):
        raise fail(int(np.argmax(bad.to_numpy())), "not a number")
    arr = num.to_numpy()
    if col.dtype == "float" and np.any(np.isinf(arr)):
        raise fail(int(np.argmax(np.isinf(arr))), "not finite")
    if col.low is not None:
        low = ~np.isnan(arr) & (arr < col.low)
        if np.any(low):
            raise fail(int(np.argmax(low)), f"below the floor {col.low}")
    if col.dtype == "int":
        frac = arr != np.round(arr)
        if np.any(frac):
            raise fail(int(np.argmax(frac)), "not an integer")
        return pd.Series(arr.astype(np.int64), index=raw.index, name=col.name)
    return pd.Series(arr, index=raw.index, name=col.name, dtype=float)


def validate_frame(frame: pd.DataFrame, kind: str, *, source: str = "<frame>") -> pd.DataFrame:
    """Check ``frame`` against the schema of ``kind`` and return it with typed columns.

    Schema columns come first, in schema order, followed by any extra columns.
    Raises :class:`ValueError` naming ``source`` and the column at fault.
    """
    _check_kind(kind, f"{source}: kind")
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{source}: expected a pandas DataFrame, got {type(frame).__name__}")
    frame = frame.reset_index(drop=True)
    columns: dict[str, pd.Series] = {}
    for col in SCHEMAS[kind]:
        if col.name not in frame.columns:
            raise ValueError(f"{source}: column {col.name!r} is missing from the {kind!r} trace")
        columns[col.name] = _convert(frame[col.name], col, source)
    for name in frame.columns:
        if name not in columns:
            columns[str(name)] = frame[name]
    return pd.DataFrame(columns, index=frame.index)


def read_trace(path: str | os.PathLike[str], *, kind: str | None = None) -> Trace:
    """Read and validate one trace (``.csv`` plus its ``.json`` sidecar).

    ``kind``, when given, must match the sidecar's. A torn last line (a write
    cut short) is a ValueError here; :func:`start_trace` repairs it on resume.
    """
    csv_path, json_path = trace_paths(path)
    meta = _read_meta(json_path, kind)
    if not csv_path.exists():
        raise FileNotFoundError(f"{csv_path}: trace file not found")
    text = csv_path.read_text()
    if text and not text.endswith("\n"):
        raise ValueError(f"{csv_path}: the last line is incomplete (an interrupted write?)")
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return Trace(kind=meta["kind"], data=validate_frame(raw, meta["kind"], source=str(csv_path)),
                 meta=meta)


def read_traces(directory: str | os.PathLike[str]) -> dict[str, Trace]:
    """Read every trace in ``directory`` (each ``*.csv`` with a sidecar), keyed by file stem."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory of traces")
    return {p.stem: read_trace(p) for p in sorted(d.glob("*.csv"))}


def _csv_text(rows: pd.DataFrame) -> str:
    buf = io.StringIO()
    # pandas writes floats as repr (shortest round-trip), so a round trip loses nothing.
    rows.to_csv(buf, index=False, header=False, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    return buf.getvalue()


def _header(kind: str, extra: Sequence[str] = ()) -> list[str]:
    return [c.name for c in SCHEMAS[kind]] + list(extra)


def _meta(kind: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    full: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": kind}
    full.update(meta)
    full["schema_version"], full["kind"] = SCHEMA_VERSION, kind
    full.setdefault("date", datetime.now(UTC).isoformat(timespec="seconds"))
    for key in REQUIRED_META:
        if key not in full:
            raise ValueError(f"meta: key {key!r} is required for a {kind!r} trace")
    return full


def write_trace(path: str | os.PathLike[str], trace: Trace) -> Path:
    """Write ``trace`` (validated) as CSV plus sidecar, replacing any existing files."""
    csv_path, json_path = trace_paths(path)
    frame = validate_frame(trace.data, trace.kind, source=str(csv_path))
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(_meta(trace.kind, trace.meta), indent=2) + "\n")
    csv_path.write_text(",".join(frame.columns) + "\n" + _csv_text(frame))
    return csv_path


def start_trace(
    path: str | os.PathLike[str], *, kind: str, meta: Mapping[str, Any]
) -> pd.DataFrame:
    """Create a trace for incremental writing, or reopen one, and return its rows.

    A new trace gets a header line and a sidecar built from ``meta``. An existing
    one must be of the same kind; a torn last line left by an interrupted write
    is dropped, ``meta`` is appended to the sidecar's ``sessions`` list, and the
    rows already measured are returned so the caller can skip them.
    """
    _check_kind(kind, "start_trace: kind")
    csv_path, json_path = trace_paths(path)
    if not csv_path.exists():
        full = _meta(kind, meta)
        full["sessions"] = [dict(meta)]
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(full, indent=2) + "\n")
        csv_path.write_text(",".join(_header(kind)) + "\n")
        return validate_frame(pd.DataFrame(columns=_header(kind)), kind, source=str(csv_path))
    old = _read_meta(json_path, kind)
    text = csv_path.read_text()
    if text and not text.endswith("\n"):
        with open(csv_path, "r+") as fh:
            fh.truncate(text.rfind("\n") + 1)
    old.setdefault("sessions", []).append(dict(meta))
    json_path.write_text(json.dumps(old, indent=2) + "\n")
    return read_trace(csv_path, kind=kind).data


def append_rows(
    path: str | os.PathLike[str], *, kind: str, rows: Iterable[Mapping[str, Any]]
) -> int:
    """Append validated ``rows`` to a trace made by :func:`start_trace`; return their number.

    The rows are written in one call and flushed to disk (``fsync``) so that a
    crash loses at most the block being written, never an earlier one.
    """
    csv_path, _ = trace_paths(path)
    if not csv_path.exists():
        raise FileNotFoundError(f"{csv_path}: call start_trace before append_rows")
    with open(csv_path) as fh:
        header = fh.readline().rstrip("\n").split(",")
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return 0
    frame = validate_frame(frame, kind, source=str(csv_path))
    extra = [c for c in frame.columns if c not in header]
    if extra:
        raise ValueError(f"{csv_path}: columns {extra} are not in the file's header")
    frame = frame.reindex(columns=header)
    with open(csv_path, "a") as fh:
        fh.write(_csv_text(frame))
        fh.flush()
        os.fsync(fh.fileno())
    return len(frame)


def replace_rows(path: str | os.PathLike[str], *, kind: str, data: pd.DataFrame) -> int:
    """Rewrite the rows of an existing trace (sidecar kept), e.g. to drop an unfinished block."""
    csv_path, json_path = trace_paths(path)
    _read_meta(json_path, kind)
    frame = validate_frame(data, kind, source=str(csv_path))
    tmp = csv_path.with_name(csv_path.name + ".tmp")
    tmp.write_text(",".join(frame.columns) + "\n" + _csv_text(frame))
    os.replace(tmp, csv_path)
    return len(frame)
