"""What both forms of ``specsim calibrate`` (a card, ``--profile``) share: reading the traces
the user named, the model cards they name, how the command reports itself and its fit, and
the refusal to write an untrusted fit."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from specsim.calibrate.cards import one_device, past_positions
from specsim.cards import ModelCard, load_model
from specsim.cli.output import writable
from specsim.traces.io import Trace, read_trace, read_traces, trace_paths

__all__ = [
    "Say",
    "collect",
    "of_kind",
    "spread",
    "trace_models",
    "past_note",
    "command_line",
    "read_passes",
    "report_fit",
    "fit_record",
    "refuse_untrusted",
    "report_runs",
]

Say = Callable[..., None]
"""Where the command's lines go: ``print``, or nowhere under ``--json``."""
Traces = list[tuple[str, Trace]]


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


def read_passes(paths: list[str]) -> tuple[Traces, Traces, dict[str, ModelCard], str]:
    """The traces named (:func:`collect`), their ``passes`` traces (a ValueError when there
    are none: nothing to fit), the model cards those name (:func:`trace_models`) and the one
    device every trace comes from (:func:`specsim.calibrate.cards.one_device`)."""
    traces = collect(paths)
    passes = [(w, t) for w, t in traces if t.kind == "passes"]
    if not passes:
        raise ValueError("no 'passes' trace among the inputs: nothing to fit")
    device = one_device([(w, t.meta, t.data) for w, t in traces])
    return traces, passes, trace_models(passes), device


def report_fit(
    fit: Any,
    cfg: pd.DataFrame,
    models: dict[str, ModelCard],
    *,
    say: Say,
    configurations: int,
    on: str = "",
) -> pd.Series:
    """Say what was fitted (``configurations``, the timed passes of ``cfg``, ``on`` a card),
    the fit's table and its in-sample error; returns the absolute relative errors."""
    say(
        f"Fitted {configurations} configurations ({int(cfg['repeats'].sum())} timed passes"
        f"{past_note(cfg, models)}){on}"
    )
    say(fit.table().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    err: pd.Series = fit.residuals["rel_error"].abs()
    say(spread("in-sample |relative error|", err))
    return err


def fit_record(fit: Any, err: pd.Series, problems: list[str]) -> dict[str, Any]:
    """The ``--json`` record's fit fields: parameters, their standard errors, the in-sample
    error and what makes the fit untrusted."""
    return {
        "parameters": fit.params,
        "stderr": fit.stderr,
        "in_sample_abs_rel_error": {"median": float(err.median()), "worst": float(err.max())},
        "untrusted": problems,
    }


def refuse_untrusted(problems: list[str], *, force: bool, what: str) -> None:
    """A ValueError listing ``problems`` unless ``--force``: an untrusted fit is not written
    (``what``: the card or the profile)."""
    if problems and not force:
        raise ValueError(
            f"the fit cannot be trusted, so no {what} was written: "
            + "; ".join(problems)
            + f". Pass --force to write it anyway (marked as untrusted in the {what})"
        )


def report_runs(
    runs: pd.DataFrame,
    *,
    title: str,
    columns: list[str],
    errors: list[tuple[str, str, pd.Series]],
    say: Say,
    out: str | None,
) -> dict[str, Any]:
    """The end-to-end check: say ``title`` and the measured runs against their predictions
    (``columns``), then each of ``errors`` (its record key, its label, the relative errors)
    as a spread; write ``runs`` to ``out`` (``--runs``) when given. Returns the record:
    each key's median and worst absolute error."""
    say(title)
    say(runs[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    record: dict[str, Any] = {}
    for key, label, err in errors:
        e = err.abs()
        say(spread(label, e))
        record[key] = {"median": float(e.median()), "worst": float(e.max())}
    if out:
        runs.to_csv(writable(out), index=False)
    return record
