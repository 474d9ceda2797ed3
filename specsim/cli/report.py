"""``specsim report``: the main job. Runs the studies and writes one HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path

from specsim.checks import LIMITS, check_size
from specsim.cli import jsonout
from specsim.cli.output import ProgressBar, check_folder
from specsim.report.page import DEFAULT_OUT, REPORT_STUDIES, build_report, format_demo

__all__ = ["add_arguments", "run", "format_demo", "ProgressBar", "fresh_folder"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=f"output folder (default: {DEFAULT_OUT}, or {DEFAULT_OUT}-2, -3, ... when that "
        "already holds an earlier report); a folder given here that holds files is refused "
        "unless --force",
    )
    parser.add_argument(
        "--force", action="store_true", help="write into a --out folder that already holds files"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the summary (studies, rows, paths) as JSON"
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
        "--plan",
        metavar="CONFIG.toml",
        help="a specsim plan config (docs/plan.md): the page opens with its verdict",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=200_000,
        help=f"Monte Carlo blocks of the sampling demo (at most {LIMITS['blocks'].most:,})",
    )


def fresh_folder(base: str) -> Path:
    """``base`` if it is empty or absent, else the first ``base-2``, ``base-3``, ... that is."""
    for i in range(1, 10_000):
        p = Path(base if i == 1 else f"{base}-{i}")
        if not p.exists() or (p.is_dir() and not any(p.iterdir())):
            return p
    raise ValueError(f"--out: {base}-2 to {base}-9999 all hold files; give --out DIR")


def run(args: argparse.Namespace) -> int:
    if args.blocks < 2:
        raise ValueError(f"--blocks: need at least 2 Monte Carlo blocks, got {args.blocks}")
    check_size(args.blocks, name="--blocks", limit="blocks")
    if args.out is None:
        out = check_folder(fresh_folder(DEFAULT_OUT), option="--out")
    else:
        out = check_folder(args.out, option="--out", force=args.force)
    report = build_report(
        out,
        seed=args.seed,
        fast=args.fast,
        studies=tuple(dict.fromkeys(args.studies or REPORT_STUDIES)),
        demo_blocks=args.blocks,
        progress=ProgressBar(),
        plan=args.plan,
    )
    if args.json:
        summary = {
            "report": str(report.html.resolve()),
            "output_folder": str(report.out_dir.resolve()),
            "verdicts": [{"case": t, "verdict": v} for t, v in report.verdicts],
            "studies": [
                {
                    "name": s.name,
                    "seconds": s.seconds,
                    "rows": len(s.data),
                    "figures": len(s.figures),
                }
                for s in report.studies
            ],
        }
        print(jsonout.dumps(summary))
        return 0
    for title, verdict in report.verdicts:  # the page opens with these; so does the terminal
        print(f"{title}: {verdict}")
    print()
    print(format_demo(report.demo))
    print()
    for s in report.studies:
        print(f"{s.name:<10} {s.seconds:6.1f} s  {len(s.data):6d} rows  {len(s.figures)} figures")
    print(f"\nreport: {report.html.resolve()}")
    print(f"output folder: {report.out_dir.resolve()}")
    return 0
