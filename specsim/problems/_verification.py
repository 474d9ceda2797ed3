"""A problem on real cards: the verification factor at a batch, from the roofline's ridge.

As in :mod:`specsim.problems._cards`, the numbers a statement shows come from the cards
and the cost model, rounded as printed, and each answer is computed from the printed
numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim import theory
from specsim.cards import DTYPE_BYTES, HardwareCard, load_hardware, load_model
from specsim.cost import Deployment, cost_coefficient, verification_factor
from specsim.problems._cards import draw_setup, fitting_batches, pair_cards, who_runs
from specsim.problems._core import Answer, Template, Worked, fmt, pick

__all__ = ["VERIFICATION"]


# The verification factor ----------------------------------------------------------------------
def _draw_v(rng: np.random.Generator) -> dict[str, Any]:
    setup = draw_setup(rng, context=512)
    t, hw = load_model(setup["target"]), load_hardware(setup["hardware"])
    batch = pick(rng, fitting_batches(t, hw, 512, 11, (1, 4, 16, 32, 64, 128)))
    return {
        **setup,
        "batch": int(batch),
        "gamma": int(rng.integers(2, 9)),
        "alpha": round(float(rng.uniform(0.6, 0.9)), 2),
    }


def _build_v(params: Mapping[str, Any]) -> Worked:
    t, d, hw = pair_cards(params)
    b, g, a, ctx = (
        int(params["batch"]),
        int(params["gamma"]),
        float(params["alpha"]),
        int(params["context"]),
    )
    peak, ce, bw, me, nbytes, ridge = _printed_ridge(hw, t.dtype)
    tokens = b * (g + 1)
    v = round(float(verification_factor(t, hw, g, batch=b, context=ctx)), 3)
    c = round(
        float(cost_coefficient(d, Deployment(target=t, hardware=hw), batch=b, context=ctx)), 4
    )
    e = float(theory.expected_tokens(a, g))
    w = e / (g * c + v)
    statement = (
        who_runs(params, t, d, hw) + f" A batch of {b} sequences decodes together; each pass "
        f"drafts $\\gamma = {g}$ tokens per sequence and acceptances are i.i.d. with "
        f"$\\alpha = {a:g}$. The accelerator card gives {peak:g} TFLOP/s peak in "
        f"{t.dtype}, of which a pass attains {ce:g}, and {bw:g} GB/s, of which it attains "
        f"{me:g}; a weight in {t.dtype} is {nbytes:g} bytes.",
        "- (a) At how many tokens per pass do its weight multiplications turn compute-bound "
        "(the ridge point $n^*$, where reading the weights and multiplying them take equal "
        "time; a number of tokens, to one decimal)?",
        "- (b) How many tokens does the batch's verification pass process?",
        r"- (c) This part needs specsim: what is the verification factor $v$ (verification "
        "pass time over plain step time, same batch)? Run "
        f"`specsim.cost.verification_factor(load_model('{t.slug}'), "
        f"load_hardware('{hw.slug}'), {g}, batch={b}, context={ctx})` (from "
        "`specsim.cards` and `specsim.cost`) and round to 3 decimals.",
        f"- (d) At this batch the cost coefficient is $c = {c:.4f}$. With (c), what is the "
        "walltime improvement?",
    )
    solution = (
        f"(a) Reading $N$ weights of {DTYPE_BYTES[t.dtype]:g} bytes takes as long as "
        r"$2Nn$ operations on $n$ tokens when $n^* = \frac{\mathrm{bytes} \times "
        r"\mathrm{peak} \times \eta_c}{2 \times \mathrm{bandwidth} \times \eta_m}$ "
        f"$= {nbytes:g} \\times {peak:g} \\times 10^{{12}} \\times {ce:g} / (2 \\times {bw:g} "
        f"\\times 10^9 \\times {me:g}) = {fmt(ridge, 1)}$ tokens (the roofline's ridge, "
        "Williams et al. 2009).",
        f"(b) ${b} \\times (\\gamma + 1) = {tokens}$ tokens: "
        + (
            "below the ridge, so the pass stays memory-bound and the extra positions cost "
            "little beyond key/value and activation traffic."
            if tokens < ridge
            else "above the ridge, so the weight multiplications are compute-bound and the "
            "pass's time grows with the tokens it verifies."
        )
        + f" (c) The call in the statement times both passes with the full cost model "
        f"(weights, key/value cache at {ctx} tokens, activations, overheads; the larger of "
        f"compute and memory time kernel by kernel) and returns $v = {v:.3f}$.",
        f"(d) $W = \\mathbb{{E}}[T]/(\\gamma c + v) = {fmt(e, 4)} / ({g} \\times {c:.4f} + "
        f"{v:.3f}) = {fmt(w, 3)}$. The paper's $v = 1$ is the batch-1, memory-bound case; "
        "under load the verification pass costs more than one plain step.",
    )
    answers = _v_answers(ridge=ridge, tokens=tokens, v=v, w=w)
    return Worked(statement=statement, solution=solution, answers=answers)


def _printed_ridge(hw: HardwareCard, dtype: str) -> tuple[float, float, float, float, float, float]:
    """The card's peak (TFLOP/s), compute efficiency, bandwidth (GB/s), memory efficiency and
    bytes per weight as the statement prints them, and the ridge point from those printed
    numbers (not the card's own), so the worked line is arithmetic."""
    peak = float(f"{hw.peak(dtype) / 1e12:g}")
    ce, bw = float(f"{hw.compute_efficiency:g}"), float(f"{hw.mem_bandwidth / 1e9:g}")
    me, nbytes = float(f"{hw.memory_efficiency:g}"), DTYPE_BYTES[dtype]
    ridge = nbytes * peak * 1e12 * ce / (2.0 * bw * 1e9 * me)
    return peak, ce, bw, me, nbytes, ridge


def _v_answers(*, ridge: float, tokens: int, v: float, w: float) -> tuple[Answer, ...]:
    """The key: the ridge, the verification pass's tokens, v and the walltime improvement."""
    return (
        Answer(symbol=r"n^*", what="ridge point", value=ridge, decimals=1, unit="tokens"),
        Answer(
            symbol=r"B(\gamma + 1)",
            what="tokens in the verification pass",
            value=tokens,
            decimals=0,
        ),
        Answer(symbol="v", what="verification factor", value=v, decimals=3),
        Answer(symbol="W", what="walltime improvement", value=w, decimals=3),
    )


VERIFICATION = Template(
    key="verification_factor",
    level=2,
    title="The verification factor at a batch",
    topic="the roofline ridge and v(gamma) under batching",
    draw=_draw_v,
    build=_build_v,
)
