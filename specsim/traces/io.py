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

from specsim.checks import NESTED_TOO_DEEPLY
from specsim.traces.schema import KINDS, REQUIRED_META, SCHEMA_VERSION, SCHEMAS, Column

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


def _text(path: Path, what: str) -> str:
    """The text of ``path``; a ValueError naming the file when it is not UTF-8 (binary)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not a UTF-8 {what} file (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None


def _read_meta(json_path: Path, kind: str | None) -> dict[str, Any]:
    if not json_path.exists():
        raise ValueError(f"{json_path}: the metadata sidecar of this trace is missing")
    try:
        meta = json.loads(_text(json_path, "JSON"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{json_path}: not valid JSON ({exc})") from None
    except RecursionError:  # json parses nested arrays and objects by recursion
        raise ValueError(f"{json_path}: {NESTED_TOO_DEEPLY}") from None
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
    if not csv_path.exists() and not json_path.exists():
        raise FileNotFoundError(f"no such trace file: {csv_path}")
    meta = _read_meta(json_path, kind)
    if not csv_path.exists():
        raise FileNotFoundError(f"{csv_path}: trace file not found")
    text = _text(csv_path, "CSV")
    if text and not text.endswith("\n"):
        raise ValueError(f"{csv_path}: the last line is incomplete (an interrupted write?)")
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return Trace(
        kind=meta["kind"], data=validate_frame(raw, meta["kind"], source=str(csv_path)), meta=meta
    )


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
    text = _text(csv_path, "CSV")
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
