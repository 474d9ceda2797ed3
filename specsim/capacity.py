"""Capacity planning: the largest request rate a replica sustains at an SLO, to a stated precision.

1. :func:`specsim.capacity_search.judge`: whether one serving run meets an
   :class:`SLO` (p99 TPOT and TTFT, optionally a goodput fraction), from
   confidence intervals: ``holds``, ``fails`` or ``undecided``; an undecided run
   is served again with twice the requests, up to ``Search.max_requests``, and
   if still undecided reported as such, never silently a pass or a fail;
2. :func:`search_capacity`: per mode (the policy, and plain decoding), the
   largest rate one replica sustains, by bisection on the log scale to
   ``Search.precision`` (2% by default); the fewest replicas that meet
   ``rate_per_s`` (:func:`serve_replicas`); and the crossover, the largest rate
   at which the speculative p99 TPOT is shown below plain decoding's on the same
   requests (above it speculation stops paying);
3. :func:`smallest_deployment`: the tensor-parallel size and replica count with
   the fewest accelerators for ``rate_per_s``.

Every serving run draws from ``numpy.random.default_rng(seed)`` (common random
numbers across rates and modes; the same seed gives the same answer) and is
reported to ``progress(done, total, label)`` (given, or set around a study with
:func:`reporting`); ``total`` is an upper bound that only falls, exact at the end.
Assumptions: the limit is monotone in the rate; a run starts empty; the
intervals' coverage under queueing correlation is approximate
(:func:`specsim.capacity_search.quantile_interval`, ``docs/capacity.md``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from specsim.capacity_search import (
    FAILS,
    HOLDS,
    SLO,
    UNDECIDED,
    Bracket,
    Outcome,
    bisect_rate,
    judge,
    smallest_count,
)
from specsim.policies import FixedGamma, fixed_gamma
from specsim.sim import ServingConfig, ServingResult, simulate_serving

__all__ = [
    "TP_SIZES", "MODES", "SLO", "Search", "Progress", "smallest_tp", "kv_capacity", "reporting",
    "judge", "serve_replicas", "search_capacity", "smallest_deployment",
]  # fmt: skip

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``: called after each serving run of a search."""

# Studies call search_capacity with their own arguments; a caller that runs a whole study
# (specsim study capacity) hands its progress callback down through this variable.
_PROGRESS: ContextVar[Progress | None] = ContextVar("capacity_progress", default=None)

TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)
"""The tensor-parallel sizes tried, smallest first."""

MODES: tuple[str, ...] = ("speculative", "plain")
"""The two ways every workload is served: with the policy, and plain decoding."""


@dataclass(frozen=True, kw_only=True)
class Search:
    """How precisely a capacity search answers: rates from ``rate_min`` to ``rate_max``
    (requests/s per replica) bisected to ``precision`` (relative); ``requests`` per
    run, doubled while undecided, up to ``max_requests``; intervals at ``confidence``,
    widened for the correlation between requests by ``batches`` batch means (None:
    the independent binomial interval; :func:`specsim.capacity_search.quantile_interval`).
    The crossover is bisected to ``crossover_precision`` (coarser by default: near it
    the modes' p99 TPOTs differ little, its probes take the most requests, and at 2%
    it served about a third of a search's requests)."""

    rate_min: float = 0.5
    rate_max: float = 32.0
    precision: float = 0.02
    requests: int = 800
    max_requests: int = 3200
    confidence: float = 0.95
    batches: int | None = 20
    crossover_precision: float = 0.05

    def __post_init__(self) -> None:
        for name in ("rate_min", "rate_max", "precision", "crossover_precision"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, float | int) or not 0 < v < math.inf:
                raise ValueError(f"{name}: expected a finite number > 0, got {v!r}")
        if self.rate_min >= self.rate_max:
            raise ValueError(f"rate_min: {self.rate_min} must be below rate_max {self.rate_max}")
        for name in ("requests", "max_requests"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
        if self.max_requests < self.requests:
            raise ValueError(f"max_requests: {self.max_requests} is below {self.requests}")
        if not (isinstance(self.confidence, float) and 0 < self.confidence < 1):
            raise ValueError(f"confidence: expected a number in (0, 1), got {self.confidence!r}")
        b = self.batches
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or not
                              2 <= b <= self.requests):  # fmt: skip
            raise ValueError(f"batches: expected None or an integer from 2 to requests "
                             f"({self.requests}), got {b!r}")  # fmt: skip

    @property
    def sizes(self) -> tuple[int, ...]:
        """The request counts a run may take: ``requests``, doubled, up to ``max_requests``."""
        out = [self.requests]
        while out[-1] < self.max_requests:
            out.append(min(2 * out[-1], self.max_requests))
        return tuple(out)

    @property
    def bisections(self) -> int:
        """An upper bound on the probes of one bisection (both ends and the midpoints)."""
        span = math.log(self.rate_max / self.rate_min) / math.log1p(self.precision)
        return 2 + max(0, math.ceil(math.log2(span)))


