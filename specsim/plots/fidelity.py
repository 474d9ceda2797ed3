"""The fidelity page's figure: every anchor, predicted against measured.

:func:`plot_fidelity` draws :func:`specsim.validate.fidelity.fidelity_table`'s rows, one
panel per quantity (per-token latency in seconds, speedup over plain decoding),
log axes on both (latencies span two decades), the measured 95% interval as a
horizontal bar, the line y = x and a band of +/- 10% (the accuracy goal), one
colour and marker per anchor family. The published plain-pass families of the stacks
(quantities :data:`STACK_QUANTITIES`) are drawn apart, by :func:`plot_stack_fidelity`, and
so are llama.cpp's speculative runs on this CPU (:data:`LLAMACPP_FAMILIES`), by
:func:`plot_llamacpp_fidelity` with the +/- 25% band of the worst-case goal, so that each
figure's families keep distinct styles.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from specsim.plots.figures import Style, describe, figure, legend_outside, style_map
from specsim.validate.fidelity.llamacpp import BENCH, LINE

__all__ = [
    "STACK_QUANTITIES",
    "LLAMACPP_FAMILIES",
    "plot_fidelity",
    "plot_stack_fidelity",
    "plot_llamacpp_fidelity",
]

STACK_QUANTITIES = ("plain pass throughput", "plain time per token")
"""The quantities of the stacks' published plain-pass families
(:mod:`specsim.validate.fidelity.published`)."""

LLAMACPP_FAMILIES = (LINE, BENCH)
"""The families of llama.cpp's speculative runs on this CPU
(:mod:`specsim.validate.fidelity.llamacpp`)."""

_NEEDED = ("family", "quantity", "unit", "measured", "measured_low", "measured_high", "predicted")
_BAND = 0.10


def plot_fidelity(table: pd.DataFrame) -> Figure:
    """Predicted against measured, one log-log panel per quantity of ``table`` (the
    fidelity table) except :data:`STACK_QUANTITIES` and :data:`LLAMACPP_FAMILIES`, y = x and
    a +/- 10% band, colour and marker per family."""
    _check(table)
    rest = table[~table["quantity"].isin(STACK_QUANTITIES)]
    rest = rest[~rest["family"].isin(LLAMACPP_FAMILIES)]
    if rest.empty:
        raise ValueError("plot_fidelity: the table has only stack rows (plot_stack_fidelity)")
    return _panels(rest, title="Fidelity: every anchor, predicted against measured (out of sample)")


def plot_stack_fidelity(table: pd.DataFrame) -> Figure:
    """The stacks' published plain-pass families of ``table`` (:data:`STACK_QUANTITIES`),
    drawn as :func:`plot_fidelity` draws the rest."""
    _check(table)
    stacks = table[table["quantity"].isin(STACK_QUANTITIES)]
    if stacks.empty:
        raise ValueError("plot_stack_fidelity: the table has no stack rows")
    return _panels(
        stacks, title="Fidelity: published plain passes, predicted by the stacks (out of sample)"
    )


def plot_llamacpp_fidelity(table: pd.DataFrame) -> Figure:
    """llama.cpp's speculative runs on this CPU (:data:`LLAMACPP_FAMILIES` of ``table``):
    predicted against measured per-token latency, one point per cell, y = x and a +/- 25%
    band (the worst-case goal), colour and marker per family."""
    _check(table)
    cells = table[table["family"].isin(LLAMACPP_FAMILIES)]
    if cells.empty:
        raise ValueError("plot_llamacpp_fidelity: the table has no llama.cpp rows")
    fig = _panels(
        cells,
        title="Fidelity: llama.cpp's speculative runs on this CPU, one thread (held out)",
        band=0.25,
        width=6.4,
        ncols=1,
    )
    # Name each model pair once, by its longest draft's cell (anchors "<pair> t<n> k<k>").
    parts = cells["anchor"].str.extract(r"^(?P<pair>\S+) t\d+ k(?P<k>\d+)$")
    pairs = cells.assign(pair=parts["pair"], k=parts["k"].astype(int))
    for pair, g in pairs.groupby("pair", sort=False):
        fig.axes[0].annotate(
            f"{pair}, k {_ks(sorted(set(g['k'])))}",
            (float(g["measured"].max()), float(g["predicted"].max())),
            xytext=(-6, 8),
            textcoords="offset points",
            ha="right",
            fontsize=8,
            color="0.25",
        )
    return fig


def _ks(ks: list[int]) -> str:
    """Draft lengths in words: ``1-8`` when consecutive, else ``1, 2, 4, 8``."""
    if ks == list(range(ks[0], ks[-1] + 1)):
        return f"{ks[0]}-{ks[-1]}"
    return ", ".join(map(str, ks))


def _check(table: pd.DataFrame) -> None:
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"plot_fidelity: expected a pandas DataFrame, got {type(table).__name__}")
    missing = [c for c in _NEEDED if c not in table.columns]
    if missing:
        raise ValueError(f"plot_fidelity: the table lacks column(s) {missing}")
    if table.empty:
        raise ValueError("plot_fidelity: the table is empty")


def _panels(
    table: pd.DataFrame,
    *,
    title: str,
    band: float = _BAND,
    width: float = 5.0,
    ncols: int | None = 2,
) -> Figure:
    quantities = list(dict.fromkeys(table["quantity"]))
    # Eight styles at most: the two model pairs of a family share one, and so do the two
    # directions of Leviathan et al.'s Table 2.
    table = table.assign(
        family=table["family"]
        .str.replace(
            r"^(CPU (?:interleaved )?runs), .* \+ .* \((.*)\)$", r"\1, both pairs (\2)", regex=True
        )
        .str.replace(
            r"^Leviathan Table 2, .*$", "Leviathan Table 2 (fitted on the other task)", regex=True
        )
    )
    styles = style_map(table["family"])
    fig, axes = figure(len(quantities), width=width, height=4.8)
    for ax, q in zip(axes, quantities, strict=True):
        _draw_panel(ax, table[table["quantity"] == q], quantity=q, styles=styles, band=band)
    legend_outside(fig, ncols=ncols)
    fams = "; ".join(str(f) for f in styles)
    return describe(
        fig,
        title=title,
        alt=f"{len(quantities)} log-log scatter panels ({', '.join(map(str, quantities))}) of "
        f"predicted against measured for {len(table)} rows, one colour and marker per family "
        f"({fams}); horizontal bars are the measured 95% or rounding intervals, the dashed "
        f"diagonal is a perfect prediction and the grey band +/- {band:.0%}.",
    )


def _draw_panel(
    ax: Axes,
    d: pd.DataFrame,
    *,
    quantity: Hashable,
    styles: dict[Hashable, Style],
    band: float = _BAND,
) -> None:
    """One quantity's panel: predicted against measured (with the measured interval) per
    family, the diagonal and the +/- band, on log axes with plain 1-2-5 ticks."""
    unit = str(d["unit"].iloc[0])
    for fam, st in styles.items():
        g = d[d["family"] == fam]
        if g.empty:
            continue
        err = np.vstack([g["measured"] - g["measured_low"], g["measured_high"] - g["measured"]])
        ax.errorbar(
            g["measured"],
            g["predicted"],
            xerr=err,
            linestyle="none",
            marker=st.marker,
            color=st.color,
            markersize=5,
            elinewidth=0.8,
            alpha=0.85,
            label=str(fam),
        )
    lo = float(min(d["measured_low"].min(), d["predicted"].min())) * 0.8
    hi = float(max(d["measured_high"].max(), d["predicted"].max())) * 1.25
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(
        xs,
        xs * (1 - band),
        xs * (1 + band),
        color="0.9",
        zorder=0,
        label=f"within +/- {band:.0%}",
    )
    ax.plot(xs, xs, color="0.3", linestyle="--", linewidth=1, label="y = x (exact)")
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel=f"measured {quantity} ({unit})",
        ylabel=f"predicted {quantity} ({unit})",
    )
    for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 ticks as plain numbers: no crowded 10^x labels
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_title(str(quantity), fontsize=10)
