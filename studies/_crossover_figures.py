"""The crossover study's figure: one per card, readable in grey-scale."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from specsim.plots.figures import describe, legend_outside, plot_lines

__all__ = ["card_figure"]

_METRIC = {"speedup": "throughput", "tpot_speedup": "TPOT"}
_AXIS = {
    "batch": ("batch (sequences per pass, closed batch)", 2),
    "rate": ("arrival rate (requests/s)", 10),
}


def _panel(ax: Axes, env: pd.DataFrame, cross: pd.DataFrame, axis: str) -> None:
    d = env.assign(metric=env["metric"].map(_METRIC))
    plot_lines(ax, d, x="x", y="mean", hue="proposer", style="metric", hollow=("TPOT",))
    ax.axhline(1.0, color="0.15", linewidth=1.0, linestyle=(0, (1, 1)), label="1x (plain decoding)")
    hit = cross[cross["kind"] == "crosses"]
    for _, r in hit.iterrows():
        hi = min(float(r["high"]), float(env["x"].max()))
        lo = max(float(r["low"]), float(env["x"].min()))
        ax.errorbar(
            [r["at"]],
            [1.0],
            xerr=[[r["at"] - lo], [hi - r["at"]]],
            fmt="|",
            color="0.1",
            markersize=12,
            capsize=3,
            label="crossing of 1 (95% interval)",
        )
    label, base = _AXIS[axis]
    ax.set_xscale("log", base=base)
    ticks = sorted(set(env["x"]))
    ax.set_xticks(ticks, [f"{t:.3g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(label)
    ax.set_ylabel("speedup over plain decoding (x)")


def card_figure(env: pd.DataFrame, cross: pd.DataFrame) -> Figure:
    """Columns: one per (target, stack); rows: the batch axis, then the rate axis. Colour and
    marker per proposer, solid throughput and dashed TPOT (hollow markers), a dotted 1x line."""
    groups = list(dict.fromkeys(zip(env["target"], env["stack"], strict=True)))
    fig = Figure(figsize=(max(5.4 * len(groups), 8.0), 8.4), layout="constrained")
    FigureCanvasAgg(fig)  # Agg canvas: savefig works without pyplot
    axes = fig.subplots(2, len(groups), squeeze=False)
    for j, (target, stack) in enumerate(groups):
        for i, axis in enumerate(("batch", "rate")):
            sel_e = (env["target"] == target) & (env["stack"] == stack) & (env["axis"] == axis)
            sel_c = (
                (cross["target"] == target) & (cross["stack"] == stack) & (cross["axis"] == axis)
            )
            _panel(axes[i][j], env[sel_e], cross[sel_c], axis)
            axes[i][j].set_title(f"{target} ({stack}): against {axis}", fontsize=10)
    legend_outside(fig, ncols=3)
    card = str(env["card"].iloc[0])
    proposers = ", ".join(dict.fromkeys(env["proposer"]))
    return describe(
        fig,
        title=f"Where speculation stops paying on {card}: speedup against batch and arrival rate",
        alt=f"A grid of line charts for {card}: one column per target and stack, the top row "
        "against the closed batch size (log scale), the bottom row against the arrival rate "
        f"(log scale). Each proposer ({proposers}) has its own marker; solid lines with filled "
        "markers are the throughput speedup, dashed lines with hollow markers the TPOT speedup, "
        "each the best candidate at that point. A dotted line marks 1x; a bar on it marks each "
        "crossing of 1 with its 95% interval.",
    )
