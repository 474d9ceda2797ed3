"""Capacity planning: the largest request rate a replica sustains at an SLO, to a stated precision.

1. :func:`specsim.capacity.judge.judge`: whether one serving run meets an
   :class:`SLO` (p99 TPOT and TTFT, optionally a goodput fraction), from
   confidence intervals, and whether it is stable (an overloaded run fails
   whatever its p99s: :mod:`specsim.sim.results.stability`): ``holds``, ``fails`` or
   ``undecided``; an undecided run
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
:func:`reporting`); ``total`` is a bound, exact at the end. The runs are served
by ``workers`` processes (:mod:`specsim.capacity.pool`): the same rows for any count.
Assumptions: the limit is monotone in the rate; a run starts empty (its first
``Search.warmup`` share of requests, 5%, is left out of its verdict); the
intervals' coverage under queueing correlation is approximate
(:func:`specsim.stats.quantile_interval`, ``docs/capacity.md``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from specsim.capacity.judge import SLO, judge
from specsim.capacity.pool import check_workers, default_workers, run_searches
from specsim.capacity.precision import Search
from specsim.capacity.walk import MODES, Progress, serve_replicas
from specsim.sim import ServingConfig
from specsim.sim.config.config_compose import speculates

if TYPE_CHECKING:
    from specsim.sim.config.config_compose import Served

__all__ = [
    "TP_SIZES",
    "MODES",
    "SLO",
    "Search",
    "Progress",
    "smallest_tp",
    "kv_capacity",
    "reporting",
    "judge",
    "serve_replicas",
    "search_capacity",
    "smallest_deployment",
]

# Studies call search_capacity with their own arguments; a caller that runs a whole study
# (specsim study capacity) hands its progress callback down through this variable.
_PROGRESS: ContextVar[Progress | None] = ContextVar("capacity_progress", default=None)

TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)
"""The tensor-parallel sizes tried, smallest first."""


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


def search_capacity(
    config: Served,
    *,
    slo: SLO,
    search: Search,
    rate_per_s: float,
    seed: int,
    base: dict[str, Any] | None = None,
    crossover: bool = True,
    modes: tuple[str, ...] = MODES,
    progress: Progress | None = None,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Tidy rows of one configuration's capacity search (each run replaces the rate and
    the request count of ``config.workload``: :func:`serve_replicas`).

    ``kind = "probe"``: one row per serving run and mode (``search``: "capacity",
    "replicas" or "crossover"; the p99s with their intervals, goodput, ``outcome``).
    ``kind = "answer"``, per mode: the bisection's bracket (``max_rate_per_replica``
    = ``rate_low``, the largest rate shown to meet the SLO; ``rate_high``;
    ``first_failing_rate``; ``status``, see :class:`specsim.capacity.statistics.Bracket`),
    the smallest ``replicas`` shown to meet ``rate_per_s`` in total behind the
    router (:func:`serve_replicas`), ``accelerators`` (replicas x tensor
    parallelism) and ``accelerators_low``, from the fewest replicas not shown to
    fail (``replicas_status`` "undecided" when that is fewer). ``kind =
    "crossover"``: the largest rate at which the speculative p99 TPOT is shown
    below plain decoding's (``crossover_rate``) and its bracket. ``base``
    (hardware, tensor_parallel, ...) starts every row; ``modes``: which of
    :data:`MODES` to search.

    ``workers``: processes that serve the runs (None: the CPUs this process may use, at
    most 2; 1: all in this process). The searches per mode and the crossover then run at
    once, and the rows are the same, in the same order, for any number of workers
    (:mod:`specsim.capacity.pool`); ``progress`` hears of each run as it ends.
    """
    if workers is not None:
        check_workers(workers)
    if not (isinstance(rate_per_s, float | int) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ValueError(f"rate_per_s: expected a finite rate > 0, got {rate_per_s!r}")
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes: expected some of {list(MODES)}, got {modes!r}")
    if crossover and not speculates(config):
        raise ValueError(
            "policy: a crossover needs a speculative policy (gamma > 0) or a tree with nodes; "
            "pass crossover=False"
        )
    report = progress if progress is not None else _PROGRESS.get()
    head = {"hardware": "", "tensor_parallel": 1, **(base or {})}
    return run_searches(
        config,
        slo=slo,
        search=search,
        seed=seed,
        base=head,
        rate_per_s=rate_per_s,
        modes=modes,
        crossover=crossover,
        workers=default_workers() if workers is None else workers,
        progress=report,
    )


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
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`search_capacity` (no crossover) for each tensor-parallel size in ``configs``
    (size -> one replica's config), then per mode a ``kind = "deployment"`` row: the size
    and replicas with the fewest accelerators (the smaller size on a tie), and
    ``accelerators_low``, the fewest that no size's search could rule out. ``progress``
    hears each size's search in turn."""
    rows: list[dict[str, Any]] = []
    for tp, config in configs.items():
        rows += search_capacity(
            config,
            slo=slo,
            search=search,
            rate_per_s=rate_per_s,
            seed=seed,
            base={**(base or {}), "tensor_parallel": tp},
            crossover=False,
            modes=modes,
            progress=progress,
            workers=workers,
        )
    for mode in modes:
        found = [
            r for r in rows if r["kind"] == "answer" and r["mode"] == mode and "accelerators" in r
        ]
        row: dict[str, Any] = {
            **(base or {}),
            "kind": "deployment",
            "mode": mode,
            "rate_per_s": rate_per_s,
        }
        if found:
            best = min(found, key=lambda r: (r["accelerators"], r["tensor_parallel"]))
            row.update(
                {k: best[k] for k in ("tensor_parallel", "replicas", "accelerators")},
                accelerators_low=min(r["accelerators_low"] for r in found),
            )
        rows.append(row)
    return rows
