"""Where an option stops paying by serving: the rate at which its median TPOT speedup over
no speculation falls through 1, found on a short rate sweep with the serving engine.

The Little's-law figure of :func:`specsim.plan.limits.stops_paying` is a closed-form upper
estimate (prefill ignored). With ``--precise`` and a request rate, :func:`served_stop` backs
it with a served search: at :data:`RATE_FACTORS` times a top rate (twice that estimate, at
most the rate the deployment serves plainly at full batch, beyond which no queue is stable;
that serveable rate when the option pays at every batch tried), the option's planned
tree and no speculation serve the same arrivals, :data:`REPLICATES` times on independent
seeds (common random numbers along
the axis, :func:`specsim.capacity.crossover.replicate`; each run the default request
count, so the search costs 16 default serving runs); the speedup is plain median TPOT over
the option's, and :func:`specsim.capacity.crossover.crossing` gives where its mean falls
through 1 with a 95% interval. The tree stays the one planned at the asked rate's batch (the
option as it would be deployed), so the crossing is where *that* configuration stops paying.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from specsim.capacity.crossover import Crossing, crossing, replicate, summarize
from specsim.plan.evaluation import latencies, serve
from specsim.plan.options import Option, PlanRequest

__all__ = ["RATE_FACTORS", "REPLICATES", "ServedLimit", "served_stop"]

RATE_FACTORS = (0.125, 0.25, 0.5, 1.0)
"""The sweep, as multiples of the top rate (log-spaced so the crossing interpolates in
``log rate``)."""
REPLICATES = 2
"""Independent seeds per rate (at least 2: a standard error)."""


@dataclass(frozen=True, kw_only=True)
class ServedLimit:
    """The served search: the rates tried, the mean speedup and its standard error at each,
    the crossing of 1, and the method in words."""

    rates: tuple[float, ...]
    speedups: tuple[float, ...]
    se: tuple[float, ...]
    crossing: Crossing
    method: str


def _speedup(request: PlanRequest, option: Option, tree: tuple[int, ...]) -> float:
    if option.proposer is None:  # pragma: no cover - build_option always gives one
        raise ValueError(f"{option.label}: no proposer")
    plain = latencies(serve(request, option.proposer, (), plain=True).requests_spec)[1]
    spec = latencies(serve(request, option.proposer, tree).requests_spec)[1]
    if plain.size == 0 or spec.size == 0:
        raise ValueError(
            f"{option.label}: no request finished at {request.load.describe()}; "
            "serve more requests (--precise) or a lower rate"
        )
    return float(np.median(plain) / np.median(spec))


def served_stop(
    option: Option, request: PlanRequest, *, tree: tuple[int, ...], top_rate: float
) -> ServedLimit:
    """The served search for ``option`` with ``tree`` up to ``top_rate`` (module
    docstring); the request's load must be a rate."""
    if request.load.rate_per_s is None:
        raise ValueError("served_stop: the load is a closed batch; give --rate")
    if not (math.isfinite(top_rate) and top_rate > 0):
        raise ValueError(f"served_stop: top_rate must be finite and > 0, got {top_rate!r}")
    rates = [top_rate * f for f in RATE_FACTORS]

    def run(rate: float, rng: np.random.Generator) -> Mapping[str, float]:
        load = dataclasses.replace(request.load, rate_per_s=rate)
        seed = int(rng.integers(2**31))
        at = dataclasses.replace(request, load=load, seed=seed, precise=False)
        return {"speedup": _speedup(at, option, tree)}

    df = replicate(run, rates, replicates=REPLICATES, rng=np.random.default_rng(request.seed))
    s = summarize(df, by=["x"], metrics=["speedup"])
    cross = crossing(s["x"], s["speedup"], s["speedup_se"])
    method = (
        f"served: median TPOT speedup on the serving engine at {len(rates)} rates "
        f"({', '.join(f'{r:.3g}' for r in rates)} req/s), {REPLICATES} seeds each, "
        f"{request.load.requests_per_run} requests a run, crossing of 1 with a 95% interval"
    )
    return ServedLimit(
        rates=tuple(rates),
        speedups=tuple(float(v) for v in s["speedup"]),
        se=tuple(float(v) for v in s["speedup_se"]),
        crossing=cross,
        method=method,
    )
