"""Card files: where cards are found, reading them, and writing them back.

This is the only module of specsim that reads TOML (:func:`read_toml` serves
simulation configs and sweep specs too) and the only one that writes cards.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, TypeVar

from specsim.cards.folders import (
    ENV_VAR,
    SearchPath,
    search_list,
    searched_first,
    user_folders,
)
from specsim.cards.hardware import HardwareCard
from specsim.cards.model import ModelCard
from specsim.cards.root import packaged_root
from specsim.cards.runtime import RuntimeProfile, check_runtime_device
from specsim.cards.stack import StackProfile
from specsim.checks import NESTED_TOO_DEEPLY

__all__ = [
    "ENV_VAR",
    "SearchPath",
    "packaged_root",
    "CARD_KINDS",
    "HEAD_KINDS",
    "PROPOSER_KINDS",
    "card_dirs",
    "card_kind",
    "card_paths",
    "find_card",
    "found_cards",
    "searched_first",
    "load_model",
    "load_hardware",
    "load_runtime",
    "list_models",
    "list_hardware",
    "list_runtimes",
    "read_toml",
    "parse_toml",
    "build_card",
]

_Card = TypeVar("_Card", ModelCard, HardwareCard, RuntimeProfile)
_AnyCard = TypeVar("_AnyCard")
_SUBDIRS = {
    "lm": ("lm",),
    "hardware": ("hardware", "calibrated"),
    "runtime": ("runtime",),
    "heads": ("heads",),
    "proposers": ("proposers",),
    "stacks": ("stacks",),
}
_WHAT = {
    "lm": "model card",
    "hardware": "hardware card",
    "runtime": "runtime card",
    "heads": "head card",
    "proposers": "proposer card",
    "stacks": "stack profile",
}
CARD_KINDS = tuple(_SUBDIRS)
"""The kinds of card, each with its subfolders of a card folder (:func:`card_dirs`)."""
HEAD_KINDS = ("parallel", "autoregressive", "mtp")
"""A head card's ``kind`` (:class:`specsim.cards.HeadCard`)."""
PROPOSER_KINDS = ("parallel", "self-speculation", "streaming-self-speculation")
"""A proposer card's ``kind`` (:mod:`specsim.cards.proposer_cards`)."""
_STACK_ONLY = frozenset(f.name for f in fields(StackProfile)) - {
    f.name for f in fields(RuntimeProfile)
}
_RUNTIME_ONLY = (
    frozenset(f.name for f in fields(RuntimeProfile))
    - {f.name for f in fields(StackProfile)}
    - {"stack_profile"}
)


def card_kind(data: dict[str, Any]) -> str | None:
    """The kind of card a TOML table is, from its fields (None: no card of specsim's).

    The one rule for a card lying directly in a card folder (in a kind's own subfolder,
    ``lm/``, ``hardware/``, ``calibrated/``, ``runtime/``, ``heads/``, ``proposers/``,
    ``stacks/``, every file is of that kind): ``peak_flops`` makes a hardware card,
    ``architecture`` a model card, ``layer_fraction`` or a head ``kind`` (``autoregressive``,
    ``mtp``) a head card, a proposer ``kind`` a proposer card; a field only stack profiles
    have (``verify``, ``trees``, ``draft_worker``, ...) a stack profile, one only runtime
    profiles have (``stack``, ``compute_efficiency``, ...) a runtime profile. So a stack
    that lacks ``verify`` is still a stack, and its error names the missing field.
    """
    kind = data.get("kind")
    if "peak_flops" in data:
        return "hardware"
    if "architecture" in data:
        return "lm"
    if "layer_fraction" in data or kind in ("autoregressive", "mtp"):
        return "heads"
    if kind in PROPOSER_KINDS:
        return "proposers"
    if _STACK_ONLY & set(data):
        return "stacks"
    if _RUNTIME_ONLY & set(data):
        return "runtime"
    return None


def _search(kind: str, search_path: SearchPath) -> list[tuple[Path, bool, bool]]:
    """``(folder, only this kind, shipped)`` for every folder searched for ``kind``, in order:
    each user folder (its files of any kind) and its subfolders for the kind, then the
    shipped cards' subfolders."""
    if kind not in _SUBDIRS:
        raise ValueError(f"kind: expected one of {sorted(_SUBDIRS)}, got {kind!r}")
    subdirs = _SUBDIRS[kind]
    out: list[tuple[Path, bool, bool]] = []
    for root in user_folders(search_path):
        out.append((root, False, False))
        out += [(root / s, True, False) for s in subdirs if (root / s).is_dir()]
    packaged = packaged_root()
    if packaged is not None:
        out += [(packaged / s, True, True) for s in subdirs if (packaged / s).is_dir()]
    return out


