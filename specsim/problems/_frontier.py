"""Problems at the frontier: the experts a verification pass touches, and when MTP depth pays.

The first reads the expert count and top-k off a real MoE card and asks for the
expected number of distinct experts per layer under uniform routing,
``E (1 - (1 - k/E)^n)`` for ``n`` tokens (linearity over experts;
:func:`specsim.cost.moe.touched_experts` is the cost model's twin). The second prices an
MTP module reused autoregressively (DeepSeek-AI, arXiv:2412.19437, Section 2.2) with a
verification cost that grows with depth, and asks for the depth that stops paying. Every
answer is computed from the printed numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim.cards import load_model
from specsim.problems._core import Answer, Template, Worked, fmt, pick, separating_decimals

__all__ = ["DISTINCT_EXPERTS", "MTP_DEPTH"]

_MOE_CARDS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "kimi-k2", "gpt-oss-120b")


# Distinct experts touched by a verification pass -----------------------------------------
def _draw_experts(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "model": str(pick(rng, _MOE_CARDS)),
        "batch": int(pick(rng, (1, 2, 4, 8, 16))),
        "gamma": int(rng.integers(2, 7)),
        "coverage": float(pick(rng, (0.5, 0.9, 0.99))),
    }


def _touched(experts: int, top_k: int, tokens: int) -> float:
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def _covering_batch(experts: int, top_k: int, coverage: float) -> int:
    """The smallest batch whose plain step touches ``coverage * experts`` in expectation."""
    b = 1
    while _touched(experts, top_k, b) < coverage * experts:
        b += 1
    return b


def _coverage_moral(experts: int, coverage: float) -> str:
    """What reaching the coverage means for a verification pass, in words that follow it."""
    text = (
        f"From there on a plain step already touches ${coverage:g} E = "
        f"{fmt(coverage * experts, 2)}$ experts in expectation, so the extra positions of a "
        f"verification pass can add at most the remaining ${fmt(1 - coverage, 2)} E = "
        f"{fmt((1 - coverage) * experts, 2)}$ experts' weights to what the step reads"
    )
    return text + (": a plain step reads nearly every expert already." if coverage >= 0.99 else ".")


def _build_experts(params: Mapping[str, Any]) -> Worked:
    card = load_model(str(params["model"]))
    moe = card.moe_spec
    if moe is None:
        raise ValueError(f"model: {card.slug!r} has no routed experts")
    E, k = moe.experts, moe.top_k
    b, g, cov = int(params["batch"]), int(params["gamma"]), float(params["coverage"])
    n = b * (g + 1)
    verify, plain = _touched(E, k, n), _touched(E, k, b)
    need = _covering_batch(E, k, cov)
    statement = (
        f"`{card.slug}` ({card.name}) has $E = {E}$ routed experts in each MoE layer and "
        f"sends every token to $k = {k}$ distinct ones of them. Assume each token picks its "
        f"$k$ experts as a set chosen uniformly at random among the sets of $k$ distinct "
        "experts, independently of the other tokens (real routers are skewed; this is the "
        f"uniform case). A batch of $b = {b}$ sequences verifies "
        f"$\\gamma + 1 = {g + 1}$ positions each in one pass.",
        "- (a) How many distinct experts does the verification pass touch per MoE layer, "
        "in expectation?",
        "- (b) And a plain decode step of the same batch (one position per sequence)?",
        "- (c) The routed-expert weights a pass reads grow with the experts it touches: by "
        "what factor from the plain step to the verification pass?",
        f"- (d) From which batch on does a plain decode step touch at least ${cov:g} E$ of "
        "the experts in expectation (the smallest such batch)?",
    )
    solution = (
        "A given expert is in a uniform set of $k$ distinct experts out of $E$ with "
        f"probability $k/E$, so one token misses it with probability $1 - k/E = "
        f"{fmt(1 - k / E, 6)}$ and $n$ independent tokens all miss it with probability "
        "$(1 - k/E)^n$; by linearity "
        "over the $E$ experts the expected number touched is $E (1 - (1 - k/E)^n)$.",
        f"(a) The pass routes $n = b (\\gamma + 1) = {n}$ tokens: "
        f"${E} (1 - {fmt(1 - k / E, 6)}^{{{n}}}) = {fmt(verify, 2)}$. (b) The plain step "
        f"routes $n = {b}$: ${fmt(plain, 2)}$. (c) The ratio is ${fmt(verify / plain, 3)}$: "
        f"this is why verification is not free on an MoE target even at small batch, while a "
        f"dense target reads the same weights for any $n$ below its ridge.",
        f"(d) Solve $1 - (1 - k/E)^b \\ge {cov:g}$: $b \\ge \\ln({fmt(1 - cov, 2)}) / "
        f"\\ln({fmt(1 - k / E, 6)}) = {fmt(math.log(1 - cov) / math.log(1 - k / E), 3)}$, "
        f"so $b = {need}$. " + _coverage_moral(E, cov),
    )
    answers = (
        Answer(
            symbol=r"\bar n_{\mathrm{verify}}",
            what="experts touched by the pass",
            value=verify,
            decimals=2,
        ),
        Answer(
            symbol=r"\bar n_{\mathrm{plain}}",
            what="experts touched by a plain step",
            value=plain,
            decimals=2,
        ),
        Answer(symbol=r"\rho", what="growth of the expert reads", value=verify / plain, decimals=3),
        Answer(symbol=r"b^*", what="smallest batch touching the share", value=need, decimals=0),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


DISTINCT_EXPERTS = Template(
    key="distinct_experts",
    level=3,
    title="Distinct experts touched by a verification pass",
    topic="expected distinct experts E(1 - (1 - k/E)^n) on a real MoE card",
    draw=_draw_experts,
    build=_build_experts,
)


# When MTP depth stops paying -------------------------------------------------------------
_MAX_DEPTH = 10


def _draw_mtp(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "a1": round(float(rng.uniform(0.80, 0.90)), 2),
        "a": round(float(rng.uniform(0.50, 0.85)), 2),
        "c": round(float(rng.uniform(0.03, 0.20)), 2),
        "s": round(float(rng.uniform(0.00, 0.12)), 2),
    }


def _mtp_tokens(a1: float, a: float, depth: int) -> float:
    return 1.0 + a1 * sum(a**j for j in range(depth))


def _build_mtp(params: Mapping[str, Any]) -> Worked:
    a1, a, c, s = (float(params[x]) for x in ("a1", "a", "c", "s"))
    speed = [_mtp_tokens(a1, a, d) / (d * c + 1.0 + s * d) for d in range(_MAX_DEPTH + 1)]
    best = int(np.argmax(speed))  # the smallest best depth on an exact tie, as (b) asks
    places = separating_decimals(speed, best)
    listing = ", ".join(fmt(x, places) for x in speed)
    statement = (
        "A target drafts with its multi-token-prediction module reused autoregressively, as "
        f"engines run DeepSeek-V3's. The first drafted token is accepted with probability "
        f"$a_1 = {a1:g}$; each later one, given that the ones before it were accepted, with "
        f"$a = {a:g}$. One module step costs $c = {c:g}$ target decode steps, and verifying "
        f"$D + 1$ positions costs $1 + s D$ steps with $s = {s:g}$ (the experts the extra "
        "positions touch). A pass of depth $D$ emits $E(D) = 1 + a_1 (1 + a + \\dots + "
        "a^{D - 1})$ tokens on average and takes $D c + 1 + s D$ steps.",
        "- (a) What is $E(3)$?",
        f"- (b) Which depth $D$ in $0..{_MAX_DEPTH}$ gives the most tokens per unit time "
        "$S(D) = E(D) / (D c + 1 + s D)$ (with $S(0) = 1$: no speculation; the smallest such "
        "depth if two tie)?",
        "- (c) What is $S$ at that depth?",
        "- (d) Above which module cost $c$ does even depth 1 stop paying ($S(1) = 1$)?",
    )
    solution = (
        f"(a) $E(3) = 1 + {a1:g} (1 + {a:g} + {a:g}^2) = {fmt(_mtp_tokens(a1, a, 3), 4)}$.",
        f"(b) For $D = 0..{_MAX_DEPTH}$, $S(D)$ is ${listing}$: the best depth is "
        f"$D = {best}$. Going from $D$ to $D + 1$ adds $a_1 a^D$ tokens for $c + s$ more "
        "steps, so it pays while $a_1 a^D > (c + s) S(D)$: the gain shrinks geometrically "
        "while the price of a step does not.",
        f"(c) $S({best}) = {fmt(speed[best], 3)}$.",
        f"(d) $S(1) = (1 + a_1) / (c + 1 + s) = 1$ gives $c = a_1 - s = {fmt(a1 - s, 2)}$: "
        "a module step dearer than that loses even at depth one.",
    )
    answers = (
        Answer(
            symbol="E(3)",
            what="tokens per pass at depth 3",
            value=_mtp_tokens(a1, a, 3),
            decimals=4,
        ),
        Answer(symbol="D^*", what="best depth", value=best, decimals=0),
        Answer(
            symbol="S(D^*)", what="tokens per step at the best depth", value=speed[best], decimals=3
        ),
        Answer(
            symbol="c^*", what="module cost where depth 1 breaks even", value=a1 - s, decimals=2
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


MTP_DEPTH = Template(
    key="mtp_depth",
    level=3,
    title="When MTP depth stops paying",
    topic="the best draft depth of a reused MTP module when verification grows with depth",
    draw=_draw_mtp,
    build=_build_mtp,
)
