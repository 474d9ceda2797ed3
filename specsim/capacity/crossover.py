"""Where speculation stops paying: the batch (or request rate) at which a speedup crosses 1.

A sweep runs a speculative configuration and its plain twin at each point ``x`` of an axis
(a closed batch of ``x`` sequences, or an arrival rate), ``replicates`` times with independent
draws; :func:`summarize` gives the mean speedup and its standard error per point, and
:func:`crossing` the first ``x`` at which the mean falls through ``level`` (1: as fast as plain
decoding), interpolated linearly in ``log x`` between the two points that bracket it, with an
interval from the curves ``mean +/- z se`` crossing the same level (the lower curve crosses
first). No crossing within the axis is said as such (``kind``), never as a number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from specsim.sim.workload.arrivals import TraceWorkload

__all__ = ["Crossing", "closed_batch", "crossing", "replicate", "summarize"]

Kind = Literal["crosses", "never", "always"]


@dataclass(frozen=True, kw_only=True)
class Crossing:
    """Where a falling curve crosses ``level``. ``kind``: ``"crosses"`` (``at`` is the point),
    ``"never"`` (above ``level`` over the whole axis: ``at`` is ``inf``), ``"always"`` (at or
    below it from the first point: ``at`` is 0). ``low`` and ``high`` bound ``at`` from the
    curves ``mean -/+ z se``, with the same conventions (0: at or before the first point,
    ``inf``: beyond the last)."""

    kind: Kind
    at: float
    low: float
    high: float


def _first_fall(x: np.ndarray, y: np.ndarray, level: float) -> float:
    """The first point where ``y`` falls from above ``level`` to at or below it, log-linear
    in ``x``; 0 when ``y[0] <= level``, ``inf`` when it never falls through."""
    if y[0] <= level:
        return 0.0
    for i in range(len(x) - 1):
        if y[i] > level >= y[i + 1]:
            f = (y[i] - level) / (y[i] - y[i + 1])
            lx = math.log(x[i]) + f * (math.log(x[i + 1]) - math.log(x[i]))
            return float(math.exp(lx))
    return math.inf


def crossing(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    se: Sequence[float] | np.ndarray,
    *,
    level: float = 1.0,
    z: float = 1.96,
) -> Crossing:
    """Where the mean curve ``y(x)`` (standard errors ``se``) first falls through ``level``.

    >>> c = crossing([1, 2, 4, 8], [1.5, 1.2, 0.9, 0.7], [0.0, 0.0, 0.0, 0.0])
    >>> round(c.at, 3), c.kind  # between 2 and 4, two thirds of the way in log x
    (3.175, 'crosses')
    """
    xs, ys, ses = (np.asarray(v, dtype=float) for v in (x, y, se))
    if not (xs.ndim == 1 and xs.shape == ys.shape == ses.shape and xs.size >= 1):
        raise ValueError(
            f"crossing: x, y and se must be 1-d of one length, got {xs.shape}, {ys.shape}, "
            f"{ses.shape}"
        )
    if not (np.all(np.isfinite(xs)) and np.all(xs > 0) and np.all(np.diff(xs) > 0)):
        raise ValueError(f"crossing: x must be positive and increasing, got {xs.tolist()}")
    if not (np.all(np.isfinite(ys)) and np.all(ses >= 0)):  # inf se: no interval, said as such
        raise ValueError(f"crossing: y must be finite and se >= 0, got {ys.tolist()}")
    at = _first_fall(xs, ys, level)
    kind: Kind = "always" if at == 0.0 else "never" if math.isinf(at) else "crosses"
    lower = _first_fall(xs, ys - z * ses, level) if np.all(np.isfinite(ses)) else 0.0
    upper = _first_fall(xs, ys + z * ses, level) if np.all(np.isfinite(ses)) else math.inf
    return Crossing(kind=kind, at=at, low=min(lower, at), high=max(upper, at))


def closed_batch(batch: int, *, prompt: int, output: int) -> TraceWorkload:
    """``batch`` requests arriving together, each ``prompt`` tokens in and ``output`` out: with
    ``max_batch = batch`` the engine serves them as one batch of ``batch`` sequences."""
    for name, v in (("batch", batch), ("prompt", prompt), ("output", output)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"closed_batch: {name} must be an integer >= 1, got {v!r}")
    n = int(batch)
    return TraceWorkload(
        arrival_s=(0.0,) * n, prompt_tokens=(int(prompt),) * n, output_tokens=(int(output),) * n
    )


def replicate(
    run: Callable[[float, np.random.Generator], Mapping[str, float]],
    xs: Sequence[float],
    *,
    replicates: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """``run(x, rng)`` at every ``x``, ``replicates`` times on independent streams of ``rng``
    (one seed per replicate, the same at every ``x``: common random numbers along the axis);
    one row per (x, replicate) with the metrics ``run`` returns."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2:
        raise ValueError(f"replicates: need at least 2 for a standard error, got {replicates!r}")
    seeds = rng.integers(2**63 - 1, size=replicates)
    rows = []
    for x in xs:
        for r, seed in enumerate(seeds):
            rows.append({"x": x, "replicate": r, **run(x, np.random.default_rng(int(seed)))})
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame, *, by: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` (which holds the axis column): each metric's mean over replicates
    and its standard error (``<metric>_se``, sample standard deviation over sqrt n)."""
    g = df.groupby(list(by), sort=False)
    out = g[list(metrics)].mean()
    n = g.size()
    if int(n.min()) < 2:
        raise ValueError("summarize: every group needs at least 2 replicates")
    for m in metrics:
        out[f"{m}_se"] = g[m].std(ddof=1) / np.sqrt(n)
    return out.reset_index()
