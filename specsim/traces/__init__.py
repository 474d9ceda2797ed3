"""Measurement traces: the column schema and the CSV + JSON sidecar files."""

from specsim.traces.io import (
    KINDS,
    REQUIRED_META,
    SCHEMA_VERSION,
    SCHEMAS,
    Column,
    Trace,
    append_rows,
    read_trace,
    read_traces,
    replace_rows,
    start_trace,
    trace_paths,
    validate_frame,
    write_trace,
)

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
