"""Where a capacity search's serving runs happen: in this process, or on a process pool.

The searches (:class:`specsim.capacity.walk.Searcher`) ask a *source* for each
run's judged result. With one worker the source serves the run in this process:
the search as it always was. With more (:func:`run_searches`), this thread still
runs the searches one after the other, but asks a :class:`PoolSource`, which
serves runs on a pool of worker processes (at most ``workers`` at once), while a
thread per later search walks that search at once and asks for its runs ahead.
Every run is served once, whoever asks first (the crossover's and a capacity
search's at the same rate, too), and this thread takes what it needs: its
rows, their order, their run numbers and its progress reports are those of one
worker, by construction, for any number of workers.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial
from multiprocessing import get_all_start_methods, get_context
from typing import TYPE_CHECKING, Any

from specsim.capacity.judge import SLO
from specsim.capacity.precision import Search
from specsim.capacity.walk import (
    MODES,
    TWIN,
    Judged,
    Progress,
    RunKey,
    Searcher,
    Source,
    serve_judged,
)
from specsim.checks import check_int
from specsim.sweep.executors import end_with_parent

if TYPE_CHECKING:
    from specsim.sim.config.config_compose import Served

__all__ = [
    "check_workers",
    "default_workers",
    "Stopped",
    "PoolSource",
    "run_searches",
]


def check_workers(workers: int) -> int:
    """``workers`` if an integer >= 1; else ValueError naming it."""
    return check_int(workers, name="workers", minimum=1)


def default_workers() -> int:
    """The CPUs this process may run on (its affinity where known), at most 2."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(2, cpus or 1))


# The worker's search, set once per worker process by the pool's initializer: the card it
# holds keeps its memo of pass times across the runs this worker serves.
_WORKER: dict[str, Any] = {}


def _start_worker(parent: int, setup: dict[str, Any]) -> None:
    end_with_parent(parent)
    _WORKER.update(setup)


def _serve_in_worker(kind: str, rate: float, n: int, replicas: int) -> dict[RunKey, Judged]:
    w = _WORKER
    return serve_judged(
        w["config"], kind, rate, n, replicas, slo=w["slo"], search=w["search"], seed=w["seed"]
    )


class Stopped(RuntimeError):
    """A run asked for after its search has ended (in error): the background searches stop."""


class PoolSource:
    """Serving runs on ``workers`` processes, each asked for once (a :data:`Source`, safe
    to call from several threads). Use as a context manager: the pool ends with the block.

    Fork where the platform has it (a worker starts as a copy of this process, about 20 ms,
    against 2 s to import the package anew), else spawn.
    """

    def __init__(
        self, config: Served, *, slo: SLO, search: Search, seed: int, workers: int
    ) -> None:
        method = "fork" if "fork" in get_all_start_methods() else "spawn"
        setup: dict[str, Any] = {"config": config, "slo": slo, "search": search, "seed": seed}
        self.pool = ProcessPoolExecutor(
            max_workers=check_workers(workers),
            mp_context=get_context(method),
            initializer=_start_worker,
            initargs=(os.getpid(), setup),
        )
        self.futures: dict[RunKey, Future[dict[RunKey, Judged]]] = {}
        self.lock = threading.Lock()
        self.stopped = False
        # Start the workers now, from this thread alone: a fork copies only the thread that
        # calls it, so it must not happen while the searches' threads hold locks.
        self.pool.submit(int, 0).result()

    def __enter__(self) -> PoolSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def stop(self) -> None:
        """Ask for no more runs: the runs not started are cancelled, later asks raise
        :class:`Stopped`."""
        with self.lock:
            self.stopped = True
            for f in self.futures.values():
                f.cancel()

    def _submit(self, kind: str, rate: float, n: int, replicas: int, keys: list[RunKey]) -> None:
        fut = self.pool.submit(_serve_in_worker, kind, rate, n, replicas)
        for k in keys:
            self.futures[k] = fut

    def __call__(self, kind: str, rate: float, n: int, replicas: int) -> dict[RunKey, Judged]:
        modes = MODES if kind == TWIN else (kind,)
        keys = [(m, rate, n, replicas) for m in modes]
        with self.lock:
            if self.stopped:
                raise Stopped(f"the search has ended; {kind} at {rate:g}/s not served")
            missing = [k for k in keys if k not in self.futures]
            if len(missing) == len(keys):
                self._submit(kind, rate, n, replicas, keys)
            else:
                for k in missing:
                    self._submit(k[0], rate, n, replicas, [k])
            futs = {id(f): f for f in (self.futures[k] for k in keys)}
        out: dict[RunKey, Judged] = {}
        for f in futs.values():
            out.update(f.result())
        return {k: out[k] for k in keys}


def run_searches(
    config: Served,
    *,
    slo: SLO,
    search: Search,
    seed: int,
    base: dict[str, Any],
    rate_per_s: float,
    modes: tuple[str, ...],
    crossover: bool,
    workers: int,
    progress: Progress | None,
) -> list[dict[str, Any]]:
    """The rows of :func:`specsim.capacity.planner.search_capacity` (its arguments checked).

    One worker: the searches one after the other in this process. More: this thread
    runs them in the same order, asking a :class:`PoolSource` for each run, while a
    thread per later search asks for its runs ahead (the first search's runs are
    this thread's own); every run is served once, whoever asks first. This thread's
    rows, run numbers and progress are those of one worker, since a run does not
    depend on who serves it; an error in a later search is met again, in order.
    """
    levels = len(search.sizes)
    per_mode = (search.bisections + 2) * levels
    budget = (len(modes) + crossover) * per_mode
    parts: list[str] = [*modes, "crossover"] if crossover else list(modes)

    def answers(s: Searcher) -> list[dict[str, Any]]:
        out = [
            s.capacity(mode, rate_per_s=rate_per_s, left=(len(parts) - k) * per_mode)
            for k, mode in enumerate(modes)
        ]
        return out + ([s.crossover(left=per_mode)] if crossover else [])

    if check_workers(workers) == 1 or len(parts) == 1:
        source: Source = partial(serve_judged, config, slo=slo, search=search, seed=seed)
        s = Searcher(source, search=search, base=base, progress=progress, budget=budget)
        rows = answers(s)
    else:
        with PoolSource(config, slo=slo, search=search, seed=seed, workers=workers) as pool:

            def ahead(which: str) -> None:
                t = Searcher(pool, search=search, base=base, progress=None, budget=budget)
                if which == "crossover":
                    t.crossover(left=per_mode)
                else:
                    t.capacity(which, rate_per_s=rate_per_s, left=per_mode)

            threads = ThreadPoolExecutor(max_workers=len(parts) - 1)
            try:
                # Not read: an error of a search ahead is met again by this thread, in order.
                for which in parts[1:]:
                    threads.submit(ahead, which)
                s = Searcher(pool, search=search, base=base, progress=progress, budget=budget)
                rows = answers(s)
            finally:
                pool.stop()
                threads.shutdown(wait=True)
    if progress is not None and s.total != s.done:  # the bound falls to the exact count
        s.total = s.done
        progress(s.done, s.done, f"{base['hardware']} done")
    return s.rows + rows
