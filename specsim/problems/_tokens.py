"""Problems on the closed forms: tokens per pass, their spread, calls per token, walltime.

Every answer comes from :mod:`specsim.theory` (the numeric twins of the closed
forms derived in ``docs/derivations.md``), under the paper's assumption that
acceptances are i.i.d. with mean ``alpha`` (Leviathan et al. 2023, Section 3.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim import theory
from specsim.problems._core import Answer, Template, Worked, fmt, invert_increasing, pick

__all__ = ["EXPECTED_TOKENS", "VARIANCE", "CALLS", "WALLTIME"]

_E = r"\mathbb{E}[T]"
_E_FORM = r"\frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}"


def draw_alpha(rng: np.random.Generator, lo: float = 0.5, hi: float = 0.95) -> float:
    return round(float(rng.uniform(lo, hi)), 2)


def iid_tokens(alpha: float, gamma: int) -> float:
    return float(theory.expected_tokens(alpha, gamma))


def iid_alpha(mean_tokens: float, gamma: int) -> float:
    """The i.i.d. acceptance probability whose expected tokens per pass is ``mean_tokens``."""
    return invert_increasing(lambda x: iid_tokens(x, gamma), mean_tokens, 0.0, 1.0)


def iid_statement(alpha: float, gamma: int) -> str:
    return (
        f"Each drafted token is accepted independently with probability $\\alpha = {alpha:g}$, "
        f"and every pass drafts $\\gamma = {gamma}$ tokens."
    )


def _e_line(alpha: float, gamma: int) -> str:
    return (
        f"$${_E} = {_E_FORM} = \\frac{{1 - {alpha:g}^{{{gamma + 1}}}}}{{1 - {alpha:g}}} = "
        f"{fmt(iid_tokens(alpha, gamma), 4)}$$"
    )


# Tokens per pass ----------------------------------------------------------------------------
def _draw_ag(rng: np.random.Generator) -> dict[str, Any]:
    return {"alpha": draw_alpha(rng), "gamma": int(rng.integers(2, 8))}


def _build_expected(params: Mapping[str, Any]) -> Worked:
    a, g = float(params["alpha"]), int(params["gamma"])
    e = iid_tokens(a, g)
    statement = (
        iid_statement(a, g)
        + " A pass emits the accepted drafts plus one token from the target (the "
        "correction after a rejection, or a bonus token when all drafts pass).",
        r"- (a) What is the expected number of tokens $\mathbb{E}[T]$ one pass emits?",
        "- (b) What is the probability that a pass emits a single token?",
        r"- (c) What is the probability that it emits $\gamma + 1$ tokens?",
    )
    solution = (
        r"The number of accepted drafts $N$ is geometric, capped at $\gamma$: the first $j$ "
        r"drafts are all accepted with probability $P(N \ge j) = \alpha^j$, and $T = N + 1$. "
        r"(a) By the tail sum, $\mathbb{E}[T] = \sum_{j=0}^{\gamma} \alpha^j$ (Leviathan et "
        r"al. 2023, Equation 1):",
        _e_line(a, g),
        f"(b) One token means the first draft was rejected: $1 - \\alpha = {fmt(1 - a, 4)}$.",
        f"(c) All drafts accepted: $\\alpha^{{\\gamma}} = {a:g}^{{{g}}} = "
        f"{fmt(float(theory.tokens_pmf(a, g, g + 1)), 4)}$.",
    )
    answers = (
        Answer(symbol=_E, what="expected tokens per pass", value=e, decimals=4),
        Answer(
            symbol="P(T = 1)",
            what="probability of one token",
            value=float(theory.tokens_pmf(a, g, 1)),
            decimals=4,
        ),
        Answer(
            symbol=r"P(T = \gamma + 1)",
            what="probability of a full block",
            value=float(theory.tokens_pmf(a, g, g + 1)),
            decimals=4,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


EXPECTED_TOKENS = Template(
    key="expected_tokens",
    level=1,
    title="Tokens per pass",
    topic="the capped geometric law and its mean (Equation 1)",
    draw=_draw_ag,
    build=_build_expected,
)


# Its variance ---------------------------------------------------------------------------------
def _draw_var(rng: np.random.Generator) -> dict[str, Any]:
    return {"alpha": draw_alpha(rng), "gamma": int(rng.integers(2, 6))}


def _build_variance(params: Mapping[str, Any]) -> Worked:
    a, g = float(params["alpha"]), int(params["gamma"])
    ks = np.arange(1, g + 2)
    pmf = np.asarray(theory.tokens_pmf(a, g, ks))
    e, second = float((ks * pmf).sum()), float((ks**2 * pmf).sum())
    var = float(theory.tokens_variance(a, g))
    pmf_text = ", ".join(f"P(T={k}) = {fmt(w, 4)}" for k, w in zip(ks, pmf, strict=True))
    statement = (
        iid_statement(a, g) + " Let $T$ be the number of tokens one pass emits: the "
        "accepted drafts plus one token from the target (the correction after a rejection, "
        "or a bonus token when all drafts pass), so $1 \\le T \\le \\gamma + 1$.",
        r"- (a) What is the variance of $T$?",
        "- (b) What is its standard deviation?",
        r"- (c) What is its coefficient of variation (standard deviation over $\mathbb{E}[T]$)?",
    )
    solution = (
        r"The law of $T$ is $P(T = k) = \alpha^{k-1}(1 - \alpha)$ for $k \le \gamma$ and "
        r"$\alpha^{\gamma}$ at $k = \gamma + 1$: " + f"${pmf_text}$.",
        f"$$\\mathbb{{E}}[T] = \\sum_k k\\,P(T = k) = {fmt(e, 4)}, \\qquad "
        f"\\mathbb{{E}}[T^2] = \\sum_k k^2 P(T = k) = {fmt(second, 4)}$$",
        f"(a) $\\mathrm{{Var}}[T] = \\mathbb{{E}}[T^2] - \\mathbb{{E}}[T]^2 = {fmt(var, 4)}$, "
        r"which is the closed form $\frac{\alpha - (2\gamma+1)(1-\alpha)\alpha^{\gamma+1} - "
        r"\alpha^{2\gamma+2}}{(1-\alpha)^2}$ derived in docs/derivations.md. "
        f"(b) The standard deviation is ${fmt(math.sqrt(var), 4)}$; (c) over the mean, "
        f"${fmt(math.sqrt(var) / e, 4)}$: single passes are noisy, which is why a "
        "simulator's tokens-per-pass estimate needs many passes for a tight interval.",
    )
    answers = (
        Answer(
            symbol=r"\mathrm{Var}[T]", what="variance of tokens per pass", value=var, decimals=4
        ),
        Answer(symbol=r"\sigma_T", what="standard deviation", value=math.sqrt(var), decimals=4),
        Answer(
            symbol=r"\sigma_T / \mathbb{E}[T]",
            what="coefficient of variation",
            value=math.sqrt(var) / e,
            decimals=4,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


VARIANCE = Template(
    key="variance",
    level=1,
    title="How much one pass's yield varies",
    topic="the variance of tokens per pass from its law",
    draw=_draw_var,
    build=_build_variance,
)


# Serial calls per token ---------------------------------------------------------------------
def _draw_calls(rng: np.random.Generator) -> dict[str, Any]:
    return {**_draw_ag(rng), "tokens": int(pick(rng, (200, 500, 1000)))}


def _build_calls(params: Mapping[str, Any]) -> Worked:
    a, g, n = float(params["alpha"]), int(params["gamma"]), int(params["tokens"])
    e = iid_tokens(a, g)
    tcalls = float(theory.target_calls_per_token(a, g))
    dcalls = float(theory.draft_calls_per_token(a, g))
    statement = (
        iid_statement(a, g) + f" A request generates {n} tokens.",
        "- (a) How many serial target calls does speculative decoding make per emitted "
        "token, on average over a long generation?",
        "- (b) How many draft calls per emitted token?",
        f"- (c) About how many target passes does the request need (plain decoding needs {n})?",
    )
    solution = (
        _e_line(a, g),
        f"(a) One target call per pass and ${fmt(e, 4)}$ tokens per pass: by the "
        f"renewal-reward theorem the long-run ratio is $1/\\mathbb{{E}}[T] = {fmt(tcalls, 4)}$.",
        f"(b) $\\gamma$ draft calls per pass: $\\gamma/\\mathbb{{E}}[T] = {fmt(dcalls, 4)}$.",
        f"(c) About ${n} / {fmt(e, 4)} = {fmt(n * tcalls, 1)}$ passes. (The exact expected "
        "count differs slightly: the last pass may overshoot the requested length.)",
    )
    answers = (
        Answer(symbol=r"1/\mathbb{E}[T]", what="target calls per token", value=tcalls, decimals=4),
        Answer(
            symbol=r"\gamma/\mathbb{E}[T]", what="draft calls per token", value=dcalls, decimals=4
        ),
        Answer(
            symbol=r"n/\mathbb{E}[T]",
            what="target passes for the request",
            value=n * tcalls,
            decimals=1,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


CALLS = Template(
    key="calls_per_token",
    level=1,
    title="Serial target calls per token",
    topic="target and draft calls per emitted token (renewal-reward)",
    draw=_draw_calls,
    build=_build_calls,
)


# Walltime ------------------------------------------------------------------------------------
def _draw_walltime(rng: np.random.Generator) -> dict[str, Any]:
    return {
        **_draw_ag(rng),
        "c": round(float(rng.uniform(0.02, 0.3)), 2),
        "v": round(float(rng.uniform(1.02, 1.5)), 2),
    }


def _build_walltime(params: Mapping[str, Any]) -> Worked:
    a, g, c, v = (
        float(params["alpha"]),
        int(params["gamma"]),
        float(params["c"]),
        float(params["v"]),
    )
    e = iid_tokens(a, g)
    w1 = float(theory.walltime_speedup(a, g, c))
    wv = float(theory.walltime_speedup(a, g, c, v))
    statement = (
        iid_statement(a, g) + f" One draft step takes $c = {c:g}$ of a target step; a "
        r"speculative pass runs $\gamma$ draft steps and one verification pass.",
        "- (a) By what factor does speculative decoding improve walltime per token if "
        "verifying $\\gamma + 1$ tokens takes as long as one target step?",
        f"- (b) And if the verification pass takes $v = {v:g}$ target steps?",
    )
    solution = (
        r"A pass costs $\gamma c$ target-step times of drafting plus $v$ of verification and "
        r"emits $\mathbb{E}[T]$ tokens; plain decoding costs one step per token. So the "
        r"improvement is $W = \mathbb{E}[T] / (\gamma c + v)$ (Theorem 3.8 of Leviathan et al. "
        "2023 at $v = 1$).",
        _e_line(a, g),
        f"(a) $W = {fmt(e, 4)} / ({g} \\times {c:g} + 1) = {fmt(w1, 3)}$.",
        f"(b) $W = {fmt(e, 4)} / ({g} \\times {c:g} + {v:g}) = {fmt(wv, 3)}$: a slower "
        "verification pass eats directly into the gain.",
    )
    answers = (
        Answer(symbol=r"W_{v=1}", what="walltime improvement, v = 1", value=w1, decimals=3),
        Answer(symbol=r"W_{v}", what="walltime improvement with the given v", value=wv, decimals=3),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


WALLTIME = Template(
    key="walltime",
    level=1,
    title="The walltime improvement",
    topic="Theorem 3.8 and the verification factor v",
    draw=_draw_walltime,
    build=_build_walltime,
)
