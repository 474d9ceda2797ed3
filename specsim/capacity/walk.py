"""The walk of a capacity search over serving runs: which run to serve next, and its rows.

A capacity search (:func:`specsim.capacity.planner.search_capacity`) is a few independent
searches, one per mode (speculative, plain: a bisection on the rate, then a walk
on the replica count) and the crossover (a bisection on the rate at which
speculation stops paying), each a chain of serving runs whose next rate depends
on the last verdict. A run is a pure function of its key (mode, rate, request
count, replicas) and the search's seed: every run draws from
``numpy.random.default_rng(seed)``, so that all rates and modes share their
random numbers (common random numbers), and nothing about it depends on which
process serves it or when. :class:`Searcher` holds the searches' logic and asks a
*source* for each run's judged result (:func:`serve_judged` in this process, or a
pool of processes: :mod:`specsim.capacity.pool`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim.capacity.judge import SLO, judge
from specsim.capacity.precision import Search
from specsim.capacity.statistics import (
    FAILS,
    HOLDS,
    UNDECIDED,
    Bracket,
    Outcome,
    bisect_rate,
    smallest_count,
)
from specsim.checks import check_int
from specsim.sim import ServingResult
from specsim.sim.config.config_compose import simulate_run

if TYPE_CHECKING:
    from specsim.sim.config.config_compose import Served

__all__ = [
    "MODES",
    "TWIN",
    "Progress",
    "RunKey",
    "Judged",
    "Source",
    "serve_replicas",
    "serve_judged",
    "Searcher",
]

MODES: tuple[str, ...] = ("speculative", "plain")
"""The two ways every workload is served: with the policy, and plain decoding."""

TWIN = "twin"
"""The run kind that serves the speculative mode and its plain twin on the same requests."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``: called after each serving run of a search."""

RunKey = tuple[str, float, int, int]
"""A serving run: (mode, rate per second, requests, replicas)."""

Judged = tuple[dict[str, Any], float]
"""A run's verdict (:func:`specsim.capacity.judge.judge`) and its mean gamma."""

Source = Callable[[str, float, int, int], dict[RunKey, Judged]]
"""``source(kind, rate, requests, replicas)``: the judged runs of a mode (or :data:`TWIN`)."""


def serve_replicas(
    config: Served,
    *,
    rate_per_s: float,
    requests: int,
    replicas: int,
    seed: int,
    plain: bool = False,
) -> ServingResult:
    """Serve ``rate_per_s`` requests/s and ``requests`` requests in total on ``replicas``
    replicas of ``config`` behind its router (``config.router``); the verdict pools
    every request. Every call draws from ``default_rng(seed)``.

    The workload is ``config.workload`` at that rate (its ``with_rate``: a Poisson,
    synthetic or preset workload). A random split would give every replica
    a Poisson stream at ``rate_per_s / replicas`` (the splitting property), so one
    replica's run at that share; a router that balances load (round-robin,
    join-shortest-queue) only does better, which the search uses: a count whose
    share one replica is shown to sustain is not served again.

    ``plain``: the same requests without speculation (a chain config at gamma 0, a tree
    config's plain twin alone: :func:`specsim.sim.config.config_compose.simulate_run`).
    """
    check_int(replicas, name="replicas", minimum=1)
    workload = config.workload
    with_rate = getattr(workload, "with_rate", None)
    if with_rate is None or not hasattr(workload, "requests"):
        raise TypeError(
            f"workload: a capacity search varies the rate and the request count; "
            f"{type(workload).__name__} has no with_rate or requests"
        )
    stream = dataclasses.replace(with_rate(rate_per_s), requests=requests)
    return simulate_run(  # chains or token trees (specsim.sim.config.config_compose)
        dataclasses.replace(config, workload=stream, replicas=replicas),
        np.random.default_rng(seed),
        plain=plain,
    )


def _mean_gamma(res: ServingResult) -> float:
    it = res.events()
    return float(it["draft_tokens"].sum() / max(int(it["batch"].sum()), 1))


def serve_judged(
    config: Served,
    kind: str,
    rate: float,
    n: int,
    replicas: int,
    *,
    slo: SLO,
    search: Search,
    seed: int,
) -> dict[RunKey, Judged]:
    """Serve one run (``kind``: a mode of :data:`MODES`, or :data:`TWIN` for the speculative
    mode and its plain twin in one run, whose results equal the two served apart) and
    judge it; keyed by :data:`RunKey`."""
    twin = kind == TWIN
    mode = "speculative" if twin else kind
    res = serve_replicas(
        dataclasses.replace(config, plain_twin=twin),
        plain=mode != "speculative",
        rate_per_s=rate,
        requests=n,
        replicas=replicas,
        seed=seed,
    )
    kw: dict[str, Any] = {
        "confidence": search.confidence,
        "batches": search.batches,
        "warmup": search.warmup,
    }
    out = {(mode, rate, n, replicas): (judge(res.requests(), slo, **kw), _mean_gamma(res))}
    if twin:
        if res.requests_plain is None:  # a policy that declares gamma 0
            raise ValueError("policy: a crossover needs a speculative policy")
        out[("plain", rate, n, replicas)] = (judge(res.requests_plain, slo, **kw), 0.0)
    return out


def _bracket_row(b: Bracket) -> dict[str, Any]:
    return {
        "rate_low": b.low,
        "rate_high": b.high,
        "first_failing_rate": b.first_fail,
        "status": b.status,
        "precision_reached": b.precision,
        "probes": b.probes,
    }


