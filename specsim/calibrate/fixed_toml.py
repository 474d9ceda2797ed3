"""``python -m specsim.calibrate.fixed_toml [--write]``: the stacks' fixed host costs, refitted.

Fits every stack of the committed plain decode rows (:mod:`specsim.calibrate.fixed_costs`),
runs the leave-one-source-out check (:mod:`specsim.calibrate.fixed_loso`) and prints, per
stack, the fitted terms with their standard errors and whether the fit beats the previous
numbers out of sample. ``--write`` writes the fitted terms of the stacks that do into
``models/stacks/<slug>.toml``: only the lines of the fitted terms (value and a comment with
the standard error and the out-of-sample error), their ``[sources]`` entries and the
``assumptions`` list; every other line is kept as it is. A stack whose fit is not committed
keeps its numbers. The kernel time is the device parts' at the time of the fit: after a
device part changes, rerun this command (``tests/calibrate/test_fixed_costs.py`` checks that
the committed numbers are the refit's).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from specsim.calibrate.fixed_costs import FixedFit, fit_fixed, stack_rows
from specsim.calibrate.fixed_loso import Decision, commit_decision, loso_table
from specsim.calibrate.plain_rows import PlainRow, read_plain_rows
from specsim.cards import load_stack
from specsim.cards.stack_files import stacks_dir

__all__ = ["COMMAND", "StackResult", "fit_all", "stack_text", "write_stacks", "main"]

COMMAND = "python -m specsim.calibrate.fixed_toml --write"
_SOURCE = (
    "models/measured/plain-decode/README.md (fixed-cost fit on published plain decode steps: "
    f"{COMMAND})"
)


@dataclass(frozen=True, kw_only=True)
class StackResult:
    """One stack: its fit (None when the rows leave no degree of freedom, ``error`` says
    why) and its out-of-sample decision."""

    slug: str
    fit: FixedFit | None
    error: str
    decision: Decision


def fit_all(rows: list[PlainRow] | None = None) -> tuple[list[StackResult], pd.DataFrame]:
    """Every stack of ``rows`` (default: the committed ones): its fit and decision, and the
    leave-one-source-out table (:func:`specsim.calibrate.fixed_loso.loso_table`)."""
    rows = read_plain_rows() if rows is None else rows
    slugs = sorted({r.stack for r in rows})
    table = loso_table(rows, slugs)
    out = []
    for slug in slugs:
        try:
            fit, err = fit_fixed(stack_rows(rows, slug), load_stack(slug)), ""
        except ValueError as exc:
            fit, err = None, str(exc)
        out.append(
            StackResult(slug=slug, fit=fit, error=err, decision=commit_decision(table, slug))
        )
    return out, table


def _value(v: float) -> str:
    text = f"{v:.4g}"
    return text if any(c in text for c in ".e") else text + ".0"


def _comment(fit: FixedFit, term: str, decision: Decision) -> str:
    bound = ", at the bound 0" if term in fit.at_bound else ""
    return (
        f"# fitted: {fit.stderr[term]:.2g} s stderr{bound}, {len(fit.rows)} plain decode "
        f"steps (models/measured/plain-decode); {decision.method} median |error| "
        f"{decision.median:.1%} (previous numbers {decision.prior_median:.1%})"
    )


def _literal(text: str) -> Callable[[re.Match[str]], str]:
    """A replacement for ``re.sub`` that inserts ``text`` as it is (no escapes read)."""
    return lambda _m: text


def _set_line(text: str, key: str, line: str, *, where: str) -> str:
    pattern = re.compile(rf"^{re.escape(key)} = .*$", re.MULTILINE)
    if not pattern.search(text):
        raise ValueError(f"{where}: no line '{key} = ...' to replace")
    return pattern.sub(_literal(line), text, count=1)


def stack_text(text: str, fit: FixedFit, decision: Decision, *, where: str) -> str:
    """``text`` (a stack TOML file) with the fitted terms' lines, ``assumptions`` and
    ``[sources]`` entries replaced; every other line kept."""
    for term, value in fit.estimate.items():
        line = f"{term} = {_value(value)}"
        line = f"{line:<36}{_comment(fit, term, decision)}"
        pattern = re.compile(rf"^{term} = .*$", re.MULTILINE)
        if pattern.search(text):
            text = pattern.sub(_literal(line), text, count=1)
        else:  # a term the file leaves at its default: add it after pass_overhead_s
            text = re.sub(r"^(pass_overhead_s = .*)$", rf"\1\n{line}", text, count=1, flags=re.M)
    kept = [a for a in fit.stack.assumptions if a not in fit.estimate]
    text = _set_line(
        text,
        "assumptions",
        "assumptions = [" + ", ".join(f'"{a}"' for a in kept) + "]",
        where=where,
    )
    for term in fit.estimate:
        entry = f'{term} = "{_SOURCE}"'
        if re.search(rf"^{term} = \"", text, flags=re.M):
            text = re.sub(rf"^{term} = \".*\"$", _literal(entry), text, flags=re.M)
        else:
            text = re.sub(r"^\[sources\]$", _literal(f"[sources]\n{entry}"), text, flags=re.M)
    return text


def write_stacks(results: list[StackResult], folder: Path | None = None) -> list[str]:
    """Write every committed fit into its stack file (module docstring); the slugs written."""
    folder = stacks_dir() if folder is None else folder
    written = []
    for res in results:
        if res.fit is None or not res.decision.commit:
            continue
        path = folder / f"{res.slug}.toml"
        text = path.read_text(encoding="utf-8")
        path.write_text(stack_text(text, res.fit, res.decision, where=str(path)), encoding="utf-8")
        written.append(res.slug)
    return written


def _report(results: list[StackResult]) -> str:
    lines = []
    for res in results:
        d = res.decision
        head = f"{res.slug}: {d.why}"
        if res.fit is None:
            lines.append(f"{head}\n    no fit: {res.error}")
            continue
        terms = ", ".join(
            f"{k} = {v:.4g} +- {res.fit.stderr[k]:.2g} s" for k, v in res.fit.estimate.items()
        )
        lines.append(f"{head}\n    {len(res.fit.rows)} rows, dof {res.fit.dof}: {terms}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the fits and decisions; ``--write`` writes the committed ones; ``--loso PATH``
    writes the held-out table as CSV."""
    ap = argparse.ArgumentParser(prog="python -m specsim.calibrate.fixed_toml", description=__doc__)
    ap.add_argument("--write", action="store_true", help="write the committed fits")
    ap.add_argument("--loso", help="write the leave-one-source-out table to this CSV")
    args = ap.parse_args(argv)
    results, table = fit_all()
    sys.stdout.write(_report(results))
    if args.loso:
        table.to_csv(args.loso, index=False)
    if args.write:
        sys.stdout.write("written: " + ", ".join(write_stacks(results)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
