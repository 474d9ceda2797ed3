"""Trace schema, validation and incremental writing (no torch needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.traces import io as traces
from specsim.traces.io import (
    KINDS,
    SCHEMAS,
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

ROOT = Path(__file__).resolve().parents[2]
META = {"device_name": "test CPU", "date": "2026-01-01T00:00:00+00:00", "command": "pytest"}


def _pass_row(**over: object) -> dict[str, object]:
    row: dict[str, object] = {
        "model": "llama-68m",
        "dtype": "float32",
        "device": "cpu",
        "batch": 2,
        "context": 64,
        "source_len": 0,
        "new_tokens": 3,
        "repeat": 0,
        "time_s": 0.0125,
        "peak_mem_bytes": np.nan,
        "energy_j": np.nan,
    }
    row.update(over)
    return row


def _sample(kind: str, n: int = 3) -> pd.DataFrame:
    """A valid frame of ``kind`` built from the schema itself."""
    values = {"int": 1, "float": 0.5, "str": "x", "bool": True}
    return pd.DataFrame([{c.name: values[c.dtype] for c in SCHEMAS[kind]} for _ in range(n)])


def test_every_kind_round_trips(tmp_path: Path) -> None:
    for kind in KINDS:
        frame = _sample(kind)
        path = write_trace(tmp_path / kind, Trace(kind=kind, data=frame, meta=META))
        back = read_trace(path)
        assert back.kind == kind
        assert back.meta["device_name"] == "test CPU"
        assert back.meta["schema_version"] == traces.SCHEMA_VERSION
        pd.testing.assert_frame_equal(back.data, validate_frame(frame, kind), check_dtype=True)


def test_round_trip_is_exact_for_floats_and_keeps_empty_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    times = rng.random(50) * 10.0 ** rng.integers(-9, 3, 50)
    rows = [
        _pass_row(repeat=i, time_s=float(t), energy_j=(np.nan if i % 2 else float(t) * 300))
        for i, t in enumerate(times)
    ]
    write_trace(tmp_path / "p.csv", Trace(kind="passes", data=pd.DataFrame(rows), meta=META))
    data = read_trace(tmp_path / "p.csv").data
    assert np.array_equal(data.time_s.to_numpy(), times)
    assert data.energy_j.isna().sum() == 25
    assert data.batch.dtype == np.int64 and data.time_s.dtype == np.float64


@settings(max_examples=25)  # each example writes and reads files: kept small
@given(
    st.lists(
        st.tuples(
            st.integers(1, 512),
            st.integers(0, 10**6),
            st.floats(0, 1e3, allow_nan=False),
            st.text(st.characters(categories=("L", "N", "P", "S")), min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_round_trip_property(rows: list[tuple[int, int, float, str]]) -> None:
    frame = pd.DataFrame([_pass_row(batch=b, context=c, time_s=t, model=m) for b, c, t, m in rows])
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write_trace(Path(d) / "p", Trace(kind="passes", data=frame, meta=META))
        back = read_trace(Path(d) / "p").data
    assert back.model.tolist() == frame.model.tolist()
    assert back.batch.tolist() == frame.batch.tolist()
    assert back.time_s.tolist() == frame.time_s.tolist()


def _write_csv(tmp_path: Path, text: str, kind: str = "passes") -> Path:
    csv_path, json_path = trace_paths(tmp_path / kind)
    json_path.write_text(json.dumps({"schema_version": 1, "kind": kind, **META}))
    csv_path.write_text(text)
    return csv_path


def test_missing_column_names_file_and_column(tmp_path: Path) -> None:
    frame = pd.DataFrame([_pass_row()]).drop(columns=["new_tokens"])
    path = _write_csv(tmp_path, frame.to_csv(index=False))
    with pytest.raises(ValueError, match=r"passes\.csv.*'new_tokens' is missing"):
        read_trace(path)


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("time_s", "fast", "not a number"),
        ("batch", "1.5", "not an integer"),
        ("batch", "0", "below the floor"),
        ("time_s", "", "empty value"),
        ("model", "", "empty value"),
        ("time_s", "inf", "not finite"),
    ],
)
def test_bad_values_name_column_and_line(tmp_path: Path, column: str, value: str, why: str) -> None:
    frame = pd.DataFrame([_pass_row(), _pass_row(repeat=1)]).astype(object)
    frame.loc[1, column] = value
    path = _write_csv(tmp_path, frame.to_csv(index=False))
    expected = rf"passes\.csv: column '{column}', row 1 \(line 3\): {why}"
    with pytest.raises(ValueError, match=expected):
        read_trace(path)


def test_bad_bool_is_rejected(tmp_path: Path) -> None:
    frame = _sample("positions").astype(object)
    frame.loc[2, "accepted"] = "maybe"
    with pytest.raises(ValueError, match="'accepted', row 2 .*not a boolean"):
        validate_frame(frame, "positions", source="mine.csv")


def test_sidecar_problems(tmp_path: Path) -> None:
    csv_path = tmp_path / "passes.csv"
    csv_path.write_text(pd.DataFrame([_pass_row()]).to_csv(index=False))
    with pytest.raises(ValueError, match="sidecar .* is missing"):
        read_trace(csv_path)
    json_path = csv_path.with_suffix(".json")
    for meta, match in [
        ({"schema_version": 1, "kind": "passes", "date": "x"}, "'device_name' is missing"),
        ({**META, "schema_version": 99, "kind": "passes"}, "schema_version 99"),
        ({**META, "schema_version": 1, "kind": "latency"}, "unknown trace kind 'latency'"),
    ]:
        json_path.write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=match):
            read_trace(csv_path)
    json_path.write_text(json.dumps({**META, "schema_version": 1, "kind": "passes"}))
    with pytest.raises(ValueError, match="holds a 'passes' trace, not 'specdec'"):
        read_trace(csv_path, kind="specdec")
    json_path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        read_trace(csv_path)


def test_unknown_kind_and_wrong_input_type() -> None:
    with pytest.raises(ValueError, match="unknown trace kind"):
        Trace(kind="bogus", data=pd.DataFrame())
    with pytest.raises(TypeError, match="expected a pandas DataFrame"):
        not_a_frame: Any = [1, 2]
        validate_frame(not_a_frame, "passes")


def test_incremental_writing_resumes_and_repairs_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "passes.csv"
    assert start_trace(path, kind="passes", meta=META).empty
    assert append_rows(path, kind="passes", rows=[_pass_row(repeat=0), _pass_row(repeat=1)]) == 2
    assert append_rows(path, kind="passes", rows=[]) == 0
    with open(path, "a") as fh:  # a write cut short
        fh.write("llama-68m,float32,cpu,2,6")
    with pytest.raises(ValueError, match="last line is incomplete"):
        read_trace(path)
    existing = start_trace(path, kind="passes", meta={**META, "command": "second"})
    assert existing.repeat.tolist() == [0, 1]
    append_rows(path, kind="passes", rows=[_pass_row(repeat=2)])
    trace = read_trace(path)
    assert trace.data.repeat.tolist() == [0, 1, 2]
    assert [s["command"] for s in trace.meta["sessions"]] == ["pytest", "second"]
    with pytest.raises(ValueError, match="holds a 'passes' trace"):
        start_trace(path, kind="ceilings", meta=META)
    with pytest.raises(ValueError, match="column 'time_s'"):
        append_rows(path, kind="passes", rows=[_pass_row(time_s=-1.0)])
    replace_rows(path, kind="passes", data=trace.data[trace.data.repeat != 1])
    assert read_trace(path).data.repeat.tolist() == [0, 2]


def test_append_needs_a_started_trace(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="start_trace"):
        append_rows(tmp_path / "passes.csv", kind="passes", rows=[_pass_row()])


def test_extra_columns_are_kept(tmp_path: Path) -> None:
    frame = pd.DataFrame([_pass_row(), _pass_row(repeat=1)]).assign(server="vllm 0.6")
    write_trace(tmp_path / "p", Trace(kind="passes", data=frame, meta=META))
    assert read_traces(tmp_path)["p"].data.server.tolist() == ["vllm 0.6"] * 2


def test_docs_describe_every_column() -> None:
    doc = (ROOT / "docs" / "traces.md").read_text()
    for kind, columns in SCHEMAS.items():
        section = doc.split(f"### `{kind}`", 1)
        assert len(section) == 2, f"docs/traces.md has no section for {kind!r}"
        body = section[1].split("\n### ", 1)[0]
        for col in columns:
            assert f"| `{col.name}` |" in body, f"{kind}.{col.name} undocumented"
    for key in traces.REQUIRED_META:
        assert f"`{key}`" in doc


def test_reading_traces_does_not_import_torch() -> None:
    code = (
        "import sys, specsim, specsim.traces.io, specsim.cli; "
        "specsim.cli.build_parser(); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_missing_trace_is_named_as_such(tmp_path: Path) -> None:
    for path in (tmp_path / "nope.csv", tmp_path / "nope"):
        with pytest.raises(FileNotFoundError, match=r"no such trace file: .*nope\.csv"):
            read_trace(path)
