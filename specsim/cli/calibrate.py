"""``specsim calibrate``: fit a hardware card to measured pass times, report held-out error."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from specsim.calibrate import (
    calibrated_card,
    card_from_ceilings,
    fit_card,
    holdout_errors,
    summarize_passes,
)
from specsim.cards import HardwareCard, load_hardware, write_hardware_card
from specsim.traces import Trace, read_trace, read_traces

HELP = "Fit a hardware card's efficiencies and overheads to measured traces (docs/traces.md)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="trace files (.csv with .json sidecar) or folders of traces",
    )
    parser.add_argument("--out", required=True, metavar="CARD.toml", help="calibrated card path")
    parser.add_argument(
        "--base",
        metavar="HARDWARE",
        help="start from this hardware card (default: a card built from the "
        "traces' measured ceilings)",
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
        "--power-source", default="",
        help="where --power comes from (required with --power; written into the card)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the end-to-end simulations")
    parser.add_argument("--plot", metavar="PNG", help="draw measured against predicted here")
    parser.add_argument(
        "--mem-capacity",
        type=float,
        default=None,
        help="device memory in bytes for a card built from ceilings",
    )
    parser.add_argument(
        "--power",
        type=float,
        nargs=2,
        metavar=("IDLE_W", "MAX_W"),
        help="power model for a card built from ceilings (say where from)",
    )


def _of_kind(traces: list[Trace], kind: str) -> list[pd.DataFrame]:
    """The data of every trace of this kind, in input order."""
    return [t.data for t in traces if t.kind == kind]


def _spread(label: str, err: pd.Series) -> str:
    """``label: median 1.2%, worst 3.4%`` for absolute relative errors."""
    return f"{label}: median {err.median():.1%}, worst {err.max():.1%}"


def _collect(paths: list[str]) -> list[Trace]:
    out: list[Trace] = []
    for p in paths:
        out.extend(read_traces(p).values() if Path(p).is_dir() else [read_trace(p)])
    return out


def _base(args: argparse.Namespace, traces: list[Trace], slug: str, name: str) -> HardwareCard:
    if args.base:
        return load_hardware(args.base)
    ceil = _of_kind(traces, "ceilings")
    if not ceil:
        raise ValueError("no --base card and no 'ceilings' trace to build one from")
    if args.mem_capacity is None or args.power is None or not args.power_source:
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
        sources={
            "peaks": "measured ceilings trace (specsim measure): best matmul and copy rates",
            "mem_capacity": "given on the command line (--mem-capacity)",
            "power": args.power_source,
        },
    )


def run(args: argparse.Namespace) -> int:
    traces = _collect(args.traces)
    passes = _of_kind(traces, "passes")
    if not passes:
        raise ValueError("no 'passes' trace among the inputs: nothing to fit")
    cfg = summarize_passes(pd.concat(passes, ignore_index=True))
    device = next((str(t.meta.get("device_name")) for t in traces), "device")
    slug = args.slug or Path(args.out).stem
    base = _base(args, traces, slug, args.name or device)
    fit = fit_card(cfg, base)
    print(f"Fitted {len(cfg)} configurations ({int(cfg['repeats'].sum())} timed passes)")
    print(fit.table().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    err = fit.residuals["rel_error"].abs()
    print(_spread("in-sample |relative error|", err))
    note = ""
    if args.holdout != "none":
        ho = holdout_errors(cfg, base, by=args.holdout)
        e = ho["rel_error"].abs()
        note = _spread(f"held-out by {args.holdout}", e)
        print(note)
        print(ho.groupby("held_out")["rel_error"].agg(lambda s: s.abs().median()).to_string())
    card = calibrated_card(
        fit,
        slug=slug,
        name=args.name or f"{device} (calibrated)",
        trace=", ".join(args.traces),
        note=note,
    )
    header = (
        f"Calibrated by: specsim calibrate {' '.join(args.traces)} --out {args.out}\n"
        "Peaks and power come from the base card; the four fitted parameters from the "
        "traces."
    )
    path = write_hardware_card(card, args.out, header=header)
    if args.residuals:
        fit.residuals.to_csv(args.residuals, index=False)
    if args.plot:
        from specsim.plots import plot_calibration

        plot_calibration(fit.residuals).savefig(args.plot, dpi=120)
    print(f"wrote {path}")
    kinds = {t.kind for t in traces}
    if {"specdec", "autoregressive", "positions"} <= kinds:
        import numpy as np

        from specsim.calibrate import predict_runs

        def cat(kind: str) -> pd.DataFrame:
            return pd.concat(_of_kind(traces, kind), ignore_index=True)

        runs = predict_runs(
            cat("specdec"), cat("autoregressive"), cat("positions"), card,
            np.random.default_rng(args.seed),
        )  # fmt: skip
        cols = [
            "target", "draft", "temperature", "gamma", "acceptance", "measured_speedup",
            "replay_speedup", "simulated_speedup", "simulated_latency_error", "host_share",
        ]  # fmt: skip
        print("\nEnd to end: measured speculative runs against the calibrated model")
        print(runs[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for kind in ("replay", "simulated"):
            for q in ("latency", "speedup"):
                e = runs[f"{kind}_{q}_error"].abs()
                print(_spread(f"{kind} {q} error", e))
        if args.runs:
            runs.to_csv(args.runs, index=False)
    return 0
