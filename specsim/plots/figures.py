"""Figures: tidy DataFrames in, matplotlib Figures out, every one readable in grey.

Every function takes a DataFrame (built elsewhere, e.g. :mod:`specsim.cost.frames`)
and returns a :class:`matplotlib.figure.Figure` drawn on the non-interactive Agg
canvas. Nothing here computes model quantities, opens windows or writes files:
the caller saves (``fig.savefig(path)``). Figures are made with
``matplotlib.figure.Figure`` directly, not pyplot, so no global figure state is
kept and no backend is switched.

The habits every figure keeps, here and in the studies (``studies/``):

- :func:`figure` is the one way a figure is made (canvas, layout, size);
- each compared series gets a colour *and* a second cue, so it survives
  grey-scale printing: :data:`STYLE_CYCLE` pairs a colour-blind-safe colour
  with a marker and a line style (:func:`style_map` gives one per level),
  :data:`LINESTYLES` tell a second factor apart and :func:`grouped_bars`
  hatches bars; :func:`plot_lines` draws one line per level this way;
- legends sit outside the data (:func:`legend_outside`);
- :func:`describe` gives the figure a title saying what is compared and alt
  text saying what it shows (:func:`set_alt_text`, read back by
  :func:`alt_text`; the report puts it in the image's ``alt``).

Sections: habits, validation. The cost model's and the calibration's figures are in
:mod:`specsim.plots.cost`, the fidelity table's in :mod:`specsim.plots.fidelity`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple

__all__ = [
    "figure",
    "Style",
    "STYLE_CYCLE",
    "LINESTYLES",
    "style_map",
    "require_columns",
    "plot_lines",
    "grouped_bars",
    "legend_outside",
    "describe",
    "set_alt_text",
    "alt_text",
    "ALT_TEXT_ATTR",
    "plot_validation_z",
]

ALT_TEXT_ATTR = "_specsim_alt_text"
"""The Figure attribute holding its alt text (use :func:`set_alt_text`, :func:`alt_text`)."""


@dataclass(frozen=True)
class Style:
    """How one series is drawn: a colour and two cues that survive grey-scale printing."""

    color: str
    marker: str
    linestyle: str | tuple[int, tuple[int, ...]]
    hatch: str

    def line(self) -> dict[str, Any]:
        """Keyword arguments of ``Axes.plot`` / ``Axes.errorbar`` for this style."""
        return {"color": self.color, "marker": self.marker, "linestyle": self.linestyle}


# Okabe & Ito's colour-blind-safe palette (yellow swapped for grey: too pale on white).
_COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES: tuple[str | tuple[int, tuple[int, ...]], ...] = (
    "-",
    "--",
    "-.",
    ":",
    (0, (5, 1)),
    (0, (3, 1, 1, 1, 1, 1)),
    (0, (1, 1)),
    (0, (8, 3)),
)
"""Line styles, told apart in grey; :func:`plot_lines` uses them for a second factor."""
_HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")
STYLE_CYCLE: tuple[Style, ...] = tuple(
    Style(c, m, ls, h) for c, m, ls, h in zip(_COLORS, _MARKERS, LINESTYLES, _HATCHES, strict=True)
)
"""Eight styles that differ pairwise in colour, marker, line style and hatch."""


def style_map(levels: Iterable[Hashable]) -> dict[Hashable, Style]:
    """One :data:`STYLE_CYCLE` entry per distinct level, in order of first appearance."""
    keys = list(dict.fromkeys(levels))
    if len(keys) > len(STYLE_CYCLE):
        raise ValueError(
            f"style_map: {len(keys)} levels, but only {len(STYLE_CYCLE)} distinct "
            "styles; split the figure or group the levels"
        )
    return dict(zip(keys, STYLE_CYCLE, strict=False))


def require_columns(df: pd.DataFrame, columns: Iterable[str], where: str) -> None:
    """TypeError unless ``df`` is a DataFrame; ValueError, starting with ``where``, when it
    lacks one of ``columns`` or is empty."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{where}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: DataFrame lacks column(s) {missing}; it has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{where}: the DataFrame is empty")


