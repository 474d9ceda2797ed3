"""N-gram (prompt lookup) drafting: its acceptance by depth and rank, measured from text.

Prompt lookup drafts with no model (Saxena, "Prompt Lookup Decoding", 2023,
github.com/apoorvumang/prompt-lookup-decoding; Yang et al., "Inference with
Reference", arXiv:2304.04487, 2023): the last ``n`` tokens are looked up
earlier in the context, and the tokens that followed them there are proposed.
Here, at each position ``t`` of a document (its own earlier text being the
context), the candidates for the next token are the distinct tokens that
followed an earlier occurrence of the last ``n`` tokens, ranked by how often
they followed it (ties: the most recent first). Rank ``r`` of depth ``d`` is
*tried* when depths ``1..d-1`` matched the text and ranks ``0..r-1`` did not
(a missing candidate counts as a miss, as a tree node with nothing to propose
is wasted); it is *accepted* when it equals the text's token. Deeper
candidates are looked up the same way after the matched tokens, with every
occurrence's continuation inside the text before ``t`` (what a drafter holds
when it drafts). ``accept[d - 1][r] = accepted / tried``: Sequoia's positional
acceptance (Chen et al. 2024, Section 3.1) under greedy verification against
the text.

Tokens are words and single punctuation marks (the regular expression
:data:`TOKEN`), not a model's subwords: a stated simplification that makes the
measurement independent of any tokenizer.

Measured on the committed sample by (``models/measured/ngram/README.md``)::

    python -c "from specsim.proposers.ngram import write_tables; \\
      write_tables(source='models/corpora/sample', out='models/measured/ngram')"
"""

from __future__ import annotations

import bisect
import csv
import heapq
import io
import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from specsim.proposers.tables import RankAcceptance

__all__ = [
    "TOKEN",
    "tokens",
    "documents",
    "lookup",
    "count_acceptance",
    "acceptance_from_counts",
    "write_tables",
]

TOKEN = re.compile(r"\w+|[^\w\s]")
"""A token: a run of word characters or one other non-space character."""


def tokens(text: str) -> list[str]:
    """``text`` split into :data:`TOKEN` tokens."""
    return TOKEN.findall(text)


def documents(
    source: str | os.PathLike[str], *, splits: Sequence[str] | None = None
) -> Iterator[tuple[str, str]]:
    """``(corpus, text)`` of every document under ``source``: the committed sample's
    ``<corpus>.fortunes`` files (documents separated by lines holding only ``%``) and
    ``<corpus>/`` folders (one document a file), or a full build's ``<corpus>.<split>.jsonl``
    files (one ``{"text": ...}`` a line; ``specsim measure --stage corpus``), of the
    ``splits`` named (default: all)."""
    root = Path(source)
    if not root.is_dir():
        raise ValueError(f"source: {str(root)!r} is not a folder")
    for path in sorted(root.glob("*.jsonl")):
        corpus, split = path.name.split(".")[:2]
        if splits is not None and split not in splits:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield corpus, str(json.loads(line)["text"])
    for path in sorted(root.glob("*.fortunes")):
        doc: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines() + ["%"]:
            if line.strip() == "%":
                if "".join(doc).strip():
                    yield path.stem, "\n".join(doc)
                doc = []
            else:
                doc.append(line)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for path in sorted(folder.glob("*")):
            if path.is_file():
                yield folder.name, path.read_text(encoding="utf-8")


def _index(text: Sequence[str], n: int) -> dict[tuple[str, ...], list[int]]:
    """Where each n-gram of ``text`` starts, in increasing order (a speed trick: the lookup
    reads only the occurrences of its own key)."""
    out: dict[tuple[str, ...], list[int]] = {}
    for j in range(len(text) - n):  # an occurrence needs a follower
        out.setdefault(tuple(text[j : j + n]), []).append(j)
    return out


def lookup(
    text: Sequence[str],
    end: int,
    *,
    n: int,
    before: int,
    index: dict[tuple[str, ...], list[int]] | None = None,
) -> list[str]:
    """The candidates for token ``end`` of ``text``: the tokens that followed earlier
    occurrences of ``text[end - n:end]`` (each occurrence's follower at an index below
    ``min(before, end)``), most frequent first, ties to the most recent.

    >>> lookup("a b c a b d a b".split(), 8, n=2, before=8)
    ['d', 'c']
    """
    if end < n:
        return []
    idx = _index(text, n) if index is None else index
    starts = idx.get(tuple(text[end - n : end]), [])
    limit = min(before, end) - n  # follower j + n below min(before, end)
    seen: Counter[str] = Counter()
    last: dict[str, int] = {}
    for j in starts[: bisect.bisect_left(starts, limit)]:
        tok = text[j + n]
        seen[tok] += 1
        last[tok] = j
    return sorted(seen, key=lambda t: (-seen[t], -last[t]))


