"""Problems on non-i.i.d. acceptance: the same mean alpha, a different yield.

The bursty-acceptance problem is worked with the exact Markov-chain calculation of
:mod:`specsim.theory.markov` (its docstring has the math).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim import theory
from specsim.acceptance.processes import MarkovAcceptance
from specsim.problems._core import Answer, Template, Worked, fmt, vec
from specsim.problems._tokens import iid_alpha
from specsim.theory.markov import markov_block_terms, markov_chain

__all__ = ["MARKOV", "MIXTURE"]

FloatArray = NDArray[np.float64]


def _matrix(m: FloatArray, decimals: int = 3) -> str:
    rows = r" \\ ".join(" & ".join(fmt(x, decimals) for x in row) for row in m)
    return r"\begin{pmatrix} " + rows + r" \end{pmatrix}"


# Bursty acceptance ---------------------------------------------------------------------------
def _draw_markov(rng: np.random.Generator) -> dict[str, Any]:
    mean = round(float(rng.uniform(0.55, 0.8)), 2)
    top = min(mean - 0.05, 0.98 - mean)
    spread = round(float(rng.uniform(0.1, top)), 2)
    return {
        "mean": mean,
        "spread": spread,
        "persistence": round(float(rng.uniform(0.5, 0.95)), 2),
        "gamma": int(rng.integers(3, 7)),
    }


def _build_markov(params: Mapping[str, Any]) -> Worked:
    mean, spread = float(params["mean"]), float(params["spread"])
    rho, g = float(params["persistence"]), int(params["gamma"])
    proc = MarkovAcceptance.two_state(mean=mean, spread=spread, persistence=rho)
    a, w = proc.alphas, proc.weights
    d, trans = markov_chain(alphas=a, weights=w, persistence=rho)
    tokens, kernel = markov_block_terms(alphas=a, weights=w, persistence=rho, gamma=g)
    mu = theory.block_start_law(alphas=a, weights=w, persistence=rho, gamma=g)
    e_iid = float(theory.expected_tokens(mean, g))
    e_stat = theory.markov_tokens_per_pass(
        alphas=a, weights=w, persistence=rho, gamma=g, start="stationary"
    )
    e_stream = proc.mean_tokens(g)
    tails = [
        float(0.5 * np.ones(2) @ np.linalg.matrix_power(d @ trans, j - 1) @ d @ np.ones(2))
        for j in range(1, g + 1)
    ]
    naive = iid_alpha(e_stream, g)
    hi, lo = proc.alphas
    statement = _markov_statement(hi=hi, lo=lo, rho=rho, mean=mean, spread=spread, g=g)
    solution = (
        f"(a) $\\mathbb{{E}}[T] = (1 - \\bar\\alpha^{{\\gamma+1}})/(1 - \\bar\\alpha) = "
        f"{fmt(e_iid, 4)}$.",
        r"(b) With the transition matrix $P = \rho I + (1 - \rho)\mathbf{1}w^\top$ and "
        r"$D = \mathrm{diag}(\alpha_E, \alpha_H)$, the first $j$ drafts of a block are all "
        r"accepted with probability $\pi (DP)^{j-1} D \mathbf{1}$, where $\pi$ is the state "
        r"law at the block's first position.",
        f"$$P = {_matrix(trans, 3)}, \\qquad D = {_matrix(d, 2)}$$",
        f"With $\\pi = (1/2, 1/2)$ these are ${vec(tails, 4)}$ for $j = 1..{g}$, against "
        f"$\\bar\\alpha^j = {vec([mean**j for j in range(1, g + 1)], 4)}$: an accepted token "
        "signals an easy stretch, which persists, so long runs are likelier than under "
        f"independence. $\\mathbb{{E}}[T] = 1 + \\sum_j P(N \\ge j) = {fmt(e_stat, 4)}$.",
        "(c) But blocks end at a rejection, rejections happen mostly in hard stretches, and "
        "the next block starts in the same stretch. The state at a block's start follows the "
        r"kernel $K = \sum_{n<\gamma}(DP)^n(I - D)P + (DP)^{\gamma}P$ "
        f"$= {_matrix(kernel, 4)}$, whose stationary law is $\\mu = {vec(mu, 4)}$ (easy, "
        f"hard). A block starting easy yields $r_E = {fmt(tokens[0], 4)}$ tokens on average "
        f"and one starting hard $r_H = {fmt(tokens[1], 4)}$, so the long-run mean is "
        f"$\\mu \\cdot r = {fmt(e_stream, 4)}$ (renewal-reward over the chain of block "
        "starts; `specsim.theory.markov_tokens_per_pass`).",
        f"(d) The ratio is ${fmt(e_stream / e_iid, 4)}$. (e) Inverting Equation 1 at "
        f"${fmt(e_stream, 4)}$ tokens gives $\\alpha = {fmt(naive, 3)}$, not "
        f"${mean:g}$: a mean acceptance measured token by token and a yield measured pass "
        "by pass disagree once acceptances are correlated.",
    )
    answers = _markov_answers(e_iid=e_iid, e_stat=e_stat, e_stream=e_stream, naive=naive)
    return Worked(statement=statement, solution=solution, answers=answers)


def _markov_statement(
    *, hi: float, lo: float, rho: float, mean: float, spread: float, g: int
) -> tuple[str, ...]:
    """The two-state chain as the student reads it, and the five questions."""
    return (
        "Acceptance comes in easy and hard stretches. A hidden state is easy (acceptance "
        f"$\\alpha_E = {hi:g}$) or hard ($\\alpha_H = {lo:g}$); from one position to the next "
        f"it is kept with probability $\\rho = {rho:g}$ and otherwise redrawn, easy or hard "
        "with probability 1/2 each. This is "
        f"`MarkovAcceptance.two_state(mean={mean:g}, spread={spread:g}, persistence={rho:g})`;"
        f" its mean acceptance is $\\bar\\alpha = {mean:g}$. Every pass drafts "
        f"$\\gamma = {g}$ tokens. Every emitted token takes one position and the state "
        "moves one step per position: a block's drafts take the positions right after the "
        "last emitted token, a rejected draft's position is taken by the target's "
        "correction (which ends the block), and when every draft passes the bonus token "
        "takes the next position.",
        r"- (a) What does the i.i.d. formula, $(1 - \alpha^{\gamma+1})/(1 - \alpha)$ "
        r"(Leviathan et al. 2023, Equation 1), predict for the tokens per pass at "
        r"$\alpha = \bar\alpha$?",
        "- (b) What is the exact expected tokens per pass of a block whose first position's "
        "state is drawn from the stationary law (1/2, 1/2)?",
        "- (c) In a long stream each block starts right after the previous one ends. What is "
        "the long-run tokens per pass?",
        "- (d) What is the ratio of (c) to (a)?",
        r"- (e) Which $\alpha$ would an i.i.d. fit report from the long-run tokens per pass "
        r"of (c), that is, which $\alpha$ makes $(1 - \alpha^{\gamma+1})/(1 - \alpha)$ "
        "equal the answer to (c)?",
    )


def _markov_answers(
    *, e_iid: float, e_stat: float, e_stream: float, naive: float
) -> tuple[Answer, ...]:
    """The key: the i.i.d. prediction, the stationary block, the stream, their ratio, the fit."""
    return (
        Answer(
            symbol=r"\mathbb{E}[T]_{\mathrm{iid}}",
            what="i.i.d. prediction",
            value=e_iid,
            decimals=4,
        ),
        Answer(
            symbol=r"\mathbb{E}[T]_{w}",
            what="block from the stationary state",
            value=e_stat,
            decimals=4,
        ),
        Answer(
            symbol=r"\mathbb{E}[T]_{\mathrm{stream}}",
            what="long-run tokens per pass",
            value=e_stream,
            decimals=4,
        ),
        Answer(
            symbol=r"\text{ratio}", what="stream over i.i.d.", value=e_stream / e_iid, decimals=4
        ),
        Answer(
            symbol=r"\alpha_{\mathrm{fit}}",
            what="alpha an i.i.d. fit reports",
            value=naive,
            decimals=3,
        ),
    )


MARKOV = Template(
    key="markov_yield",
    level=3,
    title="Bursty acceptance: the same mean, a different yield",
    topic="a two-state Markov acceptance, solved exactly",
    draw=_draw_markov,
    build=_build_markov,
)


# Two kinds of prompts ------------------------------------------------------------------------
def _draw_mixture(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "alpha_hard": round(float(rng.uniform(0.3, 0.6)), 2),
        "alpha_easy": round(float(rng.uniform(0.8, 0.95)), 2),
        "share_easy": round(float(rng.uniform(0.3, 0.7)), 2),
        "gamma": int(rng.integers(3, 7)),
        "c": round(float(rng.uniform(0.02, 0.15)), 2),
    }


def _build_mixture(params: Mapping[str, Any]) -> Worked:
    ah, ae = float(params["alpha_hard"]), float(params["alpha_easy"])
    s, g, c = float(params["share_easy"]), int(params["gamma"]), float(params["c"])
    mean = s * ae + (1 - s) * ah
    e_mean = float(theory.expected_tokens(mean, g))
    e_h, e_e = float(theory.expected_tokens(ah, g)), float(theory.expected_tokens(ae, g))
    e_mix = s * e_e + (1 - s) * e_h
    w_mix = e_mix / (g * c + 1.0)
    statement = (
        f"A service sees two kinds of prompts. A share {s:g} of its passes serve easy "
        f"prompts (code, say), where the draft is accepted with probability {ae:g} per token; "
        f"the rest serve hard ones, with {ah:g}. Within a prompt acceptances are i.i.d. Every "
        f"pass drafts $\\gamma = {g}$ tokens and a draft step costs $c = {c:g}$ of a target "
        "step ($v = 1$).",
        r"- (a) What is the average acceptance probability $\bar\alpha$ over passes?",
        r"- (b) What tokens per pass does the i.i.d. formula, $(1 - \alpha^{\gamma+1})/(1 - "
        r"\alpha)$ (Leviathan et al. 2023, Equation 1), predict at $\bar\alpha$?",
        "- (c) What is the true mean tokens per pass?",
        "- (d) What is their ratio, (c) over (b)?",
        "- (e) What is the true walltime improvement?",
    )
    solution = (
        f"(a) $\\bar\\alpha = {s:g} \\times {ae:g} + {fmt(1 - s, 2)} \\times {ah:g} = "
        f"{fmt(mean, 4)}$. (b) $\\mathbb{{E}}[T](\\bar\\alpha) = {fmt(e_mean, 4)}$.",
        f"(c) Average the yields, not the acceptances: $\\mathbb{{E}}[T]({ae:g}) = "
        f"{fmt(e_e, 4)}$ and $\\mathbb{{E}}[T]({ah:g}) = {fmt(e_h, 4)}$, so the mean is "
        f"${s:g} \\times {fmt(e_e, 4)} + {fmt(1 - s, 2)} \\times {fmt(e_h, 4)} = "
        f"{fmt(e_mix, 4)}$.",
        r"(d) $\mathbb{E}[T] = \sum_{j=0}^{\gamma}\alpha^j$ is convex in $\alpha$, so by "
        r"Jensen's inequality the average of the yields is at least the yield of the average "
        f"acceptance: the ratio is ${fmt(e_mix / e_mean, 4)}$. (e) Every pass costs the same "
        f"$\\gamma c + 1 = {fmt(g * c + 1, 2)}$ steps, so $W = {fmt(e_mix, 4)} / "
        f"{fmt(g * c + 1, 2)} = {fmt(w_mix, 3)}$.",
    )
    answers = (
        Answer(symbol=r"\bar\alpha", what="mean acceptance", value=mean, decimals=4),
        Answer(
            symbol=r"\mathbb{E}[T](\bar\alpha)",
            what="prediction at the mean",
            value=e_mean,
            decimals=4,
        ),
        Answer(
            symbol=r"\overline{\mathbb{E}[T]}",
            what="true mean tokens per pass",
            value=e_mix,
            decimals=4,
        ),
        Answer(
            symbol=r"\text{ratio}", what="true over predicted", value=e_mix / e_mean, decimals=4
        ),
        Answer(symbol="W", what="walltime improvement", value=w_mix, decimals=3),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


MIXTURE = Template(
    key="mixture_yield",
    level=3,
    title="Two kinds of prompts: Jensen's inequality",
    topic="why averaging alpha underestimates the yield",
    draw=_draw_mixture,
    build=_build_mixture,
)
