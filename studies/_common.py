"""Helpers the studies share: config checks, card-derived cost parameters, figures, markdown."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from specsim.cards import load_hardware, load_model
from specsim.costgrid import cost_coefficient, verification_factor
from specsim.studies import resolve_config

__all__ = [
    "config",
    "check_probability",
    "check_positive_int",
    "plain_cost_from_cards",
    "figure",
    "mean_se",
    "md_table",
    "fmt",
]


def config(defaults: dict[str, Any], given: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """Defaults updated by ``given`` (unknown keys raise ValueError naming the study)."""
    return resolve_config(defaults, given, f"study {where!r}")


def check_probability(values: float | Sequence[float], key: str, where: str) -> None:
    for v in np.atleast_1d(np.asarray(values, dtype=float)):
        if not (0.0 <= v <= 1.0):
            raise ValueError(f"study {where!r}: {key} must lie in [0, 1], got {v!r}")


def check_positive_int(value: int | Sequence[int], key: str, where: str, minimum: int = 1) -> None:
    for v in np.atleast_1d(np.asarray(value)):
        if not float(v).is_integer() or v < minimum:
            raise ValueError(f"study {where!r}: {key} must be integers >= {minimum}, got {v!r}")


def plain_cost_from_cards(
    *,
    target: str,
    draft: str,
    hardware: str,
    context: int,
    max_gamma: int,
    tensor_parallel: int = 1,
    batch: int = 1,
) -> tuple[float, tuple[float, ...]]:
    """``(c, v[0..max_gamma])`` of a draft/target pair on an accelerator, from the cost model.

    The closed forms' parameters at one context: ``c`` is
    :func:`specsim.cost.cost_coefficient`, ``v`` the
    :func:`specsim.cost.verification_factor` for gamma = 0..max_gamma (v[0] = 1).
    """
    t, d, hw = load_model(target), load_model(draft), load_hardware(hardware)
    c = float(
        cost_coefficient(d, t, hw, batch=batch, context=context, tensor_parallel=tensor_parallel)
    )
    v = np.asarray(
        verification_factor(
            t,
            hw,
            np.arange(max_gamma + 1),
            batch=batch,
            context=context,
            tensor_parallel=tensor_parallel,
        )
    )
    return c, tuple(float(x) for x in v)


def figure(ncols: int = 1, *, width: float = 6.4, height: float = 4.4) -> tuple[Figure, list[Axes]]:
    """A figure on the Agg canvas (no pyplot state) with ``ncols`` axes side by side."""
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def mean_se(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and its standard error over independent replicates (SE needs at least two)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("mean_se: no values")
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("inf")
    return float(x.mean()), se


def fmt(value: object, digits: int = 3) -> str:
    if isinstance(value, float | np.floating):
        if not np.isfinite(value):
            return str(value)
        return f"{value:.{digits}g}"
    return str(value)


def md_table(df: pd.DataFrame, digits: int = 3) -> str:
    """A small DataFrame as a markdown table (numbers to ``digits`` significant digits)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + " --- |" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v, digits) for v in row) + " |")
    return "\n".join(lines)
