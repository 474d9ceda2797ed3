"""Leave-one-source-out errors of the fixed host costs, and whether a fit may be committed.

For a stack whose rows come from two sources or more (a source: one published table,
:attr:`specsim.calibrate.plain_rows.PlainRow.group`), each source in turn is left out, the
terms are refitted on the others (:func:`specsim.calibrate.fixed_costs.fit_fixed`, allowed
to use every row: ``exact``) and the left-out rows are predicted; with one source of two rows
or more, each row is left out instead (``leave-one-row-out``, a weaker check, named so). The
same rows are predicted by the stack's previous numbers (:data:`PRIOR`), which nothing was
fitted on here. A fit is committed only when its out-of-sample median |error| is below the
previous numbers' on the same rows (:func:`commit_decision`): "a fit that does not beat the
assumption it replaces out of sample is not committed".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsim.calibrate.fixed_costs import Design, design, fit_design, prior_stack, stack_rows
from specsim.calibrate.plain_rows import PlainRow, read_plain_rows
from specsim.cards import load_stack
from specsim.cards.stack import StackProfile

__all__ = ["LOSO_COLUMNS", "Decision", "loso_table", "commit_decision", "decisions"]

LOSO_COLUMNS: tuple[str, ...] = (
    "stack",
    "method",
    "left_out",
    "id",
    "hardware",
    "model",
    "measured_s",
    "low_s",
    "high_s",
    "predicted_s",
    "prior_s",
    "error",
    "prior_error",
    "fitted_terms",
)
"""The columns of :func:`loso_table`: per held-out row, the refit's prediction and the
previous numbers' (``error``: predicted / measured - 1)."""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Whether a stack's fit may be committed: ``method`` (leave-one-source-out,
    leave-one-row-out, or ``none`` when no held-out check is possible), the held-out rows,
    the refits' and the previous numbers' median and worst |error|, and ``commit``."""

    stack: str
    method: str
    rows: int
    median: float
    worst: float
    prior_median: float
    prior_worst: float
    commit: bool
    why: str


def _parts(rows: Sequence[PlainRow]) -> tuple[str, list[list[PlainRow]]]:
    groups = sorted({r.group for r in rows})
    if len(groups) >= 2:
        return "leave-one-source-out", [[r for r in rows if r.group == g] for g in groups]
    if len(rows) >= 2:
        return "leave-one-row-out (one source)", [[r] for r in rows]
    return "none", []


def _held_out(
    d: Design, out: np.ndarray, stack: StackProfile, method: str
) -> list[dict[str, object]]:
    fit = fit_design(d.subset(~out), stack, exact=True)
    held = d.subset(out)
    pred, prior = held.predict(fit.stack), held.predict(prior_stack(stack))
    terms = ", ".join(f"{k} = {v:.4g}" for k, v in fit.estimate.items())
    recs = []
    for r, p, q in zip(held.rows, pred, prior, strict=True):
        recs.append(
            {
                "stack": stack.slug,
                "method": method,
                "left_out": r.group if method.startswith("leave-one-source") else r.id,
                "id": r.id,
                "hardware": r.hardware,
                "model": r.model,
                "measured_s": r.step_s,
                "low_s": r.step_low,
                "high_s": r.step_high,
                "predicted_s": float(p),
                "prior_s": float(q),
                "error": float(p) / r.step_s - 1.0,
                "prior_error": float(q) / r.step_s - 1.0,
                "fitted_terms": terms,
            }
        )
    return recs


def loso_table(rows: Sequence[PlainRow], slugs: Sequence[str]) -> pd.DataFrame:
    """The held-out predictions of each stack of ``slugs`` (module docstring; columns
    :data:`LOSO_COLUMNS`); a stack with one row contributes nothing."""
    recs: list[dict[str, object]] = []
    for slug in slugs:
        mine = stack_rows(rows, slug)
        method, parts = _parts(mine)
        if not parts:
            continue
        stack = load_stack(slug)
        d = design(mine, stack)
        for part in parts:
            ids = {r.id for r in part}
            out = np.array([r.id in ids for r in d.rows])
            recs += _held_out(d, out, stack, method)
    return pd.DataFrame(recs, columns=list(LOSO_COLUMNS))


def commit_decision(table: pd.DataFrame, slug: str) -> Decision:
    """Whether ``slug``'s fit beats its previous numbers on the held-out rows of ``table``
    (:func:`loso_table`): commit when the refits' median |error| is the lower."""
    g = table[table["stack"] == slug]
    if g.empty:
        return Decision(
            stack=slug,
            method="none",
            rows=0,
            median=float("nan"),
            worst=float("nan"),
            prior_median=float("nan"),
            prior_worst=float("nan"),
            commit=False,
            why="no held-out check is possible (one row): not committed",
        )
    err, prior = g["error"].abs().to_numpy(), g["prior_error"].abs().to_numpy()
    med, pmed = float(np.median(err)), float(np.median(prior))
    commit = med < pmed
    why = (
        f"out of sample the fit's median |error| {med:.1%} is "
        f"{'below' if commit else 'not below'} the previous numbers' {pmed:.1%}"
    )
    return Decision(
        stack=slug,
        method=str(g["method"].iloc[0]),
        rows=len(g),
        median=med,
        worst=float(err.max()),
        prior_median=pmed,
        prior_worst=float(prior.max()),
        commit=commit,
        why=why + ("" if commit else ": not committed"),
    )


def decisions(
    rows: Sequence[PlainRow] | None = None,
) -> tuple[pd.DataFrame, dict[str, Decision]]:
    """The held-out table of every stack of ``rows`` (default: the committed rows,
    :func:`specsim.calibrate.plain_rows.read_plain_rows`) and each stack's decision."""
    rows = read_plain_rows() if rows is None else list(rows)
    slugs = sorted({r.stack for r in rows})
    table = loso_table(rows, slugs)
    return table, {s: commit_decision(table, s) for s in slugs}
