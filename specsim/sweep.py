"""Parameter sweeps: a grid or a random sample over the fields of a simulation config,
seeds per point, run on a local process pool or a Dask cluster, streamed to CSV or Parquet
and resumable.

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

Every point's config is built (and so checked, by
:func:`specsim.sim.config.config_from_dict`) before anything runs.
Reproducibility: replicate ``r`` of the point whose values serialize to
``key`` (sorted JSON) runs on ``numpy.random.SeedSequence(seed, spawn_key=(*sha256(key)
words, r))``, so a point's rows do not depend on where or in which order it
runs: one process, a pool or a cluster give identical rows. Points stream to
the output as they finish (:mod:`specsim._sweepio`); ``resume`` keeps the
finished points of an interrupted run and computes only the rest.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim._sweepexec import dask_results, local_cluster, pool_results
from specsim._sweepio import open_writer

__all__ = [
    "SweepSpec",
    "SweepResult",
    "read_spec",
    "spec_from_dict",
    "sweep_points",
    "point_config",
    "point_key",
    "point_seed",
    "run_point",
    "run_sweep",
    "local_cluster",
]

MODES = ("grid", "random")
_DISTRIBUTIONS = ("uniform", "loguniform", "integers", "choice")


def _flatten(
    table: Mapping[str, Any], where: str, *, leaf: Callable[[Any], bool], prefix: str = ""
) -> dict[str, Any]:
    """Nested tables (TOML dotted keys) as ``{"a.b": leaf}``."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if leaf(value):
            out[path] = value
        elif isinstance(value, Mapping):
            out.update(_flatten(value, where, leaf=leaf, prefix=path + "."))
        else:
            raise ValueError(
                f"[{where}] {path}: expected "
                + (
                    "a list of values"
                    if where == "grid"
                    else "{uniform|loguniform|integers = [low, high]} or {choice = [...]}"
                )
                + f", got {value!r}"
            )
    return out


def _is_dist(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in _DISTRIBUTIONS


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A sweep: sampling ``mode``, seeds, the base simulation ``config`` and the axes."""

    config: Mapping[str, Any]
    mode: str = "grid"
    seed: int = 0
    seeds: int = 1
    samples: int = 0
    metrics: tuple[str, ...] = ()
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    random: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    base_dir: str = "."

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sweep.mode: expected one of {MODES}, got {self.mode!r}")
        for name in ("seed", "seeds", "samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"sweep.{name}: expected a non-negative integer, got {v!r}")
        if self.seeds < 1:
            raise ValueError(f"sweep.seeds: expected at least 1 replicate, got {self.seeds}")
        if not isinstance(self.config, Mapping) or not self.config:
            raise ValueError("[config]: expected the base simulation config (a table)")
        other = "random" if self.mode == "grid" else "grid"
        if getattr(self, other):
            raise ValueError(f"[{other}]: not used in mode {self.mode!r}; remove it")
        if self.mode == "random" and self.samples < 1:
            raise ValueError("sweep.samples: random mode needs samples >= 1")
        if self.mode == "grid" and self.samples:
            raise ValueError("sweep.samples: only for mode = 'random'")
        for path, values in self.grid.items():
            if not isinstance(values, tuple | list) or len(values) == 0:
                raise ValueError(f"[grid] {path}: expected a non-empty list, got {values!r}")
        for path, dist in self.random.items():
            if not _is_dist(dist):
                raise ValueError(
                    f"[random] {path}: expected {{uniform|loguniform|integers = "
                    f"[low, high]}} or {{choice = [...]}}, got {dist!r}"
                )
            _check_range(path, dist)
        for path in [*self.grid, *self.random]:
            _parent(dict(self.config), path)  # the path must lead into the config

    def identity(self) -> str:
        """A digest of everything that determines the results (for safe resuming)."""
        text = json.dumps(
            {
                "mode": self.mode,
                "seed": self.seed,
                "seeds": self.seeds,
                "samples": self.samples,
                "metrics": list(self.metrics),
                "config": self.config,
                "grid": {k: list(v) for k, v in self.grid.items()},
                "random": self.random,
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _parent(config: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The table holding ``path``'s last key (created for a new key in an existing table)."""
    *tables, last = path.split(".")
    node = config
    for i, name in enumerate(tables):
        child = node.get(name)
        if not isinstance(child, dict):
            where = ".".join(tables[: i + 1])
            raise ValueError(f"sweep axis {path!r}: [config] has no table {where!r}")
        node = child
    return node, last


def spec_from_dict(data: Mapping[str, Any], *, base_dir: str = ".") -> SweepSpec:
    """A :class:`SweepSpec` from parsed TOML: tables ``sweep``, ``config``, ``grid``, ``random``."""
    unknown = sorted(set(data) - {"sweep", "config", "grid", "random"})
    if unknown:
        raise ValueError(f"unknown table(s) {unknown}; known: sweep, config, grid, random")
    head = dict(data.get("sweep", {}))
    allowed = {"mode", "seed", "seeds", "samples", "metrics", "config"}
    bad = sorted(set(head) - allowed)
    if bad:
        raise ValueError(f"[sweep]: unknown key(s) {bad}; known: {sorted(allowed)}")
    config = data.get("config")
    if "config" in head:
        if config is not None:
            raise ValueError("sweep.config names a file and [config] is given too; keep one")
        from specsim.cards import read_toml

        path = Path(base_dir) / str(head.pop("config"))
        config, base_dir = read_toml(path), str(path.parent)
    if "metrics" in head:
        head["metrics"] = tuple(head["metrics"])
    grid = _flatten(data.get("grid", {}), "grid", leaf=lambda v: isinstance(v, list | tuple))
    rand = _flatten(data.get("random", {}), "random", leaf=_is_dist)
    return SweepSpec(
        **head,
        config=copy.deepcopy(dict(config or {})),
        base_dir=base_dir,
        grid={k: tuple(v) for k, v in grid.items()},
        random=rand,
    )


def read_spec(path: Path | str) -> SweepSpec:
    """Read a sweep spec TOML file (relative paths in it resolve from its folder)."""
    from specsim.cards import read_toml

    p = Path(path)
    try:
        return spec_from_dict(read_toml(p), base_dir=str(p.parent))
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None


def _check_range(path: str, dist: Mapping[str, Any]) -> None:
    """A distribution's arguments, checked before anything is drawn."""
    kind, args = next(iter(dist.items()))
    if kind == "choice":
        if not isinstance(args, list | tuple) or len(args) == 0:
            raise ValueError(f"[random] {path}: choice needs a non-empty list, got {args!r}")
        return
    numbers = isinstance(args, list | tuple) and len(args) == 2
    numbers = numbers and all(
        isinstance(x, int | float) and not isinstance(x, bool) and np.isfinite(x) for x in args
    )
    if not numbers or args[0] > args[1]:
        raise ValueError(
            f"[random] {path}: {kind} needs [low, high] with low <= high, got {args!r}"
        )
    if kind == "integers" and not all(float(x).is_integer() for x in args):
        raise ValueError(f"[random] {path}: integers needs whole numbers, got {args!r}")
    if kind == "loguniform" and args[0] <= 0:
        raise ValueError(f"[random] {path}: loguniform needs low > 0, got {args[0]!r}")


def _draw(rng: np.random.Generator, dist: Mapping[str, Any]) -> Any:
    kind, args = next(iter(dist.items()))
    if kind == "choice":
        return copy.deepcopy(list(args)[int(rng.integers(len(args)))])
    lo, hi = args
    if kind == "uniform":
        return float(rng.uniform(lo, hi))
    if kind == "loguniform":
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    return int(rng.integers(int(lo), int(hi) + 1))


def sweep_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """The axis values of every point, in a fixed order (grid order, or draw order)."""
    if spec.mode == "grid":
        names = list(spec.grid)
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(spec.grid[n] for n in names))
        ]
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(0x5A3B1E,)))
    return [{p: _draw(rng, d) for p, d in spec.random.items()} for _ in range(spec.samples)]