class _Seen:
    """The followers of every n-gram occurrence whose follower the drafter already holds,
    grown one position at a time (a speed trick: :func:`lookup` rescans every occurrence,
    this keeps counts, so a document costs about its length times the candidates)."""

    def __init__(self, text: Sequence[str], n: int) -> None:
        self.text, self.n = text, n
        self.count: dict[tuple[str, ...], Counter[str]] = {}
        self.last: dict[tuple[str, ...], dict[str, int]] = {}
        self.upto = 0  # occurrences j < upto are counted

    def grow(self, before: int) -> None:
        """Count the occurrences whose follower index ``j + n`` is below ``before``."""
        while self.upto < before - self.n:
            j = self.upto
            key = tuple(self.text[j : j + self.n])
            tok = self.text[j + self.n]
            self.count.setdefault(key, Counter())[tok] += 1
            self.last.setdefault(key, {})[tok] = j
            self.upto += 1

    def top(self, end: int, ranks: int) -> list[str]:
        """:func:`lookup`'s first ``ranks`` candidates for token ``end`` (after :meth:`grow`)."""
        key = tuple(self.text[end - self.n : end])
        seen, last = self.count.get(key), self.last.get(key, {})
        if not seen:
            return []
        return heapq.nsmallest(ranks, seen, key=lambda t: (-seen[t], -last[t]))


def count_acceptance(
    docs: Sequence[Sequence[str]], *, n: int, depths: int, ranks: int
) -> tuple[list[list[int]], list[list[int]]]:
    """``(tried, accepted)`` counts, ``[depth - 1][rank]``, over every position of ``docs``
    (token lists; see the module docstring). Every lookup drafted at position ``t`` sees the
    occurrences whose follower lies before ``t``; the candidates are :func:`lookup`'s
    (a test checks the two agree)."""
    tried = [[0] * ranks for _ in range(depths)]
    hit = [[0] * ranks for _ in range(depths)]
    for text in docs:
        seen = _Seen(text, n)
        for t in range(n, len(text)):
            seen.grow(t)
            for d in range(depths):
                pos = t + d
                if pos >= len(text):
                    break
                cands = seen.top(pos, ranks)
                matched = False
                for r in range(ranks):
                    tried[d][r] += 1
                    if r < len(cands) and cands[r] == text[pos]:
                        hit[d][r] += 1
                        matched = True
                        break
                if not matched:
                    break
    return tried, hit


def acceptance_from_counts(
    tried: Sequence[Sequence[int]], hit: Sequence[Sequence[int]], *, source: str
) -> RankAcceptance:
    """The conditional acceptance ``hit / tried``, keeping the depths where every rank was
    tried at least once."""
    rows = []
    for t_row, h_row in zip(tried, hit, strict=True):
        if min(t_row) == 0:
            break
        rows.append(tuple(h / t for h, t in zip(h_row, t_row, strict=True)))
    if not rows:
        raise ValueError("counts: no depth was tried; the text is too short for this n")
    return RankAcceptance(accept=tuple(rows), source=source)


def write_tables(
    *,
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    ns: Sequence[int] = (1, 2, 3),
    depths: int = 4,
    ranks: int = 3,
    example_n: int = 2,
    splits: Sequence[str] | None = None,
    label: str | None = None,
) -> Path:
    """Measure every corpus under ``source`` (of ``splits``, :func:`documents`) and all
    together for each ``n`` in ``ns`` into ``out/accept.csv`` (corpus, n, depth, rank, tried,
    accepted, accept), and write the pooled ``example_n`` table as ``out/accept-<label>.toml``
    (``label`` defaults to the folder name of ``source``; an acceptance file for ``specsim
    tree --acceptance``). Returns the CSV's path."""
    by_corpus: dict[str, list[list[str]]] = {}
    for corpus, text in documents(source, splits=splits):
        by_corpus.setdefault(corpus, []).append(tokens(text))
    by_corpus["all"] = [doc for docs in list(by_corpus.values()) for doc in docs]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["corpus", "n", "depth", "rank", "tried", "accepted", "accept"])
    example = None
    label = Path(source).name if label is None else label
    for corpus, docs in by_corpus.items():
        for n in ns:
            tried, hit = count_acceptance(docs, n=n, depths=depths, ranks=ranks)
            for d in range(depths):
                for r in range(ranks):
                    a = hit[d][r] / tried[d][r] if tried[d][r] else float("nan")
                    w.writerow([corpus, n, d + 1, r, tried[d][r], hit[d][r], f"{a:.6f}"])
            if corpus == "all" and n == example_n:
                example = acceptance_from_counts(tried, hit, source="")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "accept.csv"
    path.write_text(buf.getvalue(), encoding="utf-8")
    if example is not None:
        rows = ",\n".join(
            "  [" + ", ".join(f"{a:.6f}" for a in row) + "]" for row in example.accept
        )
        (folder / f"accept-{label}.toml").write_text(
            f'source = "{example_n}-gram prompt lookup measured on {label} (all corpora, word '
            f'tokens): models/measured/ngram/README.md"\n'
            f"accept = [\n{rows},\n]\n",
            encoding="utf-8",
        )
    return path
