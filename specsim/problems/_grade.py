"""Grade a student's answers file against the problem set of its seed.

The answers file is TOML: a top-level ``seed`` (the set's seed) and one table per
problem, named by the problem's number in quotes, with one key per part: the
part's letter, and a number (or, for a part that asks for several numbers, an
array of them in the order the part asks)::

    seed = 29

    ["1.1"]
    a = 0.35
    b = 0.65
    c = 0.9

    ["1.2"]
    a = 0.10
    b = [0.5, 0.0, 0.5]   # r(A), r(B), r(C)
    c = 0.35

Problems and parts left out score zero. Each number earns one point when it is
within one unit of the printed rounding of the key (``10**-decimals``: 0.01 for
an answer printed to 2 decimals), or within a relative :data:`RTOL` of it (so
three significant figures are enough), whichever is wider; a whole-number answer
(a batch, a lookahead) must be exact.
The score is the points over the number of answers in the set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specsim.cards.files import parse_toml
from specsim.checks import check_int
from specsim.problems._core import Answer, Problem
from specsim.problems._render import ProblemSet

__all__ = [
    "RTOL",
    "GradedPart",
    "Grade",
    "parts_of",
    "tolerance",
    "answers_seed",
    "parse_answers",
    "grade",
    "render_grade",
]

RTOL = 5e-3
"""Relative tolerance of a numeric answer (0.5 %): three significant figures count."""

_SEVERAL: dict[str, tuple[str, ...]] = {
    "correction": ("a", "b", "b", "b", "c"),
    "cost_coefficient": ("a", "b", "b", "c", "d"),
    "capacity": ("a", "a", "b", "b", "c"),
}
"""Templates where one part asks for several numbers: the part letter of each answer."""


def parts_of(p: Problem) -> tuple[str, ...]:
    """The part letter of each of ``p``'s answers, in order."""
    letters = _SEVERAL.get(p.key, tuple("abcdefgh"[: len(p.answers)]))
    if len(letters) != len(p.answers):
        raise RuntimeError(f"problem {p.number}: {len(p.answers)} answers, parts {letters}")
    return letters


def tolerance(a: Answer) -> float:
    """How far a number may be from the key ``a`` and still earn the point."""
    if a.decimals == 0:
        return 0.0
    return max(10.0 ** (-a.decimals), RTOL * abs(a.value))


@dataclass(frozen=True, kw_only=True)
class GradedPart:
    """One answer of one part: the key, what the student gave (None if nothing), the verdict."""

    number: str
    part: str
    answer: Answer
    given: float | None
    correct: bool


@dataclass(frozen=True, kw_only=True)
class Grade:
    """Every answer of the set, graded; ``score`` is points over answers."""

    seed: int
    parts: tuple[GradedPart, ...]

    @property
    def points(self) -> int:
        return sum(g.correct for g in self.parts)

    @property
    def score(self) -> float:
        return self.points / len(self.parts)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return x


def _part_values(value: Any, *, count: int, where: str) -> list[float]:
    if count == 1:
        return [_number(value, where)]
    if not isinstance(value, list) or len(value) != count:
        raise ValueError(f"{where}: this part asks for {count} numbers; give an array of {count}")
    return [_number(x, f"{where}[{i}]") for i, x in enumerate(value)]


def _seed(value: Any, source: str) -> int:
    return check_int(value, name=f"{source}: seed", minimum=0, why="an integer 'seed' at the top")


def answers_seed(text: str, *, source: str) -> int:
    """The ``seed`` an answers file's text names (the set it answers), or a ValueError naming
    ``source``: what ``specsim problems --check`` grades against when ``--seed`` is not given."""
    return _seed(parse_toml(text, source=source).get("seed"), source)


def parse_answers(text: str, *, source: str, problems: Mapping[str, Problem]) -> dict[str, Any]:
    """Read an answers file's text into ``{number: {part: [floats]}}`` plus its ``seed``.

    Raises ValueError naming ``source``, the problem and the part for a file that is
    not TOML, has no integer ``seed``, names a problem or part the set does not have,
    or gives something that is not a number.
    """
    data = parse_toml(text, source=source)
    seed = _seed(data.pop("seed", None), source)
    out: dict[str, Any] = {"seed": seed}
    for number, table in data.items():
        if number not in problems:
            raise ValueError(
                f"{source}: [{number!r}]: no such problem in this set (name each table by "
                f'the problem number in quotes, ["1.1"]); known: {list(problems)}'
            )
        if not isinstance(table, dict):
            raise ValueError(f"{source}: {number!r} must be a table of parts, got {table!r}")
        letters = parts_of(problems[number])
        given = {}
        for part, value in table.items():
            if part not in letters:
                raise ValueError(
                    f"{source}: problem {number} has no part {part!r}; its parts are "
                    f"{sorted(set(letters))}"
                )
            given[part] = _part_values(
                value, count=letters.count(part), where=f"{source}: problem {number} part ({part})"
            )
        out[number] = given
    return out


def grade(ps: ProblemSet, answers: Mapping[str, Any]) -> Grade:
    """Grade parsed ``answers`` (from :func:`parse_answers`) against the set ``ps``."""
    if answers["seed"] != ps.seed:
        raise ValueError(f"seed: the answers are for seed {answers['seed']}, the set is {ps.seed}")
    graded = []
    for p in ps.problems:
        given = answers.get(p.number, {})
        seen: dict[str, int] = {}
        for part, a in zip(parts_of(p), p.answers, strict=True):
            i = seen.get(part, 0)
            seen[part] = i + 1
            x = given[part][i] if part in given else None
            ok = x is not None and abs(x - a.value) <= tolerance(a) + 1e-12
            graded.append(GradedPart(number=p.number, part=part, answer=a, given=x, correct=ok))
    return Grade(seed=ps.seed, parts=tuple(graded))


def _given_text(x: float | None) -> str:
    return "nothing" if x is None else f"{x:g}"


def render_grade(ps: ProblemSet, g: Grade, *, answered: frozenset[str] | None = None) -> str:
    """The grade as Markdown: the score, then each problem with a miss and its worked solution.

    Problems not in ``answered`` (the numbers the answers file has a table for; default
    all) are listed once at the end instead of with their solutions.
    """
    out = [
        f"# Grade, problem set seed {g.seed}",
        f"Score: {g.points} of {len(g.parts)} answers ({100 * g.score:.1f} %). An answer "
        f"counts when it is within one unit of its printed last decimal of the key, or "
        f"{100 * RTOL:g} % of it, whichever is wider; whole numbers must be exact.",
    ]
    by_number = {p.number: p for p in ps.problems}
    missed: dict[str, list[GradedPart]] = {}
    for part in g.parts:
        if not part.correct:
            missed.setdefault(part.number, []).append(part)
    skipped = [n for n in missed if answered is not None and n not in answered]
    for number, parts in missed.items():
        if number in skipped:
            continue
        p = by_number[number]
        out.append(f"## Problem {number}. {p.title}: missed")
        out.append(
            "\n".join(
                f"- ({m.part}) {m.answer.what}: you gave {_given_text(m.given)}, the key is "
                f"**{m.answer.text}**{' ' + m.answer.unit if m.answer.unit else ''}"
                for m in parts
            )
        )
        out.append("Worked solution:")
        out += list(p.solution)
    if skipped:
        out.append(f"Not answered (no table in the file): {', '.join(skipped)}.")
    if not missed:
        out.append("Every answer is right.")
    return "\n\n".join(out) + "\n"
