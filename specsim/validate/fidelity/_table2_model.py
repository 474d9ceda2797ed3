"""The full model of :func:`specsim.validate.fidelity.leviathan.table2_predictions`: each
Table 2 row simulated with acceptance heterogeneous around its published alpha, on a grid of
``(h, persistence)``, and the grid point that fits one task's rows best."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsim.acceptance.processes import AcceptanceProcess, IIDAcceptance, MarkovAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import verification_factor
from specsim.policies.lookahead import FixedGamma
from specsim.sim import PlainCost, StreamConfig, simulate_stream
from specsim.theory import walltime_speedup

__all__ = [
    "heterogeneous",
    "simulate_row",
    "verification_factors",
    "simulate_grid",
    "fit_loss",
    "fit_per_task",
    "row_predictions",
]

Sims = dict[tuple[int, float, float], tuple[float, float]]
"""Speedup and standard error by (row index, h, persistence)."""


def heterogeneous(alpha: float, h: float, persistence: float) -> AcceptanceProcess:
    """Acceptance with mean ``alpha``: two states ``alpha +/- h min(alpha, 1 - alpha)`` kept
    with probability ``persistence``, or i.i.d. at ``h = 0``."""
    spread = h * min(alpha, 1.0 - alpha)
    if spread == 0.0:
        return IIDAcceptance(alpha=alpha)
    return MarkovAcceptance.two_state(mean=alpha, spread=spread, persistence=persistence)


def simulate_row(
    row: Any, v: Sequence[float], h: float, rho: float, tokens: int, seed: int
) -> tuple[float, float]:
    """One Table 2 row's speedup and its standard error under ``heterogeneous`` acceptance
    (its closed form, exactly, at ``h = 0``)."""
    if h == 0.0:
        # i.i.d. acceptance: the simulator's long-run speedup is Theorem 3.8 with v (tested by
        # the paper study and specsim.validate.forms.check_grid), so the closed form, free of
        # sampling
        # noise, stands in.
        g = int(row.gamma)
        return float(walltime_speedup(float(row.alpha), g, float(row.c), v[g])), 0.0
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=heterogeneous(float(row.alpha), h, rho),
        policy=FixedGamma(gamma=int(row.gamma)),
        cost=PlainCost(c=float(row.c), v=tuple(v)),
        max_gamma=int(row.gamma),
    )
    m = simulate_stream(cfg, np.random.default_rng(seed)).metrics()
    return float(m["speedup"]), float(m["speedup_se"])


def verification_factors(
    target: str, hardware: str, *, gammas: int, context: int
) -> tuple[float, ...]:
    """The cost model's v(gamma) of ``target`` on ``hardware`` at batch 1, gamma 0..``gammas``."""
    return tuple(
        float(x)
        for x in np.atleast_1d(
            verification_factor(
                load_model(target),
                load_hardware(hardware),
                np.arange(gammas + 1),
                batch=1,
                context=context,
            )
        )
    )


def simulate_grid(
    rows: pd.DataFrame,
    v: Sequence[float],
    grid: Sequence[tuple[float, float]],
    *,
    tokens: int,
    seeds: Sequence[int],
) -> Sims:
    """Every row at every grid point, row ``i`` on ``seeds[i]`` (common random numbers)."""
    return {
        (i, h, p): simulate_row(r, v, h, p, tokens, seeds[i])
        for h, p in grid
        for i, r in enumerate(rows.itertuples(index=False))
    }


def fit_loss(rows: pd.DataFrame, sims: Sims, *, h: float, p: float, task: str) -> float:
    """Mean squared log error of the grid point ``(h, p)`` on ``task``'s rows."""
    measured = rows["measured"].to_numpy()
    idx = [int(i) for i in np.flatnonzero(rows["task"].to_numpy() == task)]
    pred = np.array([sims[(i, h, p)][0] for i in idx])
    return float(np.mean(np.log(pred / measured[idx]) ** 2))


def fit_per_task(
    rows: pd.DataFrame,
    sims: Sims,
    grid: Sequence[tuple[float, float]],
    *,
    tasks: Sequence[str],
) -> dict[str, tuple[float, float]]:
    """For each task, the grid point of least :func:`fit_loss` (the first among ties)."""
    fitted: dict[str, tuple[float, float]] = {}
    for task in tasks:
        losses = [fit_loss(rows, sims, h=h, p=p, task=task) for h, p in grid]
        fitted[task] = grid[int(np.argmin(losses))]
    return fitted


def row_predictions(
    r: Any, vg: float, *, fitted: dict[str, tuple[float, float]], sims: Sims, i: int
) -> list[tuple[str, str, float, float, float, float]]:
    """Row ``i``'s predictions as (predictor, fitted on, value, se, h, persistence): Theorem
    3.8, Theorem 3.8 with ``vg`` = v(gamma), and the full model fitted on each task."""
    preds = [
        (
            "theorem 3.8",
            "none",
            float(walltime_speedup(r.alpha, r.gamma, r.c)),
            0.0,
            np.nan,
            np.nan,
        ),
        (
            "theorem 3.8 + v",
            "none",
            float(walltime_speedup(r.alpha, r.gamma, r.c, vg)),
            0.0,
            np.nan,
            np.nan,
        ),
    ]
    for task, (h, p) in fitted.items():
        preds.append(("full model", task, *sims[(i, h, p)], h, p))
    return preds
