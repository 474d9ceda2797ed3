"""Parameter sweeps: a grid or a random sample over the fields of a simulation config,
seeds per point, run on a local process pool or a Dask cluster, streamed to CSV or Parquet
and resumable (how-to: ``docs/howto/sweep.md``; every key: ``docs/reference/sweep-spec.md``).

A sweep spec is a TOML file (read by :func:`specsim.cards.read_toml`, the one
TOML reader). Its ``[config]`` table is a ``specsim simulate`` config
(``docs/simulate-config.md``; or name a file with ``sweep.config``); the axes
are dotted paths into it::

    [sweep]
    mode = "grid"        # "grid" (every combination) or "random" (``samples`` draws)
    seed = 2023          # the sweep seed (the config's own seed is not used)
    seeds = 4            # replicate runs per point
    # samples = 100      # random mode only
    # metrics = ["speedup", "speedup_se"]   # keep only these metrics (default: all)
    # config = "studies/configs/stream-plain.toml"  # instead of [config], relative to here

    [config]             # the base config of every point
    mode = "stream"
    tokens = 20000
    acceptance = {kind = "iid", alpha = 0.7}
    policy = {kind = "fixed", gamma = 4}
    cost = {kind = "plain", c = 0.05}

    [grid]               # mode = "grid": a list of values per path
    "acceptance.alpha" = [0.6, 0.7, 0.8]
    "policy.gamma" = [1, 2, 4, 8]
    # policy = [{kind = "fixed", gamma = 4}, {kind = "oracle"}]   # whole tables too

    [random]             # mode = "random": a distribution per path
    # "acceptance.alpha" = {uniform = [0.5, 0.95]}
    # "policy.gamma" = {integers = [1, 8]}       # inclusive
    # "cost.c" = {loguniform = [0.01, 0.2]}
    # "cost.target" = {choice = ["llama-2-7b", "llama-2-13b"]}

The base config is built by :func:`specsim.sim.config.config.config_from_dict` (the
configuration boundary); each axis is a dotted path into it, set on the frozen
dataclasses with :func:`specsim.sim.config.config.with_value` (``dataclasses.replace``
at every level; a policy's run-derived ``alpha``, ``c`` and ``max_gamma`` follow),
and every point's config is built, and so checked, before anything runs.
Reproducibility: replicate ``r`` of the point whose values serialize to
``key`` (sorted JSON) runs on ``numpy.random.SeedSequence(seed, spawn_key=(*sha256(key)
words, r))``, so a point's rows do not depend on where or in which order it
runs: one process, a pool or a cluster give identical rows. Points stream to
the output as they finish (:mod:`specsim.sweep.store`); ``resume`` keeps the
finished points of an interrupted run and computes only the rest.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specsim.checks import check_int
from specsim.sim import StreamConfig, simulate_stream
from specsim.sim.config.config import RunSpec, with_value
from specsim.sim.config.config_compose import simulate_run, slo_metrics
from specsim.sim.workload.workload import (
    PoissonWorkload,
    PresetWorkload,
    SyntheticWorkload,
    TraceWorkload,
)
from specsim.sweep.executors import (
    DEFAULT_CONNECT_TIMEOUT_S,
    check_connect_timeout,
    dask_client,
    dask_results,
    local_cluster,
    pool_results,
)
from specsim.sweep.spec import SweepSpec, check_axis, read_spec, spec_from_dict, sweep_points
from specsim.sweep.store import open_writer, output_files, remove_output

__all__ = [
    "SweepSpec",
    "SweepResult",
    "read_spec",
    "spec_from_dict",
    "check_axis",
    "sweep_points",
    "point_config",
    "point_key",
    "point_seed",
    "run_point",
    "metric_names",
    "check_metrics",
    "run_sweep",
    "local_cluster",
]


def point_config(
    base: RunSpec, values: Mapping[str, Any], *, where: str = "point", base_dir: str = "."
) -> RunSpec:
    """The base run with each dotted path set to the point's value (the base is unchanged)."""
    run = base
    for path, value in values.items():
        run = with_value(run, path, copy.deepcopy(value), where=where, base=base_dir)
    return run


def point_key(values: Mapping[str, Any]) -> str:
    """The canonical text of a point's values (sorted JSON); its seed derives from it."""
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"))


def point_seed(seed: int, key: str, replicate: int) -> np.random.SeedSequence:
    """The seed of replicate ``replicate`` of the point ``key`` in a sweep seeded ``seed``."""
    words = np.frombuffer(hashlib.sha256(key.encode()).digest()[:16], dtype="<u4")
    return np.random.SeedSequence(seed, spawn_key=(*(int(w) for w in words), int(replicate)))


def _build(base: RunSpec, values: Mapping[str, Any], base_dir: str, index: int) -> RunSpec:
    return point_config(base, values, where=f"point {index} {point_key(values)}", base_dir=base_dir)


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list | tuple) else value


def run_point(
    base: RunSpec,
    values: dict[str, Any],
    seed: int,
    seeds: int,
    metrics: tuple[str, ...],
    index: int,
    base_dir: str = ".",
) -> list[dict[str, Any]]:
    """Every replicate of one point as output rows (top-level: runs in any worker process)."""
    key = point_key(values)
    run = _build(base, values, base_dir, index)
    rows = []
    for r in range(seeds):
        rng = np.random.default_rng(point_seed(seed, key, r))
        if isinstance(run.config, StreamConfig):
            m = simulate_stream(run.config, rng, method=run.method).metrics()
        else:
            m = _serving_metrics(run, rng)
        if metrics:
            missing = [k for k in metrics if k not in m]
            if missing:
                raise ValueError(f"sweep.metrics: unknown metric(s) {missing}; known: {sorted(m)}")
            m = {k: m[k] for k in metrics}
        # A metric named like an axis (e.g. "tokens") gets the prefix "out_".
        out = {
            (f"out_{k}" if k in values else k): (v.item() if isinstance(v, np.generic) else v)
            for k, v in m.items()
        }
        rows.append(
            {
                "point": index,
                "replicate": r,
                "key": key,
                **{k: _cell(v) for k, v in values.items()},
                **out,
            }
        )
    return rows


