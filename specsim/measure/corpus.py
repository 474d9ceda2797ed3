"""Real text corpora from installed packages, split deterministically by a hash of each document.

Six corpora, all read from what the package registries installed on this
machine (nothing is fetched at run time):

==========  ==========================================================  =========
corpus      source                                                      role
==========  ==========================================================  =========
``en``      Debian ``fortunes`` and ``fortunes-min``                    train/val/test
``de``      Debian ``fortunes-de``                                      train/val/test
``es``      Debian ``fortunes-es``                                      train/val/test
``it``      Debian ``fortunes-it``                                      train/val/test
``code``    the running Python's standard library ``.py`` sources       train/val/test
``licences`` Debian ``base-files``' ``/usr/share/common-licenses``      test only
==========  ==========================================================  =========

A fortune file is a list of documents separated by lines holding only ``%``;
a ``.py`` file and a licence file are one document each. Offensive fortunes
(``off/`` folders) are left out. Exact duplicates inside a corpus are kept
once. A document goes to ``train``, ``validation`` or ``test`` by the first
8 bytes of ``blake2b(text)`` read as a fraction of 2**64 against fixed
cut-offs (:data:`FRACTIONS`): the split depends on the text alone, not on
file order, machine or Python version, and duplicates can never straddle
splits. Licences are out of domain for every model, so all of them are test.

:func:`build_corpora` writes ``<corpus>.<split>.jsonl`` (one ``{"text": ...}``
per line) and ``manifest.json`` (package versions, Python version, files,
bytes and documents per split, sha256 of every written file). Writes are
atomic (a temporary file renamed into place). A missing package stops the
build with a :class:`MissingPackageError` naming the apt package to install.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from specsim.acceptance.realtext import CORPORA  # the one list of corpus names (re-exported)
from specsim.measure.packages import (
    SOURCES,
    MissingPackageError,
    Source,
    package_version,
    source_files,
)

__all__ = [
    "CORPORA",
    "SPLITS",
    "FRACTIONS",
    "MissingPackageError",
    "Source",
    "SOURCES",
    "split_of",
    "split_fortunes",
    "package_version",
    "source_files",
    "build_corpora",
    "read_split",
    "atomic_write_bytes",
    "atomic_write_text",
    "write_sample",
]

SPLITS: tuple[str, ...] = ("train", "validation", "test")
#: Cut-offs of the hash fraction: [0, 0.9) train, [0.9, 0.95) validation, [0.95, 1) test.
FRACTIONS: tuple[float, float, float] = (0.90, 0.05, 0.05)
FORMAT = "specsim-corpus/1"


def split_of(text: str, *, test_only: bool = False) -> str:
    """The split of a document: ``train``, ``validation`` or ``test``, from blake2b of its text.

    >>> split_of("Hello.") == split_of("Hello.")
    True
    """
    if test_only:
        return "test"
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    u = h / 2**64
    if u < FRACTIONS[0]:
        return "train"
    if u < FRACTIONS[0] + FRACTIONS[1]:
        return "validation"
    return "test"


def split_fortunes(text: str) -> list[str]:
    """The documents of a fortune file: the blocks between lines that hold only ``%``.

    >>> split_fortunes("a\\nb\\n%\\nc\\n%\\n")
    ['a\\nb', 'c']
    """
    docs: list[str] = []
    cur: list[str] = []
    for line in text.splitlines():
        if line.strip() == "%":
            docs.append("\n".join(cur).strip("\n"))
            cur = []
        else:
            cur.append(line.rstrip())
    docs.append("\n".join(cur).strip("\n"))
    return [d for d in docs if d.strip()]


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # A few old fortune files are Latin-1; the package ships them as such.
        return data.decode("latin-1")


def _documents(kind: str, files: Iterable[Path]) -> Iterator[tuple[str, str]]:
    for path in files:
        text = _read_text(path).replace("\r\n", "\n")
        if kind == "fortunes":
            for doc in split_fortunes(text):
                yield path.name, doc
        elif text.strip():
            yield path.name, text


def _sample_files(sample: Path, source: Source) -> list[Path]:
    if source.kind == "fortunes":
        files = [sample / f"{source.corpus}.fortunes"]
    else:
        folder = sample / source.corpus
        files = sorted(p for p in folder.glob("*") if p.is_file()) if folder.is_dir() else []
    missing = [str(p) for p in files if not p.is_file()]
    if missing or not files:
        raise FileNotFoundError(
            f"sample {sample}: corpus {source.corpus!r} has no files ({missing or 'empty folder'})"
        )
    return files


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            # mkstemp makes the file private; committed outputs are world-readable.
            os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def build_corpora(
    *,
    out: str | os.PathLike[str],
    corpora: Iterable[str] = CORPORA,
    sample: str | os.PathLike[str] | None = None,
    sources: dict[str, Source] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build the corpora into ``out`` and return the manifest (also written as ``manifest.json``).

    ``sample`` reads the committed tiny sample (``<corpus>.fortunes`` files and
    ``code/``, ``licences/`` folders) instead of the installed packages.
    Every package is checked before anything is written, so a missing one
    leaves ``out`` untouched.
    """
    srcs = SOURCES if sources is None else sources
    names = list(corpora)
    for name in names:
        if name not in srcs:
            raise ValueError(f"corpora: unknown corpus {name!r}; known: {sorted(srcs)}")
    plan = _corpus_files(srcs, names, sample=sample)
    outdir = Path(out)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "split": {
            "hash": "blake2b-64 of the UTF-8 text",
            "fractions": dict(zip(SPLITS, FRACTIONS, strict=True)),
        },
        "python": platform.python_version(),
        "sample": sample is not None,
        "corpora": {},
    }
    for src, files, versions in plan:
        entry = _write_corpus(src, files, versions=versions, outdir=outdir)
        manifest["corpora"][src.corpus] = entry
        if log is not None:
            counts = ", ".join(f"{s} {v['documents']}" for s, v in entry["splits"].items())
            log(f"corpus {src.corpus}: {len(files)} files, {entry['source_bytes']} bytes; {counts}")
    atomic_write_text(
        outdir / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    )
    return manifest


