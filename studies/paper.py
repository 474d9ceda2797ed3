"""The paper reproduced: Leviathan, Kalman & Matias, ICML 2023 (arXiv:2211.17192).

Four parts, one tidy table (column ``part``):

- ``table1``: Table 1 (Section 3.5, c = c_hat = 0): the operations factor and
  the walltime improvement for six (alpha, gamma) pairs, as printed, from the
  closed forms (:func:`specsim.theory.ops_factor`, :func:`walltime_speedup`) and
  from the simulator (i.i.d. acceptance, :class:`specsim.sim.PlainCost`) with
  its standard error;
- ``figure3``: Figure 3, the optimal gamma against alpha for c = 0.01, 0.02,
  0.05, 0.1 (:func:`specsim.theory.optimal_gamma`) and the speedup it buys;
- ``speedup_vs_gamma``: the walltime improvement against gamma for several
  alpha, with c and v(gamma) of a real draft/target pair on a real accelerator
  (T5-small drafting for T5-XXL on a TPU-v4 by default, the paper's set-up):
  Theorem 3.8 (v = 1), the same with the cost model's v(gamma), and the simulator;
- ``table2``: the ``table2`` study (Table 2 predicted by Theorem 3.8 and by
  specsim's full model), included when ``table2`` is true.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.acceptance.processes import IIDAcceptance
from specsim.plots.figures import describe, figure, grouped_bars, legend_outside, plot_lines
from specsim.sim import PlainCost
from specsim.theory import ops_factor, optimal_gamma, walltime_speedup
from specsim.theory.tables import LEVIATHAN_TABLE1

from . import table2 as _table2
from ._common import (
    check_positive_int,
    check_probability,
    md_table,
    plain_cost_from_cards,
    setting,
    stream_metrics,
)

__all__ = ["Config", "TABLE1", "run", "figures", "summary"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study paper --list-keys``); checked on construction."""

    figure3_c: tuple[float, ...] = setting(
        (0.01, 0.02, 0.05, 0.1),
        "cost coefficients c of Figure 3's curves (draft time / target time)",
    )
    alpha_step: float = setting(0.01, "step of the alpha grid of Figure 3", "probability")
    max_gamma: int = 64
    alphas: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9)
    speedup_max_gamma: int = setting(
        10, "the speedup-against-gamma curves run gamma = 1 to this", "tokens"
    )
    target: str = "t5-xxl"
    draft: str = "t5-small"
    hardware: str = "tpu-v4"
    context: int = 64
    tokens: int = 40000
    fast_tokens: int = 8000
    table2: bool = setting(True, "include the table2 study (Table 2 predicted)")

    def __post_init__(self) -> None:
        check_probability(self.alphas, "alphas")
        for key in ("speedup_max_gamma", "max_gamma", "tokens", "fast_tokens"):
            check_positive_int(getattr(self, key), key)
        if not 0.0 < self.alpha_step <= 0.5:
            raise ValueError(f"alpha_step must be in (0, 0.5], got {self.alpha_step!r}")
        if any(c < 0 for c in self.figure3_c):
            raise ValueError(f"figure3_c must be >= 0, got {self.figure3_c!r}")


# Leviathan et al. 2023, Table 1 (Section 3.5): alpha, gamma, operations factor and
# walltime improvement as printed (c = c_hat = 0); the library's copy.
TABLE1: tuple[tuple[float, int, float, float], ...] = LEVIATHAN_TABLE1


