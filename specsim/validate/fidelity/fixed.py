"""The stacks' fixed host costs on published plain decode steps, out of sample.

Every row of ``models/measured/plain-decode/decode.csv`` a fit used (``use = fit``) and every
published single-token row a committed fit used is one fidelity row, in one family per stack
(:mod:`specsim.calibrate.fixed_costs`, :mod:`specsim.calibrate.fixed_loso`):

- a stack whose fit is committed (it beats the stack's previous numbers out of sample): the
  family ``plain decode steps, leave-one-source-out: <stack> on <card>``, each row predicted by
  the stack refitted without the row's source (without the row itself where the stack has one
  source: ``leave-one-row-out``), every other number as shipped;
- a stack whose fit is not committed: ``plain decode steps, previous numbers kept: <stack>``,
  the new rows (``plain-decode/decode.csv``) predicted by the shipped stack, which
  was fitted on none of them (its published rows stay in the published families,
  :mod:`specsim.validate.fidelity.published`).

The interval is the rounding of the printed figure; the quantity is the time per output token
of each sequence, the step time, in ms (``plain time per token``, as the published families'
ms rows: :data:`specsim.plots.fidelity.STACK_QUANTITIES` draws them with the stacks).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specsim.calibrate.fixed_loso import Decision, decisions
from specsim.calibrate.plain_rows import PLAIN_DECODE, PlainRow, modelled_step_s, read_plain_rows
from specsim.cards import load_stack

from .rows import fidelity_row

__all__ = ["LOSO_FAMILY", "KEPT_FAMILY", "QUANTITY", "fixed_cost_rows"]

LOSO_FAMILY = "plain decode steps, leave-one-source-out: {stack}"
KEPT_FAMILY = "plain decode steps, previous numbers kept: {stack}"
QUANTITY = "plain time per token"


def _row(family: str, r: PlainRow, predicted_s: float, fitted_on: str) -> dict[str, object]:
    return fidelity_row(
        family=family.format(stack=r.stack),
        anchor=f"{r.id}: {_shape(r)}",
        source=r.source,
        quantity=QUANTITY,
        unit="ms",
        measured=1e3 * r.step_s,
        interval=(1e3 * r.step_low, 1e3 * r.step_high),
        how="rounding of the printed figure (no spread published)",
        predicted=1e3 * predicted_s,
        fitted_on=fitted_on,
    )


def _shape(r: PlainRow) -> str:
    par = f", TP {r.tensor_parallel}" if r.tensor_parallel > 1 else ""
    par += f", EP {r.expert_parallel}" if r.expert_parallel > 1 else ""
    graphs = ", no CUDA graphs" if r.graphs == "off" else ""
    return (
        f"{r.model} {r.weights}{par}{graphs} on {r.hardware}: batch {r.batch} at context "
        f"{r.context}"
    )


def _loso_rows(
    table: pd.DataFrame, d: Decision, by_id: dict[str, PlainRow]
) -> list[dict[str, object]]:
    left = "this source" if d.method.startswith("leave-one-source") else "this row"
    out = []
    for rec in table[table["stack"] == d.stack].itertuples(index=False):
        fitted_on = (
            f"the {d.stack} stack's fixed host costs refitted without {left} "
            f"({rec.fitted_terms}); every other number as shipped"
        )
        out.append(_row(LOSO_FAMILY, by_id[str(rec.id)], float(rec.predicted_s), fitted_on))
    return out


def _kept_rows(rows: list[PlainRow], d: Decision) -> list[dict[str, object]]:
    stack = load_stack(d.stack)
    fitted_on = f"nothing of this row: the {d.stack} stack as shipped ({d.why})"
    return [
        _row(KEPT_FAMILY, r, modelled_step_s(r, stack), fitted_on)
        for r in rows
        if r.stack == d.stack and r.origin == PLAIN_DECODE
    ]


def fixed_cost_rows(*, root: str | Path | None = None) -> list[dict[str, object]]:
    """The fidelity rows of the module docstring."""
    rows = read_plain_rows(root=root)
    table, decided = decisions(rows)
    by_id = {r.id: r for r in rows}
    out: list[dict[str, object]] = []
    for d in decided.values():
        out += _loso_rows(table, d, by_id) if d.commit else _kept_rows(rows, d)
    return out
