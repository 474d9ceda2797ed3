"""The committed README of models/measured/llama.cpp is what its raw files and manifest give
(specsim.measure.llamacpp_report), so no figure in it was typed by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the optional extra specsim[measure]")

from specsim.measure.llamacpp_report import (  # noqa: E402
    bench_rows,
    spec_rows,
    verify_rows,
    write_readme,
)

MEASURED = Path(__file__).resolve().parents[2] / "models" / "measured" / "llama.cpp"


def test_the_committed_readme_is_regenerated_from_the_raw_files(tmp_path: Path) -> None:
    out = tmp_path / "llama.cpp"
    shutil.copytree(MEASURED, out)
    (out / "README.md").unlink()
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    write_readme(out, manifest)
    assert (out / "README.md").read_text() == (MEASURED / "README.md").read_text()


def test_the_tables_cover_every_output() -> None:
    manifest = json.loads((MEASURED / "manifest.json").read_text(encoding="utf-8"))
    groups = spec_rows(MEASURED)
    assert sum(len(v) for v in groups.values()) == len(manifest["speculative"])
    assert {pair for pair, _, _ in groups} == {"tiny", "tiny-distil", "rand-f16"}
    assert {(m, t) for m, t, _, _, _ in bench_rows(MEASURED)} >= {("target-f32", 1)}
    assert all(set(r) == set(range(2, 10)) for r in verify_rows(MEASURED).values())
