"""The crossover study's policy part: the engines' lookahead rules against the batch.

One draft/target pair on one deployment, chain serving (:func:`specsim.sim.simulate_serving`
on :class:`specsim.sim.CardCost`) of closed batches, one run per rule, batch and replicate:
a fixed lookahead (what an engine does with speculation configured and nothing else), vLLM
v0's disable-by-batch-size, vLLM v1's per-batch-size schedule, SGLang's adaptive steps
(default slots) and the load-aware goodput rule (:mod:`specsim.policies.engine_rules`). The
thresholds are the study's settings, not the engines' defaults (vLLM has none: both keys are
unset unless the user sets them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.crossover import closed_batch, replicate
from specsim.cards import load_model
from specsim.cost import Deployment
from specsim.plots.figures import describe, figure, legend_outside, plot_lines
from specsim.policies.engine_rules import (
    BatchSizeSchedule,
    DisableByBatchSize,
    GoodputAdaptive,
    SglangAdaptiveSteps,
)
from specsim.policies.lookahead import FixedGamma, LookaheadPolicy
from specsim.sim import CardCost, ServingConfig, simulate_serving

__all__ = ["policy_rows", "policy_figure"]


def card_cost(*, target: str, draft: str, hardware: str, runtime: str | None) -> CardCost:
    """The one place this study builds a CardCost: the draft beside the target on its deployment."""
    deployment = Deployment(target=target, hardware=hardware, runtime=runtime)
    return CardCost(deployment=deployment, draft=load_model(draft))


def rules(
    *, alpha: float, gamma: int, off_batch: int, max_gamma: int
) -> dict[str, LookaheadPolicy]:
    """The rules compared, each at ``gamma`` where it has one lookahead."""
    return {
        f"fixed gamma {gamma}": FixedGamma(gamma=gamma),
        f"vLLM v0: off from batch {off_batch}": DisableByBatchSize(
            gamma=gamma, disable_by_batch_size=off_batch
        ),
        f"vLLM v1: {gamma} to batch {off_batch // 4}, 1 to {off_batch - 1}, then 0": (
            BatchSizeSchedule(
                num_speculative_tokens=gamma,
                schedule=(
                    (1, off_batch // 4, gamma),
                    (off_batch // 4 + 1, off_batch - 1, 1),
                    (off_batch, off_batch, 0),
                ),
            )
        ),
        f"SGLang adaptive (from {gamma} steps)": SglangAdaptiveSteps(
            alpha=alpha, initial_steps=gamma, max_gamma=max_gamma
        ),
        "goodput (min gain 5%)": GoodputAdaptive(alpha=alpha, max_gamma=max_gamma, min_gain=0.05),
    }


def policy_rows(
    *,
    cost: CardCost,
    alpha: float,
    gamma: int,
    off_batch: int,
    batches: tuple[int, ...],
    prompt: int,
    output: int,
    replicates: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """One row per (rule, batch, replicate): the throughput and TPOT speedups, mean gamma."""
    max_gamma = max(gamma, 8)
    seed = int(rng.integers(2**63 - 1))  # the same draws for every rule: paired differences
    frames = []
    for name, policy in rules(
        alpha=alpha, gamma=gamma, off_batch=off_batch, max_gamma=max_gamma
    ).items():

        def at(
            b: float, r: np.random.Generator, policy: LookaheadPolicy = policy
        ) -> dict[str, Any]:
            cfg = ServingConfig(
                workload=closed_batch(int(b), prompt=prompt, output=output),
                cost=cost,
                acceptance=IIDAcceptance(alpha=alpha),
                policy=policy,
                max_batch=int(b),
                max_gamma=max_gamma,
            )
            m = simulate_serving(cfg, r).metrics()
            return {
                "speedup": float(m["speedup"]),
                "tpot_speedup": float(m["tpot_speedup"]),
                "mean_gamma": float(m["mean_gamma"]),
            }

        d = replicate(at, list(batches), replicates=replicates, rng=np.random.default_rng(seed))
        frames.append(d.assign(rule=name))
    return pd.concat(frames, ignore_index=True)


def policy_figure(df: pd.DataFrame, *, title: str) -> Figure:
    """Throughput speedup and mean lookahead per rule against the batch."""
    mean = df.groupby(["rule", "x"], sort=False)[["speedup", "mean_gamma"]].mean().reset_index()
    fig, axes = figure(2, width=5.4, height=4.2)
    for ax, (col, label) in zip(
        axes,
        (
            ("speedup", "throughput speedup over plain decoding (x)"),
            ("mean_gamma", "mean lookahead (tokens)"),
        ),
        strict=True,
    ):
        plot_lines(ax, mean, x="x", y=col, hue="rule")
        ax.set_xscale("log", base=2)
        ticks = sorted(set(mean["x"]))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("batch (sequences per pass, closed batch)")
        ax.set_ylabel(label)
    axes[0].axhline(
        1.0, color="0.15", linewidth=1.0, linestyle=(0, (1, 1)), label="1x (plain decoding)"
    )
    legend_outside(fig, ncols=2)
    return describe(
        fig,
        title=title,
        alt="Two line charts against the closed batch size (log scale): left the throughput "
        "speedup over plain decoding, right the mean lookahead, one line per lookahead rule "
        f"({', '.join(dict.fromkeys(df['rule']))}), each with its own colour, marker and line "
        "style; a dotted line marks 1x.",
    )
