"""``specsim calibrate``: fit a hardware card (or, with ``--profile``, a runtime profile on a
given card) to measured pass times; report held-out and end-to-end errors."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim.calibrate.cards import (
    PARAMETERS,
    TRUST_LIMITS,
    Fit,
    calibrated_card,
    card_from_ceilings,
    fit_card,
    holdout_errors,
    summarize_passes,
    trust_problems,
)
from specsim.calibrate.engine_trust import RESIDUAL_LIMIT
from specsim.cards import HardwareCard, ModelCard, load_hardware, write_hardware_card
from specsim.cli.calibrate_aic import add_aic_arguments, run_aic
from specsim.cli.calibrate_engine import add_engine_arguments, run_engine
from specsim.cli.calibrate_runtime import run_profile
from specsim.cli.calibrate_traces import (
    Say,
    command_line,
    fit_record,
    of_kind,
    read_passes,
    refuse_untrusted,
    report_fit,
    report_runs,
    spread,
)
from specsim.cli.jsonout import dumps
from specsim.cli.output import card_option, check_file, writable
from specsim.traces.io import Trace
from specsim.validate.forms import predict_runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE",
        help="trace files (.csv with .json sidecar) or folders of traces",
    )
    add_engine_arguments(parser)
    add_aic_arguments(parser)
    _add_card_and_check_arguments(parser)
    _add_device_arguments(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="write the card even if the fit cannot be trusted (it is marked as such in the "
        f"card: a standard error above {TRUST_LIMITS['stderr_ratio']:g}x its estimate, a "
        f"parameter at a bound of the fit, a held-out error above "
        f"{TRUST_LIMITS['holdout_worst'] * 100:.0f}%%; with --engine-output, a run the fitted "
        f"stack predicts more than {RESIDUAL_LIMIT * 100:.0f}%% off, the likely unit slip "
        "named), and overwrite existing output files",
    )
    parser.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    _add_profile_arguments(parser)


def _add_card_and_check_arguments(parser: argparse.ArgumentParser) -> None:
    """The card written, where it starts from, and how the fit is checked."""
    parser.add_argument("--out", metavar="CARD.toml", help="calibrated card path (required)")
    parser.add_argument(
        "--base",
        metavar="HARDWARE",
        help="start from this hardware card (default: a card built from the "
        "traces' measured ceilings); with --profile, the profile's card",
    )
    parser.add_argument("--slug", help="slug of the calibrated card (default: the file stem)")
    parser.add_argument("--name", help="display name (default: the traces' device name)")
    parser.add_argument(
        "--holdout",
        choices=("batch", "context", "none"),
        default="batch",
        help="leave each batch size (or context) out in turn and predict it",
    )
    parser.add_argument("--residuals", metavar="CSV", help="write the per-pass residuals here")
    parser.add_argument(
        "--runs",
        metavar="CSV",
        help="write the end-to-end prediction of the measured speculative runs here",
    )
    parser.add_argument(
        "--power-source",
        default="",
        help="where --power comes from (required with --power; written into the card)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the end-to-end simulations")
    parser.add_argument("--plot", metavar="PNG", help="draw measured against predicted here")


def _add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """The device values the traces cannot measure: memory and power."""
    parser.add_argument(
        "--mem-capacity",
        type=float,
        default=None,
        help="device memory in bytes (required for a card built from ceilings; with --base it "
        "replaces the base card's)",
    )
    parser.add_argument(
        "--power",
        type=float,
        nargs=2,
        metavar=("IDLE_W", "MAX_W"),
        help="power model (required for a card built from ceilings; with --base it replaces "
        "the base card's); say where from with --power-source",
    )


def _add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """``--profile``: a runtime profile fitted on a given card."""
    parser.add_argument(
        "--profile",
        action="store_true",
        help="fit a runtime profile on the card --base from plain passes only "
        "(specsim.calibrate.profile); predict the speculative runs from it",
    )
    parser.add_argument(
        "--formats",
        nargs="+",
        metavar="FORMAT",
        help="with --profile: the weight formats to fit (default: all measured); "
        "the others are predicted from the fitted profile, as a check",
    )
    parser.add_argument(
        "--stack",
        default="pytorch-eager",
        help="with --profile: the software stack the profile describes",
    )


def _sources(args: argparse.Namespace, base: HardwareCard | None) -> dict[str, str]:
    """Where each value of the calibrated card really comes from."""
    traces = ", ".join(args.traces)
    out: dict[str, str] = {}
    if base is None:
        out["peaks"] = (
            f"measured ceilings trace in {traces} (specsim measure): best matmul and copy rates"
        )
        out["interconnect"] = "none measured (one device): placeholder values, not used"
    else:
        where = f"base card {base.slug!r}" + (f" ({base.source_path})" if base.source_path else "")
        out["base_card"] = f"peaks, memory, interconnect and power copied from {where}"
        given = base.sources.items() if isinstance(base.sources, dict) else enumerate(base.sources)
        for key, text in given:
            if str(key) not in PARAMETERS:
                out[f"base_{key}"] = f"{where}: {text}"
    out["mem_capacity"] = (
        "given on the command line (--mem-capacity)"
        if args.mem_capacity is not None
        else f"copied from base card {base.slug!r}"
        if base is not None
        else "?"
    )
    if args.power is not None:
        out["power"] = f"given on the command line (--power): {args.power_source}"
    elif base is not None:
        out["power"] = f"copied from base card {base.slug!r}"
    fitted = f"fitted by specsim calibrate to the passes in {traces}"
    for name in PARAMETERS:
        out[name] = fitted
    return out


def _check_flags(args: argparse.Namespace) -> None:
    """``--mem-capacity`` and ``--power`` as typed, checked before any card is built (so that
    a bad value is blamed on the flag, not on the base card it would replace)."""
    if args.mem_capacity is not None and not (
        math.isfinite(args.mem_capacity) and args.mem_capacity > 0
    ):
        raise ValueError(
            f"--mem-capacity: expected a finite number of bytes > 0, got {args.mem_capacity:g}"
        )
    if args.power is not None:
        idle, peak = args.power
        if not all(math.isfinite(w) and w >= 0 for w in (idle, peak)) or peak <= 0:
            raise ValueError(
                f"--power: expected IDLE_W >= 0 and MAX_W > 0 (finite watts), got {idle:g} {peak:g}"
            )
        if idle > peak:
            raise ValueError(
                f"--power: IDLE_W {idle:g} exceeds MAX_W {peak:g}; give the idle power first"
            )
        if not args.power_source:
            raise ValueError("--power-source: say where --power comes from (written into the card)")


def _base(
    args: argparse.Namespace, traces: list[tuple[str, Trace]], slug: str, name: str
) -> HardwareCard:
    if args.base:
        base = card_option(load_hardware, args.base, option="--base")
        extra: dict[str, Any] = {}
        if args.mem_capacity is not None:
            extra["mem_capacity"] = args.mem_capacity
        if args.power is not None:
            extra["idle_power_w"], extra["max_power_w"] = args.power
        return dataclasses.replace(base, **extra) if extra else base
    ceil = of_kind(traces, "ceilings")
    if not ceil:
        raise ValueError("--base: no base card given and no 'ceilings' trace to build one from")
    if args.mem_capacity is None or args.power is None:
        raise ValueError(
            "a card built from ceilings needs --mem-capacity, --power and --power-source"
        )
    return card_from_ceilings(
        pd.concat(ceil, ignore_index=True),
        slug=slug,
        name=name,
        kind="cpu",
        mem_capacity=args.mem_capacity,
        idle_power_w=args.power[0],
        max_power_w=args.power[1],
        sources={"peaks": "measured ceilings trace"},
    )


_RUN_COLUMNS = [
    "target",
    "draft",
    "temperature",
    "gamma",
    "acceptance",
    "measured_speedup",
    "replay_speedup",
    "simulated_speedup",
    "simulated_latency_error",
    "host_share",
]


def _check_outputs(args: argparse.Namespace) -> None:
    """The flags, and every output path, before any work."""
    if args.formats is not None:
        raise ValueError("--formats: only --profile reads it")
    _check_flags(args)
    check_file(args.out, option="--out", force=args.force)
    for option in ("residuals", "runs", "plot"):
        if getattr(args, option):
            check_file(getattr(args, option), option=f"--{option}", force=args.force)


def _holdout(
    args: argparse.Namespace,
    cfg: pd.DataFrame,
    base: HardwareCard,
    *,
    models: dict[str, ModelCard],
    say: Say,
) -> tuple[pd.DataFrame | None, str]:
    """The held-out errors (None with ``--holdout none``) and their one-line summary."""
    if args.holdout == "none":
        return None, ""
    ho = holdout_errors(cfg, base, by=args.holdout, models=models)
    note = spread(f"held-out by {args.holdout}", ho["rel_error"].abs())
    say(note)
    say(ho.groupby("held_out")["rel_error"].agg(lambda s: s.abs().median()).to_string())
    return ho, note


def _end_to_end(
    args: argparse.Namespace, traces: list[tuple[str, Trace]], card: HardwareCard, say: Say
) -> dict[str, Any]:
    """The measured speculative runs replayed and simulated on ``card``; their errors."""
    if not {"specdec", "autoregressive", "positions"} <= {t.kind for _, t in traces}:
        return {}
    sd, ar, pos = (
        pd.concat(of_kind(traces, k), ignore_index=True)
        for k in ("specdec", "autoregressive", "positions")
    )
    runs = predict_runs(sd, ar, pos, card, np.random.default_rng(args.seed))
    errors = [
        (f"{kind}_{q}_error", f"{kind} {q} error", runs[f"{kind}_{q}_error"])
        for kind in ("replay", "simulated")
        for q in ("latency", "speedup")
    ]
    title = "\nEnd to end: measured speculative runs against the calibrated model"
    return report_runs(
        runs, title=title, columns=_RUN_COLUMNS, errors=errors, say=say, out=args.runs
    )


def _write_card(
    args: argparse.Namespace, fit: Fit, *, device: str, note: str, problems: list[str]
) -> tuple[Path, HardwareCard]:
    """The calibrated card at ``--out``, its header saying how it was made."""
    command = command_line(args)
    card = calibrated_card(
        fit,
        slug=args.slug or Path(args.out).stem,
        name=args.name or f"{device} (calibrated)",
        trace=", ".join(args.traces),
        note=note,
        command=command,
        sources=_sources(args, load_hardware(args.base) if args.base else None),
        untrusted=problems,
    )
    header = f"Calibrated by: {command}\nWhere each value comes from: [sources]."
    if problems:
        header += "\nUNTRUSTED FIT, written with --force: " + "; ".join(problems)
    return write_hardware_card(card, args.out, header=header), card


def run(args: argparse.Namespace) -> int:
    if args.aiconfigurator:
        return run_aic(args)
    if args.out is None:
        raise ValueError("calibrate: --out CARD.toml is required")
    if args.engine_output:
        return run_engine(args)
    if not args.traces:
        raise ValueError("calibrate: give TRACE files or folders, or --engine-output FILE...")
    if args.profile:
        return run_profile(args)
    _check_outputs(args)
    traces, passes, models, device = read_passes(args.traces)
    cfg = summarize_passes(pd.concat([t.data for _, t in passes], ignore_index=True))
    base = _base(args, traces, args.slug or Path(args.out).stem, args.name or device)
    fit = fit_card(cfg, base, models=models)
    say: Say = (lambda *a: None) if args.json else print
    err = report_fit(fit, cfg, models, say=say, configurations=len(cfg))
    ho, note = _holdout(args, cfg, base, models=models, say=say)
    problems = trust_problems(fit, ho)
    refuse_untrusted(problems, force=args.force, what="card")
    path, card = _write_card(args, fit, device=device, note=note, problems=problems)
    if args.residuals:
        fit.residuals.to_csv(writable(args.residuals), index=False)
    if args.plot:
        from specsim.plots.cost import plot_calibration  # start-up: matplotlib only for --plot

        plot_calibration(fit.residuals).savefig(writable(args.plot), dpi=120)
    say(f"wrote {path}" + (" (untrusted fit, written with --force)" if problems else ""))
    record: dict[str, Any] = {
        "card": str(path),
        "configurations": int(len(cfg)),
        "timed_passes": int(cfg["repeats"].sum()),
        **fit_record(fit, err, problems),
    }
    if ho is not None:
        e = ho["rel_error"].abs()
        record["held_out"] = {
            "by": args.holdout,
            "median": float(e.median()),
            "worst": float(e.max()),
        }
    end = _end_to_end(args, traces, card=card, say=say)
    if end:
        record["end_to_end"] = end
    if args.json:
        print(dumps(record))
    return 0
