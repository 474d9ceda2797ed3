"""Checks that a command's outputs can be written, made before any computing starts.

A result that took minutes to compute must not be thrown away because its file
cannot be written, and an earlier run's results must not be overwritten without
asking. Every subcommand that writes calls one of these on each output path
first (right after parsing), so a bad path is a one-line error with exit
status 2 (:class:`OutputError` is a ValueError) and nothing has been computed
or written yet:

- :func:`check_file` for one output file (``--out CARD.toml``, ``--plot-v
  FILE.png``, ``--events FILE``): the path must not be a folder, its folder
  must be writable (or creatable), and an existing file is replaced only with
  ``--force``;
- :func:`check_folder` for an output folder (``study --out``, ``report
  --out``): the path must not be a file, it must be writable (or creatable),
  and a folder that already holds files is written into only with ``--force``.

Both leave nothing behind: a folder that does not exist yet is made by the command
when it writes (:func:`writable`, right before writing), and whether a folder takes
files is tried by making one and removing it (permission bits do not tell: root passes
them, and ``/proc`` grants them but creates nothing).

Three more things the commands share live here: :func:`card_option`
(a card flag's error names the flag, not a Python parameter), :func:`check_cards`
(``--cards`` folders and ``SPECSIM_CARDS``, checked before any work) and
:class:`ProgressBar` (progress of a long run on stderr).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = [
    "OutputError",
    "check_file",
    "check_folder",
    "writable",
    "card_option",
    "check_cards",
    "ProgressBar",
]

_Card = TypeVar("_Card")


class OutputError(ValueError):
    """An output that cannot (or may not) be written; the message names the option."""


def _probe(folder: Path) -> str:
    """``""`` when a file can be created in the existing ``folder``, else the system's reason.

    The permission bits do not tell (root passes them everywhere, and ``/proc`` grants them
    but creates nothing), so a file is made and removed; the folder's times are put back, so
    that the check leaves no trace.
    """
    before = folder.stat()
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".specsim-write-check-")
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    os.close(fd)
    os.unlink(name)
    with contextlib.suppress(OSError):  # a folder whose times cannot be set: no harm done
        os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))
    return ""


def _writable(folder: Path) -> bool:
    """Whether files can be created in the existing ``folder`` (a read-only mount says no)."""
    return os.access(folder, os.W_OK | os.X_OK) and not _probe(folder)


def _why_not(folder: Path) -> str:
    """Why nothing can be written into ``folder`` (which :func:`_writable` refused)."""
    if os.access(folder, os.W_OK | os.X_OK):
        reason = _probe(folder)
        if reason:
            return f"creating a file there fails: {reason}"
    return "the folder is read-only"


def _check_parent(path: Path, option: str) -> None:
    """The nearest existing folder above ``path`` must be a writable folder."""
    for above in path.absolute().parents:
        if above.exists():
            if not above.is_dir():
                raise OutputError(f"{option}: {above} is a file, so {path} cannot be created")
            if not _writable(above):
                raise OutputError(f"{option}: cannot write into {above} ({_why_not(above)})")
            return


def check_file(path: str | os.PathLike[str], *, option: str, force: bool = False) -> Path:
    """``path`` as a Path if a file can be written there, else :class:`OutputError`.

    ``option`` names the flag in the message (``--out``); an existing file is
    refused unless ``force``.
    """
    p = Path(path)
    if str(path) == "":
        raise OutputError(f"{option}: expected a file path, got an empty string")
    if p.is_dir():
        raise OutputError(f"{option}: {p} is a folder; give the path of a file to write")
    if p.exists():
        if not force:
            raise OutputError(f"{option}: {p} already exists; pass --force to overwrite it")
        if not os.access(p, os.W_OK):
            raise OutputError(f"{option}: cannot overwrite {p} (the file is read-only)")
    _check_parent(p, option)
    return p


def check_folder(path: str | os.PathLike[str], *, option: str, force: bool = False) -> Path:
    """``path`` as a Path if an output folder can be written there, else :class:`OutputError`.

    A folder that already holds files is refused unless ``force`` (an earlier
    run's results are not overwritten without asking).
    """
    p = Path(path)
    if str(path) == "":
        raise OutputError(f"{option}: expected a folder path, got an empty string")
    if p.exists() and not p.is_dir():
        raise OutputError(f"{option}: {p} is a file; give a folder to write into")
    if p.is_dir():
        if not _writable(p):
            raise OutputError(f"{option}: cannot write into {p} ({_why_not(p)})")
        if not force and any(p.iterdir()):
            raise OutputError(
                f"{option}: {p} already holds files (an earlier run?); pass --force to write "
                "into it, or choose a new folder"
            )
        return p
    _check_parent(p, option)
    return p


def writable(path: str | os.PathLike[str]) -> Path:
    """``path`` with its folder made (the checks above let a command write into a folder it
    creates): call right before writing an output that was checked."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def card_option(
    loader: Callable[..., _Card], value: str, *, option: str, cards: Sequence[str] | None = None
) -> _Card:
    """``loader(value, search_path=cards)``, with an error naming ``option`` (not the parameter)."""
    try:
        return loader(value, search_path=cards)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        # The plain type, not a subclass whose constructor takes other arguments
        # (UnicodeDecodeError is a ValueError).
        kind = next(k for k in (FileNotFoundError, TypeError, ValueError) if isinstance(exc, k))
        raise kind(f"{option}: {exc}") from None


