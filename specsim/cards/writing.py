"""Writing cards: a model or accelerator card as a TOML file that loads back equal.

The reading side, and the search for cards, is :mod:`specsim.cards.files`.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from specsim.cards.files import STACK_FIELDS, load_runtime
from specsim.cards.hardware import HardwareCard
from specsim.cards.model import ModelCard
from specsim.cards.toml_out import toml_table

__all__ = ["write_card", "write_hardware_card"]

_OMIT_AT_DEFAULT = frozenset({"collective_algorithm", "collective_overhead_s"})
"""Fields written only when they differ from their defaults (added after cards were committed,
so that a card written today reads like one written before them)."""


def _stack_or_runtime(card: HardwareCard, table: dict[str, Any]) -> dict[str, Any]:
    """A card naming a profile is written without the numbers that are the profile's; numbers of
    its own (a calibrated card, the deprecated path) are written and win when it is read."""
    near = [Path(card.source_path).parent] if card.source_path else []
    prof = load_runtime(str(card.runtime), search_path=[p for p in near if p.is_dir()] or None)
    same = {k for k in STACK_FIELDS if getattr(card, k) == getattr(prof, k)}
    return {k: v for k, v in table.items() if k not in same}


def write_card(
    card: ModelCard | HardwareCard, path: str | os.PathLike[str], *, header: str = ""
) -> Path:
    """Write ``card`` as a TOML card file that :func:`load_model` or :func:`load_hardware`
    reads back equal (every field; ``source_path`` becomes the new file).

    Fields left at ``None`` are left out (they load back as ``None``); tables
    (``peak_flops``, a ``sources`` table, ``calibration`` with its nested tables)
    follow the plain fields; a ``sources`` list stays a list. ``header`` becomes
    leading comment lines (where the numbers come from). A value TOML cannot hold
    (``None`` inside a table, an object) is a TypeError naming where it is.
    """
    if not isinstance(card, ModelCard | HardwareCard):
        raise TypeError(f"card: expected a ModelCard or a HardwareCard, got {type(card).__name__}")
    table = {
        f.name: getattr(card, f.name)
        for f in fields(card)
        if f.name != "source_path"
        and getattr(card, f.name) is not None
        and not (f.name in _OMIT_AT_DEFAULT and getattr(card, f.name) == f.default)
    }
    if isinstance(card, HardwareCard) and card.runtime is not None:
        table = _stack_or_runtime(card, table)
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += toml_table("", table, card.slug)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def write_hardware_card(
    card: HardwareCard, path: str | os.PathLike[str], *, header: str = ""
) -> Path:
    """Write an accelerator card that :func:`load_hardware` reads back equal (see write_card)."""
    if not isinstance(card, HardwareCard):
        raise TypeError(f"card: expected a HardwareCard, got {type(card).__name__}")
    return write_card(card, path, header=header)
