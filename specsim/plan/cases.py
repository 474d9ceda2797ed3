"""The three deployments the report opens with, each answered by :func:`specsim.plan.plan`,
and the figure drawn for each answer.

- **a 7B model on one GPU**: Vicuna-7B v1.3 on one H100 SXM under the vLLM profile fitted
  there (``models/runtime/vllm-h100.toml``), weighing EAGLE-1 and Medusa heads and n-gram
  lookup, at 4 requests per second;
- **a 70B dense model over tensor parallelism**: Llama 2 70B on four H100 SXM, weighing a
  Llama 2 7B draft (its acceptance an assumed alpha, flagged) and n-gram lookup, in a
  closed batch of 16;
- **a large MoE**: DeepSeek-V3 (671B, 37B active) in fp8 on eight H200, weighing n-gram
  lookup, in a closed batch of 32.

Served cases use few requests (the report's budget: a few seconds each); ``specsim plan``
with the same flags and ``--precise`` tightens them.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specsim.cards import load_hardware, load_model, load_runtime
from specsim.cost.deployment import Deployment
from specsim.plan.answer import PlanAnswer, plan
from specsim.plan.evaluation import Estimate, Row
from specsim.plan.options import Load, OptionSpec, PlanRequest
from specsim.plan.plan_toml import request_from_toml
from specsim.plan.render import html_section

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["Case", "opening_html", "plan_figure", "report_answers", "report_cases", "user_case"]


@dataclass(frozen=True)
class Case:
    """One deployment of the report's opening: its title, the paragraph's lead-in, the
    question, and the ``specsim plan`` command that asks it."""

    title: str
    lead: str
    request: PlanRequest
    command: str


def _dep(target: str, hardware: str, *, runtime: str | None = None, tp: int = 1) -> Deployment:
    rt = None if runtime is None else load_runtime(runtime)
    return Deployment(
        target=load_model(target), hardware=load_hardware(hardware), runtime=rt, tensor_parallel=tp
    )


def report_cases() -> tuple[Case, ...]:
    """The report's three deployments (module docstring), their cards loaded now."""
    small = PlanRequest(
        deployment=_dep("vicuna-7b-v1.3", "h100-sxm", runtime="vllm-h100"),
        options=(
            OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3"),
            OptionSpec(kind="heads", card="medusa-vicuna-7b-v1.3"),
            OptionSpec(kind="ngram"),
        ),
        load=Load(rate_per_s=4.0, requests=120),
    )
    dense = PlanRequest(
        deployment=_dep("llama-2-70b", "h100-sxm", tp=4),
        options=(OptionSpec(kind="draft", card="llama-2-7b", alpha=0.7), OptionSpec(kind="ngram")),
        load=Load(batch=16),
        price_per_gpu_hour=2.0,
    )
    moe = PlanRequest(
        deployment=_dep("deepseek-v3", "h200", tp=8),
        options=(OptionSpec(kind="ngram"),),
        load=Load(batch=32, prompt_tokens=4096, output_tokens=512),
    )
    return (
        Case(
            "A 7B model on one GPU",
            "Vicuna-7B v1.3 on one H100 SXM (the vLLM profile fitted there), serving 4 req/s.",
            small,
            "specsim plan --model vicuna-7b-v1.3 --hardware h100-sxm --runtime vllm-h100 "
            "--heads eagle-vicuna-7b-v1.3 --heads medusa-vicuna-7b-v1.3 --ngram --rate 4 "
            "--requests 120",
        ),
        Case(
            "A 70B dense model over tensor parallelism",
            "Llama 2 70B on four H100 SXM, a closed batch of 16; the draft's alpha = 0.7 is "
            "assumed (a what-if), the n-gram acceptance is measured on the sample corpus.",
            dense,
            "specsim plan --model llama-2-70b --hardware h100-sxm --tensor-parallel 4 "
            "--draft llama-2-7b --alpha 0.7 --ngram --batch 16 --price-per-gpu-hour 2",
        ),
        Case(
            "A large MoE with long prompts",
            "DeepSeek-V3 (671B, 37B active, fp8) on eight H200, a closed batch of 32 with "
            "4,096-token prompts.",
            moe,
            "specsim plan --model deepseek-v3 --hardware h200 --tensor-parallel 8 --ngram "
            "--batch 32 --prompt 4096 --output 512",
        ),
    )


