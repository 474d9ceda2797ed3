"""The buried bill: operations per emitted token against serial target calls per token.

Speculative decoding trades arithmetic for latency. Per emitted token it runs
the target on ``(gamma + 1) / E`` positions and the draft ``gamma / E`` times,
so the operations factor is ``(gamma c_hat + gamma + 1) / E`` (Leviathan et al.
2023, Section 3.4, Theorem 3.11), while the serial target calls per token fall
to ``1 / E`` (Sections 3.1 and 3.4), with ``E = (1 - alpha^(gamma+1)) / (1 - alpha)``.

The study evaluates both against alpha and gamma with the closed forms
(:func:`specsim.theory.ops_factor`, :func:`specsim.theory.target_calls_per_token`)
and with the simulator (i.i.d. acceptance, :class:`specsim.sim.PlainCost` with
the same ``c_hat``) side by side, for a negligible draft (``c_hat = 0``) and for
a real draft/target pair, whose ``c_hat`` comes from the cards
(:func:`specsim.costgrid.ops_coefficient`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_model
from specsim.cost import ops_coefficient
from specsim.plots.figures import describe, figure, legend_outside, plot_lines
from specsim.sim import PlainCost
from specsim.theory import ops_factor, target_calls_per_token

from ._common import check_positive_int, check_probability, setting, stream_metrics

__all__ = ["Config", "run", "figures", "summary"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study bill --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    draft: str = "llama-3.2-1b"
    context: int = 1024
    alphas: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
    gammas: tuple[int, ...] = (1, 2, 3, 5, 8)
    mission_alpha: float = setting(
        0.2,
        "acceptance of the example the summary states (five guesses, low agreement)",
        "probability",
    )
    mission_gamma: int = setting(5, "lookahead of the example the summary states", "tokens")
    tokens: int = 40000
    fast_tokens: int = 6000

    def __post_init__(self) -> None:
        check_probability(self.alphas, "alphas")
        check_probability(self.mission_alpha, "mission_alpha")
        for key in ("gammas", "mission_gamma", "tokens", "fast_tokens"):
            check_positive_int(getattr(self, key), key)


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """One row per (draft ops, alpha, gamma, quantity, method)."""
    cfg = config
    tokens = int(cfg.fast_tokens if fast else cfg.tokens)
    c_hat_card = float(
        ops_coefficient(load_model(cfg.draft), load_model(cfg.target), context=int(cfg.context))
    )
    drafts = (("negligible draft", 0.0), (f"{cfg.draft} for {cfg.target}", c_hat_card))
    alphas = sorted({float(a) for a in cfg.alphas} | {float(cfg.mission_alpha)})
    gammas = sorted({int(g) for g in cfg.gammas} | {int(cfg.mission_gamma)})
    rows: list[dict[str, Any]] = []
    for label, c_hat in drafts:
        cost = PlainCost(c=0.0, c_hat=c_hat)
        for g in gammas:
            for a in alphas:
                m = stream_metrics(
                    IIDAcceptance(alpha=a), gamma=g, cost=cost, tokens=tokens, rng=rng
                )
                e, e_se = float(m["tokens_per_target_pass"]), m["tokens_per_target_pass_se"]
                base = {"draft_ops": label, "c_hat": c_hat, "alpha": a, "gamma": g}
                calls_se = np.nan if e_se is None else float(e_se) / e**2
                ops_se = np.nan if m["ops_factor_se"] is None else float(m["ops_factor_se"])
                rows += [
                    {
                        **base,
                        "quantity": "ops_per_token",
                        "method": "closed form",
                        "value": float(ops_factor(a, g, c_hat)),
                        "se": 0.0,
                    },
                    {
                        **base,
                        "quantity": "ops_per_token",
                        "method": "simulator",
                        "value": float(m["ops_factor"]),
                        "se": ops_se,
                    },
                    {
                        **base,
                        "quantity": "target_calls_per_token",
                        "method": "closed form",
                        "value": float(target_calls_per_token(a, g)),
                        "se": 0.0,
                    },
                    {
                        **base,
                        "quantity": "target_calls_per_token",
                        "method": "simulator",
                        "value": float(m["target_calls_per_token"]),
                        "se": calls_se,
                    },
                ]
    df = pd.DataFrame(rows)
    df["mission"] = np.isclose(df["alpha"], float(cfg.mission_alpha)) & (
        df["gamma"] == int(cfg.mission_gamma)
    )
    return df


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Both quantities against alpha: closed form as lines (colour and marker per gamma, line
    style per draft), simulator as dark error bars (95% CIs)."""
    fig, axes = figure(2, width=5.6, height=4.6)
    labels = {
        "ops_per_token": ("operations per emitted token (x plain decoding)", "the bill"),
        "target_calls_per_token": (
            "serial target calls per emitted token (calls)",
            "what it buys (the same whatever the draft costs)",
        ),
    }
    for ax, (quantity, (label, title)) in zip(axes, labels.items(), strict=True):
        d = df[df["quantity"] == quantity]
        cf = d[d["method"] == "closed form"]
        plot_lines(
            ax,
            cf,
            x="alpha",
            y="value",
            hue="gamma",
            style="draft_ops",
            markersize=4,
            label=lambda g, ops: f"gamma = {g}, {ops}",
        )
        sim = d[d["method"] == "simulator"]
        ax.errorbar(
            sim["alpha"],
            sim["value"],
            yerr=1.96 * sim["se"].fillna(0.0),
            fmt="none",
            ecolor="0.15",
            elinewidth=0.9,
            capsize=2,
            zorder=5,
            label="simulator (95% CI)",
        )
        m = cf[cf["mission"] & (cf["c_hat"] == 0.0)]
        if not m.empty:
            r = m.iloc[0]
            ax.annotate(
                f"{r['value']:.2f} (alpha {r['alpha']:g}, gamma {int(r['gamma'])})",
                xy=(r["alpha"], r["value"]),
                xytext=(12, 12),
                textcoords="offset points",
                fontsize=8,
                arrowprops={"arrowstyle": "->", "color": "0.3"},
            )
        ax.axhline(1.0, color="0.5", linewidth=0.8)
        ax.set_xlabel("acceptance rate alpha (probability)")
        ax.set_ylabel(label)
        ax.set_title(title, fontsize=10)
    legend_outside(fig, ncols=3)
    gammas = ", ".join(str(g) for g in dict.fromkeys(df["gamma"]))
    drafts = " and ".join(dict.fromkeys(df["draft_ops"]))
    return {
        "bill": describe(
            fig,
            title="The buried bill: operations per emitted token against serial target calls "
            "per token",
            alt=f"Two line charts against the acceptance rate alpha, one colour and marker per "
            f"gamma ({gammas}) and one line style per draft ({drafts}): left, the operations per "
            "emitted token relative to plain decoding, which fall from gamma + 1 as alpha "
            "rises; right, the serial target calls per emitted token, which fall below 1. "
            "Dark error bars are the simulator's 95% intervals; the arrow marks the mission's "
            "example.",
        )
    }


