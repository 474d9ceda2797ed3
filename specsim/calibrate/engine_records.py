"""The records engine benchmark outputs hold, and their fields read with errors naming the
file, record and field (:mod:`specsim.calibrate.engine_outputs`,
:mod:`specsim.calibrate.engine_spec`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DecodeRun", "read_records", "number_field"]


@dataclass(frozen=True, kw_only=True)
class DecodeRun:
    """One measured plain decode configuration: ``step_s`` per step of ``batch`` sequences
    at a mean context of ``context`` tokens, read from ``source`` in format ``engine``."""

    engine: str
    source: str
    batch: int
    context: float
    step_s: float


def read_records(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: neither JSON nor JSON lines ({exc})") from None
    return data if isinstance(data, list) else [data]


def number_field(where: str, rec: dict[str, Any], key: str, *, positive: bool = True) -> float:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: field {key!r} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{where}: field {key!r} must be positive, got {value!r}")
    return float(value)
