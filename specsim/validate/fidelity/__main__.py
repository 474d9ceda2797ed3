"""``python -m specsim.validate.fidelity [--csv PATH]``: the fidelity summary and table, as text."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from specsim.validate.fidelity import fidelity_summary, fidelity_table


def main(argv: list[str] | None = None) -> int:
    """Print :func:`fidelity_summary` and the table (errors in %); ``--csv`` writes the table."""
    ap = argparse.ArgumentParser(prog="python -m specsim.validate.fidelity", description=__doc__)
    ap.add_argument("--csv", help="also write the whole table to this CSV file")
    args = ap.parse_args(argv)
    table = fidelity_table()
    with pd.option_context(
        "display.width", 200, "display.max_columns", 20, "display.max_colwidth", 48
    ):
        sys.stdout.write(fidelity_summary(table).to_string(index=False) + "\n\n")
        cols = [
            "anchor",
            "quantity",
            "measured",
            "measured_low",
            "measured_high",
            "predicted",
            "error",
            "verdict",
        ]
        sys.stdout.write(table[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        sys.stdout.write("\n")
    if args.csv:
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
