"""Problems on design choices from the closed forms: gamma, its limit, alpha from a log, the bill.

Answers come from :mod:`specsim.theory` under the paper's i.i.d. assumption
(Leviathan et al. 2023, Sections 3.3 to 3.5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim import theory
from specsim.problems._core import Answer, Template, Worked, fmt, pick
from specsim.problems._tokens import draw_alpha, iid_alpha, iid_statement, iid_tokens

__all__ = ["BEST_GAMMA", "ORACLE", "INFER_ALPHA", "BURIED_BILL"]


# The best gamma ------------------------------------------------------------------------------
def _draw_best(rng: np.random.Generator) -> dict[str, Any]:
    a = draw_alpha(rng, 0.55, 0.95)
    return {"alpha": a, "c": round(float(rng.uniform(0.02, min(0.4, a - 0.1))), 2)}


def _build_best(params: Mapping[str, Any]) -> Worked:
    a, c = float(params["alpha"]), float(params["c"])
    if not a > c:
        raise ValueError(
            f"c: expected below alpha (speculation pays only when alpha > c), got c = {c!r} "
            f"and alpha = {a!r}"
        )
    best = int(theory.optimal_gamma(a, c))
    shown = np.arange(1, best + 3)
    w = np.asarray(theory.walltime_speedup(a, shown, c))
    table = ", ".join(f"W({k}) = {fmt(x, 3)}" for k, x in zip(shown, w, strict=True))
    bound = float(theory.gamma1_lower_bound(a, c))
    w_best = float(theory.walltime_speedup(a, best, c))
    statement = (
        f"Acceptances are i.i.d. with $\\alpha = {a:g}$ and a draft step costs $c = {c:g}$ "
        "of a target step; verification costs one target step ($v = 1$).",
        r"- (a) Which integer $\gamma$ maximizes the walltime improvement?",
        "- (b) What improvement does it give?",
        r"- (c) What improvement does $\gamma = 1$ guarantee? (Leviathan, Kalman and Matias "
        "2023, Fast Inference from Transformers via Speculative Decoding, ICML, Corollary "
        r"3.9: for $\alpha > c$ the choice $\gamma = 1$ gives $W = (1 + \alpha)/(1 + c)$.)",
    )
    solution = (
        r"Tabulate $W(\gamma) = \frac{1 - \alpha^{\gamma+1}}{(1 - \alpha)(\gamma c + 1)}$: "
        f"${table}$.",
        r"One more draft token pays exactly when $\alpha^{\gamma+1}(1 + \gamma c) > c\,"
        r"\mathbb{E}[T](\gamma)$: the extra token is accepted with probability "
        r"$\alpha^{\gamma+1}$ while every pass pays $c$ more (docs/derivations.md, Section 8). "
        f"(a) The best is $\\gamma^* = {best}$, (b) with $W = {fmt(w_best, 3)}$.",
        f"(c) $W(1) = (1 + \\alpha)/(1 + c) = {fmt(bound, 3)}$, above 1 because "
        r"$\alpha > c$; the best $\gamma$ can only do better.",
    )
    answers = (
        Answer(symbol=r"\gamma^*", what="best lookahead", value=best, decimals=0),
        Answer(symbol=r"W(\gamma^*)", what="best walltime improvement", value=w_best, decimals=3),
        Answer(symbol="W(1)", what="improvement at gamma = 1", value=bound, decimals=3),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


BEST_GAMMA = Template(
    key="best_gamma",
    level=2,
    title="Choosing the lookahead",
    topic="the best integer gamma and Corollary 3.9",
    draw=_draw_best,
    build=_build_best,
)


# The oracle bound ----------------------------------------------------------------------------
def _draw_oracle(rng: np.random.Generator) -> dict[str, Any]:
    return {"alpha": draw_alpha(rng, 0.6, 0.95), "fraction": pick(rng, (0.8, 0.9, 0.95))}


def _build_oracle(params: Mapping[str, Any]) -> Worked:
    a, f = float(params["alpha"]), float(params["fraction"])
    for name, x in (("alpha", a), ("fraction", f)):
        if not 0.0 < x < 1.0:
            raise ValueError(f"{name}: expected a number in (0, 1), got {x!r}")
    bound = float(theory.oracle_speedup_bound(a))
    # alpha^(gamma+1) <= 1 - f first holds near gamma + 1 = log(1 - f) / log(alpha); scan past it.
    gammas = np.arange(0, max(400, math.ceil(math.log(1 - f) / math.log(a)) + 2))
    reach = np.asarray(theory.expected_tokens(a, gammas)) >= f * bound
    if not reach.any():
        raise RuntimeError(f"no gamma below {gammas.size} reaches {f:g} of the bound")
    g = int(np.argmax(reach))
    statement = (
        f"Acceptances are i.i.d. with $\\alpha = {a:g}$.",
        r"- (a) However long the lookahead, how many tokens per pass can one expect at most?",
        f"- (b) What is the smallest $\\gamma$ whose expected tokens per pass reach "
        f"{f:g} of that bound?",
    )
    solution = (
        r"(a) As $\gamma \to \infty$, $\mathbb{E}[T] = \frac{1 - \alpha^{\gamma+1}}{1 - \alpha}"
        f" \\to 1/(1 - \\alpha) = {fmt(bound, 3)}$ (Leviathan et al. 2023, Section 3.5; with "
        "a free draft this also bounds the walltime improvement).",
        f"(b) $\\mathbb{{E}}[T] \\ge {f:g}/(1 - \\alpha)$ exactly when "
        f"$\\alpha^{{\\gamma+1}} \\le {fmt(1 - f, 2)}$, i.e. $\\gamma + 1 \\ge "
        f"\\ln {fmt(1 - f, 2)} / \\ln {a:g} = {fmt(math.log(1 - f) / math.log(a), 3)}$. "
        f"The smallest integer is $\\gamma = {g}$, where $\\mathbb{{E}}[T] = "
        f"{fmt(iid_tokens(a, g), 3)}$.",
    )
    answers = (
        Answer(symbol=r"1/(1 - \alpha)", what="bound on tokens per pass", value=bound, decimals=3),
        Answer(symbol=r"\gamma", what="smallest gamma reaching the fraction", value=g, decimals=0),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


ORACLE = Template(
    key="oracle_bound",
    level=2,
    title="How far can lookahead take you?",
    topic="the 1/(1 - alpha) bound and diminishing returns",
    draw=_draw_oracle,
    build=_build_oracle,
)


# Reading alpha off a log ---------------------------------------------------------------------
def _draw_infer(rng: np.random.Generator) -> dict[str, Any]:
    g = int(rng.integers(3, 7))
    a = float(rng.uniform(0.5, 0.92))
    return {"gamma": g, "mean_tokens": round(iid_tokens(a, g), 2)}


def _build_infer(params: Mapping[str, Any]) -> Worked:
    g, m = int(params["gamma"]), float(params["mean_tokens"])
    a = iid_alpha(m, g)
    # (b) from alpha as (a) prints it, so the worked line is arithmetic.
    a_printed = round(a, 3)
    lo, hi = math.floor(a * 100) / 100, math.ceil(a * 100) / 100
    statement = (
        f"A serving log shows that passes with $\\gamma = {g}$ drafted tokens emitted "
        f"{m:g} tokens on average.",
        r"- (a) Assuming i.i.d. acceptances, what acceptance probability $\alpha$ explains "
        "this?",
        r"- (b) With that $\alpha$, rounded to 3 decimals as in (a), what fraction of "
        "passes accept every draft?",
    )
    solution = (
        r"$\mathbb{E}[T] = \sum_{j=0}^{\gamma}\alpha^j$ rises from 1 at $\alpha = 0$ to "
        r"$\gamma + 1$ at $\alpha = 1$, so exactly one $\alpha$ gives the observed mean. "
        f"Bracketing: $\\mathbb{{E}}[T]({lo:.2f}) = {fmt(iid_tokens(lo, g), 4)}$ and "
        f"$\\mathbb{{E}}[T]({hi:.2f}) = {fmt(iid_tokens(hi, g), 4)}$; bisection (or Brent's "
        f"method) narrows it to (a) $\\alpha = {fmt(a, 3)}$.",
        f"(b) $\\alpha^{{\\gamma}} = {fmt(a_printed, 3)}^{{{g}}} = {fmt(a_printed**g, 3)}$. "
        "Caution: real acceptances are correlated (see the level-3 problems), and then the "
        "i.i.d. inversion is biased.",
    )
    answers = (
        Answer(symbol=r"\alpha", what="acceptance that explains the mean", value=a, decimals=3),
        Answer(
            symbol=r"\alpha^{\gamma}",
            what="fraction of fully accepted passes",
            value=a_printed**g,
            decimals=3,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


INFER_ALPHA = Template(
    key="infer_alpha",
    level=2,
    title="Reading alpha off a log",
    topic="inverting Equation 1 from an observed mean",
    draw=_draw_infer,
    build=_build_infer,
)


# The buried bill -----------------------------------------------------------------------------
def _draw_bill(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "alpha": draw_alpha(rng, 0.2, 0.9),
        "gamma": int(rng.integers(3, 9)),
        "c_hat": pick(rng, (0.0, 0.01, 0.02, 0.05, 0.1)),
        "target_billion": pick(rng, (7, 13, 70)),
    }


def _build_bill(params: Mapping[str, Any]) -> Worked:
    a, g = float(params["alpha"]), int(params["gamma"])
    ch, nb = float(params["c_hat"]), int(params["target_billion"])
    e = iid_tokens(a, g)
    factor = float(theory.ops_factor(a, g, ch))
    calls = float(theory.target_calls_per_token(a, g))
    gflop = 2.0 * nb * factor
    statement = (
        iid_statement(a, g) + f" The draft does $\\hat c = {ch:g}$ of the target's arithmetic per "
        f"token; the target has {nb} billion parameters, about $2 \\times {nb}$ GFLOP per "
        r"token. A pass runs the target on $\gamma + 1$ positions, accepted or not, and the "
        r"draft $\gamma$ times.",
        "- (a) By what factor does speculative decoding multiply the arithmetic per emitted token?",
        "- (b) By what factor does it cut the serial target calls per token?",
        "- (c) How many GFLOP does one emitted token cost?",
    )
    solution = (
        r"A pass runs the target on $\gamma + 1$ positions, accepted or not, and the draft "
        r"$\gamma$ times, for $\mathbb{E}[T] = " + fmt(e, 4) + "$ tokens (Leviathan et al. "
        "2023, Theorem 3.11):",
        f"$$\\frac{{\\gamma\\hat c + \\gamma + 1}}{{\\mathbb{{E}}[T]}} = "
        f"\\frac{{{g} \\times {ch:g} + {g + 1}}}{{{fmt(e, 4)}}} = {fmt(factor, 3)}$$",
        f"(a) {fmt(factor, 3)} times the arithmetic, while target calls fall from one per "
        f"token to $1/\\mathbb{{E}}[T] = {fmt(calls, 3)}$ per token: (b) a cut by a factor "
        f"$\\mathbb{{E}}[T] = {fmt(e, 3)}$. (c) $2 \\times {nb} \\times "
        f"{fmt(factor, 3)} = {fmt(gflop, 1)}$ GFLOP. The bill is buried at batch 1: a "
        "memory-bound pass reads the weights once however many positions it verifies, so "
        "walltime falls while arithmetic rises. It surfaces under load, when passes turn "
        "compute-bound, and in energy.",
    )
    answers = (
        Answer(
            symbol=r"\text{ops factor}",
            what="arithmetic per token, relative",
            value=factor,
            decimals=3,
        ),
        Answer(
            symbol=r"\mathbb{E}[T]",
            what="factor by which serial target calls per token fall",
            value=e,
            decimals=3,
        ),
        Answer(
            symbol=r"\text{GFLOP per token}",
            what="arithmetic per emitted token",
            value=gflop,
            decimals=1,
            unit="GFLOP",
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


BURIED_BILL = Template(
    key="buried_bill",
    level=2,
    title="The buried bill: operations per emitted token",
    topic="Theorem 3.11, arithmetic up while serial calls go down",
    draw=_draw_bill,
    build=_build_bill,
)