def figure(ncols: int = 1, *, width: float = 6.4, height: float = 4.4) -> tuple[Figure, list[Axes]]:
    """A figure on the Agg canvas (no pyplot state) with ``ncols`` axes side by side,
    each ``width`` x ``height`` inches, constrained layout."""
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)  # Agg canvas: savefig works without pyplot
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def plot_lines(
    ax: Axes,
    df: pd.DataFrame,
    *,
    x: str,
    y: str,
    hue: str,
    style: str | None = None,
    label: Callable[[Any, Any], str] | None = None,
    markersize: float = 5.0,
    markevery: int | None = None,
    drawstyle: str = "default",
    hollow: Collection[Any] = (),
) -> None:
    """One line per level of ``hue`` (and of ``style``), sorted by ``x``.

    Colour and marker follow ``hue`` (:func:`style_map`); the line style follows
    ``style`` when given (:data:`LINESTYLES`), else ``hue`` too; the levels of ``style``
    in ``hollow`` have hollow markers. ``label(h, s)`` names each line (default ``"h"`` or
    ``"h, s"``).
    """
    require_columns(df, [c for c in (x, y, hue, style) if c is not None], "plot_lines")
    hues = style_map(df[hue])
    styles = list(dict.fromkeys(df[style])) if style is not None else [None]
    for h, st in hues.items():
        for j, s in enumerate(styles):
            d = df[df[hue] == h] if s is None else df[(df[hue] == h) & (df[style] == s)]
            if d.empty:
                continue
            d = d.sort_values(x)
            name = label(h, s) if label is not None else (f"{h}" if s is None else f"{h}, {s}")
            kw = st.line()
            if s is not None:
                kw["linestyle"] = LINESTYLES[j % len(LINESTYLES)]
                if s in hollow:
                    kw["markerfacecolor"] = "none"
            ax.plot(
                d[x],
                d[y],
                label=name,
                markersize=markersize,
                markevery=markevery,
                drawstyle=drawstyle,
                linewidth=1.4,
                **kw,
            )


def grouped_bars(
    ax: Axes,
    df: pd.DataFrame,
    *,
    category: str,
    value: str,
    hue: str,
    err: str | None = None,
    horizontal: bool = False,
) -> None:
    """Bars of ``value`` per ``category``, one bar per ``hue`` level side by side.

    Each hue level has its own colour and hatch (:data:`STYLE_CYCLE`); ``err``
    names a column of error-bar half-widths. Categories keep their order of first
    appearance (the first at the top when ``horizontal``).
    """
    require_columns(df, [c for c in (category, value, hue, err) if c is not None], "grouped_bars")
    cats = list(dict.fromkeys(df[category]))
    hues = style_map(df[hue])
    width = 0.8 / len(hues)
    pos = {c: float(i) for i, c in enumerate(cats)}
    for k, (h, st) in enumerate(hues.items()):
        d = df[df[hue] == h]
        at = np.array([pos[c] for c in d[category]]) - 0.4 + width * (k + 0.5)
        e = None if err is None else d[err].to_numpy(dtype=float)
        common: dict[str, Any] = {
            "color": st.color,
            "hatch": st.hatch,
            "edgecolor": "0.15",
            "linewidth": 0.6,
            "label": str(h),
        }
        if horizontal:
            ax.barh(at, d[value], height=width, xerr=e, **common)
        else:
            ax.bar(at, d[value], width=width, yerr=e, **common)
    (ax.set_yticks if horizontal else ax.set_xticks)(list(pos.values()), [str(c) for c in cats])
    if horizontal:
        ax.set_ylim(len(cats) - 0.5, -0.5)  # the first category at the top


def legend_outside(
    fig: Figure,
    *,
    title: str | None = None,
    ncols: int | None = None,
    where: Literal["below", "right"] = "below",
) -> None:
    """One legend for the whole figure, outside every axes (below them or to their right),
    from the labelled artists of all axes; axes legends are removed.

    Each label appears once; where one label names artists of different kinds (a marker
    in one panel, a hatched bar in another), its entry shows them side by side.
    """
    handles: dict[str, list[Any]] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            kinds = [type(k) for k in handles.setdefault(lab, [])]
            if not lab.startswith("_") and type(h) not in kinds:
                handles[lab].append(h)
        old = ax.get_legend()
        if old is not None:
            old.remove()
    if not (handles := {k: v for k, v in handles.items() if v}):
        return
    n = ncols if ncols is not None else (1 if where == "right" else min(len(handles), 4))
    loc: Literal["outside right center", "outside lower center"] = (
        "outside right center" if where == "right" else "outside lower center"
    )
    entries: list[Any] = [h[0] if len(h) == 1 else tuple(h) for h in handles.values()]
    # Side-by-side handles share one handle's length: lengthen it so that each keeps room
    # for its dashes (a dashed line squeezed to a marker's width reads as solid).
    parts = max(len(h) for h in handles.values())
    fig.legend(
        entries,
        list(handles),
        loc=loc,
        ncols=n,
        title=title,
        fontsize=8,
        title_fontsize=8,
        frameon=False,
        handlelength=2.5 * parts,
        handler_map={tuple: HandlerTuple(ndivide=None, pad=0.6)},
    )


