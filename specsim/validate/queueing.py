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
(:func:`specsim.stats.batch_means_se`), which absorbs the correlation
between successive waits. A check passes when the closed form lies within
``Z_CHECK`` (4.5) standard errors of the simulated mean, the rule of
:func:`specsim.validate.forms.check_grid`; for a pair of bounds, when neither bound
is crossed by more than that.

Rows (:func:`queueing_checks`):

- M/D/1 (fixed one-token requests: service ``step_s``) at two loads, against
  :func:`specsim.theory.queueing.md1_mean_wait`;
- M/G/1 with uniform and geometric output lengths, against the
  Pollaczek-Khinchine formula with the distributions' exact moments;
- join-the-shortest-queue (JSQ) over 2 and 3 replicas (:data:`JSQ_ROWS`),
  against the exact mean wait of :func:`specsim.theory.queueing.jsq_mean_wait`;
- M/G/1 above saturation (:data:`OVERLOAD`, ``rho = 1.2``): no steady state, so no
  mean wait to check; the row passes only when the run is flagged unstable
  (:func:`specsim.sim.results.stability.stability`) and, over the second half, completes
  requests at the server's rate ``1 / E[S]`` (within ``Z_CHECK`` batch-means
  standard errors): a saturated server works all the time.

The JSQ rows need exponential service, which passes of a fixed length cannot
give: a geometric number of them has squared coefficient of variation
``1 - 1/m``, which biases the mean wait by about ``1/(2m)`` relative (the
Pollaczek-Khinchine factor ``(1 + scv) / 2`` at one server) and makes the
engine run ``m`` passes a request. So the JSQ rows serve two-token requests on
:class:`ExponentialService`, a cost source (the engine's documented extension
point) whose prefill pass of request ``i`` takes an i.i.d. exponential
``service_s[i]`` and whose other passes take no time: each request holds its
replica for exactly that long, outstanding there until it ends, and its wait is
``first_token_s - arrival_s - service_s[i]``. What is checked is the engine's
arrivals, router, FCFS admission and replicas, against the exact chain, with no
modelling bias. The router's ``"join-shortest-queue"`` orders replicas by
requests waiting, then by outstanding ones: at one request a batch that is the
number of requests at the replica, the JSQ of the chain (ties to the lowest
index, which leaves the law of the sorted queue lengths unchanged).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import FixedGamma
from specsim.sim import PlainCost
from specsim.sim.results.stability import stability
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.serving.router import Router
from specsim.sim.workload.arrivals import PoissonArrivals
from specsim.sim.workload.workload import Fixed, Geometric, Lengths, SyntheticWorkload, Uniform
from specsim.stats import batch_means_se
from specsim.theory.queueing import jsq_mean_wait, md1_mean_wait, mg1_mean_wait
from specsim.validate.jsq import ExponentialService, jsq_waits, serve_exponential

__all__ = [
    "JSQ_ROWS",
    "OVERLOAD",
    "QUEUEING_COLUMNS",
    "WARM_UP",
    "Z_CHECK",
    "ExponentialService",
    "jsq_waits",
    "mean_wait_check",
    "overload_check",
    "queueing_checks",
    "queueing_summary",
    "serve_exponential",
    "simulate_queue",
    "waiting_times",
]

Z_CHECK = 4.5
WARM_UP = 0.05
"""Share of the requests (the first to arrive) left out of the mean wait: the warm-up."""
QUEUEING_COLUMNS = [
    "check",
    "formula",
    "load",
    "servers",
    "requests",
    "simulated",
    "se",
    "expected",
    "expected_high",
    "z",
    "pass",
    "note",
]
"""The table's columns. ``load``: per server, ``rho = lambda E[S] / servers``. ``expected``
(and ``expected_high`` for a pair of bounds, else equal to it): the closed form's mean wait
in seconds. ``z``: (simulated - expected) / se, or for bounds how far outside them in
standard errors (0 inside). ``pass``: ``|z| <= Z_CHECK``; None for a skipped row."""


def simulate_queue(
    *,
    arrival_rate: float,
    output: Lengths,
    step_s: float,
    requests: int,
    rng: np.random.Generator,
    servers: int = 1,
    router: Router = "join-shortest-queue",
) -> pd.DataFrame:
    """Serve ``requests`` Poisson arrivals one at a time per replica, without speculation, on
    :class:`PlainCost` passes of ``step_s``; returns the per-request table. ``servers > 1``
    puts that many replicas behind ``router`` (the engine's ``replicas`` and ``router``)."""
    arrivals = PoissonArrivals(rate_per_s=arrival_rate)
    workload = SyntheticWorkload(
        requests=requests, arrivals=arrivals, prompt=Fixed(value=1), output=output
    )
    config = ServingConfig(
        workload=workload,
        cost=PlainCost(c=0.0, step_s=step_s),
        acceptance=IIDAcceptance(alpha=0.0),
        policy=FixedGamma(gamma=0),
        max_batch=1,
        max_gamma=0,
        plain_twin=False,
        replicas=servers,
        router=router,
    )
    return simulate_serving(config, rng).requests_spec


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
    waits: NDArray[np.float64],
    *,
    expected: float,
    expected_high: float | None = None,
    z: float = Z_CHECK,
) -> dict[str, Any]:
    """Simulated mean wait after the warm-up, its batch-means standard error, and the verdict
    against ``expected`` (or against the interval ``[expected, expected_high]``)."""
    kept = waits[int(math.ceil(WARM_UP * waits.shape[0])) :]
    mean, se = float(kept.mean()), batch_means_se(kept)
    if se is None or se <= 0:
        raise ValueError(f"waits: {kept.shape[0]} waits are too few for a batch-means interval")
    high = expected if expected_high is None else expected_high
    gap = mean - expected if mean < expected else max(mean - high, 0.0)
    zval = gap / se
    return {
        "simulated": mean,
        "se": se,
        "expected": expected,
        "expected_high": high,
        "z": zval,
        "pass": bool(abs(zval) <= z),
    }


