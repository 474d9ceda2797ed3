"""Find, configure, run and save the what-if studies.

A study is a module of the ``studies`` package (``studies/`` in a checkout,
``specsim/_studies`` in an installed wheel) with four names:

- ``DEFAULTS``: a flat dict of configuration values on real cards;
- ``run(config, rng, *, fast=False) -> pandas.DataFrame``: the tidy results;
- ``figures(df) -> dict[str, matplotlib.figure.Figure]``: drawn from the table only;
- ``summary(df) -> str``: a short markdown account, every number computed from ``df``.

This module loads studies by name (:func:`load_study`), turns ``key=value``
overrides into typed values from ``DEFAULTS`` (:func:`parse_overrides`), runs
a study (:func:`run_study`) and writes its CSV, PNG and SVG figures and
``summary.md`` to a folder (:func:`save_study`).

>>> "paper" in study_names()
True
>>> parse_overrides({"gamma": 4, "alphas": (0.5, 0.6)}, ["gamma=7", "alphas=0.7,0.8"])
{'gamma': 7, 'alphas': (0.7, 0.8)}
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim._rng import keyed_rng

__all__ = [
    "STUDY_NAMES",
    "StudyOutput",
    "studies_package",
    "study_names",
    "load_study",
    "parse_value",
    "parse_overrides",
    "resolve_config",
    "study_rng",
    "run_study",
    "save_study",
]

STUDY_NAMES: tuple[str, ...] = (
    "paper",
    "table2",
    "bill",
    "lookahead",
    "energy",
    "shift",
    "capacity",
)
"""Every study, in the order the report shows them (``paper`` includes ``table2``)."""

_CHECKOUT_NAME = "specsim_checkout_studies"


def studies_package() -> ModuleType:
    """The studies package: ``specsim._studies`` if installed, else the checkout's ``studies/``."""
    try:
        return importlib.import_module("specsim._studies")
    except ModuleNotFoundError:
        pass
    if _CHECKOUT_NAME in sys.modules:
        return sys.modules[_CHECKOUT_NAME]
    root = Path(__file__).resolve().parent.parent / "studies"
    init = root / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(
            f"studies: neither the installed package specsim._studies nor {root} exists"
        )
    spec = importlib.util.spec_from_file_location(
        _CHECKOUT_NAME, init, submodule_search_locations=[str(root)]
    )
    if spec is None or spec.loader is None:  # pragma: no cover - importlib oddity
        raise FileNotFoundError(f"studies: cannot load {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_CHECKOUT_NAME] = module
    spec.loader.exec_module(module)
    return module


def study_names() -> tuple[str, ...]:
    """The names :func:`load_study` accepts."""
    return STUDY_NAMES


def load_study(name: str) -> ModuleType:
    """The study module ``name``, checked for its four names."""
    if name not in STUDY_NAMES:
        raise ValueError(f"study: unknown study {name!r}; known: {', '.join(STUDY_NAMES)}")
    package = studies_package()
    module = importlib.import_module(f"{package.__name__}.{name}")
    for attr in ("DEFAULTS", "run", "figures", "summary"):
        if not hasattr(module, attr):
            raise TypeError(f"study {name!r}: module {module.__file__} lacks {attr!r}")
    return module


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _scalar(text: str, like: object, key: str) -> object:
    text = text.strip()
    try:
        if isinstance(like, bool):
            low = text.lower()
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise ValueError("expected true or false")
        if isinstance(like, int):
            f = float(text)
            if not f.is_integer():
                raise ValueError("expected an integer")
            return int(f)
        if isinstance(like, float):
            v = float(text)
            if not np.isfinite(v):
                raise ValueError("expected a finite number")
            return v
    except ValueError as exc:
        raise ValueError(f"--set {key}={text!r}: {exc} (default is {like!r})") from None
    if not text:
        raise ValueError(f"--set {key}: empty value")
    return text


def parse_value(text: str, default: object, key: str) -> object:
    """``text`` converted to the type of ``default`` (tuples: comma-separated items)."""
    if isinstance(default, tuple):
        like = default[0] if default else ""
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise ValueError(f"--set {key}: expected a comma-separated list, got {text!r}")
        return tuple(_scalar(t, like, key) for t in items)
    return _scalar(text, default, key)


def parse_overrides(defaults: Mapping[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` as a dict typed after ``defaults``; unknown keys raise ValueError."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set: expected key=value, got {item!r}")
        if key not in defaults:
            raise ValueError(f"--set: unknown key {key!r}; known keys: {', '.join(defaults)}")
        out[key] = parse_value(value, defaults[key], key)
    return out


def resolve_config(
    defaults: Mapping[str, Any], config: Mapping[str, Any] | None, where: str
) -> dict[str, Any]:
    """``defaults`` updated by ``config``; a key not in ``defaults`` raises ValueError."""
    merged = dict(defaults)
    for key, value in (config or {}).items():
        if key not in defaults:
            raise ValueError(f"{where}: unknown config key {key!r}; known: {', '.join(defaults)}")
        merged[key] = value
    return merged


def study_rng(seed: int, name: str) -> np.random.Generator:
    """A generator for study ``name`` from the run's ``seed``, independent of study order."""
    return keyed_rng(seed, name)


@dataclass(frozen=True)
class StudyOutput:
    """One study's results: the table, its figures, its summary and what produced them."""

    name: str
    config: dict[str, Any]
    data: pd.DataFrame
    figures: dict[str, Figure]
    summary: str
    seed: int
    fast: bool
    seconds: float
    files: dict[str, Path] = field(default_factory=dict)


def run_study(
    name: str,
    *,
    overrides: Mapping[str, Any] | None = None,
    seed: int = 2023,
    fast: bool = False,
) -> StudyOutput:
    """Run study ``name`` on its defaults updated by ``overrides``; nothing is written."""
    module = load_study(name)
    config = resolve_config(module.DEFAULTS, overrides, f"study {name!r}")
    start = time.perf_counter()
    df = module.run(config, study_rng(seed, name), fast=fast)
    if not isinstance(df, pd.DataFrame) or df.empty:
        raise TypeError(f"study {name!r}: run() must return a non-empty DataFrame")
    figs = module.figures(df)
    text = module.summary(df)
    return StudyOutput(
        name=name,
        config=config,
        data=df,
        figures=figs,
        summary=text,
        seed=seed,
        fast=fast,
        seconds=time.perf_counter() - start,
    )


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def save_study(output: StudyOutput, out_dir: Path | str) -> dict[str, Path]:
    """Write ``NAME.csv``, each figure as PNG and SVG, ``summary.md`` and ``config.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    csv = out / f"{output.name}.csv"
    output.data.to_csv(csv, index=False)
    files["csv"] = csv
    for key, fig in output.figures.items():
        for ext in ("png", "svg"):
            path = out / f"{key}.{ext}"
            fig.savefig(path, dpi=110 if ext == "png" else None)
            files[f"{key}.{ext}"] = path
    md = out / "summary.md"
    md.write_text(output.summary.rstrip("\n") + "\n", encoding="utf-8")
    files["summary"] = md
    meta = out / "config.json"
    meta.write_text(
        json.dumps(
            {
                "study": output.name,
                "seed": output.seed,
                "fast": output.fast,
                "config": {k: _jsonable(v) for k, v in output.config.items()},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    files["config"] = meta
    output.files.update(files)
    return files
