"""The user's card folders: ``search_path=`` arguments and the ``SPECSIM_CARDS`` variable.

Which folders are searched, in which order, and the ``with`` block that puts folders in
front of the variable (:func:`searched_first`: what ``--cards DIR`` does for every command).
What is looked for in them, and how a file's kind is told, is :mod:`specsim.cards.files`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["ENV_VAR", "SearchPath", "check_folder", "search_list", "searched_first", "user_folders"]

ENV_VAR = "SPECSIM_CARDS"
"""Environment variable naming extra card folders (``os.pathsep``-separated)."""

SearchPath = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None


def user_folders(search_path: SearchPath) -> list[Path]:
    """The user's card folders: ``search_path``'s, then :data:`ENV_VAR`'s, each once."""
    if search_path is None:
        user: list[Path] = []
    elif isinstance(search_path, str | os.PathLike):
        user = [Path(search_path)]
    else:
        user = [Path(p) for p in search_path]
    for root in user:
        check_folder(root, "search_path")
    env = os.environ.get(ENV_VAR, "")
    for root in (Path(p) for p in env.split(os.pathsep) if p):
        check_folder(root, f"{ENV_VAR}={os.fspath(root)}", named=True)
        user.append(root)
    seen: set[Path] = set()
    out = []
    for root in user:  # a folder given twice (--cards and the variable) is searched once
        if root.resolve() not in seen:
            seen.add(root.resolve())
            out.append(root)
    return out


def check_folder(folder: Path, where: str, *, named: bool = False) -> None:
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
        check_folder(Path(folder), "cards")
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


def search_list(search_path: SearchPath) -> list[str | os.PathLike[str]]:
    if search_path is None:
        return []
    if isinstance(search_path, str | os.PathLike):
        return [search_path]
    return list(search_path)
