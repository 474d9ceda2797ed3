"""Problems on token trees and several drafts: a tree by hand, two drafts, when a tree pays.

Acceptance probabilities are drawn in tenths (trees) or twentieths (distributions) so
that hand arithmetic stays exact; every answer is computed with :mod:`specsim.theory`
(:func:`~specsim.theory.expected_tokens_tree`, :func:`~specsim.theory.mss_acceptance`,
:func:`~specsim.theory.optimal_multidraft_acceptance`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim import theory
from specsim.problems._core import Answer, Template, Worked, composition, fmt, vec

__all__ = ["TREE_BY_HAND", "TWO_DRAFTS", "TREE_PAYS"]

# The tree of the first and third problems: A and B below the root, C below A.
_TREE = [-1, -1, 0]
_CHAIN = [-1, 0]


def _tenths(rng: np.random.Generator, lo: int, hi: int) -> float:
    return int(rng.integers(lo, hi + 1)) / 10


def _draw_tree(rng: np.random.Generator) -> dict[str, Any]:
    return {"a": _tenths(rng, 4, 9), "b": _tenths(rng, 2, 8), "c": _tenths(rng, 3, 9)}


def _tree_setup(a: float, b: float, c: float) -> str:
    return (
        "A draft proposes a token tree below the last emitted token: two candidates A (tried "
        "first) and B at depth 1, and one candidate C below A at depth 2. The target verifies "
        "the tree in one pass, trying siblings in order (SpecInfer's multi-step speculative "
        f"sampling). A is accepted with probability {fmt(a, 1)}; if A is rejected, B is "
        f"accepted with probability {fmt(b, 1)}; if A was accepted, C is accepted with "
        f"probability {fmt(c, 1)}. The pass emits the accepted path and one more token from "
        "the target."
    )


def _build_tree(params: Mapping[str, Any]) -> Worked:
    a, b, c = float(params["a"]), float(params["b"]), float(params["c"])
    accept = [[a, b], [c, 0.0]]
    reach = theory.tree_reach(_TREE, accept)
    e_tree = theory.expected_tokens_tree(_TREE, accept)
    e_chain = theory.expected_tokens_tree(_CHAIN, [[a], [c]])
    statement = (
        _tree_setup(a, b, c),
        "- (a) With what probability is B the accepted candidate?",
        "- (b) With what probability does the pass emit three tokens?",
        "- (c) How many tokens does the pass emit on average?",
        "- (d) By how many tokens per pass does B raise the average over the chain A, C?",
    )
    solution = (
        f"(a) B is tried only after A is rejected: $(1 - {fmt(a, 1)}) \\times {fmt(b, 1)} = "
        f"{fmt(reach[1], 2)}$.",
        f"(b) Three tokens come out when A and then C are accepted: ${fmt(a, 1)} \\times "
        f"{fmt(c, 1)} = {fmt(reach[2], 2)}$.",
        "(c) A pass emits one token plus one for every accepted node, so its mean is 1 plus "
        "the probability that each node is on the accepted path (Sequoia, Chen et al. 2024, "
        f"Section 3): $1 + {fmt(reach[0], 2)} + {fmt(reach[1], 2)} + {fmt(reach[2], 2)} = "
        f"{fmt(e_tree, 2)}$.",
        f"(d) Without B the chain A, C emits $1 + {fmt(a, 1)} + {fmt(reach[2], 2)} = "
        f"{fmt(e_chain, 2)}$ tokens, so B adds exactly its own reach, "
        f"${fmt(e_tree - e_chain, 2)}$: a second candidate helps only where the first fails.",
    )
    answers = (
        Answer(symbol="P(B)", what="probability B is accepted", value=float(reach[1]), decimals=2),
        Answer(
            symbol="P(T = 3)", what="probability of three tokens", value=float(reach[2]), decimals=2
        ),
        Answer(symbol=r"\mathbb{E}[T]", what="expected tokens per pass", value=e_tree, decimals=2),
        Answer(
            symbol=r"\Delta", what="gain over the chain A, C", value=e_tree - e_chain, decimals=2
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


TREE_BY_HAND = Template(
    key="tree_by_hand",
    level=1,
    title="Expected tokens of a small tree by hand",
    topic="a node's reach, and tokens per pass of a token tree",
    draw=_draw_tree,
    build=_build_tree,
)


# Two drafts ---------------------------------------------------------------------------------
def _draw_two(rng: np.random.Generator) -> dict[str, Any]:
    while True:
        p, q = composition(rng, 3), composition(rng, 3)
        if p != q:
            return {"p": [x / 20 for x in p], "q": [x / 20 for x in q]}


def _build_two(params: Mapping[str, Any]) -> Worked:
    p = np.asarray(params["p"], dtype=float)
    q = np.asarray(params["q"], dtype=float)
    alpha = theory.mss_acceptance(p, q, 1)
    two = theory.mss_acceptance(p, q, 2)
    best = theory.optimal_multidraft_acceptance(p, q, 2)
    left = np.maximum(p - q, 0.0)
    resid = left / left.sum()
    second = float(np.minimum(resid, q).sum())
    statement = (
        f"A target's next-token distribution over (A, B, C) is $p = {vec(p)}$; a draft's is "
        f"$q = {vec(q)}$. The draft proposes two candidates independently from $q$. The target "
        r"tries the first with probability $\min(1, p(x)/q(x))$; after a rejection it replaces "
        r"$p$ by the residual $r = \mathrm{norm}(\max(0, p - q))$ and tries the second with "
        r"$\min(1, r(x)/q(x))$ (SpecInfer's multi-step speculative sampling).",
        "- (a) What is the acceptance probability with one candidate?",
        "- (b) What is the probability that one of the two candidates is accepted?",
        "- (c) What is the highest acceptance probability any exact verifier of two "
        "independent candidates from $q$ can reach?",
    )
    solution = (
        f"(a) $\\alpha = \\sum_x \\min(p(x), q(x)) = {fmt(alpha, 4)}$.",
        f"(b) After a rejection the residual is $r = {vec(resid, 4)}$ and the second candidate "
        f"is accepted with $\\sum_x \\min(r(x), q(x)) = {fmt(second, 4)}$, so "
        f"$A_2 = \\alpha + (1 - \\alpha) \\times {fmt(second, 4)} = {fmt(two, 4)}$.",
        "(c) An exact verifier must emit a token with law $p$; it accepts when that token is "
        "among the candidates. The best coupling is a maximum flow from candidate pairs "
        "(mass $q(x_1) q(x_2)$) to the tokens they contain (capacity $p$), and by max-flow/"
        r"min-cut it equals $\min_H [1 + p(H) - q(H)^2]$ over sets of tokens $H$ (SpecTr, "
        "Sun et al. 2023, Section 3, frames it as optimal transport). " + _min_cut(p, q, best),
    )
    answers = (
        Answer(symbol=r"\alpha", what="acceptance with one candidate", value=alpha, decimals=4),
        Answer(symbol="A_2", what="acceptance with two candidates", value=two, decimals=4),
        Answer(symbol=r"A_2^*", what="best acceptance of two candidates", value=best, decimals=4),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


def _min_cut(p: np.ndarray, q: np.ndarray, best: float) -> str:
    """The set ``H`` of tokens that minimises ``1 + p(H) - q(H)^2`` (the first of the eight
    in order of size on a tie), with its arithmetic: the key's value shown, not only stated."""
    names = "ABC"
    sets = [h for size in range(4) for h in itertools.combinations(range(3), size)]
    value = [1.0 + p[list(h)].sum() - q[list(h)].sum() ** 2 for h in sets]
    h = sets[int(np.argmin(value))]
    if abs(min(value) - best) > 1e-9:
        raise RuntimeError(f"the minimising set gives {min(value)!r}, the key {best!r}")
    if not h:
        return (
            f"The minimum is at the empty set, $1 + 0 - 0 = {fmt(best, 4)}$: the best exact "
            "verifier always accepts one of the two candidates."
        )
    label = "\\{" + ", ".join(names[i] for i in h) + "\\}"
    ph, qh = float(p[list(h)].sum()), float(q[list(h)].sum())
    return (
        f"The minimum is at $H = {label}$: $1 + p(H) - q(H)^2 = 1 + {fmt(ph, 2)} - "
        f"{fmt(qh, 2)}^2 = {fmt(best, 4)}$."
    )


