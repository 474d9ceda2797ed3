"""``specsim calibrate --engine-output FILE... --stack STACK --hardware CARD --model CARD``:
fit a stack profile's host overheads to an engine's own benchmark outputs
(:mod:`specsim.calibrate.engine_outputs`, :mod:`specsim.calibrate.stack_fit`)."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import date
from pathlib import Path

import pandas as pd

from specsim.calibrate.engine_outputs import DecodeRun, read_all_outputs
from specsim.calibrate.engine_trust import (
    check_forced_runs,
    check_runs,
    fit_explained,
    fit_problems,
    worst_error,
)
from specsim.calibrate.spec_fit import ForcedRun, fit_speculative
from specsim.calibrate.stack_fit import StackFit, fit_stack, stack_toml
from specsim.cards import HardwareCard, ModelCard, load_hardware, load_model
from specsim.cards.stack import StackProfile
from specsim.cards.stack_files import load_stack
from specsim.cli.calibrate_traces import command_line, refuse_untrusted
from specsim.cli.jsonout import dumps
from specsim.cli.output import card_option, check_file, writable

__all__ = ["add_engine_arguments", "run_engine"]


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine-output",
        nargs="+",
        metavar="FILE",
        help="fit a stack profile (--stack) to engine benchmark outputs instead of traces: "
        "vllm bench serve / sglang bench_serving JSON, sglang bench_one_batch JSONL, "
        "llama-bench -o json, llama-speculative-simple --log-file logs (docs/calibration.md, "
        "docs/llama-cpp.md); needs --hardware and --model",
    )
    parser.add_argument("--hardware", metavar="CARD", help="with --engine-output: the device")
    parser.add_argument("--model", metavar="CARD", help="with --engine-output: the model run")
    parser.add_argument(
        "--draft",
        metavar="CARD",
        help="with --engine-output and forced-acceptance runs: the draft model card",
    )
    parser.add_argument(
        "--speculative-steps",
        type=int,
        nargs="+",
        metavar="K",
        help="with --engine-output: the lookahead of SGLang bench_serving and trtllm-bench "
        "speculative runs (--speculative-num-steps, max_draft_len; their outputs do not hold "
        "it): one K for every file, or one per --engine-output file",
    )


def _speculative(
    fit: StackFit,
    forced: list[ForcedRun],
    args: argparse.Namespace,
    *,
    hardware: HardwareCard,
    model: ModelCard,
) -> StackFit:
    """``fit`` with the speculative terms fitted to ``forced`` (none: ``fit`` itself)."""
    if not forced:
        return fit
    if not args.draft:
        raise ValueError(
            f"--engine-output: {len(forced)} forced-acceptance runs need --draft (the draft card)"
        )
    draft = card_option(load_model, args.draft, option="--draft")
    check_forced_runs(forced, stack=fit.stack, hardware=hardware, model=model, draft=draft)
    stack, est, se, table = fit_speculative(
        forced, stack=fit.stack, hardware=hardware, model=model, draft=draft
    )
    return StackFit(
        stack=stack,
        estimate={**fit.estimate, **est},
        stderr={**fit.stderr, **se},
        residuals=pd.concat([fit.residuals, table], ignore_index=True),
    )


def _optional_outputs(args: argparse.Namespace) -> dict[str, Path]:
    """``--residuals`` and ``--plot`` where given, checked before any work (as ``--out``)."""
    return {
        option: check_file(getattr(args, option), option=f"--{option}", force=args.force)
        for option in ("residuals", "plot")
        if getattr(args, option)
    }


def _fit(
    args: argparse.Namespace, stack: StackProfile, hw: HardwareCard, model: ModelCard
) -> tuple[StackFit, list[str], int, int]:
    """The fit, why it cannot be trusted (empty when it can), and the counts of plain and
    forced runs."""
    runs, forced = read_all_outputs(args.engine_output, speculative_steps=args.speculative_steps)
    check_runs(runs, stack=stack, hardware=hw, model=model)

    def refit(rs: list[DecodeRun]) -> StackFit:
        return fit_stack(rs, stack=stack, hardware=hw, model=model)

    fit = _speculative(fit_explained(runs, refit), forced, args, hardware=hw, model=model)
    return fit, fit_problems(fit, runs, refit), len(runs), len(forced)


def _marked(fit: StackFit, untrusted: list[str]) -> StackFit:
    """``fit`` with its stack's sources saying why it is not to be trusted (``--force``)."""
    if not untrusted:
        return fit
    st = fit.stack
    base = st.sources if isinstance(st.sources, dict) else {"base": "; ".join(st.sources)}
    note = "UNTRUSTED, written with --force: " + "; ".join(untrusted)
    return dataclasses.replace(
        fit, stack=dataclasses.replace(st, sources={**base, "untrusted": note})
    )


def run_engine(args: argparse.Namespace) -> int:
    if args.traces:
        raise ValueError("--engine-output: give engine outputs or traces, not both")
    for flag in ("hardware", "model"):
        if not getattr(args, flag):
            raise ValueError(f"--engine-output needs --{flag}")
    if args.stack == "pytorch-eager":
        raise ValueError("--engine-output needs --stack (the stack profile the engine runs)")
    out = check_file(args.out, option="--out", force=args.force)
    paths = _optional_outputs(args)
    try:
        stack = load_stack(args.stack)
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(f"--stack: {exc}") from None
    hw = card_option(load_hardware, args.hardware, option="--hardware")
    model = card_option(load_model, args.model, option="--model")
    fit, untrusted, n_runs, n_forced = _fit(args, stack, hw, model)
    refuse_untrusted(untrusted, force=args.force, what="stack profile")
    fit = _marked(fit, untrusted)
    command = command_line(args)
    fitted_on = f"{hw.slug}, {model.slug}, {date.today().isoformat()}"
    slug = args.slug or Path(out).stem
    text = stack_toml(fit, slug=slug, fitted_on=fitted_on, command=command)
    marks = "".join(f"# UNTRUSTED, written with --force: {u}\n" for u in untrusted)
    writable(out).write_text(marks + text)
    load_stack(out)  # read back: the file is a valid stack profile
    if "residuals" in paths:
        fit.residuals.to_csv(writable(paths["residuals"]), index=False)
    if "plot" in paths:
        from specsim.plots.cost import plot_calibration  # start-up: matplotlib only for --plot

        plot_calibration(fit.residuals).savefig(writable(paths["plot"]), dpi=120)
    worst, _ = worst_error(fit.residuals)
    record = {
        "stack": str(out),
        "runs": n_runs,
        "forced_runs": n_forced,
        "estimate": fit.estimate,
        "stderr": fit.stderr,
        "worst_rel_error": worst,
        "untrusted": untrusted,
    }
    if args.json:
        print(dumps(record))
        return 0
    print(
        f"{n_runs} decode runs and {n_forced} forced-acceptance runs from "
        f"{len(args.engine_output)} files"
    )
    for k, v in fit.estimate.items():
        print(f"  {k} = {v * 1e6:.2f} us  (stderr {fit.stderr[k] * 1e6:.2f} us)")
    print(f"  worst |predicted / measured - 1| = {worst * 100:.2f}%")
    for u in untrusted:
        print(f"  UNTRUSTED (written with --force): {u}")
    print(f"wrote {out}")
    return 0