def point_config(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The base config with each dotted path set to the point's value."""
    config = copy.deepcopy(dict(base))
    for path, value in values.items():
        node, last = _parent(config, path)
        node[last] = copy.deepcopy(value)
    return config


def point_key(values: Mapping[str, Any]) -> str:
    """The canonical text of a point's values (sorted JSON); its seed derives from it."""
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"))


def point_seed(seed: int, key: str, replicate: int) -> np.random.SeedSequence:
    """The seed of replicate ``replicate`` of the point ``key`` in a sweep seeded ``seed``."""
    words = np.frombuffer(hashlib.sha256(key.encode()).digest()[:16], dtype="<u4")
    return np.random.SeedSequence(seed, spawn_key=(*(int(w) for w in words), int(replicate)))


def _build(base: Mapping[str, Any], values: Mapping[str, Any], base_dir: str, index: int) -> Any:
    from specsim.sim.config import config_from_dict

    return config_from_dict(
        point_config(base, values), where=f"point {index} {point_key(values)}", base=base_dir
    )


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list | tuple) else value


def run_point(
    base: Mapping[str, Any],
    values: dict[str, Any],
    seed: int,
    seeds: int,
    metrics: tuple[str, ...],
    index: int,
    base_dir: str = ".",
) -> list[dict[str, Any]]:
    """Every replicate of one point as output rows (top-level: runs in any worker process)."""
    from specsim.sim import simulate_serving, simulate_stream
    from specsim.sim.stream import StreamConfig

    key = point_key(values)
    run = _build(base, values, base_dir, index)
    rows = []
    for r in range(seeds):
        rng = np.random.default_rng(point_seed(seed, key, r))
        if isinstance(run.config, StreamConfig):
            m = simulate_stream(run.config, rng, engine=run.engine).metrics()
        else:
            m = simulate_serving(run.config, rng).metrics()
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
) -> SweepResult:
    """Run the sweep, streaming rows to ``out`` (``.csv`` or ``.parquet``) as points finish.

    ``workers`` processes (1: in this process); ``dask`` starts a LocalCluster of
    ``workers`` processes on the loopback address; ``scheduler`` uses an existing
    Dask cluster (specsim must be importable on its workers). ``resume`` keeps
    the finished points already in ``out`` and computes only the others; without
    it an existing ``out`` is an error.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
    points = sweep_points(spec)
    for i, p in enumerate(points):  # fail fast on bad values, before any process starts
        _build(spec.config, p, spec.base_dir, i)
    writer = open_writer(Path(out), identity=spec.identity(), seeds=spec.seeds, resume=resume)
    done = writer.finished_points()
    todo = [
        (dict(spec.config), p, spec.seed, spec.seeds, spec.metrics, i, spec.base_dir)
        for i, p in enumerate(points)
        if i not in done
    ]
    count = 0
    try:
        results: Iterator[list[dict[str, Any]]]
        if dask or scheduler is not None:
            results = dask_results(run_point, todo, workers=workers, scheduler=scheduler)
        elif workers == 1 or len(todo) <= 1:
            results = (run_point(*t) for t in todo)
        else:
            results = pool_results(run_point, todo, workers)
        for point_rows in results:
            writer.write(point_rows)
            count += 1
            if progress is not None:
                progress(len(done) + count, len(points))
    finally:
        writer.close()
    total = writer.finalize()
    return SweepResult(
        path=Path(out), points=len(points), computed=count, skipped=len(done), rows=total
    )
