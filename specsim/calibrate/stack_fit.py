"""A stack profile's host overheads fitted to plain decode runs at several batch sizes.

A plain decode step of ``b`` sequences on a stack costs the roofline of the pass (the
stack's graph padding and eager launches included, :mod:`specsim.cost.stack_terms`) plus
``pass_overhead_s + b * sequence_overhead_s`` of host work. With the roofline ``r_i`` of
each measured configuration priced by the stack with those two terms zeroed, the excess
``y_i = t_i - r_i`` is linear in ``b_i``: ordinary least squares gives both, with standard
errors ``sqrt(diag(s^2 (X^T X)^-1))`` from the residual variance ``s^2 = RSS / (n - 2)``
(e.g. Seber and Lee, *Linear Regression Analysis*, 2nd ed., 2003, Section 3.3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsim.calibrate.engine_outputs import DecodeRun
from specsim.cards import HardwareCard, ModelCard
from specsim.cards.stack import StackProfile
from specsim.cards.stack_files import compose
from specsim.cards.toml_out import toml_table, toml_value
from specsim.cost import step_cost

__all__ = ["StackFit", "fit_stack", "roofline_steps", "stack_toml"]

FITTED = ("pass_overhead_s", "sequence_overhead_s")


@dataclass(frozen=True, kw_only=True)
class StackFit:
    """The fitted stack, the two estimates and their standard errors, the residual table
    (``time_s``, ``predicted_s``, ``model``, ``batch``, ``context``, ``source``)."""

    stack: StackProfile
    estimate: dict[str, float]
    stderr: dict[str, float]
    residuals: pd.DataFrame


def roofline_steps(
    runs: Sequence[DecodeRun], *, stack: StackProfile, hardware: HardwareCard, model: ModelCard
) -> np.ndarray:
    """Each run's modelled step time on ``stack`` without its per-pass and per-sequence
    host terms (the part the fit does not estimate)."""
    bare = dataclasses.replace(stack, pass_overhead_s=0.0, sequence_overhead_s=0.0)
    rt = compose(bare, hardware)
    return np.array(
        [
            float(
                step_cost(
                    model, hardware, batch=r.batch, context=r.context, new_tokens=1, runtime=rt
                ).time_s
            )
            for r in runs
        ]
    )


def fit_stack(
    runs: Sequence[DecodeRun], *, stack: StackProfile, hardware: HardwareCard, model: ModelCard
) -> StackFit:
    """Fit ``pass_overhead_s`` and ``sequence_overhead_s`` of ``stack`` to ``runs`` (see
    the module docstring); a ValueError for fewer than three runs or one batch size, or
    an estimate below zero (the roofline prices these runs above what they measured)."""
    if len(runs) < 3 or len({r.batch for r in runs}) < 2:
        raise ValueError(
            f"--engine-output: the fit needs three runs or more at two batch sizes or more, "
            f"got {len(runs)} at batches {sorted({r.batch for r in runs})}"
        )
    t = np.array([r.step_s for r in runs])
    roof = roofline_steps(runs, stack=stack, hardware=hardware, model=model)
    b = np.array([float(r.batch) for r in runs])
    X = np.column_stack([np.ones_like(b), b])
    coef, *_ = np.linalg.lstsq(X, t - roof, rcond=None)
    resid = t - roof - X @ coef
    s2 = float(resid @ resid) / max(len(t) - 2, 1)
    cov = s2 * np.linalg.inv(X.T @ X)
    est = dict(zip(FITTED, (float(c) for c in coef), strict=True))
    se = dict(zip(FITTED, (float(v) for v in np.sqrt(np.diag(cov))), strict=True))
    negative = [k for k, v in est.items() if v < 0]
    if negative:
        raise ValueError(
            f"--engine-output: fitted {', '.join(f'{k} = {est[k]:.3g} s' for k in negative)} "
            f"is below zero: the roofline of {model.slug} on {hardware.slug} prices these "
            "runs above their measured times (wrong --hardware, --model or dtype?)"
        )
    fitted = dataclasses.replace(
        stack, pass_overhead_s=est[FITTED[0]], sequence_overhead_s=est[FITTED[1]]
    )
    table = pd.DataFrame(
        {
            "time_s": t,
            "predicted_s": t - resid,
            "model": model.slug,
            "batch": b.astype(int),
            "context": [r.context for r in runs],
            "source": [r.source for r in runs],
        }
    )
    return StackFit(stack=fitted, estimate=est, stderr=se, residuals=table)


def stack_toml(fit: StackFit, *, slug: str, fitted_on: str, command: str) -> str:
    """The fitted stack as a ``models/stacks`` TOML file (read back by
    :func:`specsim.cards.stack_files.load_stack`): the base stack's fields with the fitted
    ones (the keys of ``fit.stderr``), each with its standard error, ``fitted_on`` and the
    files read."""
    st = fit.stack
    files = sorted({s.rsplit(" record ", 1)[0] for s in fit.residuals["source"]})
    lines = [f"# Fitted by: {command}", f"# fitted_on = {fitted_on!r}"]
    for f in dataclasses.fields(st):
        value = getattr(st, f.name)
        if f.name in ("sources", "source_path") or value is None:
            continue
        if f.name == "slug":
            value = slug
        if f.name == "assumptions":
            value = [a for a in value if a not in fit.stderr]
        note = f"  # fitted, stderr {fit.stderr[f.name]:.3g}" if f.name in fit.stderr else ""
        lines.append(f"{f.name} = {toml_value(value, f.name)}{note}")
    base = st.sources if isinstance(st.sources, dict) else {"base": "; ".join(st.sources)}
    sources = {
        **{k: v for k, v in base.items() if k not in fit.stderr},
        "fitted_on": fitted_on,
        **{k: "fitted: " + command for k in fit.stderr},
        "data": "; ".join(files),
    }
    lines += toml_table("sources", sources, "sources")
    return "\n".join(lines) + "\n"
