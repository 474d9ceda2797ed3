"""Is a serving run stable? Overload detected from its request and iteration tables.

A queue whose arrival rate exceeds what it can serve has no steady state: its
backlog and its waits grow with the length of the run, so its p99s measure the
run, not the system, and a capped batch keeps TPOT in bounds all the while. Two
one-sided tests, each at level :data:`ALPHA`, on the second half of the run
(the requests after the median arrival, from that arrival to the last one: the
warm-up from an empty system is well behind, and nothing is measured while
the system drains after the last arrival):

1. **backlog**: are requests arriving faster than they complete? The window is
   cut into :data:`BATCHES` equal slices of time; slice ``i`` has ``a_i``
   arrivals and ``d_i`` completions, and ``x_i = a_i - d_i`` is the growth of
   the number in the system. The statistic is the batch-means t statistic of
   the mean of ``x`` (Student's t, ``BATCHES - 1`` degrees of freedom).
   Stable, ``sum x`` is the change of a stationary count, so its batch-means
   standard error overstates its spread (the slices' ``x_i`` cancel in
   telescoping) and the test is conservative; overloaded, ``x`` grows by
   ``lambda - mu`` per second whatever the slice.
2. **waits**: does the time to first token keep rising? The window's requests,
   in arrival order, are cut into :data:`BATCHES` batches; the least-squares
   slope of the batches' mean TTFT on their mean arrival time, with its
   t statistic (``BATCHES - 2`` degrees of freedom). Batch means of
   consecutive requests absorb the correlation between successive waits
   (batch means: Law and Kelton, *Simulation Modeling and Analysis*, 3rd ed.,
   section 9.5.3); a trend in them is the rising wait of an unbounded queue.

The run is ``stable = False`` when either test rejects; ``stability_reason``
gives both tests' statistics. The nominal false-alarm rate of the pair is at
most ``2 * ALPHA`` (0.02%). The level is that strict because near saturation
the batch means of TTFT stay correlated and the trend's t statistic has
heavier tails than Student's: at level 1e-3, M/D/1 runs of 4000 requests at
load 0.95 were flagged in 3 of 200 seeds; at 1e-4, none of 600 stable runs at
loads 0.8 to 0.95 was (``docs/queueing.md``, with the command). Below
``2 * BATCHES`` requests in the window there is no honest test: ``stable`` is
None, and the reason says why.

**Utilization** is the fraction of the span (first arrival to last finish) that
an accelerator is busy (its iterations' time; per replica). Under continuous
batching an accelerator is busy whenever any request is in flight, so
utilization reaches 1 well below saturation: the **offered load** beside it is
the arrival rate times the work of a request at full batch (plain decoding: one
prefill of the mean prompt, then its other output tokens at a full batch's
time per sequence; :func:`plain_work_s`) per replica, the queueing ``rho``:
below 1 a queue can be stable, above 1 it cannot (without speculation, which
serves more tokens per pass and so raises the capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsim.sim.costs.source import CostSource, iteration_cost

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ALPHA", "BATCHES", "Stability", "stability", "plain_work_s", "stability_metrics"]

ALPHA = 1e-4
"""The level of each of the two tests (one-sided)."""
BATCHES = 10
"""Slices of time (backlog test) and batches of requests (wait test) in the second half."""


@dataclass(frozen=True)
class Stability:
    """The verdict (None: too few requests to test), why, and each test's statistics: the
    arrival and completion rates over the second half and the backlog test's t statistic,
    ``ttft_slope`` (seconds of TTFT per second of arrivals) and its t (NaN untested)."""

    stable: bool | None
    reason: str
    arrival_rate_per_s: float
    completion_rate_per_s: float
    backlog_t: float
    ttft_slope: float
    ttft_slope_t: float

    @property
    def p_value(self) -> float:
        """The smaller of the two tests' one-sided p-values (1 when untested): a run is
        flagged when it is below :data:`ALPHA`."""
        if self.stable is None:
            return 1.0
        from scipy import stats  # start-up: scipy.stats costs ~0.6 s; only a test needs it

        return float(
            min(stats.t.sf(self.backlog_t, BATCHES - 1), stats.t.sf(self.ttft_slope_t, BATCHES - 2))
        )


def _t(mean: float, se: float) -> float:
    """A t statistic; a zero standard error gives +-inf (or 0 with a zero mean)."""
    if se > 0:
        return mean / se
    return 0.0 if mean == 0 else math.copysign(math.inf, mean)


def _backlog(
    arrival: NDArray[np.float64], finish: NDArray[np.float64], t0: float, t1: float, k: int
) -> tuple[float, float, float]:
    """(arrival rate, completion rate, t statistic) over ``[t0, t1)`` in ``k`` slices."""
    edges = np.linspace(t0, t1, k + 1)
    a = np.histogram(arrival, bins=edges)[0].astype(float)
    d = np.histogram(finish[np.isfinite(finish)], bins=edges)[0].astype(float)
    x = a - d
    se = float(x.std(ddof=1)) / math.sqrt(k)
    span = t1 - t0
    return float(a.sum()) / span, float(d.sum()) / span, _t(float(x.mean()), se)


def _trend(arrival: NDArray[np.float64], ttft: NDArray[np.float64], k: int) -> tuple[float, float]:
    """(slope, t statistic) of the ``k`` batch-mean TTFTs on their batch-mean arrivals."""
    m = arrival.shape[0] // k
    x = arrival[: m * k].reshape(k, m).mean(axis=1)
    y = ttft[: m * k].reshape(k, m).mean(axis=1)
    xc = x - x.mean()
    sxx = float(xc @ xc)
    if sxx <= 0:  # every batch arrived at one instant: no time for a trend
        return 0.0, 0.0
    slope = float(xc @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * xc
    se = math.sqrt(float(resid @ resid) / (k - 2) / sxx)
    return slope, _t(slope, se)


def stability(requests: pd.DataFrame, *, alpha: float = ALPHA) -> Stability:
    """The stability verdict of one serving run from its per-request table (``arrival_s``,
    ``first_token_s``, ``finish_s``; the module docstring has the tests)."""
    if not (isinstance(alpha, float) and 0 < alpha < 0.5):
        raise ValueError(f"alpha: expected a test level in (0, 0.5), got {alpha!r}")
    order = np.argsort(requests["arrival_s"].to_numpy(dtype=float), kind="stable")
    arrival = requests["arrival_s"].to_numpy(dtype=float)[order]
    first = requests["first_token_s"].to_numpy(dtype=float)[order]
    finish = requests["finish_s"].to_numpy(dtype=float)[order]
    n, k = arrival.shape[0], BATCHES
    half = n // 2
    t0, t1 = (float(arrival[half]), float(arrival[-1])) if n else (0.0, 0.0)
    if n - half < 2 * k or not t1 > t0:
        why = (
            f"{n - half} requests in the second half, at least {2 * k} needed"
            if n - half < 2 * k
            else "the second half arrives at one instant (a closed batch: no arrival rate "
            "to keep up with)"
        )
        nan = math.nan
        return Stability(None, f"not tested: {why}", nan, nan, nan, nan, nan)
    unserved = int((~np.isfinite(first)).sum())
    lam, mu, t_backlog = _backlog(arrival, finish, t0, t1, k)
    ttft = np.where(np.isfinite(first), first - arrival, math.inf)[half:]
    if unserved:
        slope, t_slope = math.inf, math.inf
    else:
        slope, t_slope = _trend(arrival[half:], ttft, k)
    from scipy import stats  # start-up: as in Stability.p_value

    crit_b = float(stats.t.isf(alpha, k - 1))
    crit_s = float(stats.t.isf(alpha, k - 2))
    found = []
    if unserved:
        found.append(f"{unserved} of {n} requests never got a first token")
    if t_backlog > crit_b:
        found.append(
            f"requests arrive faster than they complete over the second half ({lam:.4g}/s "
            f"against {mu:.4g}/s; t = {t_backlog:.3g} > {crit_b:.3g})"
        )
    if t_slope > crit_s and not unserved:
        found.append(
            f"the time to first token keeps rising ({slope:.3g} s per s of arrivals; "
            f"t = {t_slope:.3g} > {crit_s:.3g})"
        )
    if found:
        reason = "overloaded: " + "; ".join(found)
    else:
        reason = (
            f"stable: completions keep up with arrivals ({mu:.4g}/s against {lam:.4g}/s, "
            f"t = {t_backlog:.3g}) and TTFT shows no rise (t = {t_slope:.3g}), "
            f"each test at level {alpha:g}"
        )
    return Stability(not found, reason, lam, mu, t_backlog, slope, t_slope)


def plain_work_s(
    cost: CostSource,
    *,
    prompt_tokens: NDArray[np.int64],
    output_tokens: NDArray[np.int64],
    max_batch: int,
    kv_capacity_tokens: int | None,
    max_gamma: int,
) -> float:
    """Accelerator seconds per request at full batch, decoding plainly: the prefill pass of
    the mean prompt (at capacity, continuous batching admits a request as another ends,
    about one at a time), then the other output tokens, each a share ``1 / B`` of a decode
    iteration over ``B`` sequences at the mean decode context (prompt plus half the
    output). ``B``: ``max_batch``, or fewer where the KV cache (``kv_capacity_tokens``;
    None: unlimited) holds fewer mean reservations (prompt + output + ``max_gamma``)."""
    if prompt_tokens.shape[0] == 0:
        raise ValueError("workload: no requests, so no work per request")
    prompt, out = float(prompt_tokens.mean()), float(output_tokens.mean())
    b = int(max_batch)
    if kv_capacity_tokens is not None:
        b = min(b, max(1, int(kv_capacity_tokens // (prompt + out + max_gamma))))
    pre = cost.prefill(np.array([max(1, round(prompt))], dtype=np.int64), draft=False).time_s
    context = np.full(b, max(1, round(prompt + out / 2)), dtype=np.int64)
    step = iteration_cost(cost, np.zeros(b, dtype=np.int64), context).time_s
    return float(pre + max(out - 1.0, 0.0) * step / b)


def stability_metrics(
    requests: pd.DataFrame, iterations: pd.DataFrame, *, work_s: float | None
) -> dict[str, Any]:
    """The record's ``stable``, ``stability_reason``, ``utilization`` (per accelerator) and
    ``offered_load`` (None without ``work_s``, a request's work: :func:`plain_work_s`)."""
    verdict = stability(requests)
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    finish = requests["finish_s"].to_numpy(dtype=float)
    done = np.isfinite(finish)  # none finished: no span, no utilization
    span = float(finish[done].max() - arrival.min()) if done.any() else 0.0
    busy = float((iterations["end_s"] - iterations["start_s"]).sum())
    # Busy time is summed over replicas: utilization is per replica, in [0, 1].
    cols = iterations.columns
    replicas = int(iterations["replica"].nunique()) if "replica" in cols and len(iterations) else 1
    offered = None
    if work_s is not None and arrival.shape[0] > 1 and arrival.max() > arrival.min():
        rate = (arrival.shape[0] - 1) / float(arrival.max() - arrival.min())
        offered = rate * work_s / replicas
    return {
        "stable": verdict.stable,
        "stability_reason": verdict.reason,
        "utilization": busy / span / replicas if span > 0 else None,
        "offered_load": offered,
        # Over the second half (None when not tested): the backlog test's two rates.
        "arrival_rate_per_s": _number(verdict.arrival_rate_per_s),
        "completion_rate_per_s": _number(verdict.completion_rate_per_s),
    }


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None
