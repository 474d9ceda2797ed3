"""``specsim calibrate``: fit a hardware card (or, with ``--profile``, a runtime profile on a
given card) to measured pass times; report held-out and end-to-end errors."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim import calibrate_profile as cp
from specsim.calibrate import (
    PARAMETERS,
    TRUST_LIMITS,
    calibrated_card,
    card_from_ceilings,
    fit_card,
    holdout_errors,
    one_device,
    summarize_passes,
    trust_problems,
)
from specsim.calibrate_formats import errors_by_format, kernel_note
from specsim.cards import (
    HardwareCard,
    RuntimeProfile,
    load_hardware,
    load_runtime,
    write_hardware_card,
)
from specsim.cli.jsonout import dumps
from specsim.cli.output import card_option, check_file
from specsim.traces import Trace, read_trace, read_traces, trace_paths
from specsim.validate import predict_runs


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
    parser.add_argument(
        "--force",
        action="store_true",
        help="write the card even if the fit cannot be trusted (it is marked as such in the "
        f"card: a standard error above {TRUST_LIMITS['stderr_ratio']:g}x its estimate, a "
        f"parameter at a bound of the fit, a held-out error above "
        f"{TRUST_LIMITS['holdout_worst'] * 100:.0f}%%), and overwrite existing output files",
    )
    parser.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="fit a runtime profile on the card --base from plain passes only "
        "(specsim.calibrate_profile); predict the speculative runs from it",
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


def _of_kind(traces: list[tuple[str, Trace]], kind: str) -> list[pd.DataFrame]:
    """The data of every trace of this kind, in input order."""
    return [t.data for _, t in traces if t.kind == kind]


def _spread(label: str, err: pd.Series) -> str:
    """``label: median 1.2%, worst 3.4%`` for absolute relative errors."""
    return f"{label}: median {err.median():.1%}, worst {err.max():.1%}"


def _collect(paths: list[str]) -> list[tuple[str, Trace]]:
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


def _base(
    args: argparse.Namespace, traces: list[tuple[str, Trace]], slug: str, name: str
) -> HardwareCard:
    if args.power is not None and not args.power_source:
        raise ValueError("--power-source: say where --power comes from (written into the card)")
    if args.base:
        base = card_option(load_hardware, args.base, option="--base")
        extra: dict[str, Any] = {}
        if args.mem_capacity is not None:
            extra["mem_capacity"] = args.mem_capacity
        if args.power is not None:
            extra["idle_power_w"], extra["max_power_w"] = args.power
        return dataclasses.replace(base, **extra) if extra else base
    ceil = _of_kind(traces, "ceilings")
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


def _command(args: argparse.Namespace) -> str:
    """The whole command line that made the card, as a shell would take it."""
    argv = getattr(args, "_argv", None)
    if argv is None:
        return shlex.join(["specsim", "calibrate", *args.traces, "--out", str(args.out)])
    return shlex.join(["specsim", *argv])


def run(args: argparse.Namespace) -> int:
    if args.profile:
        return run_profile(args)
    if args.formats is not None:
        raise ValueError("--formats: only --profile reads it")
    check_file(args.out, option="--out", force=args.force)
    for option in ("residuals", "runs", "plot"):
        if getattr(args, option):
            check_file(getattr(args, option), option=f"--{option}", force=args.force)
    traces = _collect(args.traces)
    passes = [(w, t) for w, t in traces if t.kind == "passes"]
    if not passes:
        raise ValueError("no 'passes' trace among the inputs: nothing to fit")
    device = one_device([(w, t.meta, t.data) for w, t in traces])
    cfg = summarize_passes(pd.concat([t.data for _, t in passes], ignore_index=True))
    slug = args.slug or Path(args.out).stem
    base = _base(args, traces, slug, args.name or device)
    fit = fit_card(cfg, base)
    say = (lambda *a: None) if args.json else print
    say(f"Fitted {len(cfg)} configurations ({int(cfg['repeats'].sum())} timed passes)")
    say(fit.table().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    err = fit.residuals["rel_error"].abs()
    say(_spread("in-sample |relative error|", err))
    note = ""
    ho = None
    if args.holdout != "none":
        ho = holdout_errors(cfg, base, by=args.holdout)
        note = _spread(f"held-out by {args.holdout}", ho["rel_error"].abs())
        say(note)
        say(ho.groupby("held_out")["rel_error"].agg(lambda s: s.abs().median()).to_string())
    problems = trust_problems(fit, ho)
    if problems and not args.force:
        raise ValueError(
            "the fit cannot be trusted, so no card was written: "
            + "; ".join(problems)
            + ". Pass --force to write it anyway (marked as untrusted in the card)"
        )
    command = _command(args)
    card = calibrated_card(
        fit,
        slug=slug,
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
    path = write_hardware_card(card, args.out, header=header)
    if args.residuals:
        fit.residuals.to_csv(args.residuals, index=False)
    if args.plot:
        from specsim.plots_cost import plot_calibration  # start-up: matplotlib only for --plot

        plot_calibration(fit.residuals).savefig(args.plot, dpi=120)
    say(f"wrote {path}" + (" (untrusted fit, written with --force)" if problems else ""))
    record: dict[str, Any] = {
        "card": str(path),
        "configurations": int(len(cfg)),
        "timed_passes": int(cfg["repeats"].sum()),
        "parameters": fit.params,
        "stderr": fit.stderr,
        "in_sample_abs_rel_error": {"median": float(err.median()), "worst": float(err.max())},
        "untrusted": problems,
    }
    if ho is not None:
        e = ho["rel_error"].abs()
        record["held_out"] = {
            "by": args.holdout,
            "median": float(e.median()),
            "worst": float(e.max()),
        }
    kinds = {t.kind for _, t in traces}
    if {"specdec", "autoregressive", "positions"} <= kinds:

        def cat(kind: str) -> pd.DataFrame:
            return pd.concat(_of_kind(traces, kind), ignore_index=True)

        runs = predict_runs(
            cat("specdec"),
            cat("autoregressive"),
            cat("positions"),
            card,
            np.random.default_rng(args.seed),
        )
        cols = [
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
        say("\nEnd to end: measured speculative runs against the calibrated model")
        say(runs[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        record["end_to_end"] = {}
        for kind in ("replay", "simulated"):
            for q in ("latency", "speedup"):
                e = runs[f"{kind}_{q}_error"].abs()
                say(_spread(f"{kind} {q} error", e))
                record["end_to_end"][f"{kind}_{q}_error"] = {
                    "median": float(e.median()),
                    "worst": float(e.max()),
                }
        if args.runs:
            runs.to_csv(args.runs, index=False)
    if args.json:
        print(dumps(record))
    return 0


def run_profile(args: argparse.Namespace) -> int:
    """``--profile``: fit a runtime profile to the passes on the card ``--base``, write it,
    predict the speculative runs of the traces (none of which enters the fit)."""
    given = [f for f in ("mem_capacity", "power") if getattr(args, f) is not None]
    if given or not args.base:
        raise ValueError(
            "--profile: needs --base HARDWARE (the card whose peaks the profile "
            "is relative to) and takes no " + ", ".join(f"--{g}" for g in given)
        )
    for option in ("out", "residuals", "runs", "plot"):
        if getattr(args, option):
            check_file(getattr(args, option), option=f"--{option}", force=args.force)
    card = card_option(load_hardware, args.base, option="--base")
    traces = _collect(args.traces)
    passes = [(w, t) for w, t in traces if t.kind == "passes"]
    if not passes:
        raise ValueError("no 'passes' trace among the inputs: nothing to fit")
    one_device([(w, t.meta, t.data) for w, t in traces])
    for _, t in traces:
        cp.check_fit_device(t.meta, card)
    cfg = cp.profile_configs(pd.concat([t.data for _, t in passes], ignore_index=True))
    held = cfg.iloc[:0]
    if args.formats:
        unknown = sorted(set(args.formats) - set(cfg["weights"]))
        if unknown:
            raise ValueError(
                f"--formats: {unknown} not measured; the traces have {sorted(set(cfg['weights']))}"
            )
        held = cfg[~cfg["weights"].isin(args.formats)]
        cfg = cfg[cfg["weights"].isin(args.formats)]
    slug = args.slug or Path(args.out).stem
    plain = _of_kind(traces, "autoregressive")
    sampling, sampled = 0.0, "not measured (no plain decoding trace): 0"
    if plain:
        ar = pd.concat(plain, ignore_index=True)
        sampling = float((ar["sample_s"] / ar["batch"]).median())
        sampled = (
            f"median sample_s per sequence of {len(ar)} plain decoding steps "
            "(autoregressive traces; no speculative run)"
        )
    base = RuntimeProfile(
        slug=slug,
        name=args.name or slug,
        stack=args.stack,
        compute_efficiency=0.3,
        memory_efficiency=0.3,
        layer_overhead_s=0.0,
        pass_overhead_s=0.0,
        sampling_s_per_token=sampling,
        fitted_on=card.slug,
        kinds=[card.kind],
        sources={"fit": "specsim calibrate --profile"},
    )
    fit = cp.fit_profile(cfg, card, base=base)
    say = (lambda *a: None) if args.json else print
    say(
        f"Fitted {len(fit.residuals)} configurations ({int(cfg['repeats'].sum())} timed "
        f"passes; {fit.dropped} past a card's max_position left out) on {card.slug}"
    )
    say(fit.table().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    err = fit.residuals["rel_error"].abs()
    say(_spread("in-sample |relative error|", err))
    res = fit.residuals.assign(in_fit=True)
    if len(held):  # formats left out of the fit, predicted by it (its own format factor: 1)
        unsampled = dataclasses.replace(fit.profile, sampling_s_per_token=0.0)
        out = held.assign(in_fit=False, predicted_s=cp.predict_profile(held, card, unsampled))
        res = pd.concat([res, out.assign(rel_error=out["predicted_s"] / out["time_s"] - 1)])
    say("|relative error| by weight format (in_fit False: predicted, not fitted)")
    say(errors_by_format(res).to_string(index=False, float_format=lambda v: f"{v:.1%}"))
    problems = cp.profile_trust_problems(fit)
    if problems and not args.force:
        raise ValueError(
            "the fit cannot be trusted, so no profile was written: "
            + "; ".join(problems)
            + ". Pass --force to write it anyway (marked "
            "as untrusted in the profile)"
        )
    data = (
        f"{', '.join(args.traces)}: {len(fit.residuals)} plain-pass configurations, "
        f"weight formats {sorted(set(fit.residuals['weights']))}; sampling: {sampled}"
    )
    text = cp.profile_toml(
        fit,
        slug=slug,
        name=args.name or slug,
        command=_command(args),
        data=data,
        problems=problems,
        notes=kernel_note(fit.residuals),
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    profile = load_runtime(args.out)
    say(f"wrote {args.out}" + (" (untrusted numbers marked)" if problems else ""))
    if args.residuals:
        res.to_csv(args.residuals, index=False)
    if args.plot:
        from specsim.plots_cost import plot_calibration  # start-up: matplotlib only for --plot

        # One colour per weight format (fitted or predicted): few enough for the styles.
        label = res["weights"] + np.where(res["in_fit"], "", " (predicted)")
        plot_calibration(res.assign(model=label)).savefig(args.plot, dpi=120)
    record: dict[str, Any] = {
        "profile": str(args.out),
        "parameters": fit.params,
        "stderr": fit.stderr,
        "in_sample_abs_rel_error": {"median": float(err.median()), "worst": float(err.max())},
        "untrusted": problems,
    }
    sd, ar = _of_kind(traces, "specdec"), _of_kind(traces, "autoregressive")
    if sd and ar:
        runs = cp.predict_profile_runs(
            pd.concat(sd, ignore_index=True), pd.concat(ar, ignore_index=True), card, profile
        )
        cols = [
            "target",
            "temperature",
            "gamma",
            "blocks",
            "speedup",
            "speedup_low",
            "speedup_high",
            "predicted_speedup",
            "latency_error",
            "speedup_error",
        ]
        say("\nEnd to end: measured speculative runs (95% intervals) against the profile")
        say(runs[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        record["end_to_end"] = {}
        for target, grp in runs.groupby("target"):
            for q in ("latency", "speedup"):
                e = grp[f"{q}_error"].abs()
                say(_spread(f"{target}: {q} error", e))
                record["end_to_end"][f"{target}_{q}_error"] = {
                    "median": float(e.median()),
                    "worst": float(e.max()),
                }
        if args.runs:
            runs.to_csv(args.runs, index=False)
    if args.json:
        print(dumps(record))
    return 0
