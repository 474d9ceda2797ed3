"""The verdict on one serving run: does it meet an :class:`SLO`, and is it stable?

A capacity search (:mod:`specsim.capacity.planner`) probes rates and asks of each run
:func:`judge`: the p99s of TPOT and TTFT against their targets, from the
intervals of :mod:`specsim.capacity.statistics`, and the run's stability
(:func:`specsim.sim.results.stability.stability`): a run whose queue grows without bound
fails whatever its p99s, which then measure the run's length, not the system.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsim.capacity.statistics import (
    FAILS,
    HOLDS,
    UNDECIDED,
    Outcome,
    combine,
    verdict,
)
from specsim.sim.results.stability import stability
from specsim.stats import proportion_interval, quantile_interval

__all__ = ["SLO", "SUSPECT", "judge"]

SUSPECT = 0.01
"""A run not shown unstable (:data:`specsim.sim.results.stability.ALPHA`) but whose smaller
stability p-value is below this is ``undecided``: served again with more requests, and
never counted as holding on that evidence. The tests' power grows as the square root of
the requests (an overload by a fraction ``d`` moves the backlog by about ``d * sqrt(n / 2)``
standard errors over the second half's ``n / 2``), so a search cannot tell a rate within
about ``3 / sqrt(n / 2)`` (15% at 800 requests) of the capacity from it without this."""


@dataclass(frozen=True, kw_only=True)
class SLO:
    """A latency objective on the 99th percentiles of TPOT and TTFT, in seconds.

    ``goodput_fraction``: also require at least this fraction of requests to
    meet both targets themselves (goodput over the arrival rate; DistServe's
    "SLO attainment", Zhong et al., OSDI 2024, section 2); None: no such target.
    """

    tpot_p99_s: float
    ttft_p99_s: float
    goodput_fraction: float | None = None

    def __post_init__(self) -> None:
        for name in ("tpot_p99_s", "ttft_p99_s"):
            v = getattr(self, name)
            if not (isinstance(v, float | int) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: expected a finite time > 0, got {v!r}")
        g = self.goodput_fraction
        if g is not None and not (isinstance(g, float | int) and 0 < g <= 1):
            raise ValueError(f"goodput_fraction: expected a fraction in (0, 1], got {g!r}")


def judge(
    requests: pd.DataFrame,
    slo: SLO,
    *,
    confidence: float = 0.95,
    batches: int | None = 20,
    warmup: float = 0.05,
) -> dict[str, Any]:
    """Whether one run's requests meet the SLO, with the intervals that decide it.

    ``requests``: the per-request table of a serving run (``arrival_s``,
    ``first_token_s``, ``finish_s``, ``output_tokens``). TPOT is over requests of
    more than one token; a one-token request meets any TPOT target. Returns the
    p99s and their intervals (:func:`specsim.stats.quantile_interval`
    with ``batches`` over the requests in arrival order; the binomial interval alone
    below two requests a batch),
    the fraction of requests meeting both targets and its interval, goodput
    (those requests per second of the run), ``stable`` and ``stability_reason``
    (:func:`specsim.sim.results.stability.stability`, on all the requests) and ``outcome``:
    ``fails`` when the run is shown unstable or one interval misses entirely,
    ``holds`` when every interval meets its target and neither stability test comes
    near rejecting (p-value at least :data:`SUSPECT`), else ``undecided`` (also when
    too few requests to test stability).

    Warm-up: a run starts empty, so its first requests wait less than in the steady
    state. The first ``ceil(warmup * n)`` of the ``n`` requests by arrival (5% by
    default, the rule of :mod:`specsim.validate.queueing`) are left out of everything
    above (the p99s, goodput and throughput, over the time from the first kept arrival
    to the last kept finish); ``requests`` counts them all, ``warmup_requests`` those
    left out.
    """
    if isinstance(warmup, bool) or not isinstance(warmup, float | int) or not 0 <= warmup < 1:
        raise ValueError(f"warmup: expected a share of the requests in [0, 1), got {warmup!r}")
    total = len(requests)
    skip = math.ceil(warmup * total)
    if total - skip < 1:
        raise ValueError(f"requests: {total} requests leave none after the warm-up ({warmup})")
    order = np.argsort(requests["arrival_s"].to_numpy(dtype=float), kind="stable")[skip:]
    arrival = requests["arrival_s"].to_numpy(dtype=float)[order]
    first = requests["first_token_s"].to_numpy(dtype=float)[order]
    finish = requests["finish_s"].to_numpy(dtype=float)[order]
    out_len = requests["output_tokens"].to_numpy()[order]
    ttft = first - arrival
    multi = out_len > 1
    tpot_all = np.where(multi, (finish - first) / np.maximum(out_len - 1, 1), 0.0)
    tpot = tpot_all[multi]
    good = int(((ttft <= slo.ttft_p99_s) & (tpot_all <= slo.tpot_p99_s)).sum())
    n = ttft.shape[0]
    row: dict[str, Any] = {"requests": total, "warmup_requests": skip}
    outcomes: list[Outcome] = []
    for name, x, target in (("ttft", ttft, slo.ttft_p99_s), ("tpot", tpot, slo.tpot_p99_s)):
        if x.shape[0] == 0:  # no multi-token request: no TPOT to miss
            row.update({f"{name}_p99_s": 0.0, f"{name}_p99_low_s": 0.0, f"{name}_p99_high_s": 0.0})
            continue
        k = None if batches is None or x.shape[0] < 2 * batches else batches
        interval = quantile_interval(x, 0.99, confidence=confidence, batches=k, reference=target)
        row[f"{name}_p99_s"] = float(np.percentile(x, 99))
        row[f"{name}_p99_low_s"], row[f"{name}_p99_high_s"] = interval
        outcomes.append(verdict(interval, target))
    steady = stability(requests)
    outcomes.append(
        FAILS
        if steady.stable is False
        else UNDECIDED
        if steady.p_value < SUSPECT  # also None: untested, p = 1
        else HOLDS
    )
    frac = proportion_interval(good, n, confidence=confidence)
    if slo.goodput_fraction is not None:
        outcomes.append(verdict(frac, slo.goodput_fraction, at_most=False))
    span = float(finish.max() - arrival.min())
    row.update(
        goodput_fraction=good / n,
        goodput_fraction_low=frac[0],
        goodput_fraction_high=frac[1],
        goodput_per_s=good / span if span > 0 else 0.0,
        throughput_tokens_per_s=float(out_len.sum()) / span if span > 0 else 0.0,
        stable=steady.stable,
        stability_p_value=steady.p_value,
        stability_reason=steady.reason,
        outcome=combine(outcomes),
    )
    return row
