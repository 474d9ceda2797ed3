"""The records engine benchmark outputs hold, and their fields read with errors naming the
file, record and field (:mod:`specsim.calibrate.engine_outputs`,
:mod:`specsim.calibrate.engine_spec`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.checks import LIMITS, NESTED_TOO_DEEPLY

__all__ = ["DecodeRun", "read_records", "number_field", "integer_field"]


@dataclass(frozen=True, kw_only=True)
class DecodeRun:
    """One measured plain decode configuration: ``step_s`` per step of ``batch`` sequences
    at a mean context of ``context`` tokens, read from ``source`` in format ``engine``."""

    engine: str
    source: str
    batch: int
    context: float
    step_s: float


def _text(path: Path) -> str:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:  # a binary file: the engines write UTF-8 JSON
        raise ValueError(
            f"{path}: not a UTF-8 JSON file (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None
    if not text.strip():
        raise ValueError(f"{path}: the file is empty (no JSON in it)")
    return text


def read_records(path: Path) -> list[Any]:
    """The records of one engine output: a JSON object or array, or JSON lines; a ValueError
    naming the file for one that is not UTF-8 text, empty, not JSON or nested too deeply."""
    text = _text(path)
    try:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            try:
                return [json.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: neither JSON nor JSON lines ({exc})") from None
    except RecursionError:  # json parses nested arrays and objects by recursion
        raise ValueError(f"{path}: {NESTED_TOO_DEEPLY}") from None
    return data if isinstance(data, list) else [data]


def number_field(where: str, rec: dict[str, Any], key: str, *, positive: bool = True) -> float:
    """``rec[key]`` as a float: a finite number (positive unless ``positive`` is false), else
    a ValueError naming ``where`` (the file and record) and the field."""
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: field {key!r} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{where}: field {key!r} must be positive, got {value!r}")
    return float(value)


def integer_field(
    where: str, rec: dict[str, Any], key: str, *, minimum: int = 1, limit: str = "tokens"
) -> int:
    """``rec[key]`` as an int: a whole number (``8`` or ``8.0``) of at least ``minimum`` and
    within the size limit ``limit`` (:data:`specsim.checks.LIMITS`: a batch, a token count),
    else a ValueError naming ``where`` and the field: a batch of 2.7 is an error, not 2."""
    value = number_field(where, rec, key, positive=False)
    if not value.is_integer() or value < minimum:
        raise ValueError(
            f"{where}: field {key!r} must be a whole number >= {minimum}, got {rec.get(key)!r}"
        )
    lim = LIMITS[limit]
    if value > lim.most:
        shown = f"{value:,.0f}" if value < 1e15 else f"{value:g}"
        raise ValueError(
            f"{where}: field {key!r} is {shown} {lim.unit}, over the limit of {lim.most:,} "
            "(docs/reference/limits.md)"
        )
    return int(value)
