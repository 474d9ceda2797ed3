"""Randomized problem sets on speculative decoding, with worked solutions specsim computes.

:func:`generate` draws one problem from each template (:data:`TEMPLATES`, 23 of
them in three levels) with a :class:`numpy.random.Generator` seeded by the set's
seed and the template's key: the same seed gives the same set, and a problem
does not change when other levels are left out. Each :class:`Problem` records
the parameters it was drawn with; :func:`build` rebuilds it from them, which is
how a committed set is checked. The renderers give Markdown
(:func:`render_markdown`), a LaTeX document (:func:`render_latex`) and a
printable HTML page with the key on its own pages (:func:`render_html`); the
``specsim problems`` command prints or writes them, and grades a student's
answers file against the set (:func:`parse_answers`, :func:`grade`,
:func:`render_grade`).

Topics: acceptance as overlap and the correction distribution (Leviathan et al.
2023, Section 2.3 and Corollary 3.6), tokens per pass and its variance
(Equation 1), walltime and the best lookahead (Theorem 3.8, Corollary 3.9),
the operations bill (Theorem 3.11), energy per token, the cost coefficient and
the verification factor from cards (:mod:`specsim.cost`), non-i.i.d.
acceptance, capacity under a per-user speed promise, the distinct experts an MoE
verification pass touches and the depth at which an MTP draft stops paying.

>>> ps = generate(1, levels=(1,))
>>> [p.number for p in ps.problems]
['1.1', '1.2', '1.3', '1.4', '1.5', '1.6', '1.7']
>>> p = ps.problems[2]
>>> build(p.key, p.params, number=p.number) == p
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from specsim.problems._cards import COST_COEFFICIENT, ENERGY
from specsim.problems._core import Answer, Problem, Template, Worked
from specsim.problems._design import BEST_GAMMA, BURIED_BILL, INFER_ALPHA, ORACLE
from specsim.problems._frontier import DISTINCT_EXPERTS, MTP_DEPTH
from specsim.problems._grade import (
    RTOL,
    Grade,
    GradedPart,
    answers_seed,
    grade,
    parse_answers,
    parts_of,
    render_grade,
    tolerance,
)
from specsim.problems._html import print_pdf, render_html
from specsim.problems._render import (
    LEVEL_NAMES,
    MARKER,
    ProblemSet,
    render_latex,
    render_markdown,
)
from specsim.problems._sampling import CORRECTION, EXACT_BLOCK, OVERLAP
from specsim.problems._serving import CAPACITY, GAMMA_WITH_V
from specsim.problems._tokens import CALLS, EXPECTED_TOKENS, VARIANCE, WALLTIME
from specsim.problems._trees import TREE_BY_HAND, TREE_PAYS, TWO_DRAFTS
from specsim.problems._verification import VERIFICATION
from specsim.problems._yield import MARKOV, MIXTURE
from specsim.rng import check_seed, keyed_rng

__all__ = [
    "Answer",
    "Problem",
    "ProblemSet",
    "Template",
    "Worked",
    "TEMPLATES",
    "LEVEL_NAMES",
    "MARKER",
    "generate",
    "build",
    "template",
    "render_markdown",
    "render_latex",
    "render_html",
    "print_pdf",
    "RTOL",
    "Grade",
    "GradedPart",
    "answers_seed",
    "grade",
    "parse_answers",
    "parts_of",
    "render_grade",
    "tolerance",
]

TEMPLATES: tuple[Template, ...] = (
    OVERLAP,
    CORRECTION,
    EXPECTED_TOKENS,
    VARIANCE,
    CALLS,
    WALLTIME,
    TREE_BY_HAND,
    BEST_GAMMA,
    ORACLE,
    INFER_ALPHA,
    BURIED_BILL,
    ENERGY,
    COST_COEFFICIENT,
    VERIFICATION,
    TWO_DRAFTS,
    EXACT_BLOCK,
    MARKOV,
    MIXTURE,
    GAMMA_WITH_V,
    CAPACITY,
    TREE_PAYS,
    DISTINCT_EXPERTS,
    MTP_DEPTH,
)
"""Every problem template, in reading order (level 1, then 2, then 3)."""


def _numbers() -> dict[str, str]:
    out, count = {}, {1: 0, 2: 0, 3: 0}
    for t in TEMPLATES:
        count[t.level] += 1
        out[t.key] = f"{t.level}.{count[t.level]}"
    return out


def template(key: str) -> Template:
    """The template with this key, or a ValueError listing the keys."""
    for t in TEMPLATES:
        if t.key == key:
            return t
    raise ValueError(f"key: no problem template {key!r}; known: {[t.key for t in TEMPLATES]}")


def build(key: str, params: Mapping[str, Any], *, number: str | None = None) -> Problem:
    """Work out the problem of template ``key`` with these parameters (deterministic).

    ``number`` defaults to the template's place in a full set (``"level.index"``).
    """
    t = template(key)
    worked = t.build(params)
    return Problem(
        key=t.key,
        level=t.level,
        number=_numbers()[t.key] if number is None else number,
        title=t.title,
        params=dict(params),
        statement=worked.statement,
        solution=worked.solution,
        answers=worked.answers,
    )


def _check_levels(levels: Iterable[int] | None) -> tuple[int, ...]:
    if levels is None:
        return (1, 2, 3)
    out = tuple(sorted(set(levels)))
    bad = [lv for lv in out if lv not in LEVEL_NAMES]
    if not out or bad:
        raise ValueError(f"levels: expected a non-empty selection of 1, 2, 3, got {levels!r}")
    return out


def generate(seed: int, *, levels: Iterable[int] | None = None) -> ProblemSet:
    """Draw one problem per template of the chosen ``levels`` (default all three).

    Template ``key`` draws its parameters from
    ``numpy.random.default_rng([seed, crc32(key)])``, so each problem depends only
    on the seed and its template. The parameters pass through JSON before the
    problem is built, so a set rebuilt from its recorded parameters is identical.
    """
    s = check_seed(seed)
    chosen = _check_levels(levels)
    problems = []
    for t in TEMPLATES:
        if t.level not in chosen:
            continue
        rng = keyed_rng(s, t.key)
        params = json.loads(json.dumps(t.draw(rng)))
        problems.append(build(t.key, params))
    return ProblemSet(seed=s, levels=chosen, problems=tuple(problems))
