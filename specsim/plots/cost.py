"""Figures of the cost model and its calibration: v(gamma), c, predicted against measured.

Drawn with the habits of :mod:`specsim.plots.figures` (one
:func:`~specsim.plots.figures.figure`, a colour
and a second cue per series, legends outside, a title and alt text from
:func:`~specsim.plots.figures.describe`); DataFrames in, Figures out, nothing written.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from specsim.plots.figures import (
    describe,
    figure,
    legend_outside,
    plot_lines,
    require_columns,
    style_map,
)

__all__ = ["plot_verification_factor", "plot_cost_coefficient", "plot_calibration"]


def plot_verification_factor(df: pd.DataFrame) -> Figure:
    """v(gamma) against the tokens of the verification pass, batch x (gamma + 1).

    Expects the columns of :func:`specsim.cost.verification_frame`. One
    line per gamma; dotted lines at the ceilings ``gamma + 1``, labelled; a
    vertical line at the accelerator's ridge point (first value of ``ridge_tokens``).
    """
    require_columns(df, ("gamma", "tokens", "v", "ridge_tokens"), "plot_verification_factor")
    fig, (ax,) = figure(width=7.0)
    plot_lines(ax, df, x="tokens", y="v", hue="gamma", label=lambda g, _: f"gamma = {g}")
    for gamma, st in style_map(df["gamma"]).items():
        ceiling = float(gamma) + 1  # type: ignore[arg-type]
        ax.axhline(ceiling, color=st.color, linestyle=":", linewidth=1)
        ax.annotate(
            f"ceiling gamma + 1 = {ceiling:g}",
            xy=(0.0, ceiling),
            xycoords=("axes fraction", "data"),
            xytext=(3, 2),
            textcoords="offset points",
            fontsize=7,
            color=st.color,
        )
    ridge = float(df["ridge_tokens"].iloc[0])
    ax.axvline(
        ridge, color="0.3", linestyle="--", linewidth=1, label=f"ridge point (~{ridge:.0f} tokens)"
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("verification pass size = batch x (gamma + 1) [tokens]")
    ax.set_ylabel("v(gamma) = t(gamma + 1 tokens) / t(1 token) (ratio)")
    where = ""
    if {"model", "hardware", "context"} <= set(df.columns):
        r = df.iloc[0]
        where = f": {r['model']} on {r['hardware']}, context {r['context']}"
    legend_outside(fig, where="right")
    gammas = ", ".join(str(g) for g in style_map(df["gamma"]))
    return describe(
        fig,
        title=f"Verification factor v(gamma) against pass size{where}",
        alt=f"Line chart of the verification factor v(gamma) against the tokens of the "
        f"verification pass on a log-2 axis, one line per gamma ({gammas}); v stays near 1 "
        f"while the pass is memory-bound and climbs towards its dotted ceiling gamma + 1 "
        f"past the accelerator's ridge point, marked by a dashed vertical line at about "
        f"{ridge:.0f} tokens.",
    )


def plot_cost_coefficient(df: pd.DataFrame) -> Figure:
    """c(draft, target) against batch: colour and marker per draft, line style per context.

    Expects the columns of :func:`specsim.cost.cost_coefficient_frame`.
    Dotted lines mark each draft's parameter ratio, the naive value
    of c that ignores overheads and KV traffic.
    """
    require_columns(df, ("draft", "batch", "context", "c", "param_ratio"), "plot_cost_coefficient")
    fig, (ax,) = figure(width=7.0)
    plot_lines(
        ax,
        df,
        x="batch",
        y="c",
        hue="draft",
        style="context",
        label=lambda d, ctx: f"{d}, context {ctx}",
    )
    styles = style_map(df["draft"])
    for draft, ratio in df.groupby("draft", sort=False)["param_ratio"].first().items():
        ax.axhline(ratio, color=styles[draft].color, linestyle=(0, (2, 4)), linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("c = t(draft step) / t(target step) (ratio)")
    title = "Cost coefficient c of each draft against batch (dotted: parameter ratio)"
    if {"target", "hardware"} <= set(df.columns):
        title += f"\ntarget {df['target'].iloc[0]} on {df['hardware'].iloc[0]}"
    legend_outside(fig, where="right")
    return describe(
        fig,
        title=title,
        alt="Line chart, log-log, of the cost coefficient c (draft step time over target step "
        f"time) against batch for the drafts {', '.join(map(str, styles))}, one line style per "
        "context; dotted horizontal lines mark each draft's parameter ratio.",
    )


# Calibration -----------------------------------------------------------------------------
def plot_calibration(df: pd.DataFrame) -> Figure:
    """Measured against predicted pass time (log-log), colour and marker per model.

    Expects the residual table of :func:`specsim.calibrate.cards.fit_card` (columns
    ``time_s``, ``predicted_s``, ``model``); the diagonal is a perfect fit.
    """
    require_columns(df, ("time_s", "predicted_s", "model"), "plot_calibration")
    fig, (ax,) = figure()
    for model, st in style_map(df["model"]).items():
        d = df[df["model"] == model]
        ax.plot(
            d["time_s"],
            d["predicted_s"],
            linestyle="none",
            marker=st.marker,
            color=st.color,
            markersize=5,
            alpha=0.8,
            label=str(model),
        )
    lo = float(min(df["time_s"].min(), df["predicted_s"].min()))
    hi = float(max(df["time_s"].max(), df["predicted_s"].max()))
    ax.plot([lo, hi], [lo, hi], color="0.4", linestyle="--", linewidth=1, label="perfect fit")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="measured pass time (s)",
        ylabel="predicted pass time (s)",
    )
    legend_outside(fig, where="right")
    return describe(
        fig,
        title="Calibrated cost model: predicted against measured pass time",
        alt=f"Scatter plot, log-log, of predicted against measured pass time for {len(df)} "
        "measured passes, one colour and marker per model; the dashed diagonal is a perfect "
        "fit.",
    )
