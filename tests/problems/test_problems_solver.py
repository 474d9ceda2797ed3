"""A second, independent solver: every key is reached from the printed statement alone.

The solver reads the Markdown that ``specsim problems --seed N`` prints (statements
only, no parameters, no answer key), pulls the numbers out of the text with regular
expressions, and solves each problem with its own short formulas: direct sums over
laws, brute-force scans, a forward recursion over hidden states, a linear program
for the best two-draft coupling. Nothing here calls the generator's code path; the
only specsim calls are the ones a statement prints for its "needs specsim" parts,
evaluated exactly as printed. Every key must agree with the solver within half a
unit of its printed last decimal (the printed rounding), over 60 seeds.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable

import numpy as np
import pytest
from scipy.optimize import linprog

import specsim.cost
from specsim.cards import load_hardware, load_model
from specsim.problems import generate, render_markdown

SEEDS = range(60)
_NUM = r"(-?[0-9]+(?:\.[0-9]+)?)"


def num(pattern: str, text: str) -> float:
    m = re.search(pattern.replace("#", _NUM), text)
    if m is None:
        raise AssertionError(f"the statement does not print {pattern!r}:\n{text}")
    return float(m.group(1))


def vec(name: str, text: str) -> np.ndarray:
    m = re.search(rf"\${name} = \(([^)]*)\)\$", text)
    assert m is not None, f"no ${name} = (...)$ in the statement"
    return np.array([float(x) for x in m.group(1).split(",")])


def rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| ---")
    ]


def tokens(a: float, g: int) -> float:
    return sum(a**j for j in range(g + 1))


def bisect(f: Callable[[float], float], target: float) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def specsim_call(text: str, part: str) -> float:
    """Evaluate the call a "needs specsim" part prints, as printed."""
    m = re.search(rf"\({part}\) This part needs specsim.*?Run `(specsim\.cost\.[^`]+)`", text)
    assert m is not None, f"part ({part}) does not say it needs specsim and what to run"
    env = {"specsim": specsim, "load_model": load_model, "load_hardware": load_hardware}
    return float(eval(m.group(1), env))  # noqa: S307 - the statement's own printed call


# Level 1 -------------------------------------------------------------------------------------
def s_overlap(t: str) -> list[float]:
    p, q = vec("p", t), vec("q", t)
    top = "ABCD".index(re.search(r"most likely token, ([A-D])\.", t).group(1))  # type: ignore[union-attr]
    return [np.minimum(p, q).sum(), 0.5 * np.abs(p - q).sum(), p[top]]


def s_correction(t: str) -> list[float]:
    p, q = vec("p", t), vec("q", t)
    y = "ABC".index(re.search(r"replacement\) is ([A-C])\?", t).group(1))  # type: ignore[union-attr]
    acc = sum(qx * min(1.0, px / qx) for px, qx in zip(p, q, strict=True) if qx > 0)
    r = np.clip(p - q, 0, None) / np.clip(p - q, 0, None).sum()
    return [1 - acc, *r, min(p[y], q[y]) + (1 - acc) * r[y]]


def s_expected(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    return [tokens(a, g), 1 - a, a**g]


def pmf(a: float, g: int) -> dict[int, float]:
    law = {k: a ** (k - 1) * (1 - a) for k in range(1, g + 1)}
    law[g + 1] = a**g
    return law


def s_variance(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    law = pmf(a, g)
    m = sum(k * w for k, w in law.items())
    var = sum((k - m) ** 2 * w for k, w in law.items())
    return [var, math.sqrt(var), math.sqrt(var) / m]


def s_calls(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    n = num(r"generates # tokens", t)
    e = sum(k * w for k, w in pmf(a, g).items())
    return [1 / e, g / e, n / e]


def s_walltime(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    c, v = num(r"\$c = #\$", t), num(r"\$v = #\$", t)
    return [tokens(a, g) / (g * c + 1), tokens(a, g) / (g * c + v)]


def tree_probs(t: str) -> tuple[float, float, float]:
    a = num(r"A is accepted with probability #", t)
    b = num(r"B is accepted with probability #", t)
    c = num(r"C is accepted with probability #", t)
    return a, b, c


def tree_mean(a: float, b: float, c: float) -> tuple[float, float]:
    """Enumerate the outcomes of the tree A(C), B and of the chain A, C."""
    tree = a * (c * 3 + (1 - c) * 2) + (1 - a) * (b * 2 + (1 - b) * 1)
    chain = a * (c * 3 + (1 - c) * 2) + (1 - a) * 1
    return tree, chain


def s_tree(t: str) -> list[float]:
    a, b, c = tree_probs(t)
    tree, chain = tree_mean(a, b, c)
    return [(1 - a) * b, a * c, tree, tree - chain]


# Level 2 -------------------------------------------------------------------------------------
def s_best(t: str) -> list[float]:
    a, c = num(r"\\alpha = #", t), num(r"\$c = #\$", t)
    w = [tokens(a, g) / (g * c + 1) for g in range(1, 300)]
    best = int(np.argmax(w)) + 1
    return [best, max(w), (1 + a) / (1 + c)]


def s_oracle(t: str) -> list[float]:
    a, f = num(r"\\alpha = #", t), num(r"reach # of that bound", t)
    bound = 1 / (1 - a)
    g = next(g for g in itertools.count() if tokens(a, g) >= f * bound)
    return [bound, g]


def s_infer(t: str) -> list[float]:
    g, m = int(num(r"\\gamma = #", t)), num(r"emitted # tokens on average", t)
    a = bisect(lambda x: tokens(x, g), m)
    return [a, round(a, 3) ** g]


def s_bill(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    ch, nb = num(r"\\hat c = #", t), num(r"the target has # billion", t)
    e = tokens(a, g)
    factor = (g + 1 + g * ch) / e
    return [factor, e, 2 * nb * factor]


def s_energy(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    table = {r[0].split(" ")[0]: (float(r[1]), float(r[2])) for r in rows(t)[1:]}
    (t1, e1), (tv, ev), (td, ed) = table["plain"], table["target"], table["one"]
    e = tokens(a, g)
    spec = (g * ed + ev) / e
    return [spec, e1 / spec, t1 * e / (g * td + tv)]


def s_cost(t: str) -> list[float]:
    bw, eta = num(r"bandwidth of # GB/s", t), num(r"\\eta = #", t)
    lay, pas = num(r"# microseconds per layer", t), num(r"# microseconds per pass", t)
    (w_t, b_t, l_t), (w_d, b_d, l_d) = ((float(r[1]), float(r[2]), int(r[3])) for r in rows(t)[1:])

    def ms(w: float, b: float, layers: int) -> float:
        return (w * 1e6 * b / (eta * bw * 1e9) + (layers * lay + pas) * 1e-6) * 1e3

    tt, td = ms(w_t, b_t, l_t), ms(w_d, b_d, l_d)
    return [w_d / w_t, tt, td, td / tt, specsim_call(t, "d")]


def s_verification(t: str) -> list[float]:
    a, g = num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    batch, c = num(r"A batch of # sequences", t), num(r"\$c = #\$", t)
    peak, ce = num(r"# TFLOP/s peak", t), num(r"of which a pass attains #,", t)
    bw, me = num(r"# GB/s, of which it attains", t), num(r"of which it attains #;", t)
    nbytes = num(r"is # bytes", t)
    ridge = nbytes * peak * 1e12 * ce / (2 * bw * 1e9 * me)
    v = round(specsim_call(t, "c"), 3)
    return [ridge, batch * (g + 1), v, tokens(a, g) / (g * c + v)]


def s_two(t: str) -> list[float]:
    p, q = vec("p", t), vec("q", t)
    one = np.minimum(p, q).sum()
    r = np.clip(p - q, 0, None) / np.clip(p - q, 0, None).sum()
    two = one + (1 - one) * np.minimum(r, q).sum()
    # The best exact verifier: a maximum flow from candidate pairs to the tokens they hold.
    pairs = list(itertools.product(range(3), repeat=2))
    arcs = [(i, x) for i, pr in enumerate(pairs) for x in set(pr)]
    a_ub = np.zeros((len(pairs) + 3, len(arcs)))
    for k, (i, x) in enumerate(arcs):
        a_ub[i, k] = a_ub[len(pairs) + x, k] = 1.0
    b_ub = [q[x1] * q[x2] for x1, x2 in pairs] + list(p)
    lp = linprog(-np.ones(len(arcs)), A_ub=a_ub, b_ub=b_ub, bounds=(0, None))
    return [one, two, -lp.fun]


# Level 3 -------------------------------------------------------------------------------------
def s_block(t: str) -> list[float]:
    """Enumerate Algorithm 1 with gamma = 2 on unigram p and q: the law of the output."""
    p, q = vec("p", t), vec("q", t)
    xy = re.search(r"exactly the two tokens \(([A-C]), ([A-C])\)", t)
    x, y = ("ABC".index(s) for s in xy.groups())  # type: ignore[union-attr]
    r = np.clip(p - q, 0, None) / np.clip(p - q, 0, None).sum()
    law: dict[tuple[int, ...], float] = {}
    for d1, d2 in itertools.product(range(3), repeat=2):
        w, out = q[d1] * q[d2], []
        for d in (d1, d2):
            acc = min(1.0, p[d] / q[d])
            for z in range(3):  # rejected: corrected to z
                key = (*out, z)
                law[key] = law.get(key, 0.0) + w * (1 - acc) * r[z]
            w, out = w * acc, [*out, d]
        for z in range(3):  # both accepted: a bonus token from p
            law[(*out, z)] = law.get((*out, z), 0.0) + w * p[z]
    return [
        sum(w for s, w in law.items() if len(s) == 1),
        sum(w for s, w in law.items() if len(s) == 3),
        law[(x, y)],
        sum(w for s, w in law.items() if s[0] == 0),
    ]


def s_markov(t: str) -> list[float]:
    ae, ah = num(r"\\alpha_E = #", t), num(r"\\alpha_H = #", t)
    rho, mean, g = num(r"\\rho = #", t), num(r"\\bar\\alpha = #", t), int(num(r"\\gamma = #", t))
    alphas, move = np.array([ae, ah]), rho * np.eye(2) + (1 - rho) * 0.5

    def block(start: np.ndarray) -> float:
        alive, total = start.copy(), 1.0  # alive[s]: every draft so far accepted, state s
        for _ in range(g):
            alive = alive * alphas
            total += alive.sum()
            alive = alive @ move
        return total

    # The position chain on (state, place in block); every position emits one token and
    # every block opens at place 0, so tokens per pass = 1 / (stationary mass of place 0).
    n = g + 1
    chain = np.zeros((2 * n, 2 * n))
    for s, k in itertools.product(range(2), range(n)):
        for s2 in range(2):
            if k < g:
                chain[s * n + k, s2 * n + k + 1] += alphas[s] * move[s, s2]
                chain[s * n + k, s2 * n] += (1 - alphas[s]) * move[s, s2]
            else:
                chain[s * n + k, s2 * n] += move[s, s2]
    vals, vecs = np.linalg.eig(chain.T)
    pi = np.real(vecs[:, np.argmin(np.abs(vals - 1))])
    stream = pi.sum() / (pi[0] + pi[n])
    iid = tokens(mean, g)
    return [
        iid,
        block(np.array([0.5, 0.5])),
        stream,
        stream / iid,
        bisect(lambda a: tokens(a, g), stream),
    ]


def s_mixture(t: str) -> list[float]:
    s = num(r"A share # of its passes", t)
    ae, ah = num(r"accepted with probability # per token", t), num(r"hard ones, with #\.", t)
    g, c = int(num(r"\\gamma = #", t)), num(r"\$c = #\$", t)
    mean = s * ae + (1 - s) * ah
    mix = s * tokens(ae, g) + (1 - s) * tokens(ah, g)
    return [mean, tokens(mean, g), mix, mix / tokens(mean, g), mix / (g * c + 1)]


def s_gamma_v(t: str) -> list[float]:
    a, c = num(r"\\alpha = #", t), num(r"\$c = #\$", t)
    listing = re.search(r"10\$: ([0-9., ]+)\.", t).group(1)  # type: ignore[union-attr]
    v = [float(x) for x in listing.split(",")]
    paper = [tokens(a, g) / (g * c + 1) for g in range(11)]
    real = [tokens(a, g) / (g * c + v[g]) for g in range(11)]
    gp, gr = int(np.argmax(paper)), int(np.argmax(real))
    return [gp, gr, real[gp], real[gr]]


def s_capacity(t: str) -> list[float]:
    slo, a, g = num(r"at least # tokens/s", t), num(r"\\alpha = #", t), int(num(r"\\gamma = #", t))
    table = [[float(x) for x in r] for r in rows(t)[1:]]
    plain = [(b, b * 1e3 / s) for b, s, _, _ in table if 1e3 / s >= slo]
    spec = [(b, b * 1e3 * tokens(a, g) / (g * d + v)) for b, _, d, v in table]
    spec = [(b, x) for b, x in spec if x / b >= slo]
    (bp, xp), (bs, xs) = max(plain), max(spec)
    return [bp, xp, bs, xs, xs / xp]


def s_pays(t: str) -> list[float]:
    tree, chain = tree_mean(*tree_probs(t))

    # tokens per unit time: chain verifies 3 positions, the tree 4; find where they cross
    def gap(k: float) -> float:
        return chain / (1 + 3 * k) - tree / (1 + 4 * k)

    lo, hi = 0.0, 1.0
    while gap(hi) < 0:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        lo, hi = ((lo + hi) / 2, hi) if gap((lo + hi) / 2) < 0 else (lo, (lo + hi) / 2)
    return [chain, tree, (lo + hi) / 2]


def s_experts(t: str) -> list[float]:
    E, k = int(num(r"\$E = #\$", t)), int(num(r"\$k = #\$", t))
    b, n = int(num(r"\$b = #\$", t)), int(num(r"\\gamma \+ 1 = #", t))
    cov = num(r"at least \$# E\$", t)

    def seen(tokens: int) -> float:  # expected distinct experts, one expert at a time
        return E * (1 - (1 - k / E) ** tokens)

    need = next(x for x in itertools.count(1) if seen(x) >= cov * E)
    return [seen(b * n), seen(b), seen(b * n) / seen(b), need]


def s_mtp(t: str) -> list[float]:
    a1, a = num(r"\$a_1 = #\$", t), num(r"\$a = #\$", t)
    c, s = num(r"\$c = #\$", t), num(r"\$s = #\$", t)
    e = [1 + a1 * sum(a**j for j in range(d)) for d in range(11)]
    speed = [e[d] / (d * c + 1 + s * d) for d in range(11)]
    best = int(np.argmax(speed))
    return [e[3], best, speed[best], a1 - s]


SOLVERS: dict[str, Callable[[str], list[float]]] = {
    "Acceptance is overlap": s_overlap,
    "The correction distribution by hand": s_correction,
    "Tokens per pass": s_expected,
    "How much one pass's yield varies": s_variance,
    "Serial target calls per token": s_calls,
    "The walltime improvement": s_walltime,
    "Expected tokens of a small tree by hand": s_tree,
    "Choosing the lookahead": s_best,
    "How far can lookahead take you?": s_oracle,
    "Reading alpha off a log": s_infer,
    "The buried bill: operations per emitted token": s_bill,
    "Energy per token on real cards": s_energy,
    "The cost coefficient c from cards": s_cost,
    "The verification factor at a batch": s_verification,
    "The acceptance of two drafts": s_two,
    "Why the output is exact: one block, enumerated": s_block,
    "Bursty acceptance: the same mean, a different yield": s_markov,
    "Two kinds of prompts: Jensen's inequality": s_mixture,
    "When verification costs more than a step: the best gamma at a batch": s_gamma_v,
    "A small capacity question": s_capacity,
    "When a tree stops paying": s_pays,
    "Distinct experts touched by a verification pass": s_experts,
    "When MTP depth stops paying": s_mtp,
}


def statements(markdown: str) -> dict[str, tuple[str, str]]:
    """``{number: (title, statement text)}`` from the printed set."""
    out = {}
    for chunk in markdown.split("\n### Problem ")[1:]:
        head, _, body = chunk.partition("\n")
        number, _, title = head.partition(". ")
        body = re.sub(r"<!--.*?-->", "", body.split("\n## ")[0])
        out[number] = (title, body)
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_every_key_follows_from_the_printed_statement(seed: int) -> None:
    ps = generate(seed)
    printed = statements(render_markdown(ps))
    assert set(printed) == {p.number for p in ps.problems}
    for p in ps.problems:
        title, text = printed[p.number]
        solved = SOLVERS[title](text)
        assert len(solved) == len(p.answers), p.number
        for i, (mine, a) in enumerate(zip(solved, p.answers, strict=True)):
            half = 0.5 * 10.0 ** (-a.decimals)
            assert abs(mine - a.value) <= half + 1e-9, (
                f"seed {seed} problem {p.number} answer {i} ({a.what}): key {a.text}, "
                f"solved from the statement {mine!r}"
            )


def test_the_solver_is_not_a_tautology() -> None:
    """A wrong key is caught: perturbing one printed input moves the solver off the key."""
    p = generate(3).problems[2]
    title, text = statements(render_markdown(generate(3)))[p.number]
    a = re.search(r"\\alpha = ([0-9.]+)", text).group(1)  # type: ignore[union-attr]
    moved = text.replace(f"\\alpha = {a}", f"\\alpha = {float(a) + 0.01:g}", 1)
    assert abs(SOLVERS[title](moved)[0] - p.answers[0].value) > 0.5e-4


def test_capacity_prose_follows_the_sign_of_the_ratio() -> None:
    """3.5 asks for a ratio (not a "raise") and its moral says what the numbers say."""
    seen = set()
    for seed in range(80):
        p = next(q for q in generate(seed).problems if q.key == "capacity")
        ratio = p.answers[-1].value
        text = " ".join(p.solution)
        assert "raise the capacity" not in " ".join(p.statement)
        if ratio > 1:
            assert "speculation raises the capacity" in text, seed
        else:
            assert "speculation does not raise the capacity" in text, seed
            # the prose's reason: speculation keeps the promise at no larger a batch
            assert p.answers[2].value <= p.answers[0].value, seed
        seen.add(ratio > 1)
    assert seen == {True, False}  # both cases occur, so both branches are checked


def test_the_tree_problem_says_drafting_is_free() -> None:
    """3.6's key (break-even at E_tree/(1 + 4k) = E_chain/(1 + 3k)) holds only without drafting."""
    p = next(q for q in generate(5).problems if q.key == "tree_pays")
    assert "Drafting is free" in " ".join(p.statement)
    assert "costs the same" not in " ".join(p.statement)
