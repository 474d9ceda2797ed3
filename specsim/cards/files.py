"""Card files: where cards are found, reading them, and writing them back.

This is the only module of specsim that reads TOML (:func:`read_toml` serves
simulation configs and sweep specs too) and the only one that writes cards.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, TypeVar

from specsim.cards.hardware import HardwareCard
from specsim.cards.model import ModelCard
from specsim.cards.root import packaged_root
from specsim.cards.runtime import RuntimeProfile, check_runtime_device
from specsim.checks import NESTED_TOO_DEEPLY

__all__ = [
    "ENV_VAR",
    "SearchPath",
    "packaged_root",
    "card_dirs",
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

ENV_VAR = "SPECSIM_CARDS"
"""Environment variable naming extra card folders (``os.pathsep``-separated)."""

SearchPath = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

_Card = TypeVar("_Card", ModelCard, HardwareCard, RuntimeProfile)
_AnyCard = TypeVar("_AnyCard")
_SUBDIRS = {
    "lm": ("lm",),
    "hardware": ("hardware", "calibrated"),
    "runtime": ("runtime",),
    "heads": ("heads",),
    "proposers": ("proposers",),
}
_WHAT = {
    "lm": "model",
    "hardware": "hardware",
    "runtime": "runtime",
    "heads": "head",
    "proposers": "proposer",
}


def card_dirs(kind: str, search_path: SearchPath = None) -> list[Path]:
    """Folders searched for cards of ``kind`` ("lm", "hardware", "runtime", "heads" or
    "proposers"), in
    order: each of ``search_path`` and :data:`ENV_VAR`'s folders with its subfolder for the
    kind, then the packaged cards'."""
    if kind not in _SUBDIRS:
        raise ValueError(f"kind: expected one of {sorted(_SUBDIRS)}, got {kind!r}")
    subdirs = _SUBDIRS[kind]
    if search_path is None:
        user: list[Path] = []
    elif isinstance(search_path, str | os.PathLike):
        user = [Path(search_path)]
    else:
        user = [Path(p) for p in search_path]
    for root in user:
        _check_folder(root, "search_path")
    env = os.environ.get(ENV_VAR, "")
    for root in (Path(p) for p in env.split(os.pathsep) if p):
        _check_folder(root, f"{ENV_VAR}={os.fspath(root)}", named=True)
        user.append(root)
    out: list[Path] = []
    for root in user:
        out.append(root)
        out += [root / s for s in subdirs if (root / s).is_dir()]
    packaged = packaged_root()
    if packaged is not None:
        out += [packaged / s for s in subdirs if (packaged / s).is_dir()]
    return out


def _check_folder(folder: Path, where: str, *, named: bool = False) -> None:
    """A ValueError unless ``folder`` is an existing folder; the message starts with ``where``
    (followed by the folder unless ``named``: ``SPECSIM_CARDS=/x`` names it already)."""
    if folder.is_dir():
        return
    why = "not a folder" if folder.exists() else "no such folder"
    raise ValueError(f"{where}: {why}" if named else f"{where}: {os.fspath(folder)!r}: {why}")


@contextlib.contextmanager
def searched_first(folders: Sequence[str | os.PathLike[str]] | None) -> Iterator[None]:
    """Within the ``with`` block, every card lookup searches ``folders`` first.

    For code that loads cards by slug without a ``search_path`` (simulation
    configs, studies): the folders are put in front of :data:`ENV_VAR` for the
    block (so processes started inside see them too) and the variable is put
    back after it. Each folder must exist (ValueError naming ``cards``).
    """
    if not folders:
        yield
        return
    for folder in folders:
        _check_folder(Path(folder), "cards")
    before = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = os.pathsep.join(
        [os.fspath(f) for f in folders] + ([before] if before else [])
    )
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = before


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


def build_card(
    cls: type[_AnyCard], data: dict[str, Any], path: Path, *, label: str = ""
) -> _AnyCard:
    """A card of dataclass ``cls`` from one file's table, naming unknown and missing fields;
    with ``label`` (``"head"``, ``"proposer"``) the file must be named after the card's slug."""
    keys = {f.name for f in fields(cls)} - {"source_path"}  # type: ignore[arg-type]
    unknown = sorted(set(data) - keys)
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {unknown}; known fields: {sorted(keys)}")
    missing = sorted(
        f.name
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name in keys
        and f.name not in data
        and f.default is MISSING
        and f.default_factory is MISSING
    )
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}")
    card = cls(**data, source_path=str(path))  # type: ignore[call-arg]
    slug = getattr(card, "slug", path.stem)
    if label and slug != path.stem:
        raise ValueError(f"{path}: holds the {label} card {slug!r}; name the file {slug}.toml")
    return card


STACK_FIELDS = ("compute_efficiency", "memory_efficiency", "layer_overhead_s", "pass_overhead_s")
"""The software-stack numbers a hardware card takes from the runtime profile it names."""


def _search_list(search_path: SearchPath) -> list[str | os.PathLike[str]]:
    if search_path is None:
        return []
    if isinstance(search_path, str | os.PathLike):
        return [search_path]
    return list(search_path)


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
        prof = load_runtime(name, search_path=[path.parent, *_search_list(search_path)])
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


