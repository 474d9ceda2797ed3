"""Sweep specs: a grid or a random sample of dotted paths into a simulation config.

The spec format is documented in :mod:`specsim.sweep.run`. :func:`read_spec` and
:func:`spec_from_dict` check every table, key, path and distribution before
anything runs; :func:`sweep_points` lists the axis values of every point.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim.cards import read_toml
from specsim.checks import check_int, check_size
from specsim.config import has_path
from specsim.sim.config.config import RunSpec, config_from_dict
from specsim.sim.config.config_compose import get_path

__all__ = [
    "MODES",
    "SWEEP_KEYS",
    "DISTRIBUTIONS",
    "SweepSpec",
    "check_axis",
    "read_spec",
    "spec_from_dict",
    "sweep_points",
]

MODES = ("grid", "random")
SWEEP_KEYS = ("mode", "seed", "seeds", "samples", "metrics", "config")
"""The keys of a spec's ``[sweep]`` table (docs/reference/sweep-spec.md)."""
DISTRIBUTIONS = ("uniform", "loguniform", "integers", "choice")
"""The distributions of a ``[random]`` axis (docs/reference/sweep-spec.md)."""
_DISTRIBUTIONS = DISTRIBUTIONS


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

    config: RunSpec
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
            try:
                check_int(getattr(self, name), name=f"sweep.{name}", minimum=0)
            except TypeError as exc:  # a spec's errors are ValueErrors, prefixed with its file
                raise ValueError(str(exc)) from None
        if self.seeds < 1:
            raise ValueError(f"sweep.seeds: expected at least 1 replicate, got {self.seeds}")
        if not isinstance(self.config, RunSpec):
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
            check_axis(self.config, path)
        what = "[grid] points" if self.mode == "grid" else "sweep.samples"
        check_size(self.runs(), name=f"{what} x sweep.seeds", limit="sweep_runs")

    def runs(self) -> int:
        """The simulations the sweep makes: grid points (or random samples) times ``seeds``."""
        points = math.prod(len(v) for v in self.grid.values()) if self.mode == "grid" else 0
        return (points if self.mode == "grid" else self.samples) * self.seeds

    def identity(self) -> str:
        """A digest of everything that determines the results (for safe resuming)."""
        text = json.dumps(
            {
                "mode": self.mode,
                "seed": self.seed,
                "seeds": self.seeds,
                "samples": self.samples,
                "metrics": list(self.metrics),
                "config": _canonical(self.config),
                "grid": {k: list(v) for k, v in self.grid.items()},
                "random": self.random,
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(value: Any) -> Any:
    """``value`` as plain JSON data, the same in every process: dataclasses as tables of
    their fields (with the class name; not those left out of comparisons, such as where a
    config was read from), sets sorted."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: _canonical(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.compare
        }
        return {"class": type(value).__name__, **fields}
    if isinstance(value, set | frozenset):
        return sorted(_canonical(v) for v in value)
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return repr(value)


def check_axis(config: RunSpec, path: str) -> None:
    """Raise ValueError unless the dotted ``path`` names a field of the run (or its seed)."""
    if path in ("seed", "method", "policy"):
        return
    if config.source is not None:  # a composed run: a path into the table it was built from
        *parents, _ = path.split(".")
        if parents and not get_path(config.source, ".".join(parents))[0]:
            raise ValueError(f"sweep axis {path!r}: the config has no table {'.'.join(parents)!r}")
        return  # the key itself is checked when the points are built, before any run
    why = has_path(config.config, path)
    if why is not None:
        raise ValueError(f"sweep axis {path!r}: {why}")


def spec_from_dict(data: Mapping[str, Any], *, base_dir: str = ".") -> SweepSpec:
    """A :class:`SweepSpec` from parsed TOML: tables ``sweep``, ``config``, ``grid``, ``random``."""
    unknown = sorted(set(data) - {"sweep", "config", "grid", "random"})
    if unknown:
        raise ValueError(f"unknown table(s) {unknown}; known: sweep, config, grid, random")
    head = dict(data.get("sweep", {}))
    allowed = set(SWEEP_KEYS)
    bad = sorted(set(head) - allowed)
    if bad:
        raise ValueError(f"[sweep]: unknown key(s) {bad}; known: {sorted(allowed)}")
    config = data.get("config")
    if "config" in head:
        if config is not None:
            raise ValueError("sweep.config names a file and [config] is given too; keep one")
        path = Path(base_dir) / str(head.pop("config"))
        config, base_dir = read_toml(path), str(path.parent)
    if "metrics" in head:
        head["metrics"] = tuple(head["metrics"])
    if config is None:
        raise ValueError("[config]: expected the base simulation config (a table)")
    run = config_from_dict(config, where="[config]", base=base_dir)
    grid = _flatten(data.get("grid", {}), "grid", leaf=lambda v: isinstance(v, list | tuple))
    rand = _flatten(data.get("random", {}), "random", leaf=_is_dist)
    return SweepSpec(
        **head,
        config=run,
        base_dir=base_dir,
        grid={k: tuple(v) for k, v in grid.items()},
        random=rand,
    )


def read_spec(path: Path | str) -> SweepSpec:
    """Read a sweep spec TOML file (relative paths in it resolve from its folder)."""
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