def _probe(run: RunSpec) -> RunSpec:
    """``run`` cut to a few tokens or requests: enough to list its metrics, quickly."""
    config: Any = run.config
    if isinstance(config, StreamConfig):
        config = dataclasses.replace(config, tokens=min(config.tokens, 64))
    else:
        w: Any = config.workload
        if isinstance(w, PoissonWorkload | SyntheticWorkload | PresetWorkload):
            w = dataclasses.replace(w, requests=min(w.requests, 2))
        elif isinstance(w, TraceWorkload):
            w = dataclasses.replace(
                w,
                arrival_s=w.arrival_s[:2],
                prompt_tokens=w.prompt_tokens[:2],
                output_tokens=w.output_tokens[:2],
            )
        config = dataclasses.replace(config, workload=w)
    return dataclasses.replace(run, config=config)


def metric_names(run: RunSpec) -> tuple[str, ...]:
    """The names of the metrics each point of a sweep over ``run`` reports, in order.

    From a short run of the same kind (a few tokens or requests of ``run`` itself): the
    metrics record has the same keys whatever the size.
    """
    probe = _probe(run)
    rng = np.random.default_rng(0)
    if isinstance(probe.config, StreamConfig):
        m = simulate_stream(probe.config, rng, method=probe.method).metrics()
    else:
        m = _serving_metrics(probe, rng)
    return tuple(m)


def _serving_metrics(run: RunSpec, rng: np.random.Generator) -> dict[str, Any]:
    """A serving run's metrics (chains or trees), with goodput when it has an ``[slo]``."""
    result = simulate_run(run.config, rng)
    m: dict[str, Any] = result.metrics()
    if run.slo is not None:
        m.update(slo_metrics(result, run.slo))
    return m


def check_metrics(spec: SweepSpec) -> None:
    """ValueError naming ``sweep.metrics`` and the unknown names, before anything is written."""
    if not spec.metrics:
        return
    known = metric_names(spec.config)
    missing = [k for k in spec.metrics if k not in known]
    if missing:
        raise ValueError(f"sweep.metrics: unknown metric(s) {missing}; known: {sorted(known)}")


@dataclass(frozen=True)
class SweepResult:
    """What a run did: points computed now, points kept from before, the output file."""

    path: Path
    points: int
    computed: int
    skipped: int
    rows: int


def run_sweep(
    spec: SweepSpec,
    out: Path | str,
    *,
    workers: int = 1,
    dask: bool = False,
    scheduler: str | None = None,
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> SweepResult:
    """Run the sweep, streaming rows to ``out`` (``.csv`` or ``.parquet``) as points finish.

    ``workers`` processes (1: in this process; a local pool's workers end with this
    process); ``dask`` starts a LocalCluster of ``workers`` processes on the loopback
    address; ``scheduler`` uses an existing Dask cluster (specsim must be importable on
    its workers), which must answer within ``connect_timeout`` seconds. ``resume`` keeps
    the finished points already in ``out`` and computes only the others; without it an
    existing ``out`` is an error.

    Everything that can be checked is checked before ``out`` is created: every point's
    config, the metric names and the connection to the cluster. A run that fails before
    its first point is written leaves no output behind.
    """
    check_int(workers, name="workers", minimum=1)
    check_connect_timeout(connect_timeout)
    out = Path(out)
    points = sweep_points(spec)
    for i, p in enumerate(points):  # fail fast on bad values, before any process starts
        _build(spec.config, p, spec.base_dir, i)
    check_metrics(spec)
    count = 0
    with contextlib.ExitStack() as stack:
        client = None
        if dask or scheduler is not None:  # connect before the output exists
            client = stack.enter_context(
                dask_client(workers=workers, scheduler=scheduler, connect_timeout=connect_timeout)
            )
        existed = any(p.exists() for p in output_files(out))
        writer = open_writer(out, identity=spec.identity(), seeds=spec.seeds, resume=resume)
        done = writer.finished_points()
        todo = [
            (spec.config, p, spec.seed, spec.seeds, spec.metrics, i, spec.base_dir)
            for i, p in enumerate(points)
            if i not in done
        ]
        try:
            results: Generator[list[dict[str, Any]], None, None]
            if client is not None:
                results = dask_results(run_point, todo, client=client)
            elif workers == 1 or len(todo) <= 1:
                results = (run_point(*t) for t in todo)
            else:
                results = pool_results(run_point, todo, workers)
            # closing: a cluster or pool is shut down at once, also when a write fails.
            with contextlib.closing(results):
                for point_rows in results:
                    writer.write(point_rows)
                    count += 1
                    if progress is not None:
                        progress(len(done) + count, len(points))
        except BaseException:
            writer.close()
            if count == 0 and not existed:  # nothing to keep: leave no empty output behind
                remove_output(out)
            raise
        writer.close()
    total = writer.finalize()
    return SweepResult(path=out, points=len(points), computed=count, skipped=len(done), rows=total)
