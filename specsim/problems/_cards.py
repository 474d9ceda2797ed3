"""Problems on real cards: energy per token and the cost coefficient (the verification factor
is :mod:`specsim.problems._verification`).

Parameters name model and accelerator cards (``models/``) by slug; the numbers
a statement shows come from :mod:`specsim.cards` and :mod:`specsim.cost` and are
rounded as printed, and each answer is computed from the printed (rounded)
numbers, so a student working by hand from the statement reaches the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specsim import theory
from specsim.cards import DTYPE_BYTES, HardwareCard, ModelCard, load_hardware, load_model
from specsim.cost import (
    Deployment,
    cost_coefficient,
    step_cost,
    step_cost_grid,
)
from specsim.problems._core import Answer, Template, Worked, fmt, pick

__all__ = [
    "PAIRS",
    "HARDWARE",
    "ENERGY",
    "COST_COEFFICIENT",
]

PAIRS: tuple[tuple[str, str], ...] = (
    ("llama-2-7b", "llama-68m"),
    ("llama-2-7b", "llama-160m"),
    ("llama-2-13b", "llama-160m"),
    ("llama-3.1-8b", "llama-3.2-1b"),
    ("qwen2.5-7b", "qwen2.5-0.5b"),
)
"""(target, draft) card slugs the problems draw from."""

HARDWARE: tuple[str, ...] = (
    "a100-80gb",
    "a100-40gb",
    "h100-sxm",
    "h200",
    "mi300x",
    "l4",
    "rtx-4090",
)
"""Accelerator card slugs the problems draw from (those a target does not fit on are skipped)."""


def pair_cards(params: Mapping[str, Any]) -> tuple[ModelCard, ModelCard, HardwareCard]:
    return (
        load_model(params["target"]),
        load_model(params["draft"]),
        load_hardware(params["hardware"]),
    )


def fitting_batches(
    target: ModelCard, hw: HardwareCard, context: int, new_tokens: int, batches: Sequence[int]
) -> list[int]:
    grid = step_cost_grid(
        target,
        hw,
        batch=np.asarray(batches),
        context=context,
        new_tokens=new_tokens,
        check_memory=False,
    )
    return [b for b, ok in zip(batches, grid.fits, strict=True) if ok]


def draw_setup(rng: np.random.Generator, *, context: int, min_batch: int = 1) -> dict[str, Any]:
    """A pair and an accelerator on which the target fits at ``min_batch`` (and 11 new tokens)."""
    target, draft = pick(rng, PAIRS)
    t = load_model(target)
    hws = [h for h in HARDWARE if fitting_batches(t, load_hardware(h), context, 11, [min_batch])]
    return {"target": target, "draft": draft, "hardware": pick(rng, hws), "context": context}


def who_runs(params: Mapping[str, Any], t: ModelCard, d: ModelCard, hw: HardwareCard) -> str:
    return (
        f"A {t.name} target (card `{t.slug}`, {t.dtype}) and a {d.name} draft (`{d.slug}`, "
        f"{d.dtype}) run on one {hw.name} (`{hw.slug}`); every sequence has "
        f"{params['context']} tokens of context."
    )


def _ms(seconds: float, decimals: int = 3) -> float:
    return round(seconds * 1e3, decimals)


# Energy per token ----------------------------------------------------------------------------
def _draw_energy(rng: np.random.Generator) -> dict[str, Any]:
    return {
        **draw_setup(rng, context=int(pick(rng, (256, 512, 1024)))),
        "alpha": round(float(rng.uniform(0.6, 0.9)), 2),
        "gamma": int(rng.integers(3, 7)),
    }


def _build_energy(params: Mapping[str, Any]) -> Worked:
    t, d, hw = pair_cards(params)
    a, g, ctx = float(params["alpha"]), int(params["gamma"]), int(params["context"])
    one = step_cost(t, hw, batch=1, context=ctx, new_tokens=1)
    ver = step_cost(t, hw, batch=1, context=ctx, new_tokens=g + 1)
    dra = step_cost(d, hw, batch=1, context=ctx, new_tokens=1)
    e1, ev, ed = (round(x.energy_j * 1e3, 1) for x in (one, ver, dra))
    t1, tv, td = (_ms(x.time_s) for x in (one, ver, dra))
    e = float(theory.expected_tokens(a, g))
    e_spec = (g * ed + ev) / e
    w = t1 * e / (g * td + tv)
    statement = (
        who_runs(params, t, d, hw) + f" Acceptances are i.i.d. with $\\alpha = {a:g}$ and every "
        f"pass drafts $\\gamma = {g}$ tokens: a speculative pass runs $\\gamma$ draft steps and "
        "one verification pass. specsim's cost model (`specsim.cost.step_cost`, batch 1) "
        "gives:",
        "| pass | time (ms) | energy (mJ) |\n"
        f"| plain target step | {t1:.3f} | {e1:.1f} |\n"
        f"| target pass verifying $\\gamma + 1 = {g + 1}$ tokens | {tv:.3f} | {ev:.1f} |\n"
        f"| one draft step | {td:.3f} | {ed:.1f} |",
        "- (a) What energy does speculative decoding spend per emitted token?",
        "- (b) By what factor does it cut the energy per token relative to plain decoding?",
        "- (c) By what factor does it cut the time per token?",
    )
    solution = (
        f"A pass spends $\\gamma$ draft steps and one verification and emits "
        f"$\\mathbb{{E}}[T] = {fmt(e, 4)}$ tokens. (a) Energy per token: "
        f"$({g} \\times {ed:.1f} + {ev:.1f}) / {fmt(e, 4)} = {fmt(e_spec, 1)}$ mJ, against "
        f"{e1:.1f} mJ for a plain step.",
        f"(b) The ratio is ${e1:.1f} / {fmt(e_spec, 1)} = {fmt(e1 / e_spec, 3)}$. (c) Time "
        f"per token falls from {t1:.3f} ms to $({g} \\times {td:.3f} + {tv:.3f}) / "
        f"{fmt(e, 4)}$ ms, a factor ${fmt(w, 3)}$.",
        "The cost model charges each pass its time at a power between the card's idle and "
        f"maximum power ({hw.idle_power_w:g} W and {hw.max_power_w:g} W here), rising with "
        "how busy the pass keeps compute or memory. A verification pass reads the same "
        f"weights as a plain step, so at batch 1 it costs about the same energy ({ev:.1f} "
        f"against {e1:.1f} mJ) while it yields {fmt(e, 2)} tokens on average; the draft's "
        f"$\\gamma$ steps add ${fmt(g * ed, 1)}$ mJ per pass. Energy per token therefore "
        "falls roughly as time per token does.",
    )
    answers = (
        Answer(
            symbol=r"e_{\mathrm{spec}}",
            what="energy per token, speculative",
            value=e_spec,
            decimals=1,
            unit="mJ",
        ),
        Answer(
            symbol=r"e_{\mathrm{plain}}/e_{\mathrm{spec}}",
            what="energy saving factor",
            value=e1 / e_spec,
            decimals=3,
        ),
        Answer(symbol="W", what="walltime improvement", value=w, decimals=3),
    )
    return Worked(statement=statement, solution=solution, answers=answers)


ENERGY = Template(
    key="energy",
    level=2,
    title="Energy per token on real cards",
    topic="energy per emitted token from the cost model's pass energies",
    draw=_draw_energy,
    build=_build_energy,
)


# The cost coefficient ------------------------------------------------------------------------
def _draw_c(rng: np.random.Generator) -> dict[str, Any]:
    return draw_setup(rng, context=int(pick(rng, (128, 512, 1024))))


def _printed_envelope(
    weights_m: float, *, nbytes: float, layers: int, bw: float, eff: float, lay: float, pas: float
) -> float:
    """Weights over effective bandwidth plus fixed overheads, in ms, from the printed inputs.

    ``weights_m`` in millions, ``bw`` in GB/s, ``lay`` and ``pas`` in microseconds: the
    numbers exactly as the statement prints them, so the worked line is arithmetic.
    """
    return weights_m * 1e6 * nbytes / (eff * bw * 1e9) * 1e3 + (layers * lay + pas) * 1e-3


def _build_c(params: Mapping[str, Any]) -> Worked:
    t, d, hw = pair_cards(params)
    ctx = int(params["context"])
    wt, wd = round(t.decode_params / 1e6, 1), round(d.decode_params / 1e6, 1)
    bt, bd = DTYPE_BYTES[t.dtype], DTYPE_BYTES[d.dtype]
    bw, eff = float(f"{hw.mem_bandwidth / 1e9:g}"), float(f"{hw.memory_efficiency:g}")
    lay = float(f"{hw.layer_overhead_s * 1e6:g}")
    pas = float(f"{hw.pass_overhead_s * 1e6:g}")
    naive = wd / wt
    env = {"bw": bw, "eff": eff, "lay": lay, "pas": pas}
    tt = round(_printed_envelope(wt, nbytes=bt, layers=t.layers, **env), 4)
    td = round(_printed_envelope(wd, nbytes=bd, layers=d.layers, **env), 4)
    c_env = td / tt
    c_full = float(cost_coefficient(d, Deployment(target=t, hardware=hw), context=ctx))

    def row(m: ModelCard, w: float) -> str:
        return f"| `{m.slug}` | {w:.1f} | {DTYPE_BYTES[m.dtype]:g} | {m.layers} |"

    statement = (
        who_runs(params, t, d, hw) + f" The accelerator card gives a memory bandwidth of {bw:g} "
        f"GB/s, of which a pass attains a fraction $\\eta = {eff:g}$, and fixed costs of "
        f"{lay:g} microseconds per layer and {pas:g} microseconds per pass (kernel launches, "
        "the host loop). The model cards give:",
        "| model | weights read per pass (M) | bytes per weight | layers |\n"
        + row(t, wt)
        + "\n"
        + row(d, wd),
        r"- (a) What cost coefficient $c$ (draft step time over target step time) does the "
        "ratio of the weight counts (draft weights read per pass over the target's, in "
        "millions as listed) suggest?",
        "- (b) Estimate each model's batch-1 step time as weights times bytes over "
        r"$\eta$ times bandwidth, plus the per-layer and per-pass overheads. What are the two "
        "times, in ms?",
        "- (c) What is $c$ from these estimates?",
        "- (d) This part needs specsim: what does its full cost model give? Run "
        f"`specsim.cost.cost_coefficient(load_model('{d.slug}'), specsim.cost.Deployment(target="
        f"'{t.slug}', hardware='{hw.slug}'), context={ctx})` (from `specsim.cards` and "
        "`specsim.cost`) and round to 4 decimals.",
    )
    solution = (
        f"(a) ${wd:.1f} / {wt:.1f} = {fmt(naive, 4)}$.",
        f"(b) Target: ${wt:.1f}\\,\\mathrm{{M}} \\times "
        f"{bt:g} / ({eff:g} \\times {bw:g}\\,\\mathrm{{GB/s}}) + {t.layers} "
        f"\\times {lay:g}\\,\\mu s + {pas:g}\\,\\mu s = {tt:.4f}$ ms. Draft: "
        f"${wd:.1f}\\,\\mathrm{{M}} \\times {bd:g} / "
        f"({eff:g} \\times {bw:g}\\,\\mathrm{{GB/s}}) + {d.layers} \\times {lay:g}\\,\\mu s + "
        f"{pas:g}\\,\\mu s = {td:.4f}$ ms.",
        f"(c) $c \\approx {td:.4f} / {tt:.4f} = {fmt(c_env, 4)}$: "
        f"{fmt(c_env / naive, 1)} times the weight ratio. A small draft is dominated by the "
        "fixed overheads, which do not shrink with the model; the weight ratio is a poor "
        "guide to $c$.",
        f"(d) The call in the statement returns $c = {fmt(c_full, 4)}$: the full model adds "
        f"the key/value cache read at {ctx} tokens of context, activations, and the larger "
        "of compute and memory time kernel by kernel (Leviathan et al. 2023, Definition "
        "3.7, for $c$; the roofline of Williams et al. 2009 for the times).",
    )
    answers = _c_answers(naive=naive, tt=tt, td=td, c_env=c_env, c_full=c_full)
    return Worked(statement=statement, solution=solution, answers=answers)


def _c_answers(
    *, naive: float, tt: float, td: float, c_env: float, c_full: float
) -> tuple[Answer, ...]:
    """The key: the weight ratio, the two step estimates, c from them and from specsim."""
    return (
        Answer(symbol=r"c_{\mathrm{weights}}", what="weight ratio", value=naive, decimals=4),
        Answer(
            symbol=r"t_{\mathrm{target}}",
            what="target step estimate",
            value=tt,
            decimals=4,
            unit="ms",
        ),
        Answer(
            symbol=r"t_{\mathrm{draft}}",
            what="draft step estimate",
            value=td,
            decimals=4,
            unit="ms",
        ),
        Answer(
            symbol=r"c_{\mathrm{estimate}}", what="c from the estimates", value=c_env, decimals=4
        ),
        Answer(
            symbol=r"c_{\mathrm{specsim}}",
            what="c from the full cost model",
            value=c_full,
            decimals=4,
        ),
    )


COST_COEFFICIENT = Template(
    key="cost_coefficient",
    level=2,
    title="The cost coefficient c from cards",
    topic="c from weights, bandwidth and overheads, against the full cost model",
    draw=_draw_c,
    build=_build_c,
)
