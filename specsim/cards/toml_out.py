r"""Writing TOML: the values, keys and tables of a card file (used by :mod:`specsim.cards.files`).

>>> print("\n".join(toml_table("", {"slug": "x", "peak": {"float32": 1e12}}, "x")))
slug = "x"
<BLANKLINE>
[peak]
float32 = 1000000000000.0
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Mapping

__all__ = ["toml_table", "toml_value"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: object, where: str) -> str:
    if not isinstance(key, str) or not key:
        raise TypeError(f"{where}: TOML keys are non-empty strings, got {key!r}")
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    # JSON's escapes (\" \\ \n \t \uXXXX for control characters) are all valid in a TOML
    # basic string; TOML also forbids a raw DEL. Non-ASCII stays as UTF-8 (ensure_ascii would
    # write surrogate pairs, which TOML rejects).
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: object, where: str) -> str:
    """One value as TOML: a string, number, boolean, array or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):  # numpy floats too, written as Python floats
        return repr(float(value))  # the shortest form that reads back equal; 'inf', 'nan' too
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(_toml_pair(k, v, where) for k, v in value.items()) + "}"
    raise TypeError(f"{where}: cannot write {value!r} ({type(value).__name__}) to TOML")


def _toml_pair(key: object, value: object, where: str) -> str:
    return f"{_toml_key(key, where)} = {toml_value(value, f'{where}.{key}')}"


def toml_table(header: str, table: Mapping[str, object], where: str) -> list[str]:
    """``[header]`` and its keys; nested tables follow as ``[header.key]`` sections."""
    lines = [f"\n[{header}]"] if header else []
    nested = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            nested.append((key, value))
        elif value is None:
            raise TypeError(f"{where}.{key}: TOML has no null; leave the key out instead")
        else:
            lines.append(_toml_pair(key, value, where))
    for key, value in nested:
        sub = f"{header}.{_toml_key(key, where)}" if header else _toml_key(key, where)
        lines += toml_table(sub, value, f"{where}.{key}")
    return lines