def set_alt_text(fig: Figure, text: str) -> Figure:
    """Attach alt text (what the figure shows, in words) to ``fig``; returns ``fig``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"set_alt_text: expected a non-empty string, got {text!r}")
    setattr(fig, ALT_TEXT_ATTR, " ".join(text.split()))
    return fig


def alt_text(fig: Figure) -> str | None:
    """The alt text attached by :func:`set_alt_text`, or None."""
    text = getattr(fig, ALT_TEXT_ATTR, None)
    return text if isinstance(text, str) else None


def describe(fig: Figure, *, title: str, alt: str) -> Figure:
    """Title the figure with what it compares (a suptitle, wrapped to the figure's width)
    and attach its alt text."""
    chars = max(30, int(fig.get_figwidth() * 12))  # about 12 characters an inch at 11 pt
    lines = [textwrap.fill(line, chars) for line in title.splitlines()]
    fig.suptitle("\n".join(lines), fontsize=11)
    return set_alt_text(fig, alt)


# Validation ------------------------------------------------------------------------------
def plot_validation_z(checks: pd.DataFrame, *, limit: float) -> Figure:
    """z of every check of :func:`specsim.validate.forms.check_grid`, grouped by quantity.

    The x axis holds one group of checks per quantity (inside a group: the grid
    order, alpha, then gamma, then c), each quantity with its own colour and
    marker; the shaded band is ``+/- limit``, inside which a check passes.
    """
    require_columns(checks, ("alpha", "gamma", "c", "quantity", "z"), "plot_validation_z")
    fig, (ax,) = figure(width=9.0, height=4.0)
    ax.axhspan(-limit, limit, color="0.88", zorder=0, label=f"pass band, |z| <= {limit:g}")
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    styles = style_map(checks["quantity"])
    gap = max(2, len(checks) // (10 * len(styles)))
    start, centres = 0, []
    for k, (q, st) in enumerate(styles.items()):
        z = checks.loc[checks["quantity"] == q, "z"].to_numpy(dtype=float)
        ax.plot(
            start + np.arange(len(z)),
            z,
            linestyle="none",
            marker=st.marker,
            color=st.color,
            markersize=4,
            label=str(q).replace("_", " "),
        )
        centres.append(start + (len(z) - 1) / 2)
        start += len(z) + gap
        if k < len(styles) - 1:
            ax.axvline(start - (gap + 1) / 2, color="0.6", linewidth=0.6)
    ax.set_xticks(centres, [str(q).replace("_", " ") for q in styles])
    top = max(float(checks["z"].abs().max()), limit) * 1.15
    ax.set_ylim(-top, top)
    ax.set_xlabel("check, grouped by quantity (in a group: alpha, then gamma, then c)")
    ax.set_ylabel("z (standard errors)")
    legend_outside(fig, where="right")
    failed = int((checks["z"].abs() > limit).sum())
    zs = {
        str(q).replace("_", " "): checks.loc[checks["quantity"] == q, "z"].to_numpy(float)
        for q in styles
    }
    names = list(zs)
    same = [
        f"{a} and {b}"
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if zs[a].shape == zs[b].shape and np.allclose(zs[a], zs[b])
    ]
    note = f"{'; '.join(same)} have the same z (one estimator, a fixed factor apart)"
    return describe(
        fig,
        title="Closed forms against the simulator: z = (simulated - formula) / standard error"
        + (f"\n{note}" if same else ""),
        alt=f"Scatter plot of z, in standard errors, for {len(checks)} checks over the alpha, "
        f"gamma and c grid, grouped along the x axis by quantity "
        f"({', '.join(str(q).replace('_', ' ') for q in styles)}), each with its own colour "
        f"and marker; a grey band marks the pass region |z| <= {limit:g}; {failed} checks "
        f"fall outside it; the largest |z| is {float(checks['z'].abs().max()):.2f}."
        + (f" {note[0].upper()}{note[1:]}." if same else ""),
    )
