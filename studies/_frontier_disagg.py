"""The frontier study's fourth part, disaggregated against colocated serving on the same
GPUs (``studies/frontier.py`` calls these): the deployment built from the study's
settings, the rows of :func:`specsim.capacity.disagg_layouts.compare_layouts`, the figure
and the summary lines."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.disagg_layouts import compare_layouts
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.plots.figures import describe, figure, legend_outside, plot_lines
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost
from specsim.sim.disagg import DisaggConfig, card_link
from specsim.sim.workload.arrivals import PoissonWorkload

__all__ = ["PART", "disagg_config", "disagg_figure", "disagg_rows", "disagg_summary"]

PART = "disagg"


def disagg_config(cfg: Any) -> DisaggConfig:
    """The part's deployment from the study's ``disagg_*`` settings: one GPU a replica of
    the target with its draft model drafting chains of ``disagg_gamma`` at an i.i.d.
    acceptance ``disagg_alpha``; the prefill replica the target alone; the cache over the
    card's interconnect (the deployment of ``studies/configs/serving-disaggregated.toml``)."""
    hw = load_hardware(cfg.disagg_hardware)
    target = Deployment(target=cfg.disagg_target, hardware=hw)
    return DisaggConfig(
        workload=PoissonWorkload(
            rate_per_s=1.0,
            requests=cfg.disagg_requests,
            prompt_tokens=cfg.disagg_prompt_tokens,
            output_tokens=cfg.disagg_output_tokens,
        ),
        prefill_cost=CardCost(deployment=target),
        decode_cost=CardCost(deployment=target, draft=load_model(cfg.disagg_draft)),
        acceptance=IIDAcceptance(alpha=cfg.disagg_alpha),
        policy=FixedGamma(gamma=cfg.disagg_gamma),
        link=card_link(hw, "interconnect"),
        max_batch=cfg.disagg_max_batch,
        prefill_max_batch=cfg.disagg_prefill_max_batch,
        max_gamma=cfg.disagg_gamma,
    )


def disagg_rows(cfg: Any, *, fast: bool) -> list[dict[str, Any]]:
    """The comparison's rows (``part = "disagg"``, ``series`` the layout and mode); ``fast``
    keeps the first and the last rate and at most 150 requests a run."""
    rates, requests = cfg.disagg_rates, cfg.disagg_requests
    if fast:
        rates, requests = (rates[0], rates[-1]) if len(rates) > 2 else rates, min(requests, 150)
    df = compare_layouts(
        disagg_config(cfg),
        replicas=cfg.disagg_replicas,
        rates_per_s=rates,
        requests=requests,
        prefill_replicas=cfg.disagg_prefill_replicas,
        seed=cfg.disagg_seed,
    )
    df["series"] = [
        "colocated" if lay == "colocated" else f"{p} prefill + {d} decode"
        for lay, p, d in zip(
            df["layout"], df["prefill_replicas"], df["decode_replicas"], strict=True
        )
    ]
    df["part"], df["fits"] = PART, True
    df["deployment"] = f"{cfg.disagg_target} + {cfg.disagg_draft} on {cfg.disagg_hardware}"
    return list(df.to_dict("records"))


_PANELS = (
    ("ttft_p99_s", "TTFT p99 (s)", "log"),
    ("tpot_p99_s", "TPOT p99 (ms)", "linear"),
    ("throughput_tokens_per_s", "output throughput (tokens/s)", "linear"),
)


def disagg_figure(df: pd.DataFrame) -> Figure:
    """TTFT p99, TPOT p99 and throughput against the rate, one colour and marker per layout,
    solid with speculation and dashed without."""
    d = df[df["part"] == PART].copy()
    d["tpot_p99_s"] = d["tpot_p99_s"] * 1e3  # milliseconds on the axis
    fig, axes = figure(3, width=4.6, height=4.0)
    for ax, (key, label, scale) in zip(axes, _PANELS, strict=True):
        plot_lines(ax, d, x="rate_per_s", y=key, hue="series", style="mode")
        ax.set_yscale(scale)
        if scale == "log":  # plain numbers at 1, 2, 5 per decade, not powers of ten
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(sorted(set(d["rate_per_s"])))
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_ylabel(label)
    gpus, where = int(d["gpus"].iloc[0]), d["deployment"].iloc[0]
    legend_outside(fig, ncols=3)
    return describe(
        fig,
        title=f"Disaggregated against colocated on {gpus} GPUs ({where}), with and without "
        "speculation",
        alt="Three line charts against the arrival rate: TTFT p99 (log scale), TPOT p99 in "
        "milliseconds and output throughput, for the colocated layout and each split into "
        "prefill and decode replicas of the same GPUs; each layout has its own colour and "
        "marker, solid lines with speculation and dashed lines without.",
    )


def disagg_summary(df: pd.DataFrame) -> list[str]:
    """Per rate: each layout's TTFT p99 and TPOT p99, speculative then plain."""
    d = df[df["part"] == PART]
    if d.empty:
        return []
    lines = ["", f"Disaggregated against colocated ({int(d['gpus'].iloc[0])} GPUs):", ""]
    for rate, g in d.groupby("rate_per_s", sort=True):
        cells = []
        for series, h in g.groupby("series", sort=False):
            by = h.set_index("mode")
            cells.append(
                f"{series} TTFT p99 {by.at['speculative', 'ttft_p99_s']:.3f} s "
                f"({by.at['plain', 'ttft_p99_s']:.3f} plain), TPOT p99 "
                f"{by.at['speculative', 'tpot_p99_s'] * 1e3:.2f} ms "
                f"({by.at['plain', 'tpot_p99_s'] * 1e3:.2f} plain)"
            )
        lines.append(f"- {rate:g} requests/s: " + "; ".join(cells) + ".")
    return lines
