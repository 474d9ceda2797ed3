"""``specsim calibrate --profile``: fit a runtime profile to the plain passes of the traces
on the card ``--base``, write it, and predict the traces' speculative runs from it (none
of which enters the fit; :mod:`specsim.calibrate.profile`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim.calibrate import profile as cp
from specsim.calibrate.formats import errors_by_format, kernel_note
from specsim.cards import HardwareCard, ModelCard, RuntimeProfile, load_hardware, load_runtime
from specsim.cli.calibrate_traces import (
    Say,
    command_line,
    fit_record,
    of_kind,
    read_passes,
    refuse_untrusted,
    report_fit,
    report_runs,
)
from specsim.cli.jsonout import dumps
from specsim.cli.output import card_option, check_file, writable
from specsim.traces.io import Trace

__all__ = ["run_profile"]

_RUN_COLUMNS = [
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


def _split_formats(cfg: pd.DataFrame, formats: list[str] | None) -> tuple[pd.DataFrame, ...]:
    """(fitted, held out) configurations by ``--formats``."""
    if not formats:
        return cfg, cfg.iloc[:0]
    unknown = sorted(set(formats) - set(cfg["weights"]))
    if unknown:
        raise ValueError(
            f"--formats: {unknown} not measured; the traces have {sorted(set(cfg['weights']))}"
        )
    return cfg[cfg["weights"].isin(formats)], cfg[~cfg["weights"].isin(formats)]


def _base(
    args: argparse.Namespace, traces: list[tuple[str, Trace]], card: HardwareCard
) -> tuple[RuntimeProfile, str]:
    """The profile the fit starts from, with the measured sampling cost; and where that
    cost comes from."""
    slug = args.slug or Path(args.out).stem
    plain = of_kind(traces, "autoregressive")
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
    return base, sampled


def _residuals(
    fit: cp.ProfileFit, held: pd.DataFrame, card: HardwareCard, models: dict[str, ModelCard]
) -> pd.DataFrame:
    """The fit's residuals, and the held-out formats predicted by it (``in_fit`` False)."""
    res = fit.residuals.assign(in_fit=True)
    if len(held):  # formats left out of the fit, predicted by it (its own format factor: 1)
        unsampled = dataclasses.replace(fit.profile, sampling_s_per_token=0.0)
        pred = cp.predict_profile(held, card, unsampled, models)
        out = held.assign(in_fit=False, predicted_s=pred)
        res = pd.concat([res, out.assign(rel_error=out["predicted_s"] / out["time_s"] - 1)])
    return res


def _write(
    args: argparse.Namespace, fit: cp.ProfileFit, *, problems: list[str], sampled: str
) -> None:
    """The profile's TOML at ``--out``."""
    data = (
        f"{', '.join(args.traces)}: {len(fit.residuals)} plain-pass configurations, "
        f"weight formats {sorted(set(fit.residuals['weights']))}; sampling: {sampled}"
    )
    slug = args.slug or Path(args.out).stem
    text = cp.profile_toml(
        fit,
        slug=slug,
        name=args.name or slug,
        command=command_line(args),
        data=data,
        problems=problems,
        notes=kernel_note(fit.residuals),
    )
    writable(args.out).write_text(text)


def _end_to_end(
    args: argparse.Namespace,
    traces: list[tuple[str, Trace]],
    *,
    card: HardwareCard,
    profile: RuntimeProfile,
    say: Say,
) -> dict[str, Any]:
    """The measured speculative runs predicted from ``profile``; their errors by target."""
    sd, ar = of_kind(traces, "specdec"), of_kind(traces, "autoregressive")
    if not (sd and ar):
        return {}
    runs = cp.predict_profile_runs(
        pd.concat(sd, ignore_index=True), pd.concat(ar, ignore_index=True), card, profile
    )
    errors = [
        (f"{target}_{q}_error", f"{target}: {q} error", grp[f"{q}_error"])
        for target, grp in runs.groupby("target")
        for q in ("latency", "speedup")
    ]
    title = "\nEnd to end: measured speculative runs (95% intervals) against the profile"
    return report_runs(
        runs, title=title, columns=_RUN_COLUMNS, errors=errors, say=say, out=args.runs
    )


def _check(args: argparse.Namespace) -> None:
    """The flags, and every output path, before any work."""
    given = [f for f in ("mem_capacity", "power") if getattr(args, f) is not None]
    if given or not args.base:
        raise ValueError(
            "--profile: needs --base HARDWARE (the card whose peaks the profile "
            "is relative to) and takes no " + ", ".join(f"--{g}" for g in given)
        )
    for option in ("out", "residuals", "runs", "plot"):
        if getattr(args, option):
            check_file(getattr(args, option), option=f"--{option}", force=args.force)


def run_profile(args: argparse.Namespace) -> int:
    """``--profile``: fit a runtime profile to the passes on the card ``--base``, write it,
    predict the speculative runs of the traces (none of which enters the fit)."""
    _check(args)
    card = card_option(load_hardware, args.base, option="--base")
    traces, passes, models, _ = read_passes(args.traces)
    for _, t in traces:
        cp.check_fit_device(t.meta, card)
    all_cfg = cp.profile_configs(pd.concat([t.data for _, t in passes], ignore_index=True))
    cfg, held = _split_formats(all_cfg, args.formats)
    base, sampled = _base(args, traces, card)
    fit = cp.fit_profile(cfg, card, base=base, models=models)
    say: Say = (lambda *a: None) if args.json else print
    n = len(fit.residuals)
    err = report_fit(fit, cfg, models, say=say, configurations=n, on=f" on {card.slug}")
    res = _residuals(fit, held, card, models)
    say("|relative error| by weight format (in_fit False: predicted, not fitted)")
    say(errors_by_format(res).to_string(index=False, float_format=lambda v: f"{v:.1%}"))
    problems = cp.profile_trust_problems(fit)
    refuse_untrusted(problems, force=args.force, what="profile")
    _write(args, fit, problems=problems, sampled=sampled)
    profile = load_runtime(args.out)
    say(f"wrote {args.out}" + (" (untrusted numbers marked)" if problems else ""))
    if args.residuals:
        res.to_csv(writable(args.residuals), index=False)
    if args.plot:
        from specsim.plots.cost import plot_calibration  # start-up: matplotlib only for --plot

        # One colour per weight format (fitted or predicted): few enough for the styles.
        label = res["weights"] + np.where(res["in_fit"], "", " (predicted)")
        plot_calibration(res.assign(model=label)).savefig(writable(args.plot), dpi=120)
    record: dict[str, Any] = {
        "profile": str(args.out),
        **fit_record(fit, err, problems),
    }
    end = _end_to_end(args, traces, card=card, profile=profile, say=say)
    if end:
        record["end_to_end"] = end
    if args.json:
        print(dumps(record))
    return 0