def user_case(path: str | os.PathLike[str]) -> Case:
    """A user's ``specsim plan --config`` TOML as the report's first case."""
    request = request_from_toml(path)
    title = f"Your deployment ({Path(path).name})"
    return Case(title, "", request, f"specsim plan --config {os.fspath(path)}")


def report_answers(cases: tuple[Case, ...] | None = None) -> list[tuple[Case, PlanAnswer]]:
    """Each case (default: :func:`report_cases`) answered, in order."""
    return [(c, plan(c.request)) for c in (report_cases() if cases is None else cases)]


def _bars(
    ax: Axes,
    rows: tuple[Row, ...],
    get: Callable[[Row], Estimate],
    *,
    scale: float,
    label: str,
    chosen: str | None,
) -> None:
    vals = [get(r) for r in rows]
    y = np.arange(len(rows))
    v = np.array([e.value for e in vals]) * scale
    lo = np.array([e.low if np.isfinite(e.low) else e.value for e in vals]) * scale
    hi = np.array([e.high if np.isfinite(e.high) else e.value for e in vals]) * scale
    colors = ["#ee7733" if r.label == chosen else "#4477aa" for r in rows]
    ax.barh(y, v, xerr=np.vstack([v - lo, hi - v]), color=colors, capsize=3)
    ax.set_yticks(y, [r.label for r in rows])
    ax.set_xlabel(label)


def plan_figure(answer: PlanAnswer, *, title: str) -> Figure:
    """Median TPOT and tokens per second of every option, with their 95% intervals (a
    closed form has none), the chosen option in orange."""
    import matplotlib.pyplot as plt  # start-up: only the report draws

    fig, axes = plt.subplots(1, 2, figsize=(9, 0.55 * len(answer.rows) + 1.4), sharey=True)
    pick = answer.verdict.choice
    tpot = "median TPOT (ms)"
    _bars(axes[0], answer.rows, lambda r: r.tpot_p50_s, scale=1e3, label=tpot, chosen=pick)
    thr = "tokens per second"
    rows = answer.rows
    _bars(axes[1], rows, lambda r: r.throughput_tokens_per_s, scale=1.0, label=thr, chosen=pick)
    axes[0].invert_yaxis()  # the axes are shared: the table's order, top to bottom
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def opening_html(answers: list[tuple[Case, PlanAnswer]], *, png: Callable[[Figure], str]) -> str:
    """The report's opening: each answer's verdict as a short paragraph, its figure (``png``:
    a figure as base64 PNG) and the command that asks it, then the answer in full, folded."""
    esc = html.escape
    parts = ["<section id='answers'><h2>Would speculation pay off here?</h2>"]
    for case, answer in answers:
        fig = plan_figure(answer, title=case.title)
        alt = f"{case.title}: median TPOT and tokens per second of each option"
        parts += [
            f"<h3>{esc(case.title)}</h3>",
            f"<p class='verdict'>{esc(case.lead)} <strong>{esc(answer.verdict.sentence)}"
            "</strong></p>",
            f"<figure><img alt='{esc(alt)}' src='data:image/png;base64,{png(fig)}'>",
            f"<figcaption>{esc(alt)} (the chosen one in orange; 95% intervals). Made by: "
            f"<code>{esc(case.command)}</code></figcaption></figure>",
            "<details><summary>the whole answer</summary>",
            html_section(answer, title=case.title),
            "</details>",
        ]
    parts.append("</section>")
    return "".join(parts)
