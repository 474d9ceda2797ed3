"""The nouns of a problem set: an answer, a worked problem, a template that draws one.

A problem is *data*: its template key, its level, the parameters it was drawn
with (JSON-ready numbers and card slugs) and the text built from them. Building
is deterministic: ``template.build(params)`` gives the same statement, worked
solution and answers every time, so a committed set can be checked by
rebuilding it from the parameters it records, and every answer is computed by
specsim, never typed in.

Text conventions (shared by the Markdown and LaTeX renderers): a text is a tuple
of paragraphs; inline math is ``$...$``; a paragraph that starts and ends with
``$$`` is display math; a paragraph that starts with ``- `` is a list item
(consecutive items form one list); a paragraph of lines ``| a | b |`` is a
table whose first line is the header; ``**bold**`` and ```code``` are the only
inline markup. Outside math, texts avoid the characters LaTeX reserves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from specsim.checks import check_int

__all__ = [
    "Answer",
    "Worked",
    "Problem",
    "Template",
    "fmt",
    "separating_decimals",
    "vec",
    "pick",
    "composition",
    "invert_increasing",
]

_MAX_DECIMALS = 12


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One numeric answer: what it is, its value as specsim computes it, how it is rounded.

    ``symbol`` is inline math without the dollars (``r"\\alpha"``); ``what`` says
    in words what the number is; ``decimals`` is the stated rounding (0 for
    integers); ``unit`` is appended to the printed value.
    """

    symbol: str
    what: str
    value: float
    decimals: int
    unit: str = ""

    def __post_init__(self) -> None:
        value = float(self.value)
        if not math.isfinite(value):
            raise ValueError(f"Answer {self.what!r}: value must be finite, got {self.value!r}")
        check_int(
            self.decimals, name=f"Answer {self.what!r}: decimals", minimum=0, maximum=_MAX_DECIMALS
        )
        object.__setattr__(self, "value", value)

    @property
    def text(self) -> str:
        """The value rounded to the stated decimals (no unit)."""
        return fmt(self.value, self.decimals)


@dataclass(frozen=True, kw_only=True)
class Worked:
    """What a template builds from its parameters: the statement, the solution, the answers."""

    statement: tuple[str, ...]
    solution: tuple[str, ...]
    answers: tuple[Answer, ...]

    def __post_init__(self) -> None:
        if not self.statement or not self.solution or not self.answers:
            raise ValueError("Worked: statement, solution and answers must all be non-empty")


@dataclass(frozen=True, kw_only=True)
class Problem:
    """A drawn problem: template key, level, number, parameters and the worked text.

    ``number`` is ``"level.index"`` (for example ``"2.3"``), the same whichever
    levels a set includes.
    """

    key: str
    level: int
    number: str
    title: str
    params: Mapping[str, Any] = field(hash=False)
    statement: tuple[str, ...]
    solution: tuple[str, ...]
    answers: tuple[Answer, ...]


@dataclass(frozen=True, kw_only=True)
class Template:
    """A kind of problem: ``draw(rng)`` picks parameters, ``build(params)`` works it out.

    ``topic`` says in a few words what the problem teaches (shown in the set's
    table of contents).
    """

    key: str
    level: int
    title: str
    topic: str
    draw: Callable[[np.random.Generator], dict[str, Any]]
    build: Callable[[Mapping[str, Any]], Worked]

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"Template {self.key!r}: level must be 1, 2 or 3, got {self.level!r}")


def fmt(x: float, decimals: int) -> str:
    """``x`` rounded to ``decimals`` places, without a sign on zero (``-0.00`` reads badly)."""
    text = f"{float(x):.{decimals}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]
    return text


def separating_decimals(values: ArrayLike, best: int, *, start: int = 3) -> int:
    """The fewest decimals, from ``start`` on, at which ``values[best]`` prints above every
    other value that it exceeds, so that a listing shows why it is the best (a near-tie
    printed to 3 decimals reads as a tie). Values equal to it (within ``1e-12``, an exact
    tie, which the statement breaks by its own rule) are left printed equal."""
    xs = [float(v) for v in np.asarray(values, dtype=float).ravel()]
    top = xs[best]
    below = [v for i, v in enumerate(xs) if i != best and v < top - 1e-12]
    for d in range(start, _MAX_DECIMALS + 1):
        shown = float(fmt(top, d))
        if all(float(fmt(v, d)) < shown for v in below):
            return d
    return _MAX_DECIMALS


def vec(values: ArrayLike, decimals: int = 2) -> str:
    """A tuple of numbers for the text: ``(0.45, 0.35, 0.20)``."""
    return "(" + ", ".join(fmt(v, decimals) for v in np.asarray(values, dtype=float).ravel()) + ")"


def pick(rng: np.random.Generator, choices: Sequence[Any]) -> Any:
    """One of ``choices``, uniformly (keeps the Python type of the element)."""
    return choices[int(rng.integers(len(choices)))]


def composition(rng: np.random.Generator, parts: int, total: int = 20) -> list[int]:
    """``parts`` positive integers summing to ``total``, uniformly among such compositions."""
    cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False))
    edges = np.concatenate([[0], cuts, [total]])
    return [int(d) for d in np.diff(edges)]


def invert_increasing(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The ``x`` in ``[lo, hi]`` with ``f(x) = target`` for an increasing ``f``, by bisection.

    Runs until the bracket stops shrinking in floating point (about 60 halvings on
    [0, 1]), so the result is within an ulp or two of the root; raises ValueError
    when ``target`` lies outside ``[f(lo), f(hi)]``.
    """
    if not f(lo) <= target <= f(hi):
        raise ValueError(
            f"target: {target!r} is outside [f({lo}), f({hi})] = [{f(lo)!r}, {f(hi)!r}]"
        )
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return mid
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
