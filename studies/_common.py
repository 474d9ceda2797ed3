"""Helpers the studies share: config checks, card-derived cost parameters, markdown."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any

import numpy as np
import pandas as pd

from specsim.acceptance.processes import AcceptanceProcess
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, cost_coefficient, verification_factor
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CostSource, StreamConfig, simulate_stream

__all__ = [
    "check_probability",
    "check_positive_int",
    "check_positive",
    "plain_cost_from_cards",
    "stream_metrics",
    "mean_se",
    "md_table",
    "fmt",
    "setting",
]


def setting(default: Any, doc: str, unit: str = "") -> Any:
    """A study ``Config`` field with its meaning and unit, which ``--list-keys`` shows."""
    return field(default=default, metadata={"doc": doc, "unit": unit})


def check_probability(values: float | Sequence[float], key: str) -> None:
    """Raise ValueError naming ``key`` unless every value lies in [0, 1] (for ``__post_init__``)."""
    for v in np.atleast_1d(np.asarray(values, dtype=float)):
        if not (0.0 <= v <= 1.0):
            raise ValueError(f"{key} must lie in [0, 1], got {v!r}")


def check_positive_int(value: int | Sequence[int], key: str, minimum: int = 1) -> None:
    """Raise ValueError naming ``key`` unless every value is an integer >= ``minimum``."""
    for v in np.atleast_1d(np.asarray(value)):
        if not float(v).is_integer() or v < minimum:
            raise ValueError(f"{key} must be integers >= {minimum}, got {v!r}")


def check_positive(values: float | Sequence[float], key: str) -> None:
    """Raise ValueError naming ``key`` unless every value is a finite number > 0."""
    for v in np.atleast_1d(np.asarray(values, dtype=float)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{key} must be > 0, got {v!r}")


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
    dep = Deployment(target=t, hardware=hw, tensor_parallel=tensor_parallel)
    c = float(cost_coefficient(d, dep, batch=batch, context=context))
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


def stream_metrics(
    acceptance: AcceptanceProcess,
    *,
    gamma: int,
    cost: CostSource,
    tokens: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Metrics of one simulated stream of ``tokens`` tokens at a fixed lookahead ``gamma``.

    :func:`specsim.sim.simulate_stream` with ``FixedGamma(gamma)`` and ``max_gamma = gamma``,
    drawing from ``rng``; returns its ``metrics()`` record.
    """
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=acceptance,
        policy=FixedGamma(gamma=gamma),
        cost=cost,
        max_gamma=gamma,
    )
    return simulate_stream(cfg, rng).metrics()


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
