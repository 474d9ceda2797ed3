"""``specsim calibrate --engine-output FILE... --stack STACK --hardware CARD --model CARD``:
fit a stack profile's host overheads to an engine's own benchmark outputs
(:mod:`specsim.calibrate.engine_outputs`, :mod:`specsim.calibrate.stack_fit`)."""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

import pandas as pd

from specsim.calibrate.engine_outputs import read_all_outputs
from specsim.calibrate.spec_fit import ForcedRun, fit_speculative
from specsim.calibrate.stack_fit import StackFit, fit_stack, stack_toml
from specsim.cards import HardwareCard, ModelCard, load_hardware, load_model
from specsim.cards.stack_files import load_stack
from specsim.cli.calibrate_traces import command_line
from specsim.cli.jsonout import dumps
from specsim.cli.output import check_file

__all__ = ["add_engine_arguments", "run_engine"]


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine-output",
        nargs="+",
        metavar="FILE",
        help="fit a stack profile (--stack) to engine benchmark outputs instead of traces: "
        "vllm bench serve / sglang bench_serving JSON, sglang bench_one_batch JSONL, "
        "llama-bench -o json (docs/calibration.md); needs --hardware and --model",
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
    stack, est, se, table = fit_speculative(
        forced, stack=fit.stack, hardware=hardware, model=model, draft=load_model(args.draft)
    )
    return StackFit(
        stack=stack,
        estimate={**fit.estimate, **est},
        stderr={**fit.stderr, **se},
        residuals=pd.concat([fit.residuals, table], ignore_index=True),
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
    plot = check_file(args.plot, option="--plot", force=args.force) if args.plot else None
    stack, hw, model = load_stack(args.stack), load_hardware(args.hardware), load_model(args.model)
    runs, forced = read_all_outputs(args.engine_output, speculative_steps=args.speculative_steps)
    fit = fit_stack(runs, stack=stack, hardware=hw, model=model)
    fit = _speculative(fit, forced, args, hardware=hw, model=model)
    command = command_line(args)
    fitted_on = f"{hw.slug}, {model.slug}, {date.today().isoformat()}"
    slug = args.slug or Path(out).stem
    out.write_text(stack_toml(fit, slug=slug, fitted_on=fitted_on, command=command))
    load_stack(out)  # read back: the file is a valid stack profile
    if args.residuals:
        fit.residuals.to_csv(args.residuals, index=False)
    if plot is not None:
        from specsim.plots.cost import plot_calibration  # start-up: matplotlib only for --plot

        plot_calibration(fit.residuals).savefig(plot, dpi=120)
    rel = (fit.residuals["predicted_s"] / fit.residuals["time_s"] - 1).abs()
    record = {
        "stack": str(out),
        "runs": len(runs),
        "forced_runs": len(forced),
        "estimate": fit.estimate,
        "stderr": fit.stderr,
        "worst_rel_error": float(rel.max()),
    }
    if args.json:
        print(dumps(record))
        return 0
    print(
        f"{len(runs)} decode runs and {len(forced)} forced-acceptance runs from "
        f"{len(args.engine_output)} files"
    )
    for k, v in fit.estimate.items():
        print(f"  {k} = {v * 1e6:.2f} us  (stderr {fit.stderr[k] * 1e6:.2f} us)")
    print(f"  worst |predicted / measured - 1| = {rel.max() * 100:.2f}%")
    print(f"wrote {out}")
    return 0
