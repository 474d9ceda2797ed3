"""Token trees and acceptance by depth and rank (Sequoia's positional model).

A token tree is ``parents``: node ``i``'s parent index, ``-1`` for the children
of the root (the last emitted token), in topological order (:func:`check_tree`).
:class:`RankAcceptance` holds ``accept[d - 1][r]``, the probability that the
rank-``r`` child at depth ``d`` is accepted given its earlier siblings were
rejected (Chen et al., "Sequoia", 2024, arXiv:2402.12374, Section 3.1).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from specsim.cards import read_toml
from specsim.checks import check_int
from specsim.cost import PassShape
from specsim.cost.shape import check_tree, tree_depths

__all__ = [
    "RankAcceptance",
    "check_tree",
    "tree_depths",
    "frontier_widths",
    "verify_shape",
    "load_acceptance",
]


def frontier_widths(parents: Sequence[int]) -> tuple[int, ...]:
    """Per depth ``d = 1..D``, the nodes at depth ``d - 1`` with children (the root is one).

    A draft that proposes depth by depth runs once per depth over this frontier: step
    ``d`` takes these nodes' features and proposes their children.
    """
    depths: list[int] = []
    for i, p in enumerate(parents):  # checked as it goes (a speed trick: one pass a tree)
        if type(p) is not int or not -1 <= p < i:
            return frontier_widths(check_tree(parents))  # names the fault, or plain ints
        depths.append(1 if p < 0 else depths[p] + 1)
    if isinstance(parents, str | bytes):
        check_tree(parents)
    widths = [0] * (max(depths) if depths else 0)
    for node in set(parents):  # the nodes with children
        widths[0 if node < 0 else depths[node]] += 1
    return tuple(widths)


def verify_shape(parents: Sequence[int], *, context: int, batch: int) -> PassShape:
    """The target's verification pass of a token tree: the last emitted token and the nodes.

    The pass computes the root (the last emitted token, whose successor the target
    samples when every child is rejected) and the tree's nodes, so a chain of
    ``gamma`` drafts is ``gamma + 1`` positions, as in
    :func:`specsim.cost.verification_positions`.
    """
    tree = check_tree(parents)
    return PassShape.tree(context=context, parents=[-1, *(p + 1 for p in tree)], batch=batch)


@dataclass(frozen=True, kw_only=True)
class RankAcceptance:
    """Acceptance by depth and rank (Sequoia's positional model; see the module docstring).

    ``accept[d - 1][r]``: the conditional acceptance of the rank-``r`` child at
    depth ``d``. Depths past the table repeat its last row, up to ``max_depth`` when
    set (a proposer that cannot draft deeper, e.g. a head card: a deeper depth is an
    error naming it); ranks past a row have probability 0. ``source`` says where the
    numbers come from.
    """

    accept: tuple[tuple[float, ...], ...]
    source: str = ""
    name: str = field(default="accept")
    max_depth: int | None = None

    def __post_init__(self) -> None:
        try:
            rows = tuple(tuple(float(x) for x in row) for row in self.accept)
        except (TypeError, ValueError):
            raise ValueError(
                f"{self.name}: expected rows of probabilities, one row per depth, got "
                f"{self.accept!r}"
            ) from None
        if not rows or any(not row for row in rows):
            raise ValueError(f"{self.name}: expected at least one depth of at least one rank")
        for d, row in enumerate(rows, start=1):
            for r, a in enumerate(row):
                if not (math.isfinite(a) and 0.0 <= a <= 1.0):
                    raise ValueError(
                        f"{self.name}: depth {d}, rank {r}: expected a probability in [0, 1], "
                        f"got {a!r}"
                    )
        if self.max_depth is not None:
            check_int(self.max_depth, name=f"{self.name}: max_depth", minimum=1, why="or None")
        object.__setattr__(self, "accept", rows)

    @classmethod
    def from_marginal(
        cls, marginal: Sequence[Sequence[float]], *, source: str = "", name: str = "accept"
    ) -> RankAcceptance:
        """From the probability that the rank-``r`` child is *the* accepted one (Sequoia's
        acceptance vector, Section 3.1). At each depth these must sum to at most one; a
        depth whose ranks sum above one is an error naming it."""
        rows = []
        for d, row in enumerate(marginal, start=1):
            p = [float(x) for x in row]
            if any(not (math.isfinite(x) and 0.0 <= x <= 1.0) for x in p):
                raise ValueError(f"{name}: depth {d}: expected probabilities in [0, 1], got {p}")
            total = math.fsum(p)
            if total > 1.0 + 1e-12:
                raise ValueError(
                    f"{name}: depth {d}: the ranks' probabilities sum to {total:.6g}, above one "
                    "(at most one child can be the accepted one)"
                )
            cond, left = [], 1.0
            for x in p:
                cond.append(0.0 if left <= 0.0 else min(1.0, x / left))
                left -= x
            rows.append(tuple(cond))
        return cls(accept=tuple(rows), source=source, name=name)

    @property
    def depths(self) -> int:
        return len(self.accept)

    @property
    def ranks(self) -> int:
        """The widest row: ranks past it are never accepted."""
        return max(len(row) for row in self.accept)

    def conditional(self, depth: int, rank: int) -> float:
        """The rank-``rank`` child's acceptance at ``depth`` given earlier siblings rejected."""
        if depth < 1 or rank < 0:
            raise ValueError(f"depth and rank: expected depth >= 1, rank >= 0; got {depth}, {rank}")
        if self.max_depth is not None and depth > self.max_depth:
            raise ValueError(
                f"{self.name}: depth {depth} is beyond what this proposer drafts "
                f"(max_depth {self.max_depth})"
            )
        row = self.accept[min(depth, self.depths) - 1]
        return row[rank] if rank < len(row) else 0.0

    def marginal(self, depth: int, rank: int) -> float:
        """The probability that the rank-``rank`` child is the accepted one at ``depth``."""
        left = math.prod(1.0 - self.conditional(depth, j) for j in range(rank))
        return left * self.conditional(depth, rank)

    def table(self, depths: int, ranks: int) -> NDArray[np.float64]:
        """``accept`` as a ``depths x ranks`` array (past rows repeated, past ranks 0)."""
        out = np.zeros((depths, ranks))
        for d in range(1, depths + 1):
            for r in range(ranks):
                out[d - 1, r] = self.conditional(d, r)
        return out

    def rank_of(self, parents: Sequence[int]) -> tuple[int, ...]:
        """Each node's rank among its siblings (order of listing)."""
        seen: dict[int, int] = {}
        out = []
        for p in check_tree(parents):
            out.append(seen.get(p, 0))
            seen[p] = out[-1] + 1
        return tuple(out)

    def node_table(self, parents: Sequence[int]) -> NDArray[np.float64]:
        """``accept`` as the array that covers ``parents``' depths and ranks."""
        depths, ranks = tree_depths(parents), self.rank_of(parents)
        return self.table(max(depths, default=1), max(ranks, default=0) + 1)


def _rows(cells: dict[tuple[int, int], float], where: str) -> list[list[float]]:
    depths = max(d for d, _ in cells)
    rows = []
    for d in range(1, depths + 1):
        ranks = sorted(r for dd, r in cells if dd == d)
        if ranks != list(range(len(ranks))) or not ranks:
            raise ValueError(
                f"{where}: depth {d} must list ranks 0, 1, ... without gaps, got {ranks}"
            )
        rows.append([cells[(d, r)] for r in ranks])
    return rows


def load_acceptance(path: str | os.PathLike[str]) -> RankAcceptance:
    """Acceptance by depth and rank from a TOML or CSV file.

    TOML: ``accept = [[...], ...]`` (conditional, row ``d - 1`` for depth ``d``) or
    ``marginal = [[...], ...]`` (the probability that each rank is the accepted one,
    summing to at most one per depth), and ``source = "..."`` saying where the numbers
    come from. CSV: columns ``depth,rank,accept`` (or ``depth,rank,marginal``), depth from
    1 and rank from 0; lines starting with ``#`` are comments (``# source: ...``).
    """
    p = Path(path)
    where = f"acceptance file {p}"
    if p.suffix == ".toml":
        data = read_toml(p)
        unknown = sorted(set(data) - {"accept", "marginal", "source", "notes"})
        if unknown or ("accept" in data) == ("marginal" in data):
            raise ValueError(
                f"{where}: expected exactly one of 'accept' and 'marginal' (and "
                f"'source', 'notes'), got keys {sorted(data)}"
            )
        source = str(data.get("source", ""))
        if "marginal" in data:
            return RankAcceptance.from_marginal(data["marginal"], source=source, name=where)
        return RankAcceptance(accept=data["accept"], source=source, name=where)
    if p.suffix != ".csv":
        raise ValueError(f"{where}: expected a .toml or .csv file")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    try:
        text = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:  # a binary file: an acceptance CSV is UTF-8 text
        raise ValueError(
            f"{p}: not a UTF-8 CSV file (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None
    source = " ".join(t.split(":", 1)[1].strip() for t in text if t.startswith("# source:"))
    reader = csv.DictReader([t for t in text if t.strip() and not t.startswith("#")])
    kind = next((k for k in ("accept", "marginal") if k in (reader.fieldnames or [])), None)
    if kind is None or not {"depth", "rank"} <= set(reader.fieldnames or []):
        raise ValueError(
            f"{where}: expected columns depth,rank,accept (or marginal), got {reader.fieldnames}"
        )
    cells: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], int] = {}
    for line, row in enumerate(reader, start=2):
        try:
            key, value = (int(row["depth"]), int(row["rank"])), float(row[kind])
        except (TypeError, ValueError):
            raise ValueError(
                f"{where}: row {line}: expected integers depth >= 1, rank >= 0 and "
                f"a number, got {row}"
            ) from None
        if key in first:  # a second value for one cell would silently win
            raise ValueError(
                f"{where}: row {line}: depth {key[0]}, rank {key[1]} given twice (first in "
                f"row {first[key]})"
            )
        cells[key], first[key] = value, line
    if not cells or min(d for d, _ in cells) < 1:
        raise ValueError(f"{where}: expected rows with depth >= 1")
    rows = _rows(cells, where)
    if kind == "marginal":
        return RankAcceptance.from_marginal(rows, source=source, name=where)
    return RankAcceptance(accept=tuple(tuple(r) for r in rows), source=source, name=where)