def card_dirs(kind: str, search_path: SearchPath = None) -> list[Path]:
    """Folders searched for cards of ``kind`` (one of :data:`CARD_KINDS`), in order: each
    folder of ``search_path`` and of :data:`ENV_VAR` with its subfolders for the kind, then
    the packaged cards'."""
    return [d for d, _, _ in _search(kind, search_path)]


def parse_toml(text: str, *, source: str) -> dict[str, Any]:
    """The table of TOML ``text``; a ValueError starting with ``source`` (the file, or the
    flag that named it) when the text is not valid TOML or nests too deeply to parse."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise ValueError(f"{source}: {NESTED_TOO_DEEPLY}") from None


def _read(path: Path) -> dict[str, Any]:
    """The table of TOML file ``path``; a ValueError naming the file when it is not TOML."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:  # a binary file: TOML is UTF-8 text
        raise ValueError(
            f"{path}: not a UTF-8 TOML file (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None
    # Bytes decoded as tomllib.load does (no newline translation, unlike read_text).
    return parse_toml(text, source=str(path))


_NOUN = {
    "ModelCard": "model card",
    "HardwareCard": "hardware card",
    "RuntimeProfile": "runtime profile",
    "StackProfile": "stack profile",
    "DevicePart": "device part",
}


def build_card(
    cls: type[_AnyCard], data: dict[str, Any], path: Path, *, label: str = ""
) -> _AnyCard:
    """A card of dataclass ``cls`` from one file's table, naming unknown and missing fields;
    with ``label`` (``"head"``, ``"proposer"``) the file must be named after the card's slug."""
    keys = {f.name for f in fields(cls)} - {"source_path"}  # type: ignore[arg-type]
    what = _NOUN.get(cls.__name__, f"{label} card")
    unknown = sorted(set(data) - keys)
    if unknown:
        raise ValueError(
            f"{path}: unknown field(s) {unknown} of a {what}; known fields: {sorted(keys)}"
        )
    missing = sorted(
        f.name
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name in keys
        and f.name not in data
        and f.default is MISSING
        and f.default_factory is MISSING
    )
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing} of a {what}")
    card = cls(**data, source_path=str(path))  # type: ignore[call-arg]
    slug = getattr(card, "slug", path.stem)
    if label and slug != path.stem:
        raise ValueError(f"{path}: holds the {label} card {slug!r}; name the file {slug}.toml")
    return card


STACK_FIELDS = ("compute_efficiency", "memory_efficiency", "layer_overhead_s", "pass_overhead_s")
"""The software-stack numbers a hardware card takes from the runtime profile it names."""


def _hardware(path: Path, search_path: SearchPath) -> HardwareCard:
    """A hardware card from ``path``, the :data:`STACK_FIELDS` it does not set filled from the
    runtime profile it names (looked up beside the card, then on the search path); the profile
    must suit it."""
    data = _read(path)
    name = data.get("runtime")
    if name is None:
        return build_card(HardwareCard, data, path)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{path}: field 'runtime' must be a profile slug, got {name!r}")
    try:
        prof = load_runtime(name, search_path=[path.parent, *search_list(search_path)])
    except ValueError as exc:
        raise ValueError(f"{path}: runtime: {exc}") from exc
    # Numbers the card sets itself (a calibrated card: the deprecated path) win over the
    # profile's; the profile fills the rest.
    card = build_card(HardwareCard, {**{k: getattr(prof, k) for k in STACK_FIELDS}, **data}, path)
    try:
        check_runtime_device(prof, card)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    return card


def _slug_of(data: dict[str, Any]) -> object:
    return data.get("slug")


def _direct(kind: str, slug_or_path: object) -> tuple[str, Path | None]:
    """``(text, path)``: the slug or path as text, and the file when it names one."""
    if not isinstance(slug_or_path, str | os.PathLike):
        raise TypeError(
            f"card: expected a card slug or a path to a .toml file, got {slug_or_path!r}"
        )
    text = os.fspath(slug_or_path)
    if not isinstance(text, str) or not text:
        raise TypeError(f"card: expected a slug or a .toml path, got {slug_or_path!r}")
    direct = Path(text)
    if not (text.endswith(".toml") or direct.is_file()):
        return text, None
    if direct.is_dir():
        raise ValueError(f"{text}: a folder, not a card file")
    if not direct.is_file():
        raise FileNotFoundError(f"card file {text!r} does not exist")
    return text, direct