def check_cards(folders: Sequence[str | os.PathLike[str]] | None, *, env: str) -> None:
    """Every ``--cards`` folder, and every folder of the environment variable ``env``, must be
    an existing folder; else a ValueError in the user's words (``--cards /x: not a folder``,
    ``SPECSIM_CARDS=/x: no such folder``)."""
    named = [(f"--cards {os.fspath(f)}", Path(f)) for f in folders or ()]
    named += [(f"{env}={p}", Path(p)) for p in os.environ.get(env, "").split(os.pathsep) if p]
    for words, folder in named:
        if not folder.is_dir():
            why = "not a folder" if folder.exists() else "no such folder"
            raise ValueError(f"{words}: {why}")


class ProgressBar:
    """A plain-text progress bar on stderr with an estimate of the time left: redrawn in
    place on a terminal, one line per step otherwise (so that logs stay readable).

    The estimate assumes the steps left take as long as the steps done in this
    run so far. A ``done`` that jumps ahead skipped the steps between (a resumed
    run's finished units): they count as neither done nor left by this run's
    pace. A ``done`` smaller than the last one starts a new phase (another
    accelerator's search, say), whose pace is measured afresh.
    """

    def __init__(self, width: int = 30) -> None:
        self.width = width
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self._phase_start = self.start  # when the phase's first step began
        self._last_time = self.start
        self._last_done: int | None = None
        self._skipped = 0  # steps of this phase done before it (not by its pace)

    def left(self, done: int, total: int) -> str:
        """``", about 3 min left"`` for step ``done`` of ``total`` (empty when done or
        nothing was timed yet); records the step."""
        now = time.perf_counter()
        if self._last_done is None or done <= self._last_done:
            if self._last_done is not None:
                self._phase_start = self._last_time
            self._skipped = done - 1
        elif done > self._last_done + 1:
            self._skipped += done - self._last_done - 1
        self._last_done, self._last_time = done, now
        timed = done - self._skipped
        if not 0 < done < total or timed <= 0:
            return ""
        return f", about {_duration((now - self._phase_start) * (total - done) / timed)} left"

    def __call__(self, done: int, total: int, label: str) -> None:
        left = self.left(done, total)
        filled = self.width * min(done, total) // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"[{bar}] {done}/{total} {label} ({time.perf_counter() - self.start:.0f} s{left})"
        if self.tty:
            end = "\n" if done >= total else ""
            sys.stderr.write("\r" + line.ljust(79) + end)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _duration(seconds: float) -> str:
    """A time left in the largest unit that keeps it readable (``42 s``, ``3 min``, ``1.5 h``)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
