"""What both forms of ``specsim calibrate`` (a card, ``--profile``) share: reading the traces
the user named, the model cards they name, and how the command reports itself."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pandas as pd

from specsim.calibrate.cards import past_positions
from specsim.cards import ModelCard, load_model
from specsim.traces.io import Trace, read_trace, read_traces, trace_paths

__all__ = ["collect", "of_kind", "spread", "trace_models", "past_note", "command_line"]


def collect(paths: list[str]) -> list[tuple[str, Trace]]:
    """(where, trace) for every trace named or found in a named folder."""
    out: list[tuple[str, Trace]] = []
    for p in paths:
        if Path(p).is_dir():
            out.extend((str(Path(p) / f"{stem}.csv"), t) for stem, t in read_traces(p).items())
            continue
        csv_path, json_path = trace_paths(p)
        if not csv_path.exists() and not json_path.exists():
            raise FileNotFoundError(f"{p}: no such trace file or folder")
        out.append((p, read_trace(p)))
    return out


def of_kind(traces: list[tuple[str, Trace]], kind: str) -> list[pd.DataFrame]:
    """The data of every trace of this kind, in input order."""
    return [t.data for _, t in traces if t.kind == kind]


def spread(label: str, err: pd.Series) -> str:
    """``label: median 1.2%, worst 3.4%`` for absolute relative errors."""
    return f"{label}: median {err.median():.1%}, worst {err.max():.1%}"


def trace_models(passes: list[tuple[str, Trace]]) -> dict[str, ModelCard]:
    """The model card of every model a passes trace names; an unknown one is reported with
    the trace that named it."""
    out: dict[str, ModelCard] = {}
    for where, trace in passes:
        if "model" not in trace.data.columns:
            raise ValueError(f"{where}: passes trace has no 'model' column")
        for slug in map(str, trace.data["model"].unique()):
            if slug in out:
                continue
            try:
                out[slug] = load_model(slug)
            except (ValueError, FileNotFoundError) as err:
                raise ValueError(
                    f"model {slug!r}, named in the 'model' column of trace {where}: {err}"
                ) from err
    return out


def past_note(cfg: pd.DataFrame, models: dict[str, ModelCard]) -> str:
    """``; N past their model card's max_position, fitted as measured`` (or nothing)."""
    past = past_positions(cfg, models)
    return f"; {past} past their model card's max_position, fitted as measured" if past else ""


def command_line(args: argparse.Namespace) -> str:
    """The whole command line that made the card, as a shell would take it."""
    argv = getattr(args, "_argv", None)
    if argv is None:
        return shlex.join(["specsim", "calibrate", *args.traces, "--out", str(args.out)])
    return shlex.join(["specsim", *argv])
