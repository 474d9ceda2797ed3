"""Where the corpora's text comes from: the Debian packages and the Python standard library
installed on this machine (:data:`SOURCES`), their versions (``dpkg-query``) and files
(``dpkg -L``). A missing package stops a build before anything is written
(:class:`MissingPackageError`, naming the apt package). :mod:`specsim.measure.corpus`
splits and writes them."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MissingPackageError", "Source", "SOURCES", "package_version", "source_files"]


class MissingPackageError(RuntimeError):
    """A package a corpus is read from is not installed; the message names it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where one corpus comes from.

    ``kind`` is ``fortunes`` (files installed by ``packages`` under
    ``/usr/share/games/fortunes``), ``python`` (the standard library of the
    running interpreter) or ``licences`` (``/usr/share/common-licenses`` of
    ``packages``). ``test_only`` sends every document to the test split.
    """

    corpus: str
    kind: str
    packages: tuple[str, ...] = ()
    test_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("fortunes", "python", "licences"):
            raise ValueError(
                f"Source.kind: expected fortunes, python or licences, got {self.kind!r}"
            )


SOURCES: dict[str, Source] = {
    "en": Source(corpus="en", kind="fortunes", packages=("fortunes", "fortunes-min")),
    "de": Source(corpus="de", kind="fortunes", packages=("fortunes-de",)),
    "es": Source(corpus="es", kind="fortunes", packages=("fortunes-es",)),
    "it": Source(corpus="it", kind="fortunes", packages=("fortunes-it",)),
    "code": Source(corpus="code", kind="python"),
    "licences": Source(
        corpus="licences", kind="licences", packages=("base-files",), test_only=True
    ),
}

# Standard-library folders that are not the library's own code, or are huge
# generated tables, or are test suites (kept out so that 'code' stays code).
_STDLIB_SKIP = (
    "site-packages",
    "dist-packages",
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "ensurepip",
    "config-",
    "__pycache__",
    "turtledemo",
)


def _dpkg(args: list[str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("dpkg-query") is None:
        raise MissingPackageError(
            "dpkg-query: not found; the corpora are read from Debian packages, so build them "
            "on Debian or Ubuntu (or build from the committed sample with --sample)"
        )
    return subprocess.run(["dpkg-query", *args], capture_output=True, text=True, check=False)


def package_version(package: str, *, corpus: str = "?") -> str:
    """The installed version of a Debian package, or :class:`MissingPackageError` naming it."""
    res = _dpkg(["-W", "-f=${Status}\t${Version}", package])
    status, _, version = res.stdout.partition("\t")
    if res.returncode != 0 or not status.endswith("installed") or "not-installed" in status:
        raise MissingPackageError(
            f"corpus {corpus!r}: the Debian package {package!r} is not installed; install it "
            f"with `apt-get install -y {package}` (as root), then build again"
        )
    return version.strip()


def _package_files(package: str) -> list[Path]:
    res = _dpkg(["-L", package])
    if res.returncode != 0:
        raise MissingPackageError(
            f"package {package!r}: dpkg-query -L failed ({res.stderr.strip()}); install it with "
            f"`apt-get install -y {package}`"
        )
    return [Path(line) for line in res.stdout.splitlines() if line.strip()]


def source_files(source: Source) -> tuple[list[Path], dict[str, str]]:
    """The files a corpus is read from, sorted, and the versions of what provides them.

    Raises :class:`MissingPackageError` when a package is not installed.
    """
    versions: dict[str, str] = {}
    files: list[Path] = []
    if source.kind == "python":
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        versions["python"] = platform.python_version()
        for path in sorted(stdlib.rglob("*.py")):
            rel = path.relative_to(stdlib).parts
            if any(part.startswith(_STDLIB_SKIP) for part in rel[:-1]):
                continue
            if path.is_file() and not path.is_symlink():
                files.append(path)
        return files, versions
    for package in source.packages:
        versions[package] = package_version(package, corpus=source.corpus)
        for path in _package_files(package):
            if source.kind == "fortunes":
                ok = (
                    str(path).startswith("/usr/share/games/fortunes/")
                    and "off" not in path.parts
                    and path.suffix not in (".dat", ".u8")
                    and path.name != "off"
                )
            else:
                ok = str(path).startswith("/usr/share/common-licenses/")
            if ok and path.is_file() and not path.is_symlink():
                files.append(path)
    return sorted(set(files)), versions
