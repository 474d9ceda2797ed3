"""The serving simulator against queueing theory: mean waits of M/D/1, M/G/1 and JSQ.

With one sequence a batch (``max_batch = 1``), no speculation (``gamma = 0``),
the closed forms' cost source (:class:`specsim.sim.PlainCost`: every pass,
the prefill included, takes ``step_s``) and Poisson arrivals, the serving
engine is a single-server first-come-first-served queue whose service time is
``output_tokens * step_s``: the prefill pass emits the first token and each
decode pass one more. A request's **wait** is the time from its arrival to the
start of its service, read from the per-request table as

    wait = first_token_s - arrival_s - step_s

(its time to first token less the one prefill pass that produced that token).
The first 5% of requests (by arrival) are dropped as warm-up from an empty
system; the standard error of the mean wait is by 30 batch means of the rest
(:func:`specsim.sim.records.batch_means_se`), which absorbs the correlation
between successive waits. A check passes when the closed form lies within
``Z_CHECK`` (4.5) standard errors of the simulated mean, the rule of
:func:`specsim.validate.check_grid`; for a pair of bounds, when neither bound
is crossed by more than that.

Rows (:func:`queueing_checks`):

- M/D/1 (fixed one-token requests: service ``step_s``) at two loads, against
  :func:`specsim.theory.queueing.md1_mean_wait`;
- M/G/1 with uniform and geometric output lengths, against the
  Pollaczek-Khinchine formula with the distributions' exact moments;
- join-the-shortest-queue over 2 replicas with near-exponential service
  (geometric lengths of mean 16: squared coefficient of variation 15/16),
  between the M/M/k and random-routing bounds. It needs the serving engine's
  ``replicas`` and ``router`` fields; without them the row says so and is skipped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim.acceptance import IIDAcceptance
from specsim.policies import FixedGamma
from specsim.sim import PlainCost
from specsim.sim.arrivals import PoissonArrivals
from specsim.sim.records import batch_means_se
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.workload import Fixed, Geometric, Lengths, SyntheticWorkload, Uniform
from specsim.theory.queueing import jsq_mean_wait_bounds, md1_mean_wait, mg1_mean_wait

__all__ = [
    "QUEUEING_COLUMNS", "WARM_UP", "Z_CHECK", "mean_wait_check", "queueing_checks",
    "queueing_summary", "simulate_queue", "waiting_times",
]  # fmt: skip

Z_CHECK = 4.5
WARM_UP = 0.05
"""Share of the requests (the first to arrive) left out of the mean wait: the warm-up."""
QUEUEING_COLUMNS = [
    "check", "formula", "load", "servers", "requests", "simulated", "se", "expected",
    "expected_high", "z", "pass", "note",
]  # fmt: skip
"""The table's columns. ``load``: per server, ``rho = lambda E[S] / servers``. ``expected``
(and ``expected_high`` for a pair of bounds, else equal to it): the closed form's mean wait
in seconds. ``z``: (simulated - expected) / se, or for bounds how far outside them in
standard errors (0 inside). ``pass``: ``|z| <= Z_CHECK``; None for a skipped row."""


def _engine_has_replicas() -> bool:
    return {"replicas", "router"} <= {f.name for f in dataclasses.fields(ServingConfig)}


def simulate_queue(*, arrival_rate: float, output: Lengths, step_s: float, requests: int,
                   rng: np.random.Generator, servers: int = 1,
                   router: str = "join-shortest-queue") -> pd.DataFrame:  # fmt: skip
    """Serve ``requests`` Poisson arrivals one at a time per replica, without speculation, on
    :class:`PlainCost` passes of ``step_s``; returns the per-request table. ``servers > 1``
    puts that many replicas behind ``router`` (the engine's ``replicas`` and ``router``)."""
    arrivals = PoissonArrivals(rate_per_s=arrival_rate)
    workload = SyntheticWorkload(requests=requests, arrivals=arrivals, prompt=Fixed(value=1),
                                 output=output)  # fmt: skip
    fields: dict[str, Any] = dict(
        workload=workload, cost=PlainCost(c=0.0, step_s=step_s),
        acceptance=IIDAcceptance(alpha=0.0), policy=FixedGamma(gamma=0), max_batch=1,
        max_gamma=0, plain_twin=False,
    )  # fmt: skip
    if servers != 1:
        if not _engine_has_replicas():
            raise ValueError("servers: the serving engine has no replicas field to serve on")
        fields.update(replicas=servers, router=router)
    return simulate_serving(ServingConfig(**fields), rng).requests_spec


def waiting_times(requests: pd.DataFrame, *, prefill_s: float) -> NDArray[np.float64]:
    """Each request's wait for service, in arrival order: ``first_token_s - arrival_s -
    prefill_s``, the time to first token less the prefill pass that emitted the token."""
    table = requests.sort_values("arrival_s", kind="stable")
    wait = (table["first_token_s"] - table["arrival_s"]).to_numpy() - prefill_s
    if not np.all(np.isfinite(wait)):
        raise ValueError("requests: a request has no first token (the run did not finish it)")
    # A wait is >= 0; float rounding of the clock leaves at most a few ulps below.
    return np.maximum(wait, 0.0)


def mean_wait_check(
    waits: NDArray[np.float64], *, expected: float, expected_high: float | None = None,
    z: float = Z_CHECK,
) -> dict[str, Any]:  # fmt: skip
    """Simulated mean wait after the warm-up, its batch-means standard error, and the verdict
    against ``expected`` (or against the interval ``[expected, expected_high]``)."""
    kept = waits[int(math.ceil(WARM_UP * waits.shape[0])) :]
    mean, se = float(kept.mean()), batch_means_se(kept)
    if se is None or se <= 0:
        raise ValueError(f"waits: {kept.shape[0]} waits are too few for a batch-means interval")
    high = expected if expected_high is None else expected_high
    gap = mean - expected if mean < expected else max(mean - high, 0.0)
    zval = gap / se
    return {"simulated": mean, "se": se, "expected": expected, "expected_high": high,
            "z": zval, "pass": bool(abs(zval) <= z)}  # fmt: skip


def _row(check: str, formula: str, load: float, servers: int, requests: int,
         result: dict[str, Any] | None, note: str = "") -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {"check": check, "formula": formula, "load": load, "servers": servers,
                           "requests": requests}  # fmt: skip
    if result is None:
        out.update(simulated=math.nan, se=math.nan, expected=math.nan, expected_high=math.nan,
                   z=math.nan)  # fmt: skip
        out["pass"] = None
    else:
        out.update(result)
    out["note"] = note
    return out


def queueing_checks(rng: np.random.Generator, *, quick: bool = True,
                    z: float = Z_CHECK) -> pd.DataFrame:  # fmt: skip
    """The queueing table (columns :data:`QUEUEING_COLUMNS`). ``quick``: about 40,000
    requests in all (a few seconds); otherwise five times as many."""
    scale = 1 if quick else 5
    rows = []
    for load in (0.5, 0.8):
        n = (20_000 if load == 0.5 else 40_000) * scale
        waits = waiting_times(
            simulate_queue(arrival_rate=load, output=Fixed(value=1), step_s=1.0, requests=n,
                           rng=rng), prefill_s=1.0)  # fmt: skip
        result = mean_wait_check(waits, expected=md1_mean_wait(arrival_rate=load, service=1.0),
                                 z=z)  # fmt: skip
        rows.append(_row("M/D/1", "rho s / (2 (1 - rho))", load, 1, n, result,
                         "one-token requests: service = one prefill pass"))  # fmt: skip
    dists: tuple[tuple[str, Lengths], ...] = (
        ("uniform 1..9 tokens", Uniform(low=1, high=9)),
        ("geometric, mean 4 tokens", Geometric(mean_tokens=4.0)),
    )
    for name, dist in dists:
        load, n = 0.6, 8_000 * scale
        step = 1.0 / dist.mean  # E[S] = 1 s
        waits = waiting_times(
            simulate_queue(arrival_rate=load, output=dist, step_s=step, requests=n, rng=rng),
            prefill_s=step,
        )
        expected = mg1_mean_wait(arrival_rate=load, mean_service=1.0,
                                 second_moment=dist.second_moment * step * step)  # fmt: skip
        rows.append(_row("M/G/1", "lambda E[S^2] / (2 (1 - rho))", load, 1, n,
                         mean_wait_check(waits, expected=expected, z=z),
                         f"service = output tokens x step, {name}"))  # fmt: skip
    rows.append(_jsq_row(rng, n=3_000 * scale, z=z))
    return pd.DataFrame(rows, columns=QUEUEING_COLUMNS)


def _jsq_row(rng: np.random.Generator, *, n: int, z: float) -> dict[str, Any]:
    servers, load = 2, 0.7
    formula = "M/M/k <= W <= M/M/1 at lambda/k"
    if not _engine_has_replicas():
        return _row("JSQ, M/M/k bounds", formula, load, servers, n, None,
                    "skipped: ServingConfig has no replicas and router fields yet (the "
                    "replicas of issue 17)")  # fmt: skip
    dist = Geometric(mean_tokens=16.0)
    step = 1.0 / dist.mean
    rate = load * servers
    waits = waiting_times(
        simulate_queue(arrival_rate=rate, output=dist, step_s=step, requests=n, rng=rng,
                       servers=servers, router="join-shortest-queue"), prefill_s=step)  # fmt: skip
    low, high = jsq_mean_wait_bounds(arrival_rate=rate, mean_service=1.0, servers=servers)
    return _row("JSQ, M/M/k bounds", formula, load, servers, n,
                mean_wait_check(waits, expected=low, expected_high=high, z=z),
                "geometric lengths, mean 16 (near-exponential service)")  # fmt: skip


def queueing_summary(table: pd.DataFrame) -> tuple[int, int, int]:
    """(checks run, passed, skipped) of a :func:`queueing_checks` table."""
    ran = table["pass"].notna()
    return int(ran.sum()), int((table.loc[ran, "pass"] == True).sum()), int((~ran).sum())  # noqa: E712
