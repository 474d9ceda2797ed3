"""Find, configure, run and save the what-if studies.

A study is a module of the ``studies`` package (``studies/`` in a checkout,
``specsim/_studies`` in an installed wheel) with four names:

- ``Config``: a flat, frozen, keyword-only dataclass of settings with defaults
  on real cards, validated in ``__post_init__``;
- ``run(config, rng, *, fast=False) -> pandas.DataFrame``: the tidy results;
- ``figures(df) -> dict[str, matplotlib.figure.Figure]``: drawn from the table only;
- ``summary(df) -> str``: a short markdown account, every number computed from ``df``.

This module loads studies by name (:func:`load_study`), builds a study's
config from overrides through the configuration boundary :mod:`specsim.config`
(:func:`study_config`; ``key=value`` text with :func:`parse_overrides`), runs a
study (:func:`run_study`) and writes its CSV, PNG and SVG figures and
``summary.md`` to a folder (:func:`save_study`).

>>> "paper" in study_names()
True
>>> parse_overrides(load_study("bill").Config, ["gammas=2,5", "mission_alpha=0.3"])
{'gammas': (2, 5), 'mission_alpha': 0.3}
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specsim.config import build, parse_assignments
from specsim.rng import keyed_rng

if TYPE_CHECKING:  # the figures' type only: importing the runner does not load matplotlib
    from matplotlib.figure import Figure

__all__ = [
    "STUDY_NAMES",
    "StudyOutput",
    "studies_package",
    "study_names",
    "load_study",
    "study_config",
    "config_keys",
    "KEY_DOCS",
    "key_doc",
    "parse_overrides",
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
    "engine",
    "proposers",
    "frontier",
    "crossover",
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
    root = Path(__file__).resolve().parents[2] / "studies"
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
    for attr in ("Config", "run", "figures", "summary"):
        if not hasattr(module, attr):
            raise TypeError(f"study {name!r}: module {module.__file__} lacks {attr!r}")
    return module


def parse_overrides(config_class: type, items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` typed by the fields of a study's ``Config`` (lists:
    comma-separated); unknown keys and unreadable values raise ValueError naming them."""
    return parse_assignments(config_class, items, where="--set")


def study_config(name: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """Study ``name``'s ``Config`` with ``overrides`` (checked by the configuration boundary)."""
    return build(load_study(name).Config, dict(overrides or {}), where=f"study {name!r}")


def config_keys(config: Any) -> dict[str, Any]:
    """A study config's settings as ``{key: value}``, in declaration order."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


KEY_DOCS: dict[str, tuple[str, str]] = {
    "target": ("target model card (slug)", ""),
    "draft": ("draft model card (slug)", ""),
    "drafts": ("draft model cards compared (slugs)", ""),
    "hardware": ("accelerator card(s) (slug)", ""),
    "tensor_parallel": (
        "devices per model replica (0: the smallest power of two that fits)",
        "devices",
    ),
    "alpha": ("mean acceptance probability of a draft token", "probability"),
    "alphas": ("mean acceptance probabilities compared", "probability"),
    "gamma": ("draft tokens per verification pass", "tokens"),
    "gammas": ("lookaheads compared (draft tokens per pass)", "tokens"),
    "max_gamma": ("largest lookahead a policy may choose", "tokens"),
    "context": ("tokens already in the KV cache when a pass is costed", "tokens"),
    "prompt": ("prompt length of each stream", "tokens"),
    "tokens": ("tokens decoded per simulated stream", "tokens"),
    "streams": ("simulated streams", "count"),
    "requests": ("requests served per simulated run", "count"),
    "rate_per_s": ("request arrival rate (Poisson)", "1/s"),
    "prompt_tokens": ("prompt length range of a request (low, high)", "tokens"),
    "output_tokens": ("output length range of a request (low, high)", "tokens"),
    "max_batch": ("most requests in one batch", "requests"),
    "persistence": (
        "probability that the acceptance state carries over to the next position",
        "probability",
    ),
    "batches": ("batch sizes compared", "sequences"),
    "policy": ("lookahead policy", ""),
    "slo_tpot_p99_s": ("service-level objective on the 99th-percentile time per output token", "s"),
    "slo_ttft_p99_s": ("service-level objective on the 99th-percentile time to first token", "s"),
}
"""Meaning and unit of the settings the studies share, by key: what ``--list-keys`` shows
for a key whose field carries no ``metadata={"doc": ..., "unit": ...}`` of its own."""


def key_doc(config_class: type, key: str) -> tuple[str, str]:
    """``(meaning, unit)`` of setting ``key`` of a study's ``Config`` ("" where not known).

    The field's own ``metadata`` (``doc``, ``unit``) first, then :data:`KEY_DOCS`; a
    ``fast_X`` key is X in the fast form (``--fast``), and a key ending in ``_s`` is
    in seconds.
    """
    meta: Mapping[str, Any] = next(
        (f.metadata for f in dataclasses.fields(config_class) if f.name == key), {}
    )
    doc, unit = KEY_DOCS.get(key, ("", ""))
    if not doc and key.startswith("fast_"):
        base_doc, unit = key_doc(config_class, key.removeprefix("fast_"))
        doc = f"{base_doc or key.removeprefix('fast_')}, in the fast form (--fast)"
    if not unit and key.endswith("_s") and not key.endswith("_per_s"):
        unit = "s"
    return str(meta.get("doc", doc)), str(meta.get("unit", unit))


def study_rng(seed: int, name: str) -> np.random.Generator:
    """A generator for study ``name`` from the run's ``seed``, independent of study order."""
    return keyed_rng(seed, name)


@dataclass(frozen=True)
class StudyOutput:
    """One study's results: the table, its figures, its summary and what produced them."""

    name: str
    config: Any
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
    progress: Callable[[int, int, str], None] | None = None,
) -> StudyOutput:
    """Run study ``name`` on its defaults updated by ``overrides``; nothing is written.

    ``progress(done, total, label)``, if given, hears of every serving run of the
    capacity searches the study makes (:func:`specsim.capacity.planner.reporting`).
    """
    module = load_study(name)
    config = study_config(name, overrides)
    start = time.perf_counter()
    if progress is None:
        df = module.run(config, study_rng(seed, name), fast=fast)
    else:
        from specsim.capacity.planner import reporting  # start-up: loads the simulator

        with reporting(progress):
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
                "config": {k: _jsonable(v) for k, v in config_keys(output.config).items()},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    files["config"] = meta
    output.files.update(files)
    return files