def found_cards(kind: str, text: str, search_path: SearchPath = None) -> list[Path]:
    """Every file that answers for the slug ``text`` among the cards of ``kind``, the user's
    first: by its name, or (in a user folder) by its ``slug`` field. A card is looked up by
    file name, so a file named for another card, or two files of one slug among the user's
    folders (or among the shipped ones), would make a lookup pick a card the user did not
    mean: each is a ValueError naming the files. A user's card stands in for a shipped one
    of the same slug (it comes first, on purpose)."""
    what = _WHAT[kind]
    user: list[Path] = []
    shipped: list[Path] = []
    seen: set[Path] = set()
    for d, only, packaged in _search(kind, search_path):
        paths = [d / f"{text}.toml"] if packaged else sorted(d.glob("*.toml"))
        for candidate in paths:
            if not candidate.is_file() or candidate.resolve() in seen:
                continue
            data = _read(candidate)
            if not only and card_kind(data) != kind:
                continue
            if candidate.stem != text and _slug_of(data) != text:
                continue
            slug = _slug_of(data)
            if slug != candidate.stem:
                raise ValueError(
                    f"{candidate} holds the {what} {slug!r}, but a card is looked up by its "
                    f"file name ({candidate.name!r}); name the file {slug}.toml"
                )
            seen.add(candidate.resolve())
            (shipped if packaged else user).append(candidate)
    for group in (user, shipped):
        if len(group) > 1:
            raise ValueError(
                f"the {what} {text!r} is found twice on the search path: "
                f"{group[0]} and {group[1]}; remove or rename one"
            )
    return user + shipped


def find_card(
    kind: str, slug_or_path: str | os.PathLike[str], search_path: SearchPath = None
) -> Path:
    """The file of the card of ``kind`` a slug names (:func:`found_cards`), or the ``.toml``
    path given; a ValueError naming the known slugs and the folders searched when none."""
    text, direct = _direct(kind, slug_or_path)
    if direct is not None:
        return direct
    found = found_cards(kind, text, search_path)
    if found:
        return found[0]
    dirs = card_dirs(kind, search_path)
    known = ", ".join(p.stem for p in card_paths(kind, search_path))
    raise ValueError(
        f"no {_WHAT[kind]} {text!r} (known: {known}; searched: {', '.join(str(d) for d in dirs)})"
    )


def load_model(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> ModelCard:
    """Load a language-model card by slug (``"llama-2-7b"``) or from a ``.toml`` path."""
    path = find_card("lm", slug_or_path, search_path)
    return build_card(ModelCard, _read(path), path)


def load_hardware(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> HardwareCard:
    """Load an accelerator card by slug (``"a100-80gb"``) or from a ``.toml`` path."""
    return _hardware(find_card("hardware", slug_or_path, search_path), search_path)


def load_runtime(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> RuntimeProfile:
    """Load a runtime profile by slug (``"gpt-fast-a100"``) or from a ``.toml`` path
    (``models/runtime/``; :mod:`specsim.cards.runtime`)."""
    path = find_card("runtime", slug_or_path, search_path)
    return build_card(RuntimeProfile, _read(path), path)


def card_paths(kind: str, search_path: SearchPath = None) -> list[Path]:
    """The file of every card of ``kind`` found (:func:`card_kind` in a folder that mixes
    kinds), sorted by slug; the first of each slug wins (a user's before a shipped one)."""
    seen: dict[str, Path] = {}
    for d, only, _ in _search(kind, search_path):
        for path in sorted(d.glob("*.toml")):
            if path.stem not in seen and (only or card_kind(_read(path)) == kind):
                seen[path.stem] = path
    return [seen[k] for k in sorted(seen)]


def list_models(*, search_path: SearchPath = None) -> list[ModelCard]:
    """Every language-model card found, sorted by slug (the first of each slug wins)."""
    return [build_card(ModelCard, _read(p), p) for p in card_paths("lm", search_path)]


def list_hardware(*, search_path: SearchPath = None) -> list[HardwareCard]:
    """Every accelerator card found (base and calibrated), sorted by slug."""
    return [_hardware(p, search_path) for p in card_paths("hardware", search_path)]


def list_runtimes(*, search_path: SearchPath = None) -> list[RuntimeProfile]:
    """Every runtime profile found, sorted by slug."""
    return [build_card(RuntimeProfile, _read(p), p) for p in card_paths("runtime", search_path)]


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read any specsim TOML file (cards, simulation configs, sweep specs): the one reader.

    Raises FileNotFoundError naming a missing file and ValueError for a folder, a file that
    is not UTF-8 text (a binary file) or invalid TOML, each naming the file.
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{p}: a folder, not a TOML file")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    return _read(p)