def _table1(tokens: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cost = PlainCost(c=0.0, c_hat=0.0)
    for a, g, ops_paper, speed_paper in TABLE1:
        m = stream_metrics(IIDAcceptance(alpha=a), gamma=g, cost=cost, tokens=tokens, rng=rng)
        for quantity, twin, paper, sim, se in (
            ("ops_factor", ops_factor(a, g, 0.0), ops_paper, m["ops_factor"], m["ops_factor_se"]),
            ("speedup", walltime_speedup(a, g, 0.0), speed_paper, m["speedup"], m["speedup_se"]),
        ):
            base = {"part": "table1", "alpha": a, "gamma": g, "c": 0.0, "quantity": quantity}
            rows.append({**base, "method": "paper", "value": paper, "se": 0.0})
            rows.append({**base, "method": "closed form", "value": float(twin), "se": 0.0})
            rows.append({**base, "method": "simulator", "value": float(sim), "se": float(se)})
    return rows


def _figure3(cs: tuple[float, ...], step: float, max_gamma: int) -> list[dict[str, Any]]:
    alphas = np.round(np.arange(0.0, 1.0 + step / 2, step), 10)
    alphas = alphas[alphas < 1.0]  # at alpha = 1 the best gamma is max_gamma: not informative
    rows: list[dict[str, Any]] = []
    for c in cs:
        g = np.asarray(optimal_gamma(alphas, c, max_gamma=max_gamma))
        s = np.asarray(walltime_speedup(alphas, g, c))
        rows += [
            {
                "part": "figure3",
                "alpha": float(a),
                "c": float(c),
                "gamma": int(gg),
                "quantity": "optimal_gamma",
                "method": "closed form",
                "value": float(ss),
                "se": 0.0,
            }
            for a, gg, ss in zip(alphas, g, s, strict=True)
        ]
    return rows


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """All four parts; ``value`` is the quantity named in ``quantity`` (figure3: the speedup
    at the optimal gamma, which is in ``gamma``)."""
    cfg = config
    tokens = int(cfg.fast_tokens if fast else cfg.tokens)
    rows = _table1(tokens, rng)
    rows += _figure3(
        tuple(float(c) for c in cfg.figure3_c), float(cfg.alpha_step), int(cfg.max_gamma)
    )
    gmax = int(cfg.speedup_max_gamma)
    c, v = plain_cost_from_cards(
        target=cfg.target,
        draft=cfg.draft,
        hardware=cfg.hardware,
        context=int(cfg.context),
        max_gamma=gmax,
    )
    pair = f"{cfg.draft} -> {cfg.target} on {cfg.hardware}"
    cost = PlainCost(c=c, v=v)
    for a in cfg.alphas:
        for g in range(1, gmax + 1):
            base = {
                "part": "speedup_vs_gamma",
                "alpha": float(a),
                "gamma": g,
                "c": c,
                "v": v[g],
                "quantity": "speedup",
                "pair": pair,
            }
            m = stream_metrics(
                IIDAcceptance(alpha=float(a)), gamma=g, cost=cost, tokens=tokens, rng=rng
            )
            rows += [
                {
                    **base,
                    "method": "theorem 3.8",
                    "value": float(walltime_speedup(a, g, c)),
                    "se": 0.0,
                },
                {
                    **base,
                    "method": "theorem 3.8 + v",
                    "value": float(walltime_speedup(a, g, c, v[g])),
                    "se": 0.0,
                },
                {
                    **base,
                    "method": "simulator",
                    "value": float(m["speedup"]),
                    "se": float(m["speedup_se"]),
                },
            ]
    df = pd.DataFrame(rows)
    if cfg.table2:
        t2 = _table2.run(_table2.Config(), rng, fast=fast).assign(part="table2")
        df = pd.concat([df, t2], ignore_index=True)
    return df


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Figure 3, speedup against gamma, Table 1 side by side and (if present) Table 2."""
    out: dict[str, Figure] = {}
    f3 = df[df["part"] == "figure3"]
    cs = ", ".join(f"{c:g}" for c in dict.fromkeys(f3["c"]))
    every = max(1, f3.groupby("c").size().max() // 12)  # about a dozen markers a line
    fig, (ax, ax2) = figure(2, width=5.2)
    for a, y, steps in ((ax, "gamma", "steps-post"), (ax2, "value", "default")):
        plot_lines(
            a,
            f3,
            x="alpha",
            y=y,
            hue="c",
            label=lambda c, _: f"c = {c:g}",
            markevery=every,
            markersize=4,
            drawstyle=steps,
        )
        a.set_xlabel("acceptance rate alpha (probability)")
    ax.set_yscale("log", base=2)
    ax.set_ylabel("optimal gamma (draft tokens per block)")
    ax.set_title("optimal gamma", fontsize=10)
    ax2.set_ylabel("walltime improvement at the optimal gamma (x)")
    ax2.set_yscale("log", base=2)
    ax2.set_title("the improvement it buys (Theorem 3.8)", fontsize=10)
    legend_outside(fig, title="cost coefficient")
    out["paper_figure3"] = describe(
        fig,
        title="Figure 3 of Leviathan et al.: the optimal gamma against alpha, per cost "
        "coefficient c",
        alt=f"Two line charts against the acceptance rate alpha, one colour, marker and line "
        f"style per cost coefficient c ({cs}): left, the optimal gamma as a step function on a "
        "log-2 axis, rising with alpha and falling with c; right, the walltime improvement "
        "that gamma buys, on a log-2 axis.",
    )
    sg = df[df["part"] == "speedup_vs_gamma"]
    fig, (ax,) = figure(1, width=8.0, height=5.0)
    theory = sg[sg["method"] != "simulator"]
    plot_lines(
        ax,
        theory,
        x="gamma",
        y="value",
        hue="alpha",
        style="method",
        label=lambda a, m: f"alpha = {a:g}, {m}",
    )
    sim = sg[sg["method"] == "simulator"]
    ax.errorbar(
        sim["gamma"],
        sim["value"],
        yerr=1.96 * sim["se"],
        fmt="none",
        ecolor="0.2",
        elinewidth=1,
        capsize=2,
        zorder=5,
        label="simulator (95% CI)",
    )
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    ax.set_xlabel("gamma (draft tokens per block)")
    ax.set_ylabel("walltime improvement over plain decoding (x)")
    pair = sg["pair"].iloc[0]
    legend_outside(fig, ncols=3)
    alphas = ", ".join(f"{a:g}" for a in dict.fromkeys(sg["alpha"]))
    vmax = float(sg["v"].max())
    same = f"; v(gamma) <= {vmax:.3f}: the theorem lines coincide" if vmax < 1.01 else ""
    out["paper_speedup_vs_gamma"] = describe(
        fig,
        title="Walltime improvement against gamma: Theorem 3.8, Theorem 3.8 with v(gamma), "
        f"simulator\n{pair}, c = {sg['c'].iloc[0]:.3f}{same}",
        alt=f"Line chart of the walltime improvement against gamma for {pair}, one colour and "
        f"marker per alpha ({alphas}); solid lines are Theorem 3.8, dashed lines Theorem 3.8 "
        f"with the cost model's v(gamma){same}, and dark error bars the simulator's 95% "
        "intervals.",
    )
    t1 = df[df["part"] == "table1"].copy()
    t1["case"] = (
        "alpha " + t1["alpha"].astype(str) + "\ngamma " + t1["gamma"].astype(int).astype(str)
    )
    t1["ci"] = 1.96 * t1["se"]
    fig, axes = figure(2, width=5.0)
    names = {"ops_factor": "operations factor (x plain)", "speedup": "walltime improvement (x)"}
    for ax, (quantity, ylabel) in zip(axes, names.items(), strict=True):
        grouped_bars(
            ax,
            t1[t1["quantity"] == quantity],
            category="case",
            value="value",
            hue="method",
            err="ci",
        )
        ax.set_title(ylabel.split(" (")[0], fontsize=10)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("(alpha, gamma) pair of Table 1")
        ax.set_ylabel(ylabel)
    legend_outside(fig)
    out["paper_table1"] = describe(
        fig,
        title="Table 1 of Leviathan et al. (c = c_hat = 0): the paper's values, the closed "
        "forms and the simulator",
        alt=f"Two grouped bar charts over the {t1['case'].nunique()} (alpha, gamma) pairs of "
        "the paper's Table 1: left the operations factor, right the walltime improvement; per "
        "pair one bar each for the paper's printed value, the closed form and the simulator "
        "(with its 95% interval), told apart by colour and hatch.",
    )
    if (df["part"] == "table2").any():
        out.update(_table2.figures(df[df["part"] == "table2"]))
    return out


def summary(df: pd.DataFrame) -> str:
    """Table 1 side by side, Figure 3's extremes, the best gamma per alpha, and Table 2."""
    t1 = (
        df[df["part"] == "table1"]
        .pivot_table(
            index=["alpha", "gamma", "quantity"], columns="method", values="value", sort=False
        )
        .reset_index()
    )
    worst = float((t1["closed form"] - t1["paper"]).abs().max())
    lines = [
        "### Table 1 (c = c_hat = 0)",
        "",
        md_table(t1),
        "",
        f"Largest |closed form - paper| is {worst:.3f} (the paper rounds to 0.01).",
        "",
    ]
    f3 = df[df["part"] == "figure3"]
    lines += ["### Figure 3: optimal gamma", ""]
    for c, g in f3.groupby("c"):
        at = g.set_index("alpha")
        a9 = float(at.index[np.argmin(np.abs(at.index - 0.9))])
        lines.append(
            f"- c = {c:g}: at alpha = {a9:.2f} the best gamma is {int(at.loc[a9, 'gamma'])}"
            f" ({at.loc[a9, 'value']:.2f}x); speculation pays (gamma >= 1) from alpha = "
            f"{float(g.loc[g['gamma'] > 0, 'alpha'].min()):.2f}."
        )
    sg = df[(df["part"] == "speedup_vs_gamma") & (df["method"] == "simulator")]
    th = df[(df["part"] == "speedup_vs_gamma") & (df["method"] == "theorem 3.8 + v")]
    lines += [
        "",
        f"### Walltime improvement against gamma ({sg['pair'].iloc[0]}, c = {sg['c'].iloc[0]:.4f})",
        "",
    ]
    for a, g in sg.groupby("alpha"):
        best = g.loc[g["value"].idxmax()]
        t = th[th["alpha"] == a]
        tb = t.loc[t["value"].idxmax()]
        lines.append(
            f"- alpha = {a:g}: simulator best gamma {int(best['gamma'])} "
            f"({best['value']:.2f} +/- {1.96 * best['se']:.2f}x); closed form best "
            f"{int(tb['gamma'])} ({tb['value']:.2f}x)."
        )
    z = sg.set_index(["alpha", "gamma"])["value"] - th.set_index(["alpha", "gamma"])["value"]
    z = z / sg.set_index(["alpha", "gamma"])["se"]
    lines.append(
        f"- Simulator against closed form: largest |z| = {float(z.abs().max()):.2f} over "
        f"{len(z)} points."
    )
    if (df["part"] == "table2").any():
        lines += ["", _table2.summary(df[df["part"] == "table2"])]
    return "\n".join(lines) + "\n"