class Searcher:
    """One configuration's searches, sharing their rows, run counter, progress and runs:
    the crossover reuses the capacity searches' runs at the rates they share (a plain-mode
    run equals the speculative run's plain twin: the same requests, drawn the same way).
    ``source`` serves and judges a run (:data:`Source`)."""

    def __init__(
        self,
        source: Source,
        *,
        search: Search,
        base: dict[str, Any],
        progress: Progress | None,
        budget: int,
    ) -> None:
        self.source, self.search, self.base, self.progress = source, search, base, progress
        self.rows: list[dict[str, Any]] = []
        self.runs: dict[RunKey, dict[str, Any]] = {}
        self.done, self.total = 0, budget

    def record(self, key: RunKey, kind: str, judged: Judged) -> None:
        mode, rate, _, replicas = key
        row, mean_gamma = judged
        full = {
            **self.base,
            "kind": "probe",
            "search": kind,
            "mode": mode,
            "run": self.done,
            "rate_per_s": rate,
            "replicas": replicas,
            "rate_per_replica": rate / replicas,
            **row,
            "meets_slo": row["outcome"] == HOLDS,
            "mean_gamma": mean_gamma,
        }
        self.rows.append(full)
        self.runs[key] = full

    def tick(self, label: str, left: int) -> None:
        self.done += 1
        self.total = max(self.done, min(self.total, self.done + left))
        if self.progress is not None:
            self.progress(self.done, self.total, f"{self.base['hardware']} {label}")

    def served(
        self, mode: str, rate: float, n: int, *, replicas: int, kind: str, left: int
    ) -> dict[str, Any]:
        """The judged run of ``mode`` at ``rate`` with ``n`` requests (served if new)."""
        key = (mode, rate, n, replicas)
        if key not in self.runs:
            self.record(key, kind, self.source(mode, rate, n, replicas)[key])
            self.tick(f"{kind} {mode} {rate:.3g}/s, {n} requests", left)
        return self.runs[key]

    def probe(self, mode: str, rate: float, *, replicas: int, kind: str, left: int) -> Outcome:
        """Serve ``mode`` at ``rate`` on ``replicas``, with more requests while undecided
        (in all: each replica serves at least ``Search.requests``, as long as a one-replica
        probe, and the pooled count follows ``Search.sizes``)."""
        outcome: Outcome = UNDECIDED
        for n in sorted({max(n, self.search.requests * replicas) for n in self.search.sizes}):
            outcome = self.served(mode, rate, n, replicas=replicas, kind=kind, left=left)["outcome"]
            if outcome != UNDECIDED:
                break
        return outcome

    def probe_replicas(
        self, mode: str, rate: float, replicas: int, *, known: Bracket, left: int
    ) -> Outcome:
        """``replicas`` at ``rate`` in total; a share at most the bracket's low end holds
        (the router does at least as well as a random split) without another run."""
        if rate / replicas <= known.low:
            return HOLDS
        return self.probe(mode, rate, replicas=replicas, kind="replicas", left=left)

    def pays(self, rate: float, left: int) -> Outcome:
        """Speculation beats plain decoding on p99 TPOT at ``rate`` (the same requests):
        holds when the intervals do not overlap that way, fails when they do not overlap
        the other way, else undecided (with more requests, up to the limit)."""
        outcome: Outcome = UNDECIDED
        for n in self.search.sizes:
            keys = [(m, rate, n, 1) for m in MODES]
            if not any(k in self.runs for k in keys):
                judged = self.source(TWIN, rate, n, 1)
                for k in keys:
                    self.record(k, "crossover", judged[k])
                self.tick(f"crossover {rate:.3g}/s, {n} requests", left)
            spec, plain = (
                self.served(m, rate, n, replicas=1, kind="crossover", left=left) for m in MODES
            )
            outcome = (
                HOLDS
                if spec["tpot_p99_high_s"] < plain["tpot_p99_low_s"]
                else FAILS
                if spec["tpot_p99_low_s"] > plain["tpot_p99_high_s"]
                else UNDECIDED
            )
            if outcome != UNDECIDED:
                break
        return outcome

    def capacity(self, mode: str, *, rate_per_s: float, left: int) -> dict[str, Any]:
        """``mode``'s answer row: the bisection on one replica's rate, then the replicas
        for ``rate_per_s`` (:func:`specsim.capacity.planner.search_capacity`)."""
        search, tp = self.search, int(self.base["tensor_parallel"])
        b = bisect_rate(
            partial(self.probe, mode, replicas=1, kind="capacity", left=left),
            rate_min=search.rate_min,
            rate_max=search.rate_max,
            precision=search.precision,
        )
        ans: dict[str, Any] = {
            **self.base,
            "kind": "answer",
            "mode": mode,
            "rate_per_s": rate_per_s,
            "max_rate_per_replica": b.low,
            **_bracket_row(b),
            "rate_per_accelerator": b.low / tp,
        }
        if b.low > 0:
            limit = 4 * math.ceil(rate_per_s / b.low) + 4
            walk = partial(self.probe_replicas, mode, rate_per_s, known=b, left=left)
            n, low = smallest_count(walk, start=math.ceil(rate_per_s / b.low), limit=limit)
            ans.update(
                replicas=n,
                replicas_status="decided" if low == n else "undecided",
                accelerators=n * tp,
                accelerators_low=low * tp,
            )
        return ans

    def crossover(self, *, left: int) -> dict[str, Any]:
        """The crossover's row: the largest rate at which speculation is shown to pay."""
        search = self.search
        c = bisect_rate(
            partial(self.pays, left=left),
            rate_min=search.rate_min,
            rate_max=search.rate_max,
            precision=search.crossover_precision,
        )
        return {
            **self.base,
            "kind": "crossover",
            "mode": "speculative vs plain",
            "crossover_rate": c.low,
            **_bracket_row(c),
        }
