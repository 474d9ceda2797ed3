"""Figures: tidy DataFrames in, matplotlib Figures out (seaborn styling).

Every function takes a DataFrame (built elsewhere, e.g. :mod:`specsim.costgrid`)
and returns a :class:`matplotlib.figure.Figure` drawn on the non-interactive Agg
canvas. Nothing here computes model quantities, opens windows or writes files:
the caller saves (``fig.savefig(path)``). Figures are made with
``matplotlib.figure.Figure`` directly, not pyplot, so no global figure state is
kept and no backend is switched.

Sections: cost model (verification factor, cost coefficient). Later topics add
their own section below, one function per figure.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "plot_verification_factor",
    "plot_cost_coefficient",
    "plot_calibration",
]


def _require(df: pd.DataFrame, columns: Iterable[str], where: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{where}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: DataFrame lacks column(s) {missing}; it has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{where}: the DataFrame is empty")


def _figure(width: float = 6.4, height: float = 4.4) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # Agg canvas: savefig works without pyplot
    ax: Axes = fig.subplots()
    return fig, ax


# Cost model ------------------------------------------------------------------------------
def plot_verification_factor(df: pd.DataFrame) -> Figure:
    """v(gamma) against the tokens of the verification pass, batch x (gamma + 1).

    Expects the columns of :func:`specsim.costgrid.verification_frame`. One
    line per gamma; dotted lines at the ceilings ``gamma + 1``; a vertical line
    at the accelerator's ridge point (first value of ``ridge_tokens``).
    """
    _require(df, ("gamma", "tokens", "v", "ridge_tokens"), "plot_verification_factor")
    fig, ax = _figure()
    palette = sns.color_palette("viridis", n_colors=df["gamma"].nunique())
    sns.lineplot(data=df, x="tokens", y="v", hue="gamma", palette=palette, marker="o", ax=ax)
    for color, gamma in zip(palette, sorted(df["gamma"].unique()), strict=True):
        ax.axhline(gamma + 1, color=color, linestyle=":", linewidth=1)
    ridge = float(df["ridge_tokens"].iloc[0])
    ax.axvline(ridge, color="0.3", linestyle="--", linewidth=1)
    ax.annotate(
        f"ridge ~ {ridge:.0f} tokens",
        xy=(ridge, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(4, -12),
        textcoords="offset points",
        fontsize=8,
        color="0.3",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in the verification pass, batch x (gamma + 1)")
    ax.set_ylabel("v(gamma) = t(gamma + 1) / t(1)")
    title = "verification factor"
    if {"model", "hardware", "context"} <= set(df.columns):
        r = df.iloc[0]
        title += f": {r['model']} on {r['hardware']}, context {r['context']}"
    ax.set_title(title, fontsize=10)
    ax.legend(title="gamma", fontsize=8)
    return fig


def plot_cost_coefficient(df: pd.DataFrame) -> Figure:
    """c(draft, target) against batch, one colour per draft, one line style per context.

    Expects the columns of :func:`specsim.costgrid.cost_coefficient_frame`.
    Dashed horizontal lines mark each draft's parameter ratio, the naive value
    of c that ignores overheads and KV traffic.
    """
    _require(df, ("draft", "batch", "context", "c", "param_ratio"), "plot_cost_coefficient")
    fig, ax = _figure()
    drafts = list(dict.fromkeys(df["draft"]))
    palette = dict(zip(drafts, sns.color_palette("deep", n_colors=len(drafts)), strict=True))
    sns.lineplot(
        data=df, x="batch", y="c", hue="draft", style="context", palette=palette, marker="o", ax=ax
    )
    for draft, ratio in df.groupby("draft", sort=False)["param_ratio"].first().items():
        ax.axhline(ratio, color=palette[draft], linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch")
    ax.set_ylabel("c = t(draft step) / t(target step)")
    title = "cost coefficient (dashed: parameter ratio)"
    if {"target", "hardware"} <= set(df.columns):
        title = f"{title}\ntarget {df['target'].iloc[0]} on {df['hardware'].iloc[0]}"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return fig


# Calibration -----------------------------------------------------------------------------
def plot_calibration(df: pd.DataFrame) -> Figure:
    """Measured against predicted pass time (log-log), one colour per model.

    Expects the residual table of :func:`specsim.calibrate.fit_card` (columns
    ``time_s``, ``predicted_s``, ``model``); the diagonal is a perfect fit.
    """
    _require(df, ("time_s", "predicted_s", "model"), "plot_calibration")
    fig, ax = _figure()
    sns.scatterplot(data=df, x="time_s", y="predicted_s", hue="model", ax=ax)
    lo = float(min(df["time_s"].min(), df["predicted_s"].min()))
    hi = float(max(df["time_s"].max(), df["predicted_s"].max()))
    ax.plot([lo, hi], [lo, hi], color="0.4", linestyle="--", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel="measured pass time (s)",
           ylabel="predicted pass time (s)", title="Calibrated cost model")  # fmt: skip
    return fig
