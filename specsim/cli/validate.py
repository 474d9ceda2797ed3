"""``specsim validate``: the simulator against the closed forms, and where they break.

By default a summary: per quantity checked, how many checks pass and the worst
``|z|``; ``--verbose`` prints the whole grid, ``--csv FILE`` writes it, and
``--json`` prints everything as one JSON object. A check passes when the
formula lies within ``Z_CHECK`` (4.5) standard errors of the simulated value,
and that is the interval printed beside each row.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from specsim.cli.jsonout import dumps
from specsim.cli.output import ProgressBar, check_file
from specsim.validate import Z_CHECK, check_summary, validation_tables


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="seed of the simulations (default 1)")
    parser.add_argument(
        "--quick", action="store_true",
        help="a smaller grid (alpha 0.2, 0.5, 0.8, 0.95; gamma 1, 3, 5, 10) and 1%% intervals",
    )  # fmt: skip
    parser.add_argument(
        "--verbose", action="store_true", help="print every check of the grid, not the summary"
    )
    parser.add_argument("--csv", metavar="FILE", help="write every check of the grid here (CSV)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --csv FILE")
    parser.add_argument(
        "--json", action="store_true", help="the summary, every check and the dropped assumptions"
    )


def format_checks(df: pd.DataFrame) -> str:
    """Every check: the simulated value, the interval the verdict uses, the formula, z."""
    head = f"pass interval (+-{Z_CHECK:g} se)"
    lines = [
        f"{'alpha':>5} {'gamma':>5} {'c':>5} {'quantity':<17} {'simulated':>10} "
        f"{head:>23} {'formula':>10} {'z':>6}  verdict"
    ]
    for r in df.itertuples(index=False):
        lines.append(
            f"{r.alpha:>5.2f} {r.gamma:>5d} {r.c:>5.2f} {r.quantity:<17} {r.simulated:>10.5f} "
            f"[{r.pass_low:>10.5f}, {r.pass_high:>10.5f}] {r.formula:>10.5f} {r.z:>6.2f}  "
            f"{'ok' if r.ok else 'FAIL'}"
        )
    return "\n".join(lines)


def format_summary(summary: pd.DataFrame) -> str:
    """Per quantity: checks passed of all, and the worst |z| with where it is."""
    lines = [f"{'quantity':<17} {'passed':>11} {'worst |z|':>9}  at"]
    for r in summary.itertuples(index=False):
        passed = f"{r.passed} of {r.checks}"
        lines.append(f"{r.quantity:<17} {passed:>11} {r.worst_abs_z:>9.2f}  {r.worst_at}")
    return "\n".join(lines)


def format_dropped(df: pd.DataFrame) -> str:
    lines = [f"{'case':<72} {'quantity':<17} {'simulated':>9} {'formula':>9} {'error':>8}"]
    for r in df.itertuples(index=False):
        lines.append(
            f"{r.case:<72} {r.quantity:<17} {r.simulated:>9.4f} {r.formula:>9.4f} "
            f"{r.error_pct:>+7.1f}%"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.csv:
        check_file(args.csv, option="--csv", force=args.force)
    progress = None
    if sys.stderr.isatty():  # a bar on a terminal; logs stay free of it
        progress = ProgressBar()
    checks, dropped = validation_tables(
        np.random.default_rng(args.seed), quick=args.quick, progress=progress
    )
    summary = check_summary(checks)
    failed = int((~checks["ok"]).sum())
    if args.csv:
        checks.to_csv(args.csv, index=False)
    if args.json:
        record = {
            "z_limit": Z_CHECK,
            "failed": failed,
            "summary": summary.to_dict("records"),
            "checks": checks.to_dict("records"),
            "assumptions_dropped": dropped.to_dict("records"),
        }
        print(dumps(record, indent=1))
        return 1 if failed else 0
    print("Closed forms against the simulator (i.i.d. acceptance, serialized draft, v = 1)")
    print(
        f"A check passes when the formula lies within {Z_CHECK:g} standard errors of the "
        f"simulated value (|z| <= {Z_CHECK:g})."
    )
    print(format_checks(checks) if args.verbose else format_summary(summary))
    print(f"\n{len(checks) - failed} of {len(checks)} checks pass (|z| <= {Z_CHECK:g}).", end="")
    if args.csv:
        print(f" Every check: {args.csv}", end="")
    elif not args.verbose:
        print(" Every check: --verbose, --csv FILE or --json.", end="")
    print("\n")
    print("How far the formulas are off when one assumption is dropped")
    print(format_dropped(dropped))
    return 1 if failed else 0
