"""``specsim calibrate --aiconfigurator SYSTEM --backend trtllm|sglang``: a stack's device part
fitted on aiconfigurator's per-operation tables (:mod:`specsim.calibrate.aiconfigurator`)."""

from __future__ import annotations

import argparse

from specsim.calibrate.aic_tables import BACKENDS, SYSTEMS

__all__ = ["add_aic_arguments", "run_aic"]


def add_aic_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--aiconfigurator",
        metavar="SYSTEM",
        help=f"fit the device part of --backend's stack on aiconfigurator's tables of SYSTEM "
        f"(one of {', '.join(sorted(SYSTEMS))}); the committed extract, or with "
        "--systems-path (or the installed aiconfigurator_core) re-extracted first",
    )
    parser.add_argument("--backend", choices=sorted(BACKENDS), help="with --aiconfigurator")
    parser.add_argument(
        "--systems-path", metavar="DIR", help="with --aiconfigurator: aiconfigurator_core/systems"
    )
    parser.add_argument(
        "--extract", action="store_true", help="with --aiconfigurator: re-extract the tables"
    )
    parser.add_argument(
        "--write-part",
        action="store_true",
        help="with --aiconfigurator: write the device part if it beats today's numbers",
    )


def run_aic(args: argparse.Namespace) -> int:
    from specsim.calibrate.aiconfigurator import main  # start-up: only for --aiconfigurator

    if args.backend is None:
        raise ValueError("calibrate: --aiconfigurator needs --backend trtllm or sglang")
    argv = ["--system", args.aiconfigurator, "--backend", args.backend]
    argv += ["--extract"] * (args.extract or args.systems_path is not None)
    argv += ["--systems-path", args.systems_path] * (args.systems_path is not None)
    return main(argv + ["--write"] * args.write_part)
