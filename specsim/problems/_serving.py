"""Problems on cards under load: the best gamma at a batch, and capacity at a speed promise.

Like :mod:`specsim.problems._cards`, statements print cost-model numbers rounded
and answers are computed from the printed numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specsim import theory
from specsim.cards import load_hardware, load_model
from specsim.cost import (
    Deployment,
    cost_coefficient,
    step_cost,
    step_cost_grid,
    verification_factor,
)
from specsim.problems._cards import draw_setup, fitting_batches, pair_cards, who_runs
from specsim.problems._core import Answer, Template, Worked, fmt, pick, separating_decimals

__all__ = ["GAMMA_WITH_V", "CAPACITY"]

_BATCHES = tuple(2**k for k in range(9))


# The best gamma when verification costs more than one step ------------------------------
_MAX_GAMMA = 10


def _draw_gv(rng: np.random.Generator) -> dict[str, Any]:
    setup = draw_setup(rng, context=512, min_batch=16)
    t, hw = load_model(setup["target"]), load_hardware(setup["hardware"])
    batch = pick(rng, fitting_batches(t, hw, 512, _MAX_GAMMA + 1, (16, 32, 64, 128, 256)))
    return {**setup, "batch": int(batch), "alpha": round(float(rng.uniform(0.6, 0.9)), 2)}


def _build_gv(params: Mapping[str, Any]) -> Worked:
    t, d, hw = pair_cards(params)
    b, a, ctx = int(params["batch"]), float(params["alpha"]), int(params["context"])
    v = verification_factor(t, hw, np.arange(_MAX_GAMMA + 1), batch=b, context=ctx)
    table = np.round(np.asarray(v), 3)
    c = round(
        float(cost_coefficient(d, Deployment(target=t, hardware=hw), batch=b, context=ctx)), 4
    )
    g_paper = int(theory.optimal_gamma(a, c, max_gamma=_MAX_GAMMA))
    g_real = int(theory.optimal_gamma(a, c, max_gamma=_MAX_GAMMA, v=table))
    gammas = np.arange(_MAX_GAMMA + 1)
    w = np.asarray(theory.walltime_speedup(a, gammas, c, table))
    listing = ", ".join(f"{x:.3f}" for x in table)
    statement = (
        who_runs(params, t, d, hw) + f" A batch of {b} sequences decodes together; acceptances "
        f"are i.i.d. with $\\alpha = {a:g}$. At this batch the cost model gives $c = {c:.4f}$ "
        r"and the verification factors $v(\gamma)$ for $\gamma = 0, 1, \dots, "
        f"{_MAX_GAMMA}$: {listing}.",
        r"- (a) The walltime improvement is $W(\gamma) = \mathbb{E}[T](\gamma) / (\gamma c + "
        r"v(\gamma))$. Which $\gamma$ in $0..10$ maximizes it if, as in the paper, a "
        r"verification pass is assumed to cost one plain step ($v = 1$ for every $\gamma$)?",
        r"- (b) Which $\gamma$ maximizes it with the listed $v(\gamma)$?",
        "- (c) What walltime improvement does the answer to (a) really give, with the listed "
        r"$v(\gamma)$?",
        "- (d) And the answer to (b)?",
    )
    solution = (
        r"Maximize $W(\gamma) = \mathbb{E}[T](\gamma) / (\gamma c + v(\gamma))$ over the "
        f"table. (a) With $v = 1$ the best is $\\gamma = {g_paper}$. (b) With the real "
        f"factors, $W(\\gamma)$ for $\\gamma = 0..{_MAX_GAMMA}$ is "
        f"${', '.join(fmt(x, separating_decimals(w, g_real)) for x in w)}$, best at "
        f"$\\gamma = {g_real}$.",
        f"(c) The paper's choice really gives $W = {fmt(w[g_paper], 3)}$ and (d) the "
        f"load-aware choice $W = {fmt(w[g_real], 3)}$. " + _gamma_moral(g_paper, g_real),
    )
    answers = (
        Answer(
            symbol=r"\gamma^*_{v=1}", what="best gamma assuming v = 1", value=g_paper, decimals=0
        ),
        Answer(symbol=r"\gamma^*_{v}", what="best gamma with the real v", value=g_real, decimals=0),
        Answer(
            symbol=r"W(\gamma^*_{v=1})",
            what="real improvement of the paper's choice",
            value=float(w[g_paper]),
            decimals=3,
        ),
        Answer(
            symbol=r"W(\gamma^*_{v})",
            what="real improvement of the load-aware choice",
            value=float(w[g_real]),
            decimals=3,
        ),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


def _gamma_moral(g_paper: int, g_real: int) -> str:
    """What the two choices of lookahead say, in words that follow them."""
    if g_real < g_paper:
        return (
            f"The real factors shorten the best lookahead, from $\\gamma = {g_paper}$ to "
            f"${g_real}$: once $B(\\gamma + 1)$ passes the ridge, each extra draft token costs "
            "verification time for the whole batch, so the best lookahead shrinks as load "
            "grows (the idea behind `specsim.policies.lookahead.LoadAdaptive`)."
        )
    if g_real == g_paper:
        return (
            f"Here the real factors lower $W$ but leave the best lookahead where $v = 1$ puts "
            f"it, $\\gamma = {g_paper}$: at this batch the load costs speed, not a change of "
            "lookahead, so (c) and (d) agree."
        )
    return (
        f"Here the real factors lengthen the best lookahead, from $\\gamma = {g_paper}$ to "
        f"${g_real}$ (the listed $v(\\gamma)$ grows more slowly at larger $\\gamma$)."
    )


GAMMA_WITH_V = Template(
    key="gamma_with_v",
    level=3,
    title="When verification costs more than a step: the best gamma at a batch",
    topic="optimal gamma with the verification factor from the cost model",
    draw=_draw_gv,
    build=_build_gv,
)


# Capacity -------------------------------------------------------------------------------------
def _draw_capacity(rng: np.random.Generator) -> dict[str, Any]:
    setup = draw_setup(rng, context=int(pick(rng, (512, 1024))))
    t, hw = load_model(setup["target"]), load_hardware(setup["hardware"])
    rate1 = 1.0 / step_cost(t, hw, batch=1, context=setup["context"], new_tokens=1).time_s
    return {
        **setup,
        "alpha": round(float(rng.uniform(0.65, 0.9)), 2),
        "gamma": int(rng.integers(3, 6)),
        "slo": int(rate1 * rng.uniform(0.3, 0.8)),
    }


def _largest(batches: Sequence[int], rates: np.ndarray, slo: float, how: str) -> tuple[int, float]:
    """The largest batch whose per-user rate keeps the promise, and its total throughput."""
    ok = [(b, b * r) for b, r in zip(batches, rates, strict=True) if r >= slo]
    if not ok:
        raise ValueError(
            f"slo: no listed batch keeps {slo} tokens/s per user with {how} decoding; the "
            f"best achievable is {float(np.max(rates)):.1f} tokens/s"
        )
    return max(ok)


def _capacity_moral(ratio: float, plain_batch: int, spec_batch: int) -> str:
    """What the capacity numbers say, in words that follow them: whether speculation raises
    the capacity, and whether through a larger batch or more speed at the same one."""
    bp, bs = plain_batch, spec_batch
    if ratio > 1.0:
        how = (
            f"that speed is spent on a larger batch ({bs} against plain decoding's {bp})"
            if bs > bp
            else f"both keep the promise up to batch {bp}, and there each user's faster "
            "stream serves more tokens/s from the same batch"
            if bs == bp
            else f"speculation keeps the promise only up to batch {bs}, below plain "
            f"decoding's {bp}, but its per-user speed there more than makes up for the "
            "smaller batch"
        )
        return (
            "Here speculation raises the capacity: it buys per-user speed with spare "
            f"compute, and under a per-user promise {how}."
        )
    if bs > bp:
        return (
            f"Here speculation does not raise the capacity: it keeps the promise up to batch "
            f"{bs}, beyond plain decoding's {bp}, but each of its users gets fewer tokens/s "
            f"there than plain decoding gives at batch {bp}, and the larger batch does not "
            "make up for it."
        )
    where = (
        f"both keep the promise up to batch {bs}, and there"
        if bs == bp
        else f"speculation keeps the promise only up to batch {bs}, below plain "
        f"decoding's {bp}: at batch {bp}"
    )
    return (
        f"Here speculation does not raise the capacity: {where} the draft steps and the "
        r"verification of $\gamma + 1$ positions per sequence take at least as long as the "
        "accepted tokens save, so speculation is no faster per user than plain decoding."
    )


def _build_capacity(params: Mapping[str, Any]) -> Worked:
    t, d, hw = pair_cards(params)
    a, g, ctx, slo = (
        float(params["alpha"]),
        int(params["gamma"]),
        int(params["context"]),
        int(params["slo"]),
    )
    batches = fitting_batches(t, hw, ctx, g + 1, _BATCHES)
    bs = np.asarray(batches)
    step = np.round(step_cost_grid(t, hw, batch=bs, context=ctx, new_tokens=1).time_s * 1e3, 3)
    ver = np.round(step_cost_grid(t, hw, batch=bs, context=ctx, new_tokens=g + 1).time_s * 1e3, 3)
    dra = np.round(step_cost_grid(d, hw, batch=bs, context=ctx, new_tokens=1).time_s * 1e3, 3)
    e = float(theory.expected_tokens(a, g))
    plain_rate = 1e3 / step
    spec_rate = 1e3 * e / (g * dra + ver)
    bp, xp = _largest(batches, plain_rate, slo, "plain")
    bsp, xs = _largest(batches, spec_rate, slo, "speculative")
    rows = [
        f"| {b} | {s:.3f} | {q:.3f} | {v:.3f} |"
        for b, s, q, v in zip(batches, step, dra, ver, strict=True)
    ]
    statement = (
        who_runs(params, t, d, hw) + f" The service promises every user at least {slo} tokens/s. "
        f"Speculation drafts $\\gamma = {g}$ tokens with i.i.d. acceptance $\\alpha = {a:g}$. "
        "A speculative pass runs $\\gamma$ draft steps and one verification and emits "
        r"$\mathbb{E}[T] = (1 - \alpha^{\gamma+1})/(1 - \alpha)$ tokens per user on average; a "
        "plain step emits one. The cost model gives these pass times for the batches whose "
        "weights and key/value "
        "caches fit in memory (the draft's own small cache is ignored), in ms:",
        f"| batch | target step | draft step | verification of {g + 1} tokens |\n"
        + "\n".join(rows),
        "- (a) With plain decoding, what is the largest listed batch that keeps the promise, "
        "and the total throughput there (tokens/s)?",
        "- (b) The same with speculative decoding?",
        "- (c) What is the ratio of the speculative capacity to the plain one (total "
        "throughput of (b) over that of (a)) at this promise? A ratio below 1 means "
        "speculation lowers the capacity.",
    )
    solution = (
        r"Per user, plain decoding emits $1/t_{\mathrm{step}}$ tokens per second and "
        r"speculation $\mathbb{E}[T]/(\gamma t_{\mathrm{draft}} + t_{\mathrm{verify}})$, with "
        f"$\\mathbb{{E}}[T] = {fmt(e, 4)}$. Per batch, plain: "
        f"{', '.join(fmt(x, 1) for x in plain_rate)}; speculative: "
        f"{', '.join(fmt(x, 1) for x in spec_rate)} tokens/s per user.",
        f"(a) Plain decoding keeps {slo} tokens/s up to batch {bp}, serving "
        f"{fmt(xp, 1)} tokens/s in total. (b) Speculation keeps it up to batch {bsp}, "
        f"{fmt(xs, 1)} tokens/s. (c) The ratio is {fmt(xs, 1)} / {fmt(xp, 1)} = "
        f"{fmt(xs / xp, 3)}.",
        _capacity_moral(xs / xp, bp, bsp)
        + " This steady-state estimate ignores arrivals, prefill and scheduling; "
        "`specsim.sim.simulate_serving` simulates them.",
    )
    answers = _capacity_answers(bp=bp, xp=xp, bsp=bsp, xs=xs)
    return Worked(statement=statement, solution=solution, answers=answers)


def _capacity_answers(*, bp: int, xp: float, bsp: int, xs: float) -> tuple[Answer, ...]:
    """The key: the largest batch and its throughput, plain and speculative, and the ratio."""
    return (
        Answer(symbol=r"B_{\mathrm{plain}}", what="largest batch, plain", value=bp, decimals=0),
        Answer(
            symbol=r"X_{\mathrm{plain}}",
            what="throughput, plain",
            value=xp,
            decimals=1,
            unit="tokens/s",
        ),
        Answer(
            symbol=r"B_{\mathrm{spec}}", what="largest batch, speculative", value=bsp, decimals=0
        ),
        Answer(
            symbol=r"X_{\mathrm{spec}}",
            what="throughput, speculative",
            value=xs,
            decimals=1,
            unit="tokens/s",
        ),
        Answer(
            symbol=r"X_{\mathrm{spec}}/X_{\mathrm{plain}}",
            what="capacity ratio, speculative over plain",
            value=xs / xp,
            decimals=3,
        ),
    )


CAPACITY = Template(
    key="capacity",
    level=3,
    title="A small capacity question",
    topic="throughput at a per-user speed promise, plain and speculative",
    draw=_draw_capacity,
    build=_build_capacity,
)