def _is_kind(data: dict[str, Any], kind: str) -> bool:
    key = {"lm": "architecture", "hardware": "peak_flops", "runtime": "stack"}[kind]
    return key in data


def _user_dirs(kind: str, search_path: SearchPath) -> list[Path]:
    """The folders of :func:`card_dirs` that are not the shipped cards (search path, env)."""
    packaged = packaged_root()
    every = ("lm", "hardware", "calibrated", "runtime")
    shipped = set() if packaged is None else {packaged / s for s in every}
    return [d for d in card_dirs(kind, search_path) if d not in shipped]


def _slug_of(data: dict[str, Any]) -> object:
    return data.get("slug")


def _find(kind: str, slug_or_path: str | os.PathLike[str], search_path: SearchPath) -> Path:
    if not isinstance(slug_or_path, str | os.PathLike):
        raise TypeError(
            f"card: expected a card slug or a path to a .toml file, got {slug_or_path!r}"
        )
    text = os.fspath(slug_or_path)
    if not isinstance(text, str) or not text:
        raise TypeError(f"card: expected a slug or a .toml path, got {slug_or_path!r}")
    direct = Path(text)
    if text.endswith(".toml") or direct.is_file():
        if direct.is_dir():
            raise ValueError(f"{text}: a folder, not a card file")
        if not direct.is_file():
            raise FileNotFoundError(f"card file {text!r} does not exist")
        return direct
    what = _WHAT[kind]
    dirs = card_dirs(kind, search_path)
    user = _user_dirs(kind, search_path)
    # Every file that answers for this slug, by its name or (in a user folder) by its slug
    # field: a card is looked up by file name, so a file named for another card, or two files
    # of one slug, would make a lookup pick a card the user did not mean, without a word.
    found: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    for d in dirs:
        paths = [d / f"{text}.toml"] if d not in user else sorted(d.glob("*.toml"))
        for candidate in paths:
            if not candidate.is_file() or candidate.resolve() in seen:
                continue
            data = _read(candidate)
            if not _is_kind(data, kind):
                continue
            if candidate.stem == text or _slug_of(data) == text:
                found.append((candidate, data))
                seen.add(candidate.resolve())
    for candidate, data in found:
        slug = _slug_of(data)
        if slug != candidate.stem:
            raise ValueError(
                f"{candidate} holds the {what} card {slug!r}, but a card is "
                f"looked up by its file name ({candidate.name!r}); name the file {slug}.toml"
            )
    in_user = [p for p, _ in found if p.parent in user]
    shipped = [p for p, _ in found if p.parent not in user]
    # A user's card may stand in for a shipped one of the same slug (it comes first, on
    # purpose); two user cards, or two shipped ones, of one slug are a mistake.
    for group in (in_user, shipped):
        if len(group) > 1:
            raise ValueError(
                f"the {what} card {text!r} is found twice on the search path: "
                f"{group[0]} and {group[1]}; remove or rename one"
            )
    if found:
        return (in_user or shipped)[0]
    known = sorted({p.stem for d in dirs for p in d.glob("*.toml")})
    raise ValueError(
        f"no {what} card {text!r} (known: {', '.join(known)}; searched: "
        f"{', '.join(str(d) for d in dirs)})"
    )


def load_model(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> ModelCard:
    """Load a language-model card by slug (``"llama-2-7b"``) or from a ``.toml`` path."""
    path = _find("lm", slug_or_path, search_path)
    return build_card(ModelCard, _read(path), path)


def load_hardware(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> HardwareCard:
    """Load an accelerator card by slug (``"a100-80gb"``) or from a ``.toml`` path."""
    return _hardware(_find("hardware", slug_or_path, search_path), search_path)


def load_runtime(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> RuntimeProfile:
    """Load a runtime profile by slug (``"gpt-fast-a100"``) or from a ``.toml`` path
    (``models/runtime/``; :mod:`specsim.cards.runtime`)."""
    path = _find("runtime", slug_or_path, search_path)
    return build_card(RuntimeProfile, _read(path), path)


def _list(kind: str, search_path: SearchPath) -> list[Path]:
    seen: dict[str, Path] = {}
    for d in card_dirs(kind, search_path):
        for path in sorted(d.glob("*.toml")):
            if path.stem not in seen and _is_kind(_read(path), kind):
                seen[path.stem] = path
    return [seen[k] for k in sorted(seen)]


def list_models(*, search_path: SearchPath = None) -> list[ModelCard]:
    """Every language-model card found, sorted by slug (the first of each slug wins)."""
    return [build_card(ModelCard, _read(p), p) for p in _list("lm", search_path)]


def list_hardware(*, search_path: SearchPath = None) -> list[HardwareCard]:
    """Every accelerator card found (base and calibrated), sorted by slug."""
    return [_hardware(p, search_path) for p in _list("hardware", search_path)]


def list_runtimes(*, search_path: SearchPath = None) -> list[RuntimeProfile]:
    """Every runtime profile found, sorted by slug."""
    return [build_card(RuntimeProfile, _read(p), p) for p in _list("runtime", search_path)]


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
