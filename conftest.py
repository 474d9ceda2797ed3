"""Doctest collection leaves out the modules whose optional extra is not installed.

``pytest`` collects ``specsim/`` with ``--doctest-modules`` (pyproject), which
imports every module. The parts below need an optional extra; without it their
doctests are not collected, and the test session's header says which extra to
install. The tests of those parts skip on their own (``pytest.importorskip``,
naming the extra). ``make test`` installs every extra, so it collects everything.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent

# A folder or module of the package -> (the extra that provides its imports, those imports).
_OPTIONAL: dict[str, tuple[str, tuple[str, ...]]] = {
    "specsim/measure": ("measure", ("torch", "transformers", "tokenizers")),
}


def _missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _left_out() -> dict[str, tuple[str, list[str]]]:
    """Each optional part whose extra is incomplete -> (the extra, the missing imports)."""
    out = {}
    for part, (extra, modules) in _OPTIONAL.items():
        missing = _missing(modules)
        if missing:
            out[part] = (extra, missing)
    return out


_LEFT_OUT = _left_out()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    for part in _LEFT_OUT:
        if collection_path.resolve().is_relative_to(_ROOT / part):
            return True
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"doctests of {part}/ left out: needs the {extra} extra ({', '.join(missing)} missing): "
        f"pip install -e .[{extra}]"
        for part, (extra, missing) in _LEFT_OUT.items()
    ]
