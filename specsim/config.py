"""The configuration boundary: TOML tables, dicts and ``key=value`` text become frozen dataclasses.

Every configuration in specsim is a frozen dataclass (a simulation's
:class:`specsim.sim.StreamConfig`, a study's ``Config``, a policy, a cost
source). This module turns what users write into them, and nothing else does:

- :func:`build` makes a dataclass from a mapping (a parsed TOML table, a dict
  of overrides). The keys it accepts are the dataclass's own init fields and
  each value is checked against the field's type hint (:func:`coerce`), so no
  table restates a field list: a new field is configurable the moment it
  exists. Unknown keys, missing keys and wrong types raise ValueError naming
  the key, the value and where it came from; the dataclass's ``__post_init__``
  checks ranges, and its message is prefixed the same way.
- :func:`parse_text` and :func:`parse_assignments` read ``--set key=value``
  text by the field's type (numbers, ``true``/``false``, comma-separated
  lists for tuples).
- :func:`replace_path` applies a dotted path (``"acceptance.alpha"``) to a
  nested dataclass with :func:`dataclasses.replace` at every level, the way
  sweeps vary a run.

Fields whose type is a card take a card slug (``"llama-2-7b"``), loaded with
:func:`specsim.cards.load_model` or :func:`specsim.cards.load_hardware`.
Fields whose type is an extension point (an acceptance process, a policy)
take a table with a ``kind`` key when the caller passes ``kinds``: a map from
that type to ``{kind name: constructor}``.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True, kw_only=True)
... class Demo:
...     n: int = 3
...     xs: tuple[float, ...] = (0.5,)
>>> build(Demo, {"xs": [1, 2]}, where="demo")
Demo(n=3, xs=(1.0, 2.0))
>>> parse_assignments(Demo, ["n=7", "xs=0.1,0.2"], where="--set")
{'n': 7, 'xs': (0.1, 0.2)}
>>> replace_path(Demo(), "n", 4, where="sweep")
Demo(n=4, xs=(0.5,))
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

from specsim.cards import HardwareCard, ModelCard, load_hardware, load_model

__all__ = [
    "Kinds",
    "field_types",
    "coerce",
    "build",
    "build_kind",
    "parse_text",
    "parse_assignments",
    "replace_path",
    "has_path",
    "path_hint",
]

Kinds = Mapping[Any, Mapping[str, Any]]
"""For an extension-point type, by ``kind`` name: a dataclass, or a tuple of dataclasses
that are alternative forms of one kind (see :func:`build_kind`)."""

_BY_NAME: dict[type, Callable[[str], Any]] = {ModelCard: load_model, HardwareCard: load_hardware}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def field_types(cls: Any) -> dict[str, Any]:
    """``{name: type hint}`` of the init fields of dataclass ``cls``, in declaration order.

    A hint that cannot be resolved at run time (a name imported for type checking only)
    is ``typing.Any``: its values are passed through unchecked.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"expected a dataclass type, got {cls!r}")
    return _field_types(cls)


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        module = vars(sys.modules.get(cls.__module__, types.ModuleType("_")))
        hints = {}
        for f in dataclasses.fields(cls):
            try:
                hints[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type
            except Exception:  # an unresolvable hint: the class checks
                hints[f.name] = Any
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def _required(cls: type) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def _name(hint: Any) -> str:
    if hint is type(None):
        return "none"
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _fail(where: str, hint: Any, value: Any) -> ValueError:
    return ValueError(f"{where}: expected {_name(hint)}, got {value!r}")


def coerce(value: Any, hint: Any, where: str, *, kinds: Kinds | None = None) -> Any:
    """``value`` checked against the type ``hint`` and converted where that is lossless.

    Integers pass for floats (as floats), lists for tuples, card slugs for cards, tables
    for dataclasses (and, given ``kinds``, tables with a ``kind`` for extension points).
    Raises ValueError naming ``where``, the expected type and the value.
    """
    if kinds and _hashable(hint) and hint in kinds and isinstance(value, Mapping):
        return build_kind(kinds[hint], value, where=where, kinds=kinds)
    if hint is Any or isinstance(hint, typing.TypeVar):
        return tuple(value) if isinstance(value, list) else value
    if _is_union(hint):
        return _coerce_union(value, hint, where, kinds=kinds)
    origin = get_origin(hint)
    if origin is Literal:
        if value in get_args(hint) and not isinstance(value, bool):
            return value
        raise ValueError(f"{where}: expected one of {list(get_args(hint))}, got {value!r}")
    if origin is tuple:
        return _coerce_tuple(value, hint, where)
    if origin is not None:  # other generics (Sequence[...], Mapping[...]): the class checks
        return tuple(value) if isinstance(value, list) else value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _fail(where, hint, value)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _fail(where, hint, value)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _fail(where, hint, value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise _fail(where, hint, value)
    if hint in _BY_NAME:
        if isinstance(value, hint):
            return value
        if isinstance(value, str):
            try:
                return _BY_NAME[hint](value)
            except (ValueError, FileNotFoundError, KeyError) as exc:
                raise ValueError(f"{where}: {exc}") from None
        raise _fail(where, hint, value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return build(hint, value, where=where, kinds=kinds)
    return value


def _coerce_union(value: Any, hint: Any, where: str, *, kinds: Kinds | None) -> Any:
    """``value`` as the first type of the union ``hint`` that takes it (None only if allowed)."""
    args = get_args(hint)
    if value is None:
        if type(None) in args:
            return None
        raise _fail(where, hint, value)
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return coerce(value, arg, where, kinds=kinds)
        except ValueError as exc:
            errors.append(exc)
    if len(errors) == 1:  # one type besides None (``ModelCard | None``): its own reason
        raise errors[0]
    raise _fail(where, hint, value)


def _coerce_tuple(value: Any, hint: Any, where: str) -> tuple[Any, ...]:
    """A list or tuple checked element by element: ``tuple[T, ...]`` or a fixed length."""
    if not isinstance(value, list | tuple):
        raise _fail(where, hint, value)
    args = get_args(hint)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if args and len(args) != len(value):
        raise ValueError(f"{where}: expected {len(args)} values, got {value!r}")
    return tuple(
        coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True))
    )


def _hashable(hint: Any) -> bool:
    try:
        hash(hint)
    except TypeError:
        return False
    return True


def build(cls: type, data: Mapping[str, Any], *, where: str, kinds: Kinds | None = None) -> Any:
    """An instance of dataclass ``cls`` from ``data``, every key and value checked.

    A required field that admits None may be left out (it is None).
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a table, got {data!r}")
    hints = field_types(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(hints)}")
    optional = {k for k, h in hints.items() if _is_union(h) and type(None) in get_args(h)}
    missing = sorted(_required(cls) - set(data) - optional)
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")
    args = {k: coerce(v, hints[k], f"{where}.{k}", kinds=kinds) for k, v in data.items()}
    args |= {k: None for k in (_required(cls) & optional) - set(data)}
    try:
        return cls(**args)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def build_kind(
    constructors: Mapping[str, Any],
    table: Mapping[str, Any],
    *,
    where: str,
    kinds: Kinds | None = None,
) -> Any:
    """The object a ``{kind = NAME, ...}`` table names, built by :func:`build` from the rest
    of the table. ``constructors[NAME]`` is a dataclass, or a tuple of dataclasses that are
    alternative forms of one kind: the first whose fields hold every key and whose required
    fields are all given."""
    if not isinstance(table, Mapping) or "kind" not in table:
        raise ValueError(f"{where}: expected a table with a 'kind' key, got {table!r}")
    kind = table["kind"]
    if not isinstance(kind, str) or kind not in constructors:
        raise ValueError(f"{where}.kind: unknown kind {kind!r}; known: {sorted(constructors)}")
    rest = {k: v for k, v in table.items() if k != "kind"}
    forms = constructors[kind]
    forms = forms if isinstance(forms, tuple) else (forms,)
    allowed = sorted({k for f in forms for k in field_types(f)})
    unknown = sorted(set(rest) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {allowed}")
    form = next(
        (f for f in forms if set(rest) <= set(field_types(f)) and _required(f) <= set(rest)),
        max(forms, key=lambda f: len(set(rest) & set(field_types(f)))),
    )
    try:
        return build(form, rest, where=f"{where} ({kind})", kinds=kinds)
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(where) else f"{where} ({kind}): {text}") from None


def _scalar(text: str, hint: Any, key: str) -> Any:
    text = text.strip()
    if hint is bool:
        low = text.lower()
        if low in _TRUE | _FALSE:
            return low in _TRUE
        raise ValueError(f"{key}={text!r}: expected true or false")
    if hint is int:
        try:
            f = float(text)
        except ValueError:
            raise ValueError(f"{key}={text!r}: expected an integer") from None
        if not f.is_integer():
            raise ValueError(f"{key}={text!r}: expected an integer")
        return int(f)
    if hint is float:
        try:
            v = float(text)
        except ValueError:
            raise ValueError(f"{key}={text!r}: expected a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{key}={text!r}: expected a finite number")
        return v
    if get_origin(hint) is Literal:
        if text in get_args(hint):
            return text
        raise ValueError(f"{key}={text!r}: expected one of {list(get_args(hint))}")
    if not text:
        raise ValueError(f"{key}: empty value")
    return text


def parse_text(text: str, hint: Any, key: str) -> Any:
    """``text`` read as a value of type ``hint`` (tuples: comma-separated items)."""
    if _is_union(hint):
        args = [a for a in get_args(hint) if a is not type(None)]
        if type(None) in get_args(hint) and text.strip().lower() == "none":
            return None
        errors = []
        for arg in args:
            try:
                return parse_text(text, arg, key)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"{key}={text!r}: cannot parse")
    if get_origin(hint) is tuple:
        parts = get_args(hint)
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise ValueError(f"{key}: expected a comma-separated list, got {text!r}")
        if len(parts) == 2 and parts[1] is Ellipsis:
            return tuple(_scalar(t, parts[0], key) for t in items)
        if len(items) != len(parts):
            raise ValueError(f"{key}={text!r}: expected {len(parts)} comma-separated values")
        return tuple(_scalar(t, a, key) for t, a in zip(items, parts, strict=True))
    return _scalar(text, hint, key)


def parse_assignments(cls: type, items: Iterable[str], *, where: str) -> dict[str, Any]:
    """``["key=value", ...]`` as ``{key: value}`` typed by the fields of dataclass ``cls``."""
    hints = field_types(cls)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{where}: expected key=value, got {item!r}")
        if key not in hints:
            raise ValueError(f"{where}: unknown key {key!r}; known keys: {', '.join(hints)}")
        try:
            out[key] = parse_text(value, hints[key], key)
        except ValueError as exc:
            raise ValueError(f"{where} {exc}") from None
    return out


def has_path(obj: Any, path: str) -> str | None:
    """None when the dotted ``path`` names a field of ``obj`` (nested dataclasses), else why not."""
    node = obj
    parts = path.split(".")
    for i, name in enumerate(parts):
        if not dataclasses.is_dataclass(node):
            return f"{'.'.join(parts[:i])!r} is not a table"
        if name not in field_types(type(node)):
            at = ".".join(parts[:i]) or "the config"
            return f"{at} ({type(node).__name__}) has no field {name!r}"
        node = getattr(node, name)
    return None


def replace_path(obj: Any, path: str, value: Any, *, where: str, kinds: Kinds | None = None) -> Any:
    """``obj`` with the field at dotted ``path`` set to ``value`` (checked by its type hint),
    through :func:`dataclasses.replace` on every dataclass along the path."""
    why = has_path(obj, path)
    if why is not None:
        raise ValueError(f"{where}: {path!r}: {why}")
    return _replace(obj, path.split("."), value, f"{where}: {path}", kinds)


def _replace(obj: Any, parts: list[str], value: Any, where: str, kinds: Kinds | None) -> Any:
    head = parts[0]
    if len(parts) > 1:
        new = _replace(getattr(obj, head), parts[1:], value, where, kinds)
    else:
        new = coerce(value, field_types(type(obj))[head], where, kinds=kinds)
    try:
        return dataclasses.replace(obj, **{head: new})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def path_hint(obj: Any, path: str) -> Any:
    """The type hint of the field at dotted ``path`` in nested dataclass ``obj``."""
    why = has_path(obj, path)
    if why is not None:
        raise ValueError(f"{path!r}: {why}")
    *parents, last = path.split(".")
    node = obj
    for name in parents:
        node = getattr(node, name)
    return field_types(type(node))[last]