def smallest_tp(fits: Callable[[int], bool], *, where: str, what: str, hardware: str) -> int:
    """The smallest size in :data:`TP_SIZES` for which ``fits(tp)`` holds.

    Raises ValueError starting with ``where`` and naming ``what`` (the models and
    whatever else must fit) and the ``hardware`` when not even the largest size fits.
    """
    for tp in TP_SIZES:
        if fits(tp):
            return tp
    raise ValueError(f"{where}: {what} do not fit on {TP_SIZES[-1]} x {hardware}")


def kv_capacity(config: ServingConfig) -> int:
    """The KV-cache budget of a serving config in tokens (0 when the weights leave no room)."""
    try:
        return config.kv_capacity() or 0
    except ValueError:
        return 0


@contextlib.contextmanager
def reporting(progress: Progress | None) -> Iterator[None]:
    """Within the block, :func:`search_capacity` calls given no ``progress`` report to
    this one (a study that searches does not need to pass it on)."""
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def serve_replicas(
    config: ServingConfig, *, rate_per_s: float, requests: int, replicas: int, seed: int
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
    """
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas: expected an integer >= 1, got {replicas!r}")
    workload = config.workload
    with_rate = getattr(workload, "with_rate", None)
    if with_rate is None or not hasattr(workload, "requests"):
        raise TypeError(f"workload: a capacity search varies the rate and the request count; "
                        f"{type(workload).__name__} has no with_rate or requests")  # fmt: skip
    stream = dataclasses.replace(with_rate(rate_per_s), requests=requests)
    return simulate_serving(dataclasses.replace(config, workload=stream, replicas=replicas),
                            np.random.default_rng(seed))  # fmt: skip


class _Searcher:
    """One configuration's searches, sharing its rows, its run counter, its progress and
    its runs: a run is a function of (mode, rate, requests, replicas) and the seed, so the
    crossover reuses the capacity searches' runs at the rates they share (a plain-mode run
    equals the speculative run's plain twin: the same requests, drawn the same way)."""

    def __init__(self, config: ServingConfig, *, slo: SLO, search: Search, seed: int,
                 base: dict[str, Any], progress: Progress | None, budget: int) -> None:  # fmt: skip
        self.config, self.slo, self.search, self.seed = config, slo, search, seed
        self.base, self.progress = base, progress
        self.rows: list[dict[str, Any]] = []
        self.runs: dict[tuple[str, float, int, int], dict[str, Any]] = {}
        self.done, self.total = 0, budget

    def mode_config(self, mode: str, *, twin: bool = False) -> ServingConfig:
        policy = self.config.policy if mode == "speculative" else FixedGamma(gamma=0)
        return dataclasses.replace(self.config, policy=policy, plain_twin=twin)

    def record(self, mode: str, rate: float, n: int, replicas: int, kind: str,
               requests: pd.DataFrame, mean_gamma: float) -> dict[str, Any]:  # fmt: skip
        row = judge(requests, self.slo, confidence=self.search.confidence,
                    batches=self.search.batches)  # fmt: skip
        full = {**self.base, "kind": "probe", "search": kind, "mode": mode, "run": self.done,
                "rate_per_s": rate, "replicas": replicas, "rate_per_replica": rate / replicas,
                **row, "meets_slo": row["outcome"] == HOLDS,
                "mean_gamma": mean_gamma}  # fmt: skip
        self.rows.append(full)
        self.runs[(mode, rate, n, replicas)] = full
        return full

    def tick(self, label: str, left: int) -> None:
        self.done += 1
        self.total = max(self.done, min(self.total, self.done + left))
        if self.progress is not None:
            self.progress(self.done, self.total, f"{self.base['hardware']} {label}")

    def served(self, mode: str, rate: float, n: int, *, replicas: int, kind: str,
               left: int) -> dict[str, Any]:  # fmt: skip
        """The judged run of ``mode`` at ``rate`` with ``n`` requests (served if new)."""
        key = (mode, rate, n, replicas)
        if key not in self.runs:
            res = serve_replicas(self.mode_config(mode), rate_per_s=rate, requests=n,
                                 replicas=replicas, seed=self.seed)  # fmt: skip
            self.record(mode, rate, n, replicas, kind, res.requests(), _mean_gamma(res))
            self.tick(f"{kind} {mode} {rate:.3g}/s, {n} requests", left)
        return self.runs[key]

    def probe(self, mode: str, rate: float, *, replicas: int, kind: str, left: int) -> Outcome:
        """Serve ``mode`` at ``rate`` on ``replicas``, with more requests while undecided
        (in all: each replica serves at least ``Search.requests``, as long as a one-replica
        probe, and the pooled count follows ``Search.sizes``)."""
        outcome: Outcome = UNDECIDED
        for n in sorted({max(n, self.search.requests * replicas) for n in self.search.sizes}):
            outcome = self.served(mode, rate, n, replicas=replicas, kind=kind,
                                  left=left)["outcome"]  # fmt: skip
            if outcome != UNDECIDED:
                break
        return outcome

    def probe_replicas(self, mode: str, rate: float, replicas: int, *, known: Bracket,
                       left: int) -> Outcome:  # fmt: skip
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
            if ("speculative", rate, n, 1) not in self.runs and ("plain", rate, n, 1) not in \
                    self.runs:  # fmt: skip
                res = serve_replicas(self.mode_config("speculative", twin=True),
                                     rate_per_s=rate, requests=n, replicas=1,
                                     seed=self.seed)  # fmt: skip
                if res.requests_plain is None:  # a policy that declares gamma 0
                    raise ValueError("policy: a crossover needs a speculative policy")
                self.record("speculative", rate, n, 1, "crossover", res.requests(),
                            _mean_gamma(res))  # fmt: skip
                self.record("plain", rate, n, 1, "crossover", res.requests_plain, 0.0)
                self.tick(f"crossover {rate:.3g}/s, {n} requests", left)
            spec, plain = (self.served(m, rate, n, replicas=1, kind="crossover", left=left)
                           for m in MODES)  # fmt: skip
            outcome = (HOLDS if spec["tpot_p99_high_s"] < plain["tpot_p99_low_s"] else
                       FAILS if spec["tpot_p99_low_s"] > plain["tpot_p99_high_s"] else
                       UNDECIDED)  # fmt: skip
            if outcome != UNDECIDED:
                break
        return outcome


def _mean_gamma(res: ServingResult) -> float:
    it = res.events()
    return float(it["draft_tokens"].sum() / max(int(it["batch"].sum()), 1))


def _bracket_row(b: Bracket) -> dict[str, Any]:
    return {"rate_low": b.low, "rate_high": b.high, "first_failing_rate": b.first_fail,
            "status": b.status, "precision_reached": b.precision,
            "probes": b.probes}  # fmt: skip


def search_capacity(
    config: ServingConfig,
    *,
    slo: SLO,
    search: Search,
    rate_per_s: float,
    seed: int,
    base: dict[str, Any] | None = None,
    crossover: bool = True,
    modes: tuple[str, ...] = MODES,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Tidy rows of one configuration's capacity search (each run replaces the rate and
    the request count of ``config.workload``: :func:`serve_replicas`).

    ``kind = "probe"``: one row per serving run and mode (``search``: "capacity",
    "replicas" or "crossover"; the p99s with their intervals, goodput, ``outcome``).
    ``kind = "answer"``, per mode: the bisection's bracket (``max_rate_per_replica``
    = ``rate_low``, the largest rate shown to meet the SLO; ``rate_high``;
    ``first_failing_rate``; ``status``, see :class:`specsim.capacity_search.Bracket`),
    the smallest ``replicas`` shown to meet ``rate_per_s`` in total behind the
    router (:func:`serve_replicas`), ``accelerators`` (replicas x tensor
    parallelism) and ``accelerators_low``, from the fewest replicas not shown to
    fail (``replicas_status`` "undecided" when that is fewer). ``kind =
    "crossover"``: the largest rate at which the speculative p99 TPOT is shown
    below plain decoding's (``crossover_rate``) and its bracket. ``base``
    (hardware, tensor_parallel, ...) starts every row; ``modes``: which of
    :data:`MODES` to search.
    """
    if not (isinstance(rate_per_s, float | int) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ValueError(f"rate_per_s: expected a finite rate > 0, got {rate_per_s!r}")
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes: expected some of {list(MODES)}, got {modes!r}")
    if crossover and fixed_gamma(config.policy) == 0:
        raise ValueError("policy: a crossover needs a speculative policy (gamma > 0); "
                         "pass crossover=False")  # fmt: skip
    report = progress if progress is not None else _PROGRESS.get()
    head = {"hardware": "", "tensor_parallel": 1, **(base or {})}
    tp = int(head["tensor_parallel"])
    levels = len(search.sizes)
    per_mode = (search.bisections + 2) * levels
    budget = (len(modes) + crossover) * per_mode
    s = _Searcher(config, slo=slo, search=search, seed=seed, base=head, progress=report,
                  budget=budget)  # fmt: skip
    answers: list[dict[str, Any]] = []
    for k, mode in enumerate(modes):
        left = (len(modes) + crossover - k) * per_mode
        b = bisect_rate(partial(s.probe, mode, replicas=1, kind="capacity", left=left),
                        rate_min=search.rate_min, rate_max=search.rate_max,
                        precision=search.precision)  # fmt: skip
        ans: dict[str, Any] = {**head, "kind": "answer", "mode": mode, "rate_per_s": rate_per_s,
                               "max_rate_per_replica": b.low, **_bracket_row(b),
                               "rate_per_accelerator": b.low / tp}  # fmt: skip
        if b.low > 0:
            limit = 4 * math.ceil(rate_per_s / b.low) + 4
            walk = partial(s.probe_replicas, mode, rate_per_s, known=b, left=left)
            n, low = smallest_count(walk, start=math.ceil(rate_per_s / b.low), limit=limit)
            ans.update(replicas=n, replicas_status="decided" if low == n else "undecided",
                       accelerators=n * tp, accelerators_low=low * tp)  # fmt: skip
        answers.append(ans)
    if crossover:
        c = bisect_rate(partial(s.pays, left=per_mode), rate_min=search.rate_min,
                        rate_max=search.rate_max,
                        precision=search.crossover_precision)  # fmt: skip
        answers.append({**head, "kind": "crossover", "mode": "speculative vs plain",
                        "crossover_rate": c.low, **_bracket_row(c)})  # fmt: skip
    if report is not None and s.total != s.done:  # the bound falls to the exact count
        s.total = s.done
        report(s.done, s.done, f"{head['hardware']} done")
    return s.rows + answers


def smallest_deployment(
    configs: Mapping[int, ServingConfig],
    *,
    slo: SLO,
    search: Search,
    rate_per_s: float,
    seed: int,
    base: dict[str, Any] | None = None,
    modes: tuple[str, ...] = MODES,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """:func:`search_capacity` (no crossover) for each tensor-parallel size in ``configs``
    (size -> one replica's config), then per mode a ``kind = "deployment"`` row: the size
    and replicas with the fewest accelerators (the smaller size on a tie), and
    ``accelerators_low``, the fewest that no size's search could rule out. ``progress``
    hears each size's search in turn."""
    rows: list[dict[str, Any]] = []
    for tp, config in configs.items():
        rows += search_capacity(config, slo=slo, search=search, rate_per_s=rate_per_s,
                                seed=seed, base={**(base or {}), "tensor_parallel": tp},
                                crossover=False, modes=modes, progress=progress)  # fmt: skip
    for mode in modes:
        found = [r for r in rows if r["kind"] == "answer" and r["mode"] == mode and
                 "accelerators" in r]  # fmt: skip
        row: dict[str, Any] = {**(base or {}), "kind": "deployment", "mode": mode,
                               "rate_per_s": rate_per_s}  # fmt: skip
        if found:
            best = min(found, key=lambda r: (r["accelerators"], r["tensor_parallel"]))
            row.update({k: best[k] for k in ("tensor_parallel", "replicas", "accelerators")},
                       accelerators_low=min(r["accelerators_low"] for r in found))  # fmt: skip
        rows.append(row)
    return rows
