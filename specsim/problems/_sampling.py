"""Problems on the sampling step itself: acceptance as overlap, the correction, exactness.

Each draws a target ``p`` and a draft ``q`` on a vocabulary of three or four
tokens, with probabilities in twentieths so that hand arithmetic stays exact,
and computes every answer with :mod:`specsim.sampling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim import sampling
from specsim.problems._core import Answer, Template, Worked, composition, fmt, vec

__all__ = ["OVERLAP", "CORRECTION", "EXACT_BLOCK"]

TOKENS = "ABCD"


def _draw_pair(rng: np.random.Generator, vocab: int, *, under: int = 1) -> dict[str, Any]:
    """p != q in twentieths, with at least ``under`` tokens the draft under-proposes."""
    while True:
        p = composition(rng, vocab)
        q = composition(rng, vocab)
        if sum(a > b for a, b in zip(p, q, strict=True)) >= under:
            return {"p": [x / 20 for x in p], "q": [x / 20 for x in q]}


def _pair(params: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, str]:
    p = np.asarray(params["p"], dtype=float)
    q = np.asarray(params["q"], dtype=float)
    names = "(" + ", ".join(TOKENS[: p.shape[0]]) + ")"
    return p, q, names


def _setup(p: np.ndarray, q: np.ndarray, names: str) -> str:
    return (
        f"A target model's next-token distribution over the tokens {names} is "
        f"$p = {vec(p)}$ and a draft model's is $q = {vec(q)}$. Speculative sampling draws "
        r"$x \sim q$ and accepts it with probability $\min(1, p(x)/q(x))$."
    )


def _min_terms(p: np.ndarray, q: np.ndarray) -> str:
    return " + ".join(f"\\min({fmt(a, 2)}, {fmt(b, 2)})" for a, b in zip(p, q, strict=True))


# Acceptance is overlap ----------------------------------------------------------------------
def _draw_overlap(rng: np.random.Generator) -> dict[str, Any]:
    return _draw_pair(rng, int(rng.integers(3, 5)))


def _build_overlap(params: Mapping[str, Any]) -> Worked:
    p, q, names = _pair(params)
    alpha = float(sampling.acceptance_rate(p, q))
    diffs = np.abs(p - q)
    tv = 0.5 * float(diffs.sum())
    top = int(np.argmax(p))
    statement = (
        _setup(p, q, names),
        r"- (a) What is the probability $\alpha$ that the drafted token is accepted?",
        r"- (b) What is the total variation distance "
        r"$\mathrm{TV}(p, q) = \tfrac{1}{2}\sum_x |p(x) - q(x)|$?",
        f"- (c) The draft is replaced by a greedy one that always proposes the target's most "
        f"likely token, {TOKENS[top]}. What is the acceptance probability now?",
    )
    solution = (
        r"(a) Averaging the acceptance probability over the draft's proposal, "
        r"$\alpha = \sum_x q(x)\min(1, p(x)/q(x)) = \sum_x \min(p(x), q(x))$: the overlap of "
        r"the two histograms.",
        f"$$\\alpha = {_min_terms(p, q)} = {fmt(alpha, 2)}$$",
        f"(b) The absolute differences are ${vec(diffs)}$, which sum to "
        f"${fmt(2 * tv, 2)}$, so $\\mathrm{{TV}} = {fmt(tv, 2)}$. Indeed "
        r"$\alpha = 1 - \mathrm{TV}$ (Leviathan et al. 2023, Corollary 3.6): "
        r"$\min(a, b) = (a + b - |a - b|)/2$ pointwise, and $p$ and $q$ each sum to 1.",
        f"(c) The greedy draft is a point mass on {TOKENS[top]}, so the overlap is "
        f"$\\min(p({TOKENS[top]}), 1) = {fmt(p[top], 2)}$: a greedy draft is accepted exactly as "
        "often as the target samples that token itself.",
    )
    answers = (
        Answer(symbol=r"\alpha", what="acceptance probability", value=alpha, decimals=2),
        Answer(symbol=r"\mathrm{TV}(p, q)", what="total variation distance", value=tv, decimals=2),
        Answer(
            symbol=r"\alpha_{\mathrm{greedy}}",
            what="acceptance of the greedy draft",
            value=float(sampling.acceptance_rate(p, np.eye(p.shape[0])[top])),
            decimals=2,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


OVERLAP = Template(
    key="overlap",
    level=1,
    title="Acceptance is overlap",
    topic="acceptance as a sum of minima and as 1 - TV",
    draw=_draw_overlap,
    build=_build_overlap,
)


# The correction distribution ------------------------------------------------------------------
def _draw_correction(rng: np.random.Generator) -> dict[str, Any]:
    return _draw_pair(rng, 3, under=2)


def _build_correction(params: Mapping[str, Any]) -> Worked:
    p, q, names = _pair(params)
    alpha = float(sampling.acceptance_rate(p, q))
    residual = np.maximum(p - q, 0.0)
    r = sampling.correction_distribution(p, q)
    emitted = sampling.emitted_distribution(p, q)
    y = int(np.argmax(r))
    Y = TOKENS[y]
    statement = (
        _setup(p, q, names),
        "- (a) With what probability is a drafted token rejected?",
        r"- (b) After a rejection the target samples a replacement from the correction "
        r"distribution $r = \mathrm{norm}(\max(0, p - q))$. Give $r(A)$, $r(B)$ and $r(C)$.",
        f"- (c) What is the probability that the token emitted at this position (an accepted "
        f"draft or the replacement) is {Y}?",
    )
    solution = (
        f"(a) The acceptance is $\\alpha = \\sum_x \\min(p(x), q(x)) = {fmt(alpha, 2)}$, so a "
        f"drafted token is rejected with probability $1 - \\alpha = {fmt(1 - alpha, 2)}$.",
        f"(b) The residual $\\max(0, p - q) = {vec(residual)}$ has mass "
        f"${fmt(residual.sum(), 2)} = 1 - \\alpha$. Normalizing, $r = {vec(r, 4)}$. Only "
        "the tokens the draft under-proposes ($p > q$) receive correction mass: the "
        "correction adds back exactly what the draft's proposals fall short of.",
        f"(c) {Y} is emitted if it was drafted and accepted, probability "
        f"$\\min(p({Y}), q({Y})) = {fmt(min(p[y], q[y]), 2)}$, or after a rejection, "
        f"probability $(1 - \\alpha)\\, r({Y}) = {fmt(1 - alpha, 2)} \\times {fmt(r[y], 4)} = "
        f"{fmt((1 - alpha) * r[y], 4)}$. The total is ${fmt(emitted[y], 4)} = p({Y})$: the "
        "emitted token is distributed exactly as the target (Leviathan et al. 2023, "
        "Theorem A.1; Chen et al. 2023, Theorem 1).",
    )
    answers = (
        Answer(symbol=r"1 - \alpha", what="rejection probability", value=1 - alpha, decimals=2),
        *(
            Answer(
                symbol=f"r({TOKENS[i]})",
                what=f"correction probability of {TOKENS[i]}",
                value=float(r[i]),
                decimals=4,
            )
            for i in range(3)
        ),
        Answer(
            symbol=rf"P(\text{{emit }} {Y})",
            what=f"probability the emitted token is {Y}",
            value=float(emitted[y]),
            decimals=4,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


CORRECTION = Template(
    key="correction",
    level=1,
    title="The correction distribution by hand",
    topic="rejection, the residual distribution and exactness at one position",
    draw=_draw_correction,
    build=_build_correction,
)


# One whole block, enumerated ------------------------------------------------------------------
def _build_exact_block(params: Mapping[str, Any]) -> Worked:
    p, q, names = _pair(params)
    law = sampling.enumerate_block(lambda ctx: p, lambda ctx: q, 2)
    alpha = float(sampling.acceptance_rate(p, q))
    r = sampling.correction_distribution(p, q)
    x = int(np.argmax(np.minimum(p, q)))
    y = int(np.argmax(r))
    X, Y = TOKENS[x], TOKENS[y]
    one = sum(w for s, w in law.items() if len(s) == 1)
    three = sum(w for s, w in law.items() if len(s) == 3)
    pair = law.get((x, y), 0.0)
    first_a = sum(w for s, w in law.items() if s[0] == 0)
    statement = (
        f"A unigram target and draft: at every position the target's next-token distribution "
        f"over {names} is $p = {vec(p)}$ and the draft's is $q = {vec(q)}$, whatever came "
        r"before. One speculative block drafts $\gamma = 2$ tokens and the target verifies "
        "them in one pass (Leviathan et al. 2023, Algorithm 1).",
        "- (a) What is the probability that the block emits exactly one token?",
        "- (b) What is the probability that it emits three tokens?",
        f"- (c) What is the probability that it emits exactly the two tokens ({X}, {Y})?",
        "- (d) What is the probability that the first token it emits is A?",
    )
    solution = (
        r"Follow the tree of one block. The first draft $x_1 \sim q$ is accepted with "
        r"probability $\alpha = \sum_x \min(p(x), q(x)) = " + fmt(alpha, 2) + r"$; on a "
        r"rejection the block emits one token from $r = \mathrm{norm}(\max(0, p - q)) = "
        + vec(r, 4)
        + "$ and ends. After an acceptance the second draft is verified the same "
        "way; if it is accepted too, the target's pass already holds the distribution of a "
        "third position and the block adds a bonus token drawn from $p$.",
        f"(a) One token means the first draft was rejected: $1 - \\alpha = {fmt(one, 4)}$.",
        f"(b) Three tokens means both drafts were accepted: $\\alpha^2 = {fmt(three, 4)}$.",
        f"(c) {X} drafted and accepted, probability $\\min(p({X}), q({X})) = "
        f"{fmt(min(p[x], q[x]), 2)}$; then the second draft rejected, $1 - \\alpha = "
        f"{fmt(1 - alpha, 2)}$, and corrected to {Y}, $r({Y}) = {fmt(r[y], 4)}$. The product "
        f"is ${fmt(pair, 4)}$.",
        f"(d) As in the one-position case, A comes first either drafted and accepted or as the "
        f"correction after a rejection: ${fmt(min(p[0], q[0]), 2)} + {fmt(1 - alpha, 2)} "
        f"\\times {fmt(r[0], 4)} = {fmt(first_a, 4)} = p(A)$. Conditioned on the prefix "
        "emitted so far, the same argument holds at every later position, so the block's "
        "output has exactly the target's law; `specsim.sampling.enumerate_block` sums every "
        "path of the tree and confirms all four numbers.",
    )
    answers = (
        Answer(symbol=r"P(T = 1)", what="probability of one token", value=one, decimals=4),
        Answer(symbol=r"P(T = 3)", what="probability of three tokens", value=three, decimals=4),
        Answer(
            symbol=f"P({X}{Y})", what=f"probability of exactly ({X}, {Y})", value=pair, decimals=4
        ),
        Answer(
            symbol=r"P(\text{first} = A)",
            what="probability the first token is A",
            value=first_a,
            decimals=4,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


EXACT_BLOCK = Template(
    key="exact_block",
    level=3,
    title="Why the output is exact: one block, enumerated",
    topic="the tree of a block, its length law and exactness by enumeration",
    draw=_draw_correction,
    build=_build_exact_block,
)
