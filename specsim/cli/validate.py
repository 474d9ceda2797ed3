"""``specsim validate``: the simulator against the closed forms, and where they break."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd

from specsim.validate import validation_tables

HELP = "Check the simulator against the closed forms (exit 1 on a failed check)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="seed of the simulations")
    parser.add_argument(
        "--quick", action="store_true",
        help="a smaller grid (alpha 0.2, 0.5, 0.8, 0.95; gamma 1, 3, 5, 10) and 1%% intervals",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="both tables as JSON")


def format_checks(df: pd.DataFrame) -> str:
    lines = [
        f"{'alpha':>5} {'gamma':>5} {'c':>5} {'quantity':<17} {'simulated':>10} "
        f"{'99% interval':>23} {'formula':>10} {'z':>6}  verdict"
    ]
    for r in df.itertuples(index=False):
        lines.append(
            f"{r.alpha:>5.2f} {r.gamma:>5d} {r.c:>5.2f} {r.quantity:<17} {r.simulated:>10.5f} "
            f"[{r.ci_low:>10.5f}, {r.ci_high:>10.5f}] {r.formula:>10.5f} {r.z:>6.2f}  "
            f"{'ok' if r.ok else 'FAIL'}"
        )
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
    checks, dropped = validation_tables(np.random.default_rng(args.seed), quick=args.quick)
    failed = int((~checks["ok"]).sum())
    if args.json:
        record = {
            "checks": checks.to_dict("records"),
            "failed": failed,
            "assumptions_dropped": dropped.to_dict("records"),
        }
        print(json.dumps(record, indent=1))
    else:
        print("Closed forms against the simulator (i.i.d. acceptance, serialized draft, v = 1)")
        print(format_checks(checks))
        print(f"\n{len(checks) - failed} of {len(checks)} checks pass (|z| <= 4.5).\n")
        print("How far the formulas are off when one assumption is dropped")
        print(format_dropped(dropped))
    return 1 if failed else 0