def _corpus_files(
    srcs: dict[str, Source], names: list[str], *, sample: str | os.PathLike[str] | None
) -> list[tuple[Source, list[Path], dict[str, str]]]:
    """Each corpus with its source files and their versions (the sample's, or the installed
    packages'), found before anything is written."""
    plan: list[tuple[Source, list[Path], dict[str, str]]] = []
    for name in names:
        src = srcs[name]
        if sample is not None:
            plan.append((src, _sample_files(Path(sample), src), {"sample": str(sample)}))
        else:
            files, versions = source_files(src)
            if not files:
                raise MissingPackageError(
                    f"corpus {name!r}: no source files found (packages {list(src.packages)}); "
                    f"reinstall them with `apt-get install --reinstall -y "
                    f"{' '.join(src.packages) or 'python3'}`"
                )
            plan.append((src, files, versions))
    return plan


def _write_corpus(
    src: Source, files: list[Path], *, versions: dict[str, str], outdir: Path
) -> dict[str, Any]:
    """One corpus's documents, deduplicated, written split by split; its manifest entry."""
    seen: set[str] = set()
    buckets: dict[str, list[str]] = {s: [] for s in SPLITS}
    for _, doc in _documents(src.kind, files):
        if doc in seen:
            continue
        seen.add(doc)
        buckets[split_of(doc, test_only=src.test_only)].append(doc)
    entry: dict[str, Any] = {
        "kind": src.kind,
        "versions": versions,
        "files": len(files),
        "source_bytes": sum(p.stat().st_size for p in files),
        "test_only": src.test_only,
        "splits": {},
    }
    for split, docs in buckets.items():
        payload = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs)
        data = payload.encode("utf-8")
        atomic_write_bytes(outdir / f"{src.corpus}.{split}.jsonl", data)
        entry["splits"][split] = {
            "documents": len(docs),
            "bytes": sum(len(d.encode("utf-8")) for d in docs),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    return entry


def read_split(root: str | os.PathLike[str], corpus: str, split: str) -> list[str]:
    """The documents of one corpus split written by :func:`build_corpora`."""
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
    path = Path(root) / f"{corpus}.{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such corpus split; build the corpora first "
            "(specsim measure corpus --out DIR)"
        )
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


def write_sample(
    *,
    corpora_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    per_split: tuple[int, int, int] = (14, 4, 4),
    max_doc_bytes: int = 260,
    code_bytes: tuple[int, int] = (800, 4000),
) -> dict[str, int]:
    """Write the tiny committed sample from a full build: the shortest documents of each split.

    Fortunes: the first ``per_split`` documents (train, validation, test) of
    at most ``max_doc_bytes`` bytes that hold only printable text, written
    as ``<corpus>.fortunes``; code: the shortest files between ``code_bytes``
    bytes, two for train and one for each other split; licences: the two
    shortest. Every document keeps its text, so building the corpora from the
    sample puts it in the same split as the full build. Returns bytes written per corpus.
    """
    root = Path(out)
    sizes: dict[str, int] = {}
    for corpus in ("en", "de", "es", "it"):
        chosen: list[str] = []
        for split, n in zip(SPLITS, per_split, strict=True):
            docs = [
                d
                for d in read_split(corpora_dir, corpus, split)
                if len(d.encode("utf-8")) <= max_doc_bytes
                and all(c.isprintable() or c == "\n" for c in d)
            ]
            chosen.extend(docs[:n])
        text = "\n%\n".join(chosen) + "\n%\n"
        atomic_write_text(root / f"{corpus}.fortunes", text)
        sizes[corpus] = len(text.encode("utf-8"))
    lo, hi = code_bytes
    sizes["code"] = 0
    for split in SPLITS:
        docs = [d for d in read_split(corpora_dir, "code", split) if lo <= len(d) <= hi]
        if not docs:
            raise ValueError(f"code_bytes: no {split} code document between {lo} and {hi} bytes")
        for i, doc in enumerate(
            sorted(docs, key=lambda d: (len(d), d))[: 2 if split == "train" else 1]
        ):
            atomic_write_text(root / "code" / f"{split}-{i}.py", doc)
            sizes["code"] += len(doc.encode("utf-8"))
    sizes["licences"] = 0
    lic = sorted(read_split(corpora_dir, "licences", "test"), key=lambda d: (len(d), d))[:2]
    for i, doc in enumerate(lic):
        atomic_write_text(root / "licences" / f"licence-{i}.txt", doc)
        sizes["licences"] += len(doc.encode("utf-8"))
    return sizes