TWO_DRAFTS = Template(
    key="two_drafts",
    level=2,
    title="The acceptance of two drafts",
    topic="multi-step speculative sampling on two candidates, and the best possible",
    draw=_draw_two,
    build=_build_two,
)


# When a tree stops paying ---------------------------------------------------------------------
def _build_pays(params: Mapping[str, Any]) -> Worked:
    a, b, c = float(params["a"]), float(params["b"]), float(params["c"])
    e_tree = theory.expected_tokens_tree(_TREE, [[a, b], [c, 0.0]])
    e_chain = theory.expected_tokens_tree(_CHAIN, [[a], [c]])
    # Pass time 1 + kappa n for n verified positions (the root and the nodes): the tree
    # pays while e_tree / (1 + 4 kappa) > e_chain / (1 + 3 kappa).
    kappa = (e_tree - e_chain) / (4.0 * e_chain - 3.0 * e_tree)
    statement = (
        _tree_setup(a, b, c),
        "A verification pass over $n$ positions (the last emitted token and the candidates) "
        r"takes $1 + \kappa n$ time units: $\kappa$ is small while verification is memory-"
        "bound and grows with the batch as it becomes compute-bound. Drafting is free (a "
        "pass costs only its verification), as for a negligible draft.",
        "- (a) How many tokens per pass does the chain A, C emit on average?",
        "- (b) How many does the tree A, B, C emit?",
        r"- (c) Above which $\kappa$ do tokens per unit time favour the chain?",
    )
    solution = (
        f"(a) $1 + {fmt(a, 1)} + {fmt(a, 1)} \\times {fmt(c, 1)} = {fmt(e_chain, 4)}$.",
        f"(b) B adds its reach $(1 - {fmt(a, 1)}) \\times {fmt(b, 1)}$: ${fmt(e_tree, 4)}$.",
        "(c) The chain verifies 3 positions, the tree 4. The tree pays while "
        r"$E_{\mathrm{tree}} / (1 + 4\kappa) > E_{\mathrm{chain}} / (1 + 3\kappa)$, that is "
        r"while $\kappa < (E_{\mathrm{tree}} - E_{\mathrm{chain}}) / (4 E_{\mathrm{chain}} - "
        rf"3 E_{{\mathrm{{tree}}}}) = {fmt(kappa, 4)}$. Beyond it the extra candidate costs "
        "more time than the tokens it adds: as the batch grows the best tree shrinks towards "
        "a chain.",
    )
    answers = (
        Answer(
            symbol=r"E_{\mathrm{chain}}",
            what="expected tokens of the chain",
            value=e_chain,
            decimals=4,
        ),
        Answer(
            symbol=r"E_{\mathrm{tree}}",
            what="expected tokens of the tree",
            value=e_tree,
            decimals=4,
        ),
        Answer(
            symbol=r"\kappa^*",
            what="break-even verification cost per position",
            value=kappa,
            decimals=4,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


TREE_PAYS = Template(
    key="tree_pays",
    level=3,
    title="When a tree stops paying",
    topic="tokens per unit time of a tree against a chain as verification gets dearer",
    draw=_draw_tree,
    build=_build_pays,
)
