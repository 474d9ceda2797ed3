"""The capacity study's disaggregated form (``--set disaggregated=true``): per card, how many
prefill and decode replicas the service needs, with and without speculation, by the (P, D)
walk of :mod:`specsim.capacity.disagg`; its rows, figure and summary
(``studies/capacity.py`` calls these)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.capacity.disagg import disagg_capacity, smallest_pools
from specsim.capacity.planner import SLO
from specsim.plots.figures import describe, figure, legend_outside, style_map
from specsim.sim import ServingConfig
from specsim.sim.disagg import DisaggConfig, card_link
from specsim.sim.disagg.from_toml import prefill_cost

from ._common import md_table

__all__ = ["pool_rows", "pool_figures", "pool_summary"]

_MARKERS = {"holds": "o", "undecided": "s", "fails": "x"}


def pool_rows(
    serving: ServingConfig,
    *,
    hardware: Any,
    slo: SLO,
    rate_per_s: float,
    requests: tuple[int, int],
    pools: tuple[int, int],
    seed: int,
) -> list[dict[str, Any]]:
    """The walk's rows on one card: ``serving`` is the decode replica (its prefill replica
    is the same deployment without the draft), the KV cache over the card's interconnect."""
    config = DisaggConfig(
        workload=serving.workload,
        prefill_cost=prefill_cost(serving.cost),  # type: ignore[arg-type]
        decode_cost=serving.cost,
        acceptance=serving.acceptance,
        policy=serving.policy,
        link=card_link(hardware, "interconnect"),
        max_batch=serving.max_batch,
        max_gamma=serving.max_gamma,
    )
    walk = disagg_capacity(
        config,
        rate_per_s=rate_per_s,
        slo=slo,
        requests=requests[0],
        max_requests=requests[1],
        seed=seed,
        max_prefill=pools[0],
        max_decode=pools[1],
    )
    best = smallest_pools(walk)
    chosen = set(zip(best["mode"], best["prefill_replicas"], best["decode_replicas"], strict=True))
    keys = zip(walk["mode"], walk["prefill_replicas"], walk["decode_replicas"], strict=True)
    walk["chosen"] = [k in chosen for k in keys]
    walk["kind"] = "probe"
    walk["hardware"] = hardware.slug
    cost: Any = serving.cost  # a CardCost (the study builds it)
    walk["tensor_parallel"] = int(cost.tensor_parallel)
    walk["target"], walk["draft"] = cost.target.slug, cost.draft.slug
    walk["rate_per_s"] = rate_per_s
    return list(walk.to_dict("records"))


def pool_figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Per card, the (P, D) pairs the walk served: outcome by marker, speculative and plain
    side by side, the pair chosen (fewest GPUs that hold) ringed."""
    cards = list(dict.fromkeys(df["hardware"]))
    fig, axes = figure(len(cards), width=5.6, height=4.4)
    styles = style_map(["speculative", "plain"])
    for ax, card in zip(axes, cards, strict=True):
        g = df[df["hardware"] == card]
        for j, mode in enumerate(("speculative", "plain")):
            m = g[g["mode"] == mode]
            shift = (j - 0.5) * 0.25
            for outcome, marker in _MARKERS.items():
                sub = m[m["outcome"] == outcome]
                if not len(sub):
                    continue
                ax.plot(
                    sub["prefill_replicas"] + shift,
                    sub["decode_replicas"],
                    linestyle="none",
                    marker=marker,
                    color=styles[mode].color,
                    markerfacecolor="none" if mode == "plain" else styles[mode].color,
                    markersize=7,
                    label=f"{mode}: {outcome}",
                )
            best = m[m["chosen"]]
            ax.plot(
                best["prefill_replicas"] + shift,
                best["decode_replicas"],
                linestyle="none",
                marker="h",
                markersize=17,
                markerfacecolor="none",
                color="0.15",
                label="the mode's pair with the fewest GPUs",
            )
        tp = int(g["tensor_parallel"].iloc[0])
        ax.set_title(f"{card} ({tp} per replica)", fontsize=9)
        ax.set_xlabel("prefill replicas P (count)")
        ax.set_ylabel("decode replicas D (count)")
        ax.set_xticks(np.arange(1, int(g["prefill_replicas"].max()) + 1))
        ax.set_yticks(np.arange(1, int(g["decode_replicas"].max()) + 1))
        ax.set_xlim(0.5, int(g["prefill_replicas"].max()) + 0.5)
        ax.set_ylim(0.5, int(g["decode_replicas"].max()) + 0.5)
    legend_outside(fig, where="below", ncols=2 if len(cards) == 1 else 4)
    r0 = df.iloc[0]
    return {
        "capacity_pools": describe(
            fig,
            title=f"Prefill and decode replicas for {float(r0['rate_per_s']):g} requests/s "
            f"(p99 TPOT <= {float(r0['slo_tpot_p99_s']) * 1e3:g} ms, p99 TTFT <= "
            f"{float(r0['slo_ttft_p99_s']):g} s), {r0['target']} with {r0['draft']} drafting",
            alt="One chart per accelerator card: the pairs of prefill replicas (x) and decode "
            "replicas (y) the staircase walk served, a circle where the pair holds the SLO, "
            "a square where it is undecided, a cross where it fails; speculative decoding "
            "and plain decoding side by side in two colours, and a ring around each mode's "
            "pair with the fewest GPUs that holds.",
        )
    }


def pool_summary(df: pd.DataFrame) -> str:
    """Per card and mode, the pair with the fewest GPUs that holds the SLO."""
    r0 = df.iloc[0]
    lines = [
        f"### Disaggregated capacity for {float(r0['rate_per_s']):g} requests/s (p99 TPOT <= "
        f"{float(r0['slo_tpot_p99_s']) * 1e3:g} ms, p99 TTFT <= {float(r0['slo_ttft_p99_s']):g} "
        f"s; alpha = {float(r0['alpha']):g}, policy {r0['policy']})",
        "",
    ]
    chosen = df[df["chosen"]]
    cols = ["hardware", "tensor_parallel", "mode", "prefill_replicas", "decode_replicas", "gpus"]
    cols += ["ttft_p99_s", "tpot_p99_s"]
    lines += [md_table(chosen[cols]) if len(chosen) else "No pair held the SLO.", ""]
    for (hw, mode), g in df.groupby(["hardware", "mode"], sort=False):
        if not g["chosen"].any():
            lines.append(f"- {hw}, {mode}: no pair of the walk held the SLO ({len(g)} served).")
    return "\n".join(lines) + "\n"
