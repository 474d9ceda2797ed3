"""``specsim report``: the main job. Runs the studies and writes one HTML page."""

from __future__ import annotations

import argparse
import sys
import time

from specsim.report import DEFAULT_OUT, REPORT_STUDIES, build_report, format_demo

__all__ = ["HELP", "add_arguments", "run", "format_demo", "ProgressBar"]

HELP = (
    "Run the main job: every study (fast forms by default), the validation tables and the "
    "sampling demo, written as one self-contained HTML page and CSVs."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default=DEFAULT_OUT, metavar="DIR", help=f"output folder (default: {DEFAULT_OUT})"
    )
    parser.add_argument("--seed", type=int, default=2023, help="seed of every simulation")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--fast",
        dest="fast",
        action="store_true",
        default=True,
        help="fast forms of the studies (default; a few minutes on 2 cores)",
    )
    mode.add_argument(
        "--full", dest="fast", action="store_false", help="full forms of the studies (much longer)"
    )
    parser.add_argument(
        "--study",
        dest="studies",
        action="append",
        choices=REPORT_STUDIES,
        metavar="NAME",
        help="run only this study (repeatable; default: all of " + ", ".join(REPORT_STUDIES) + ")",
    )
    parser.add_argument(
        "--blocks", type=int, default=200_000, help="Monte Carlo blocks of the sampling demo"
    )


class ProgressBar:
    """A plain-text progress bar on stderr: redrawn in place on a terminal, one line per
    step otherwise (so that logs stay readable)."""

    def __init__(self, width: int = 30) -> None:
        self.width = width
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int, label: str) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"[{bar}] {done}/{total} {label} ({time.perf_counter() - self.start:.0f} s)"
        if self.tty:
            end = "\n" if done >= total else ""
            sys.stderr.write("\r" + line.ljust(79) + end)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    if args.blocks < 2:
        raise ValueError(f"--blocks: need at least 2 Monte Carlo blocks, got {args.blocks}")
    report = build_report(
        args.out,
        seed=args.seed,
        fast=args.fast,
        studies=tuple(dict.fromkeys(args.studies or REPORT_STUDIES)),
        demo_blocks=args.blocks,
        progress=ProgressBar(),
    )
    print(format_demo(report.demo))
    print()
    for s in report.studies:
        print(f"{s.name:<10} {s.seconds:6.1f} s  {len(s.data):6d} rows  {len(s.figures)} figures")
    print(f"\nreport: {report.html.resolve()}")
    print(f"output folder: {report.out_dir.resolve()}")
    return 0
