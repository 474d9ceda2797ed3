"""``specsim validate``: the simulator against the closed forms, and where they break.

By default a summary: per quantity checked, how many checks pass and the worst
``|z|``; ``--verbose`` prints the whole grid, ``--csv FILE`` writes it, and
``--json`` prints everything as one JSON object. A check passes when the
formula lies within ``Z_CHECK`` (4.5) standard errors of the simulated value,
and that is the interval printed beside each row. A third table checks the
serving simulator against queueing theory (:mod:`specsim.validate.queueing`):
one line by default, every row with ``--verbose``; its failures count in the
exit status like the grid's. A fourth checks the single-stream tree simulator against
the tree closed forms (:mod:`specsim.validate.tree_forms`), shown and counted the same way.
``--fidelity`` adds the fidelity table (:mod:`specsim.validate.fidelity`): every committed
measurement and published anchor, predicted against measured out of sample, summarized
per family (every row with ``--verbose``); its misses are the model's, reported as such,
and do not change the exit status, which says whether the simulator is right.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from specsim.cli.jsonout import dumps
from specsim.cli.output import ProgressBar, check_file, writable
from specsim.validate.fidelity import fidelity_summary, fidelity_table
from specsim.validate.forms import Z_CHECK, check_summary, validation_tables
from specsim.validate.queueing import queueing_checks, queueing_summary
from specsim.validate.tree_forms import tree_checks, tree_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="seed of the simulations (default 1)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smaller grid (alpha 0.2, 0.5, 0.8, 0.95; gamma 1, 3, 5, 10) and 1%% intervals, "
        "and the fast forms of the queueing table (about 80,000 requests, not 400,000) and "
        "the tree table (40 requests per tree, not 400)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="print every check of the grid, not the summary"
    )
    parser.add_argument("--csv", metavar="FILE", help="write every check of the grid here (CSV)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --csv FILE")
    parser.add_argument(
        "--json", action="store_true", help="the summary, every check and the dropped assumptions"
    )
    parser.add_argument(
        "--fidelity",
        action="store_true",
        help="also predict every committed measurement and published anchor against the "
        "measured value (docs/fidelity.md); misses are reported, not counted as failures",
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


def format_queueing(df: pd.DataFrame) -> str:
    """Every queueing check: the simulated mean wait and its standard error, the closed form
    (or its bounds), z and the verdict; a skipped row gives its reason."""
    lines = [
        f"{'check':<18} {'load':>4} {'k':>2} {'requests':>8} {'simulated':>10} "
        f"{'se':>8} {'expected':>17} {'z':>6}  verdict"
    ]
    for r in df.to_dict("records"):
        head = f"{r['check']:<18} {r['load']:>4.2f} {r['servers']:>2d} {r['requests']:>8d}"
        if r["pass"] is None:
            lines.append(f"{head}  {r['note']}")
            continue
        lo, hi = r["expected"], r["expected_high"]
        expected = f"{lo:.4f}" if lo == hi else f"[{lo:.3f}, {hi:.3f}]"
        lines.append(
            f"{head} {r['simulated']:>10.4f} {r['se']:>8.4f} {expected:>17} "
            f"{r['z']:>6.2f}  {'ok' if r['pass'] else 'FAIL'}  {r['note']}"
        )
    return "\n".join(lines)


def queueing_line(df: pd.DataFrame) -> str:
    ran, passed, skipped = queueing_summary(df)
    line = f"{passed} of {ran} queueing checks pass (|z| <= {Z_CHECK:g})"
    return line + (f", {skipped} skipped." if skipped else ".")


def format_trees(df: pd.DataFrame) -> str:
    """Every tree check: the simulated value, the interval the verdict uses, the closed
    form, z and the verdict."""
    head = f"pass interval (+-{Z_CHECK:g} se)"
    lines = [
        f"{'tree':<18} {'acceptance':<26} {'n':>3} {'passes':>7} {'quantity':<16} "
        f"{'simulated':>9} {head:>21} {'formula':>9} {'z':>6}  verdict"
    ]
    for r in df.to_dict("records"):
        lines.append(
            f"{r['tree']:<18} {r['acceptance']:<26} {r['nodes']:>3d} {r['passes']:>7d} "
            f"{r['quantity']:<16} {r['simulated']:>9.5f} [{r['pass_low']:>9.5f}, "
            f"{r['pass_high']:>9.5f}] {r['expected']:>9.5f} {r['z']:>6.2f}  "
            f"{'ok' if r['pass'] else 'FAIL'}"
        )
    return "\n".join(lines)


def trees_line(df: pd.DataFrame) -> str:
    ran, passed = tree_summary(df)
    return f"{passed} of {ran} tree checks pass (|z| <= {Z_CHECK:g})."


def run(args: argparse.Namespace) -> int:
    if args.csv:
        check_file(args.csv, option="--csv", force=args.force)
    progress = None
    if sys.stderr.isatty():  # a bar on a terminal; logs stay free of it
        progress = ProgressBar()
    checks, dropped = validation_tables(
        np.random.default_rng(args.seed), quick=args.quick, progress=progress
    )
    queueing = queueing_checks(np.random.default_rng(args.seed), quick=args.quick)
    trees = tree_checks(np.random.default_rng(args.seed), quick=args.quick)
    summary = check_summary(checks)
    failed = int((~checks["ok"]).sum())
    ran, passed, _ = queueing_summary(queueing)
    failed_queueing = ran - passed
    ran_trees, passed_trees = tree_summary(trees)
    failed_trees = ran_trees - passed_trees
    bad = bool(failed or failed_queueing or failed_trees)
    fidelity = fidelity_table(np.random.default_rng(args.seed)) if args.fidelity else None
    if args.csv:
        checks.to_csv(writable(args.csv), index=False)
    if args.json:
        record = {
            "z_limit": Z_CHECK,
            "failed": failed,
            "summary": summary.to_dict("records"),
            "checks": checks.to_dict("records"),
            "assumptions_dropped": dropped.to_dict("records"),
            "queueing_failed": failed_queueing,
            "queueing": queueing.to_dict("records"),
            "trees_failed": failed_trees,
            "trees": trees.to_dict("records"),
        }
        if fidelity is not None:
            record["fidelity_summary"] = fidelity_summary(fidelity).to_dict("records")
            record["fidelity"] = fidelity.to_dict("records")
        print(dumps(record, indent=1))
        return 1 if bad else 0
    _print_closed_forms(args, checks=checks, summary=summary, dropped=dropped, failed=failed)
    print(
        "\nServing simulator against queueing theory (batch 1, no speculation, Poisson "
        "arrivals): mean wait in queue, seconds"
    )
    if args.verbose or failed_queueing:
        print(format_queueing(queueing))
    print(queueing_line(queueing) + ("" if args.verbose else " Every check: --verbose."))
    print(
        "\nTree simulator against the tree closed forms (positional acceptance by depth "
        "and rank): tokens per pass and discarded share"
    )
    if args.verbose or failed_trees:
        print(format_trees(trees))
    print(trees_line(trees) + ("" if args.verbose else " Every check: --verbose."))
    if fidelity is not None:
        print(
            "\nFidelity: every committed measurement and published anchor, predicted against "
            "measured (out of sample; docs/fidelity.md)"
        )
        print(format_fidelity(fidelity, verbose=args.verbose))
    return 1 if bad else 0


def _print_closed_forms(
    args: argparse.Namespace,
    *,
    checks: pd.DataFrame,
    summary: pd.DataFrame,
    dropped: pd.DataFrame,
    failed: int,
) -> None:
    """The closed forms against the simulator, then how far they are off when one assumption
    is dropped."""
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


def format_fidelity(table: pd.DataFrame, *, verbose: bool) -> str:
    """Per family and quantity: rows, median and worst |error|, misses, the goal and whether
    it is met; with ``verbose`` every row (measured with its interval, predicted, error)."""
    summary = fidelity_summary(table)
    lines = [
        f"{'family':<66} {'quantity':<18} {'rows':>4} {'median':>7} {'worst':>7} "
        f"{'misses':>6}  goal met"
    ]
    for r in summary.to_dict("records"):
        lines.append(
            f"{r['family']:<66} {r['quantity']:<18} {r['rows']:>4d} "
            f"{r['median |error|']:>7.1%} {r['worst |error|']:>7.1%} {r['misses']:>6d}  "
            f"{'yes' if r['goal met'] else 'NO'} ({r['goal']})"
        )
    misses = int((table["verdict"] == "miss").sum())
    lines.append(
        f"{len(table)} rows, {misses} outside their measured interval."
        + ("" if verbose else " Every row: --verbose or --json.")
    )
    if verbose:
        for r in table.to_dict("records"):
            lines.append(
                f"  {r['anchor']:<48} {r['quantity']:<18} measured {r['measured']:.4g} "
                f"[{r['measured_low']:.4g}, {r['measured_high']:.4g}] predicted "
                f"{r['predicted']:.4g} ({r['error']:+.1%}) {r['verdict']}"
            )
    return "\n".join(lines)
