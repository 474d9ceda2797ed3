"""Field checks shared by the card dataclasses, and the dtypes a card may name.

Each check raises TypeError (wrong kind of value) or ValueError (out of range)
with the card (its file, or its kind and slug), the field and the value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from specsim import checks

__all__ = [
    "DTYPE_BYTES",
    "card_label",
    "check_int",
    "check_float",
    "check_str",
    "check_bool",
    "check_sources",
]

DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "float8": 1.0,
    "int8": 1.0,
}
"""Bytes per element of each dtype a card or a pass may name."""


def card_label(path: str | None, kind: str, slug: object) -> str:
    """How an error names a card: its file when it came from one, else its kind and slug."""
    return path if path else f"{kind} card {slug!r}"


def check_int(where: str, name: str, value: object, *, minimum: int) -> None:
    """:func:`specsim.checks.check_int` of a card's field (the message names card and field)."""
    checks.check_int(value, name=f"{where}: field {name!r}", minimum=minimum)


def check_float(
    where: str, name: str, value: object, *, minimum: float = 0.0, strict: bool = False
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where}: field {name!r} must be a number, got {value!r}")
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise ValueError(f"{where}: field {name!r} must be finite and {bound}, got {value}")


def check_str(where: str, name: str, value: object, choices: Sequence[str] = ()) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    if choices and value not in choices:
        raise ValueError(f"{where}: field {name!r} must be one of {list(choices)}, got {value!r}")


def check_bool(where: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: field {name!r} must be true or false, got {value!r}")


def check_sources(where: str, value: object) -> None:
    """``sources`` is a table (what -> where from) or a list of strings, not empty."""
    keyed: Iterable[tuple[object, object]]
    if isinstance(value, Mapping):
        keyed = value.items()
    elif isinstance(value, list | tuple):
        keyed = enumerate(value)
    else:
        raise TypeError(f"{where}: field 'sources' must be a table or a list, got {value!r}")
    if not value:
        raise ValueError(f"{where}: field 'sources' must hold at least one non-empty string")
    for key, v in keyed:
        if isinstance(v, str) and v:
            continue
        if isinstance(value, Mapping) and isinstance(v, int | float) and not isinstance(v, bool):
            # [sources] is the last table of a card, so a key written below it lands in it.
            raise ValueError(
                f"{where}: `{key}` = {v!r} in [sources]: a number here is probably a misplaced "
                "key (a card field written below the [sources] table belongs above it)"
            )
        at = f"[sources] `{key}`" if isinstance(value, Mapping) else f"sources[{key}]"
        raise ValueError(
            f"{where}: {at} must be a non-empty string (where a value comes from), got {v!r}"
        )