def summary(df: pd.DataFrame) -> str:
    """The mission's example and the range of the bill, computed from ``df``."""
    lines = ["### The buried bill", ""]
    mission = df[df["mission"]]
    for label, g in mission.groupby("draft_ops", sort=False):
        v = g.set_index(["quantity", "method"])
        ops, ops_sim = (
            v.loc[("ops_per_token", "closed form")],
            v.loc[("ops_per_token", "simulator")],
        )
        calls = v.loc[("target_calls_per_token", "closed form")]
        calls_sim = v.loc[("target_calls_per_token", "simulator")]
        r = g.iloc[0]
        lines.append(
            f"- {label} (c_hat = {r['c_hat']:.4g}), gamma = {int(r['gamma'])}, alpha = "
            f"{r['alpha']:g}: {ops['value']:.2f}x the operations per emitted token (simulator "
            f"{ops_sim['value']:.2f} +/- {1.96 * ops_sim['se']:.2f}), while serial target calls "
            f"fall to {calls['value']:.3f} per token (simulator {calls_sim['value']:.3f} +/- "
            f"{1.96 * calls_sim['se']:.3f}), {1 / calls['value']:.2f}x fewer than plain decoding."
        )
    cf = df[(df["method"] == "closed form") & (df["quantity"] == "ops_per_token")]
    hi = cf.loc[cf["value"].idxmax()]
    lines.append(
        f"- The largest bill in the grid: {hi['value']:.2f}x at alpha = {hi['alpha']:g}, gamma = "
        f"{int(hi['gamma'])} ({hi['draft_ops']}); it approaches gamma + 1 + gamma c_hat as alpha "
        "falls to 0, where nothing is saved."
    )
    sim = df[df["method"] == "simulator"].set_index(["draft_ops", "alpha", "gamma", "quantity"])
    th = df[df["method"] == "closed form"].set_index(["draft_ops", "alpha", "gamma", "quantity"])
    z = ((sim["value"] - th["value"]) / sim["se"]).replace([np.inf, -np.inf], np.nan).dropna()
    lines.append(
        f"- Simulator against closed form: largest |z| = {float(z.abs().max()):.2f} over "
        f"{len(z)} points with a standard error."
    )
    return "\n".join(lines) + "\n"
