"""``specsim measure --preset real``: its flags and its run (tiny models trained on real
text, their acceptance measured; ``docs/real-acceptance.md``)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsim.cli import jsonout
from specsim.cli.output import check_folder

__all__ = ["REAL_DEFAULTS", "REAL_FLAGS", "REAL_STAGES", "add_real_arguments", "run_real"]

REAL_STAGES = ("corpus", "tokenizer", "train", "alpha")
# The flags only the real preset reads (their defaults are applied in run_real, so that a
# flag given with another preset can be told from one left out).
REAL_FLAGS = ("stage", "work", "models", "sample", "train_only", "vocab")
REAL_DEFAULTS: dict[str, Any] = {"work": "out/real-work", "models": "models/tiny", "vocab": 4096}


def add_real_arguments(parser: argparse.ArgumentParser) -> None:
    """The argument group only ``--preset real`` reads."""
    real = parser.add_argument_group("preset real (tiny models trained on real text)")
    real.add_argument(
        "--stage",
        nargs="+",
        choices=REAL_STAGES,
        default=None,
        metavar="STAGE",
        help=f"stages to run ({', '.join(REAL_STAGES)}; default all)",
    )
    real.add_argument(
        "--work",
        default=None,
        metavar="DIR",
        help="corpora, token cache and checkpoints (default out/real-work)",
    )
    real.add_argument(
        "--models",
        default=None,
        metavar="DIR",
        help="tokenizer and trained weights (default models/tiny)",
    )
    real.add_argument(
        "--sample",
        default=None,
        metavar="DIR",
        help="build the corpora from this committed sample instead of the "
        "installed packages (models/corpora/sample)",
    )
    real.add_argument(
        "--train-only",
        nargs="+",
        default=None,
        metavar="MODEL",
        help="train only these models of the plan",
    )
    real.add_argument("--vocab", type=int, default=None, help="tokenizer vocabulary (default 4096)")


def run_real(args: argparse.Namespace) -> int:
    """``specsim measure --preset real``: the chosen stages run, then a summary printed."""
    try:
        from specsim.measure.realbuild import build_real
    except ImportError as exc:
        print(
            f"specsim measure: the real preset needs the optional extra specsim[measure] "
            f"(torch, transformers, tokenizers, safetensors): {exc}",
            file=sys.stderr,
        )
        return 2
    from specsim.measure.corpus import MissingPackageError

    for key, value in REAL_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    stages = args.stage or REAL_STAGES
    _check_folders(args, stages)
    t0 = time.perf_counter()

    def log(line: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f} s] {line}", file=sys.stderr, flush=True)

    threads = 1 if args.threads is None else args.threads
    try:
        build_real(
            work=args.work,
            models_dir=args.models,
            stages=[s for s in stages if s != "alpha"],
            sample=args.sample,
            vocab_size=args.vocab,
            only=args.train_only,
            threads=threads,
            log=log,
        )
    except MissingPackageError as exc:
        print(f"specsim measure: {exc}", file=sys.stderr)
        return 2
    if "alpha" in stages:
        from specsim.measure.realrun import SHRUNK, measure_real

        measure_real(
            work=args.work,
            models_dir=args.models,
            out=args.out,
            seed=args.seed,
            threads=threads,
            command=_real_command(args),
            log=log,
            **(SHRUNK if args.shrink else {}),
        )
    _print_summary(args, stages=stages, seconds=time.perf_counter() - t0)
    return 0


def _real_command(args: argparse.Namespace) -> str:
    stage = f" --stage {' '.join(args.stage)}" if args.stage else ""
    threads = f" --threads {args.threads}" if args.threads is not None else ""
    shrink = " --shrink" if args.shrink else ""
    return (
        f"specsim measure --device {args.device} --preset real{stage} --work {args.work} "
        f"--models {args.models} --out {args.out} --seed {args.seed}{threads}{shrink}"
    )


def _check_folders(args: argparse.Namespace, stages: Sequence[str]) -> None:
    """Before any work: every folder the chosen stages write can be written (each may hold
    an earlier run's files, which the stages reuse)."""
    check_folder(args.work, option="--work", force=True)
    if {"tokenizer", "train"} & set(stages):
        check_folder(args.models, option="--models", force=True)
    if "alpha" in stages:
        check_folder(args.out, option="--out", force=True)


def _print_summary(args: argparse.Namespace, *, stages: Sequence[str], seconds: float) -> None:
    """What ran and where its files are: one JSON object with --json, else one line."""
    if args.json:
        out = Path(args.out)
        print(
            jsonout.dumps(
                {
                    "preset": "real",
                    "stages": list(stages),
                    "seed": args.seed,
                    "seconds": seconds,
                    "models_folder": str(Path(args.models).resolve()),
                    "work_folder": str(Path(args.work).resolve()),
                    "output_folder": str(out.resolve()) if "alpha" in stages else None,
                    "files": sorted(str(f) for f in out.iterdir() if f.is_file())
                    if "alpha" in stages and out.is_dir()
                    else [],
                }
            )
        )
        return
    print(
        f"preset real: stages {' '.join(stages)} done in {seconds:.1f} s; "
        f"models in {args.models}" + (f", measurements in {args.out}" if "alpha" in stages else "")
    )