def _row(
    check: str,
    formula: str,
    load: float,
    servers: int,
    requests: int,
    result: dict[str, Any] | None,
    note: str = "",
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "check": check,
        "formula": formula,
        "load": load,
        "servers": servers,
        "requests": requests,
    }
    if result is None:
        out.update(
            simulated=math.nan, se=math.nan, expected=math.nan, expected_high=math.nan, z=math.nan
        )
        out["pass"] = None
    else:
        out.update(result)
    out["note"] = note
    return out


def queueing_checks(
    rng: np.random.Generator, *, quick: bool = True, z: float = Z_CHECK
) -> pd.DataFrame:
    """The queueing table (columns :data:`QUEUEING_COLUMNS`). ``quick``: about 120,000
    requests in all (about 9 s of CPU); otherwise five times as many."""
    scale = 1 if quick else 5
    rows = []
    for load in (0.5, 0.8):
        n = (20_000 if load == 0.5 else 40_000) * scale
        waits = waiting_times(
            simulate_queue(
                arrival_rate=load, output=Fixed(value=1), step_s=1.0, requests=n, rng=rng
            ),
            prefill_s=1.0,
        )
        result = mean_wait_check(waits, expected=md1_mean_wait(arrival_rate=load, service=1.0), z=z)
        rows.append(
            _row(
                "M/D/1",
                "rho s / (2 (1 - rho))",
                load,
                1,
                n,
                result,
                "one-token requests: service = one prefill pass",
            )
        )
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
        expected = mg1_mean_wait(
            arrival_rate=load, mean_service=1.0, second_moment=dist.second_moment * step * step
        )
        rows.append(
            _row(
                "M/G/1",
                "lambda E[S^2] / (2 (1 - rho))",
                load,
                1,
                n,
                mean_wait_check(waits, expected=expected, z=z),
                f"service = output tokens x step, {name}",
            )
        )
    for servers, load, n in JSQ_ROWS:
        rows.append(_jsq_row(rng, servers=servers, load=load, n=n * scale, z=z))
    load, n = OVERLOAD
    result = overload_check(rng, n=n * scale, z=z)
    note = f"M/G/1, geometric output (mean 4 tokens); {result.pop('reason')}"
    rows.append(_row("overload", "unstable; completes 1 / E[S]", load, 1, n * scale, result, note))
    return pd.DataFrame(rows, columns=QUEUEING_COLUMNS)


OVERLOAD: tuple[float, int] = (1.2, 4_000)
"""The row above saturation: (load, requests in the quick table)."""
_SLICES = 30  # the batch-means rule of batch_means_se


def overload_check(
    rng: np.random.Generator, *, n: int, load: float = OVERLOAD[0], z: float = Z_CHECK
) -> dict[str, Any]:
    """M/G/1 at ``load`` (geometric output of mean 4 tokens, ``E[S] = 1 s``): ``simulated``
    is the completion rate over the second half (requests/s), ``expected`` the server's
    rate 1/s, ``se`` by batch means over 30 slices of time; ``pass`` when the run is flagged
    unstable and ``|z| <= z``, and ``note`` gives the detector's reason."""
    dist = Geometric(mean_tokens=4.0)
    step = 1.0 / dist.mean
    req = simulate_queue(arrival_rate=load, output=dist, step_s=step, requests=n, rng=rng)
    verdict = stability(req)
    arrival = np.sort(req["arrival_s"].to_numpy())
    edges = np.linspace(arrival[n // 2], arrival[-1], _SLICES + 1)
    done = np.histogram(req["finish_s"].to_numpy(), bins=edges)[0] / np.diff(edges)
    rate, se = float(done.mean()), float(done.std(ddof=1)) / math.sqrt(_SLICES)
    zval = (rate - 1.0) / se if se > 0 else (0.0 if rate == 1.0 else math.inf)
    return {
        "simulated": rate,
        "se": se,
        "expected": 1.0,
        "expected_high": 1.0,
        "z": zval,
        "pass": bool(verdict.stable is False and abs(zval) <= z),
        "reason": verdict.reason,
    }


JSQ_ROWS: tuple[tuple[int, float, int], ...] = ((2, 0.7, 20_000), (3, 0.8, 20_000))
"""The JSQ rows: (replicas, load per replica, requests in the quick table)."""


def _jsq_row(
    rng: np.random.Generator, *, servers: int, load: float, n: int, z: float
) -> dict[str, Any]:
    rate = load * servers
    waits = jsq_waits(arrival_rate=rate, servers=servers, requests=n, rng=rng)
    expected = jsq_mean_wait(arrival_rate=rate, mean_service=1.0, servers=servers)
    return _row(
        "JSQ",
        "sorted-queue Markov chain",
        load,
        servers,
        n,
        mean_wait_check(waits, expected=expected, z=z),
        "exponential service, join-shortest-queue router",
    )


def queueing_summary(table: pd.DataFrame) -> tuple[int, int, int]:
    """(checks run, passed, skipped) of a :func:`queueing_checks` table."""
    ran = table["pass"].notna()
    return int(ran.sum()), int((table.loc[ran, "pass"] == True).sum()), int((~ran).sum())  # noqa: E712
