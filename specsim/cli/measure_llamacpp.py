"""``specsim measure --engine llama.cpp --out DIR``: llama.cpp's own tools on this CPU
(``llama-bench``, ``llama-speculative-simple``; built by ``make llama-cpp``), raw outputs
into ``DIR`` (``docs/llama-cpp.md``)."""

from __future__ import annotations

import argparse
import sys
import time

from specsim.cli import jsonout
from specsim.cli.measure_real import REAL_FLAGS
from specsim.cli.output import check_folder

__all__ = ["ENGINES", "add_engine_arguments", "check_engine_flags", "run_engine"]

ENGINES = ("llama.cpp",)
_PRESET_FLAGS = ("device", "preset", "only", "shrink")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("third-party engine (instead of --device and --preset)")
    group.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="measure an engine's own tools instead of torch passes: llama.cpp runs llama-bench "
        "and llama-speculative-simple on GGUF files written from models/tiny (docs/llama-cpp.md)",
    )
    group.add_argument(
        "--llama-root",
        default=".venv/llama.cpp",
        metavar="DIR",
        help="with --engine llama.cpp: where make llama-cpp built it (default .venv/llama.cpp)",
    )


def check_engine_flags(args: argparse.Namespace) -> None:
    """With ``--engine``, the torch preset's flags are refused; without it, they are needed."""
    if args.engine is None:
        missing = [f"--{k}" for k in ("device", "preset") if getattr(args, k) is None]
        if missing:
            raise ValueError(
                f"{' and '.join(missing)}: required (or --engine llama.cpp to measure llama.cpp)"
            )
        return
    flags = (*_PRESET_FLAGS, *REAL_FLAGS)
    given = [
        f"--{k.replace('_', '-')}" for k in flags if getattr(args, k, None) not in (None, False)
    ]
    if given:
        raise ValueError(f"{', '.join(given)}: not read with --engine {args.engine}")


def run_engine(args: argparse.Namespace) -> int:
    check_folder(args.out, option="--out", force=True)
    try:
        import numpy as np  # start-up: only this path draws random weights

        from specsim.measure.llamacpp_build import LlamaCppMissing
        from specsim.measure.llamacpp_run import measure_llamacpp
    except ImportError as exc:
        print(f"specsim measure: needs the optional extra specsim[measure]: {exc}", file=sys.stderr)
        return 2
    threads = (args.threads,) if args.threads is not None else (1, 2)
    t0 = time.perf_counter()

    def say(line: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f} s] {line}", file=sys.stderr, flush=True)

    try:
        manifest = measure_llamacpp(
            args.out,
            rng=np.random.default_rng(args.seed),
            root=args.llama_root,
            threads=threads,
            log=say,
        )
    except LlamaCppMissing as exc:
        print(f"specsim measure: {exc}", file=sys.stderr)
        return 2
    n_bench, n_spec = len(manifest["llama_bench"]), len(manifest["speculative"])
    if args.json:
        print(jsonout.dumps({"engine": args.engine, "output_folder": args.out, **manifest}))
    else:
        print(
            f"llama.cpp {manifest['build']['llama_cpp_commit'][:7]}: {n_bench} llama-bench "
            f"files, {n_spec} speculative logs in {args.out} ({manifest['seconds_this_run']:.1f} s)"
        )
    return 0
