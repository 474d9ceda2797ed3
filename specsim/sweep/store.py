"""Where sweep rows go: a CSV file or a Parquet file, written point by point, resumable.

- CSV: each finished point's rows are appended and flushed at once. On resume a
  torn last line (a run killed mid-write) and points with missing replicates
  are dropped; the file is rewritten with the complete points only.
- Parquet (needs ``pyarrow``): each finished point is one file in
  ``OUT.parts/``, written to a temporary name and renamed (atomic); at the end
  the parts (and any earlier ``OUT``) are combined into ``OUT``.

Both sort the rows by point and replicate when the sweep completes, so the
same sweep gives the same file however its points were scheduled. A sidecar
``OUT.meta.json`` records the spec's identity: resuming with another spec is
an error rather than a silent mix.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["open_writer", "output_files", "remove_output", "CsvWriter", "ParquetWriter"]


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def _check_meta(path: Path, identity: str, seeds: int, resume: bool, exists: bool) -> None:
    meta = _meta_path(path)
    if exists and not resume:
        raise ValueError(f"--out: {path} exists; pass --resume to continue it or remove it")
    if exists and resume:
        if not meta.is_file():
            raise ValueError(f"--resume: {meta} is missing; cannot tell which sweep wrote {path}")
        old = json.loads(meta.read_text(encoding="utf-8"))
        if old.get("identity") != identity or old.get("seeds") != seeds:
            raise ValueError(
                f"--resume: {path} was written by a different sweep spec "
                f"({old.get('identity')} != {identity}); use another --out"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"identity": identity, "seeds": seeds}) + "\n", encoding="utf-8")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    return str(value)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class CsvWriter:
    """Append-per-point CSV with resume (see the module docstring)."""

    def __init__(self, path: Path, *, identity: str, seeds: int, resume: bool) -> None:
        self.path, self.seeds = path, seeds
        _check_meta(path, identity, seeds, resume, path.exists())
        self.header: list[str] | None = None
        self.done: set[int] = set()
        if resume and path.exists():
            self._recover()
        self.fh = path.open("a", encoding="utf-8", newline="")

    def _recover(self) -> None:
        text = self.path.read_text(encoding="utf-8")
        text = text[: text.rfind("\n") + 1]  # drop a torn last line
        rows = list(csv.reader(io.StringIO(text)))
        if not rows:
            self.path.write_text("", encoding="utf-8")
            return
        self.header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        p, r = self.header.index("point"), self.header.index("replicate")
        reps: dict[int, set[int]] = {}
        for row in body:
            reps.setdefault(int(row[p]), set()).add(int(row[r]))
        self.done = {k for k, v in reps.items() if v == set(range(self.seeds))}
        keep = [row for row in body if int(row[p]) in self.done]
        _replace(self.path, self._format([self.header, *keep]))

    @staticmethod
    def _format(rows: list[list[str]]) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        return buf.getvalue()

    def finished_points(self) -> set[int]:
        return set(self.done)

    def write(self, rows: list[dict[str, Any]]) -> None:
        lines: list[list[str]] = []
        if self.header is None:
            self.header = list(rows[0])
            lines.append(self.header)
        for row in rows:
            if list(row) != self.header:
                raise ValueError(f"sweep rows: columns {list(row)} differ from {self.header}")
            lines.append([_cell(v) for v in row.values()])
        self.fh.write(self._format(lines))  # one write per point, then flushed
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()

    def finalize(self) -> int:
        rows = list(csv.reader(io.StringIO(self.path.read_text(encoding="utf-8"))))
        if not rows:
            return 0
        head, body = rows[0], rows[1:]
        p, r = head.index("point"), head.index("replicate")
        body.sort(key=lambda row: (int(row[p]), int(row[r])))
        _replace(self.path, self._format([head, *body]))
        return len(body)


class ParquetWriter:
    """One Parquet part per point, combined at the end (see the module docstring)."""

    def __init__(self, path: Path, *, identity: str, seeds: int, resume: bool) -> None:
        if importlib.util.find_spec("pyarrow") is None:
            raise ValueError("--out *.parquet needs pyarrow (pip install pyarrow); or write .csv")
        self.path, self.parts = path, path.with_name(path.name + ".parts")
        _check_meta(path, identity, seeds, resume, path.exists() or self.parts.exists())
        self.parts.mkdir(parents=True, exist_ok=True)
        self.done: set[int] = set()
        if path.exists():
            self.done |= {int(x) for x in pd.read_parquet(path, columns=["point"])["point"]}
        for part in self.parts.glob("part-*.parquet"):
            self.done.add(int(part.stem.removeprefix("part-")))

    def finished_points(self) -> set[int]:
        return set(self.done)

    def write(self, rows: list[dict[str, Any]]) -> None:
        point = int(rows[0]["point"])
        tmp = self.parts / f".part-{point:08d}.tmp"
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        os.replace(tmp, self.parts / f"part-{point:08d}.parquet")

    def close(self) -> None:
        return None

    def finalize(self) -> int:
        frames = [pd.read_parquet(p) for p in sorted(self.parts.glob("part-*.parquet"))]
        if self.path.exists():
            frames.insert(0, pd.read_parquet(self.path))
        if not frames:
            return 0
        df = pd.concat(frames, ignore_index=True).sort_values(["point", "replicate"])
        tmp = self.path.with_name(self.path.name + ".tmp")
        df.to_parquet(tmp, index=False)
        os.replace(tmp, self.path)
        shutil.rmtree(self.parts)
        return len(df)


def output_files(path: Path) -> tuple[Path, ...]:
    """Everything a writer of ``path`` may create: the file, its sidecar, Parquet parts."""
    return (path, _meta_path(path), path.with_name(path.name + ".parts"))


def remove_output(path: Path) -> None:
    """Remove what a writer of ``path`` created (see :func:`output_files`)."""
    for p in (*output_files(path), path.with_name(path.name + ".tmp")):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def open_writer(
    path: Path, *, identity: str, seeds: int, resume: bool
) -> CsvWriter | ParquetWriter:
    """A writer for ``path`` by its suffix: ``.csv`` or ``.parquet``."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return CsvWriter(path, identity=identity, seeds=seeds, resume=resume)
    if suffix in (".parquet", ".pq"):
        return ParquetWriter(path, identity=identity, seeds=seeds, resume=resume)
    raise ValueError(f"--out: expected a .csv or .parquet file, got {str(path)!r}")
