"""The engine study's figures and summary, from its tidy table (``studies/engine.py``).

Per part (paged KV memory, chunked prefill, replicas behind each router): each setting's
p99s with their 95% intervals and goodput with its batch-means interval, plain decoding
hollow, every setting judged against its baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from specsim.plots.figures import describe, figure, legend_outside, style_map

from ._common import fmt, md_table

__all__ = ["PARTS", "MODES", "Z95", "METRICS", "VS", "figures", "summary"]

PARTS: tuple[str, ...] = ("memory", "prefill", "replicas")
MODES: tuple[str, ...] = ("speculative", "plain")
Z95 = 1.959963984540054  # the two-sided 95% normal quantile
METRICS = ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "goodput_per_s")
VS = {m: "vs_" + m.replace("_per_s", "").removesuffix("_s") for m in METRICS}  # vs_ttft_p99


_PANEL_METRICS = {
    "memory": ("ttft_p99_s", "tpot_p99_s"),
    "prefill": ("ttft_p99_s", "tpot_p99_s"),
    "replicas": ("ttft_p99_s", "e2e_p99_s"),
}
_NAMES = {"ttft_p99_s": "p99 TTFT", "tpot_p99_s": "p99 TPOT", "e2e_p99_s": "p99 end-to-end"}


def _points(ax: Axes, d: pd.DataFrame, series: list[tuple[str, str]], styles: Any) -> float:
    """Per (column, mode): a point per variant with its interval (plain hollow); the top."""
    variants = list(dict.fromkeys(d["variant"]))
    at = {v: float(i) for i, v in enumerate(variants)}
    ends = d[[c for m, _ in series for c in (m, m.replace("_s", "_high_s")) if c in d]].to_numpy()
    top = 1.6 * float(ends[np.isfinite(ends)].max())  # an unbounded interval runs to the top
    for k, (metric, mode) in enumerate(series):
        g = d[d["mode"] == mode]
        x = np.array([at[v] for v in g["variant"]]) + 0.12 * (k - (len(series) - 1) / 2)
        y = g[metric].to_numpy(float)
        if metric == "goodput_per_s":
            lo = hi = Z95 * np.nan_to_num(g["goodput_se"].to_numpy(float))
        else:  # an interval without an upper end runs off the panel
            lo = y - g[metric.replace("_s", "_low_s")].clip(lower=0).to_numpy(float)
            hi = np.minimum(g[metric.replace("_s", "_high_s")].to_numpy(float), top) - y
        st = styles[metric]
        ax.errorbar(
            x,
            y,
            yerr=[lo, hi],
            color=st.color,
            marker=st.marker,
            linestyle="none",
            markersize=6,
            capsize=2,
            label=f"{_NAMES.get(metric, 'goodput')}, {mode}",
            markerfacecolor=st.color if mode == "speculative" else "none",
        )
    ax.set_xticks(list(at.values()), variants, rotation=25, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(variants) - 0.4)
    ax.set_xlabel("engine setting")
    ax.set_title(_title(d, str(d["part"].iloc[0])), fontsize=9)
    return top


def _title(d: pd.DataFrame, part: str) -> str:
    r = d.iloc[0]
    name = {"memory": "KV memory", "prefill": "prefill"}.get(part, f"{r['replicas']} replicas")
    return f"{name} ({r['workload']}, {float(r['rate_per_s']):g} requests/s)"


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """p99 latencies with their intervals per variant, a panel per part; then goodput."""
    r0 = df.iloc[0]
    styles = style_map(["ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "goodput_per_s"])
    pair = (
        f"{r0['target']} with {r0['draft']} drafting (gamma = {int(r0['gamma'])}) on "
        f"{int(r0['tensor_parallel'])} x {r0['hardware']} per replica"
    )
    fig, axes = figure(3, width=4.4, height=4.2)
    for ax, part in zip(axes, PARTS, strict=True):
        top = _points(
            ax,
            df[df["part"] == part],
            [(m, mode) for m in _PANEL_METRICS[part] for mode in MODES],
            styles,
        )
        for metric, ls in (("ttft_p99_s", ":"), ("tpot_p99_s", "-.")):
            if metric in _PANEL_METRICS[part] and (slo := float(r0[f"slo_{metric}"])):
                ax.axhline(
                    slo,
                    color=styles[metric].color,
                    linestyle=ls,
                    linewidth=1,
                    label=f"SLO on {_NAMES[metric]} ({slo:g} s)",
                )
        ax.set_yscale("log")
        ax.set_ylim(top=top)
        ax.set_ylabel("p99 latency (s)")
    legend_outside(fig, ncols=4)
    out = {
        "engine_latency": describe(
            fig,
            title=f"Serving engine settings with and without speculation: p99 latencies "
            "with 95% intervals (a bar to the top edge: no upper bound from these requests), "
            f"{pair}",
            alt=f"Three panels of points with 95% interval bars, log scale of seconds, {pair}; "
            "filled markers speculative, hollow plain. Left: p99 time to first token and per "
            "output token for KV reservation and a paged cache, with the card's memory and a "
            "tight budget (paged: recompute or swap). Middle: the same for whole prompts and "
            "chunked prefill budgets on code prompts. Right: p99 time to first token and "
            "end-to-end latency behind each router. Dotted lines mark the SLOs; a bar to the top "
            "edge has no upper bound.",
        )
    }
    fig, axes = figure(3, width=4.4, height=4.0)
    for ax, part in zip(axes, PARTS, strict=True):
        d = df[df["part"] == part]
        top = _points(ax, d, [("goodput_per_s", mode) for mode in MODES], styles)
        rate = float(d["rate_per_s"].iloc[0])
        ax.axhline(rate, color="0.4", linestyle=":", linewidth=1, label="arrival rate")
        ax.set_ylim(0, 1.12 * max(rate, top / 1.6))
        ax.set_ylabel("goodput (requests/s)")
    legend_outside(fig, ncols=3)
    out["engine_goodput"] = describe(
        fig,
        title=f"Goodput (requests per second meeting both "
        f"SLOs) with 95% batch-means intervals, {pair}",
        alt=f"Three panels of goodput in "
        f"requests/s with 1.96-standard-error bars, filled speculative, hollow plain, a dotted "
        f"line at the arrival rate: KV memory, prefill budgets and routers, {pair}.",
    )
    return out


def _iv(r: Any, metric: str) -> str:
    """A p99 with its interval, in ms below one second."""
    scale, unit = (1e3, " ms") if r[metric] < 1 else (1.0, " s")
    p, lo, hi = (scale * r[metric.replace("_s", k)] for k in ("_s", "_low_s", "_high_s"))
    return f"{fmt(p)} [{fmt(lo)}, {fmt(hi)}]{unit}"


def _table(d: pd.DataFrame, metrics: tuple[str, ...], extra: dict[str, str]) -> str:
    rows = []
    for _, r in d.iterrows():
        row = {"setting": r["variant"], "mode": r["mode"]}
        for m in metrics:
            row[_NAMES[m]] = _iv(r, m)
            row[f"{_NAMES[m]} vs baseline"] = r[VS[m]]
        row["goodput (req/s)"] = f"{r['goodput_per_s']:.3f} ± {Z95 * r['goodput_se']:.3f}"
        row["goodput vs baseline"] = r[VS["goodput_per_s"]]
        row.update(
            {
                k: int(r[c]) if isinstance(r[c], float) and r[c].is_integer() else r[c]
                for c, k in extra.items()
            }
        )  # counts that pandas stored as floats
        rows.append(row)
    return md_table(pd.DataFrame(rows))


def summary(df: pd.DataFrame) -> str:
    """A table per part and what each shows, every number from ``df``."""
    r0 = df.iloc[0]
    mem, pre, rep = (df[df["part"] == p] for p in PARTS)
    mem = mem.assign(  # counts with their rate a request, and recomputed tokens with a share
        pre=[
            f"{n} ({p:.3f} ± {Z95 * se:.3f})"
            for n, p, se in zip(
                mem["preemptions"],
                mem["preemptions_per_request"],
                np.nan_to_num(mem["preemptions_per_request_se"]),
                strict=True,
            )
        ],
        rec=[
            f"{n} ({x:.1%})"
            for n, x in zip(mem["recomputed_tokens"], mem["recomputed_share"], strict=True)
        ],
    )
    paged = mem[mem["variant"] == "paged"]
    same = "gives" if paged["same_times_as_reservation"].all() else "does NOT give"
    spec = pre[pre["mode"] == "speculative"]
    gam, most, budgets = (
        spec["mean_gamma"].to_numpy(),
        int(spec["most_positions"].max()),
        spec[spec["token_budget"] > 0],
    )
    cut = np.ptp(gam) > 0 or bool((budgets["most_positions"] > budgets["token_budget"]).any())
    lines = [
        f"### Serving engine settings: {r0['target']} + {r0['draft']} (gamma = "
        f"{int(r0['gamma'])}, alpha = {r0['alpha']:g}) on {int(r0['tensor_parallel'])} x "
        f"{r0['hardware']} per replica; p99s with 95% intervals, goodput ± 1.96 SE (SLO: "
        f"p99 TTFT <= {r0['slo_ttft_p99_s']:g} s, p99 TPOT <= {r0['slo_tpot_p99_s'] * 1e3:g} ms)",
        "",
        f"**KV memory** ({_title(mem, 'memory')}; tight = "
        f"{int(mem['kv_capacity_tokens'].min())} tokens):",
        "",
        _table(
            mem,
            ("ttft_p99_s", "tpot_p99_s"),
            {
                "pre": "preemptions (a request ± 1.96 SE)",
                "rec": "tokens recomputed (of prefill)",
                "swap_s": "swapped out (s)",
            },
        ),
        "",
        f"- Paged KV with the card's memory ({int(paged['kv_capacity_tokens'].iloc[0])} tokens) "
        f"{same} every request the same first-token and finish times as the reservation "
        "model, in both modes.",
        "",
        f"**Chunked prefill** ({_title(pre, 'prefill')}):",
        "",
        _table(
            pre,
            ("ttft_p99_s", "tpot_p99_s"),
            {
                "mean_gamma": "mean gamma",
                "mean_batch": "mean batch",
                "most_positions": "most positions a pass",
            },
        ),
        "",
        "- The lookahead was "
        + (
            "cut where the budget bound: mean gamma " + ", ".join(f"{g:.3f}" for g in gam)
            if cut
            else f"never cut: every setting ran mean gamma {gam[0]:.3f}, since the "
            f"verification positions of a pass (at most {most}) never reached a budget; "
            "prefill chunks take what the positions leave"
        )
        + ".",
        "",
        f"**Replicas** ({_title(rep, 'replicas')}):",
        "",
        _table(
            rep,
            ("ttft_p99_s", "e2e_p99_s"),
            {
                "replica_requests_min": "fewest requests a replica",
                "replica_requests_max": "most",
                "replica_e2e_p99_min_s": "replica p99 e2e min (s)",
                "replica_e2e_p99_max_s": "max (s)",
            },
        ),
        "",
        "Baseline: the first setting of its table (paged, tight: reservation, tight), same "
        "mode; 'beyond noise': the 95% intervals do not overlap (goodput: more than 1.96 "
        "combined standard errors apart); 'undecided': they overlap only through an interval "
        "with no upper bound.",
    ]
    return "\n".join(lines) + "\n"
