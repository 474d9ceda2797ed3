"""``specsim study NAME``: run one what-if study and write its CSV, figures and summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from specsim.studies import STUDY_NAMES, load_study, parse_overrides, run_study, save_study

HELP = "Run one what-if study (" + ", ".join(STUDY_NAMES) + "); --list-keys shows its settings."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", choices=STUDY_NAMES, metavar="NAME", help="the study: " + ", ".join(STUDY_NAMES)
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a default (repeatable; lists are comma-separated)",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="output folder (default: out/NAME)"
    )
    parser.add_argument("--fast", action="store_true", help="the fast form (what the report runs)")
    parser.add_argument("--seed", type=int, default=2023, help="seed of every simulation")
    parser.add_argument(
        "--list-keys", action="store_true", help="print the study's keys and defaults and exit"
    )


def run(args: argparse.Namespace) -> int:
    module = load_study(args.name)
    if args.list_keys:
        for key, value in module.DEFAULTS.items():
            shown = ",".join(str(v) for v in value) if isinstance(value, tuple) else value
            print(f"{key} = {shown}")
        return 0
    overrides = parse_overrides(module.DEFAULTS, args.sets)
    out = Path(args.out) if args.out else Path("out") / args.name
    result = run_study(args.name, overrides=overrides, seed=args.seed, fast=args.fast)
    files = save_study(result, out)
    print(result.summary.rstrip("\n"))
    print()
    print(
        f"{args.name}: {len(result.data)} rows, {len(result.figures)} figures in "
        f"{result.seconds:.1f} s"
    )
    for key in sorted(files):
        print(f"  {files[key]}")
    print(f"output folder: {out.resolve()}")
    return 0
