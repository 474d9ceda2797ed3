"""The capacity study's figure: p99 TPOT and TTFT with their intervals against the load per
accelerator, speculative (solid, filled) and plain (dashed, hollow), the SLO lines and each
card's crossover, and the accelerators needed for the service's rate
(``studies/capacity.py`` computes the rows)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.plots.figures import (
    LINESTYLES,
    describe,
    figure,
    legend_outside,
    plot_lines,
    style_map,
)

from ._capacity_pools import pool_figures

__all__ = ["figures"]


def _card(hw: str, tp: int) -> str:
    return f"{hw} (replica of {tp})"


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """p99 TPOT and TTFT (with their intervals) against the load per accelerator,
    speculative and plain, SLO lines and each card's crossover; then the accelerators
    needed for the service's rate, with their intervals.

    The load is the replica's request rate over its tensor-parallel degree, so that
    cards with replicas of different sizes compare per accelerator.
    """
    if "prefill_replicas" in df.columns:  # the disaggregated form
        return pool_figures(df)
    tp = df.groupby("hardware", sort=False)["tensor_parallel"].first().astype(int)
    pr = df[(df["kind"] == "probe") & (df["search"] == "capacity")].copy()
    # The run that decided each rate: the one with the most requests.
    pr = pr.sort_values("requests").groupby(["hardware", "mode", "rate_per_s"], sort=False).tail(1)
    pr["rate_per_device"] = pr["rate_per_s"] / pr["tensor_parallel"]
    pr["card"] = [_card(h, tp[h]) for h in pr["hardware"]]
    styles = style_map(_card(h, n) for h, n in tp.items())
    fig, axes = figure(3, width=5.0)
    for ax, (metric, slo, label) in zip(
        axes,
        (
            ("tpot_p99_s", "slo_tpot_p99_s", "p99 time per output token, TPOT (s)"),
            ("ttft_p99_s", "slo_ttft_p99_s", "p99 time to first token, TTFT (s)"),
        ),
        strict=False,
    ):
        plot_lines(
            ax, pr, x="rate_per_device", y=metric, hue="card", style="mode", hollow={"plain"}
        )
        # An interval without an end (too few requests to bound it) runs to the panel's edge.
        values = pr[[metric, f"{metric[:-2]}_low_s", f"{metric[:-2]}_high_s"]].to_numpy()
        finite = values[np.isfinite(values) & (values > 0)]
        bottom, top = 0.5 * float(finite.min()), 2.0 * float(finite.max())
        for card, g in pr.groupby("card", sort=False):
            low = g[f"{metric[:-2]}_low_s"].clip(lower=bottom)
            high = g[f"{metric[:-2]}_high_s"].clip(upper=top)
            ax.errorbar(
                g["rate_per_device"],
                g[metric],
                fmt="none",
                ecolor=styles[card].color,
                yerr=[g[metric] - low, high - g[metric]],
                elinewidth=0.8,
                capsize=2,
                label="_interval",
            )
        ax.set_ylim(bottom, top)
        ax.axhline(
            float(df[slo].iloc[0]), color="0.2", linestyle=(0, (1, 2)), linewidth=1.2, label="SLO"
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("load per accelerator (requests/s)")
        ax.set_ylabel(label)
    cross = df[df["kind"] == "crossover"]
    for i, r in enumerate(cross.itertuples(index=False)):
        card = _card(str(r.hardware), int(r.tensor_parallel))
        if r.crossover_rate > 0 and r.status != "above rate_max":
            axes[0].axvline(
                r.crossover_rate / r.tensor_parallel,
                color=styles[card].color,
                linestyle=LINESTYLES[(2 + i) % len(LINESTYLES)],
                linewidth=1.2,
                marker=styles[card].marker,
                markevery=[1],
                label=f"{card}: speculation stops paying",
            )
    ans = df[(df["kind"] == "answer")]
    ans = ans[ans["max_rate_per_replica"] > 0] if "accelerators" in ans else ans.iloc[:0]
    ax = axes[2]
    for i, (hw, g) in enumerate(ans.groupby("hardware", sort=False)):
        card = _card(str(hw), tp[hw])
        for j, r in enumerate(g.itertuples(index=False)):
            st = styles[card]
            ax.errorbar(
                [i + (j - 0.5) * 0.3],
                [r.accelerators],
                capsize=4,
                color=st.color,
                marker=st.marker,
                markersize=7,
                linestyle="none",
                markerfacecolor="none" if r.mode == "plain" else st.color,
                yerr=[[r.accelerators - r.accelerators_low], [0]],
                label=f"{card}, {r.mode}",
            )
            ax.annotate(
                f"{int(r.accelerators)}",
                (i + (j - 0.5) * 0.3, r.accelerators),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
            )
    ax.set_xticks(range(len(tp)), [_card(h, n) for h, n in tp.items()], fontsize=8)
    ax.set_xlim(-0.7, len(tp) - 0.3)
    ax.margins(y=0.12)
    ax.set_xlabel("accelerator card (tensor-parallel degree per replica)")
    ax.set_ylabel("accelerators needed (count)")
    rate = float(df.loc[df["kind"] == "answer", "rate_per_s"].iloc[0])
    ax.set_title(f"for {rate:g} requests/s (filled: speculative, hollow: plain)", fontsize=9)
    legend_outside(fig, where="below", ncols=3)
    pair = f"{df['target'].iloc[0]} with {df['draft'].iloc[0]} drafting"
    cards = ", ".join(f"{h} with {n} per replica" for h, n in tp.items())
    return {
        "capacity": describe(
            fig,
            title=f"Capacity of {pair}, with and without speculation: p99 latency against "
            f"load per accelerator, and the accelerators needed at the SLO "
            f"(to {float(df['precision'].iloc[0]):.0%} in rate)",
            alt=f"Three charts. Left and middle, log-log: p99 time per output token and p99 "
            f"time to first token of one serving replica against the request rate per "
            f"accelerator, for {cards}, speculative (solid lines, filled markers) and plain "
            f"(dashed lines, hollow markers) decoding, with "
            f"95% order-statistic intervals; a dotted line marks each SLO and a vertical "
            f"line each card's crossover rate, above which speculation is no longer shown to "
            f"lower the p99 TPOT. Right: the accelerators needed for {rate:g} requests/s per "
            f"card, speculative (filled) and plain (hollow), an error bar down to the fewest "
            f"the search could not rule out.",
        )
    }
