"""The tree and multi-draft problem templates: answers recomputed by independent routes.

Nothing here calls specsim.theory: the tree's answers come from enumerating the
accept/reject coins of the walk, the two-draft answers from enumerating candidate pairs
and from SpecTr's linear program (scipy), the break-even cost from a bisection on the
two throughputs.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from scipy.optimize import linprog
from test_problems import _QUESTION_RULES, check_latex  # the registered templates' checks

from specsim.problems import Problem, ProblemSet, render_latex, render_markdown
from specsim.problems._trees import TREE_BY_HAND, TREE_PAYS, TWO_DRAFTS

TEMPLATES = (TREE_BY_HAND, TWO_DRAFTS, TREE_PAYS)


def _walk(a: float, b: float, c: float) -> dict[str, float]:
    """Enumerate the three coins (A, B if A fails, C if A passes) of the tree A, B; A -> C."""
    out = {"B": 0.0, "three": 0.0, "E": 0.0, "chain": 0.0}
    for ca, cb, cc in itertools.product((True, False), repeat=3):
        w = (a if ca else 1 - a) * (b if cb else 1 - b) * (c if cc else 1 - c)
        path = ["A", "C"] if ca and cc else ["A"] if ca else ["B"] if cb else []
        chain = ["A", "C"] if ca and cc else ["A"] if ca else []
        out["B"] += w * (path == ["B"])
        out["three"] += w * (len(path) == 2)
        out["E"] += w * (len(path) + 1)
        out["chain"] += w * (len(chain) + 1)
    return out


def _pairs(p: np.ndarray, q: np.ndarray) -> float:
    """Two i.i.d. candidates, multi-step speculative sampling, summed over every pair."""
    left = np.maximum(p - q, 0.0)
    r = left / left.sum() if left.sum() > 0 else p
    total = 0.0
    for x1, x2 in itertools.product(range(len(p)), repeat=2):
        a1 = min(1.0, p[x1] / q[x1]) if q[x1] > 0 else 0.0
        a2 = min(1.0, r[x2] / q[x2]) if q[x2] > 0 else 0.0
        total += q[x1] * q[x2] * (a1 + (1 - a1) * a2)
    return total


def _lp(p: np.ndarray, q: np.ndarray) -> float:
    tuples = list(itertools.product(range(len(p)), repeat=2))
    cols = [(t, y) for t in range(len(tuples)) for y in set(tuples[t])]
    a_ub = np.zeros((len(tuples) + len(p), len(cols)))
    for j, (t, y) in enumerate(cols):
        a_ub[t, j] = a_ub[len(tuples) + y, j] = 1.0
    b_ub = np.concatenate([[q[x] * q[y] for x, y in tuples], p])
    res = linprog(-np.ones(len(cols)), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    return float(-res.fun)


def independent(key: str, params: dict) -> list[float]:
    if key in ("tree_by_hand", "tree_pays"):
        w = _walk(params["a"], params["b"], params["c"])
        if key == "tree_by_hand":
            return [w["B"], w["three"], w["E"], w["E"] - w["chain"]]
        lo, hi = 0.0, 10.0  # the tree's advantage in tokens per unit time falls with kappa
        for _ in range(200):
            mid = (lo + hi) / 2
            ahead = w["E"] / (1 + 4 * mid) > w["chain"] / (1 + 3 * mid)
            lo, hi = (mid, hi) if ahead else (lo, mid)
        return [w["chain"], w["E"], (lo + hi) / 2]
    p, q = np.asarray(params["p"]), np.asarray(params["q"])
    return [float(np.minimum(p, q).sum()), _pairs(p, q), _lp(p, q)]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.key)
def test_answers_agree_with_independent_routes(template, seed: int) -> None:
    params = template.draw(np.random.default_rng([seed, 16]))
    worked = template.build(params)
    expected = independent(template.key, params)
    assert len(worked.answers) == len(expected)
    for answer, value in zip(worked.answers, expected, strict=True):
        assert answer.value == pytest.approx(value, abs=1e-9), (template.key, answer.what)
    parts = [s for s in worked.statement if s.startswith("- (")]
    assert len(parts) == len(worked.answers)
    for question, answer in zip(parts, worked.answers, strict=True):
        for pattern, rule, ok in _QUESTION_RULES:
            if re.search(pattern, question):
                assert ok(answer.value), (template.key, question, rule, answer.value)


def test_the_problems_render_in_markdown_and_latex() -> None:
    problems = []
    for n, t in enumerate(TEMPLATES, start=1):
        params = t.draw(np.random.default_rng(n))
        w = t.build(params)
        problems.append(
            Problem(
                key=t.key,
                level=t.level,
                number=f"{t.level}.{n}",
                title=t.title,
                params=params,
                statement=w.statement,
                solution=w.solution,
                answers=w.answers,
            )
        )
    ps = ProblemSet(seed=1, levels=(1, 2, 3), problems=tuple(problems))
    md = render_markdown(ps, answers=True)
    assert all(t.title in md for t in TEMPLATES)
    check_latex(render_latex(ps, answers=True))


def test_a_second_candidate_never_hurts_tokens_per_pass() -> None:
    for a, b, c in itertools.product((0.4, 0.9), (0.2, 0.8), (0.3, 0.9)):
        w = _walk(a, b, c)
        assert w["E"] - w["chain"] == pytest.approx((1 - a) * b, abs=1e-15)
