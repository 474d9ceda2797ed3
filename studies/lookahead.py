"""Lookahead chosen per token instead of fixed for a whole run.

Five ways to pick gamma, on the single-stream simulator with the cost model of
real cards (:class:`specsim.sim.CardCost`; Llama-3.1-70B drafted by Llama-3.2-1B
on two H200s by default), under i.i.d. acceptance and under Markov-modulated
acceptance with the same mean (easy and hard stretches):

- **fixed**: one gamma for the whole run (``fixed_gamma``);
- **best static (theory)**: :class:`specsim.policies.lookahead.OptimalStatic`, the gamma
  that maximizes Theorem 3.8 for the mean alpha and the cards' c
  (Leviathan et al. 2023, Section 3.5); **best static (searched)**: the fixed
  gamma in ``1..search_max_gamma`` with the most tokens/s in this very run;
- **adaptive per token**: :class:`specsim.policies.lookahead.ConfidenceThreshold`, stop
  drafting when the draft's confidence drops below a threshold (SpecDec++-like);
- **+2/-1 heuristic**: :class:`specsim.policies.lookahead.HeuristicPlusTwoMinusOne`,
  Hugging Face assisted generation's schedule;
- **oracle**: :class:`specsim.policies.lookahead.Oracle`, which knows the future.

Every policy sees the same acceptance draws (common random numbers per
stream), so differences are paired; the standard errors are over streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.acceptance.processes import AcceptanceProcess, IIDAcceptance, MarkovAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.plots.figures import describe, figure, grouped_bars, legend_outside
from specsim.policies.lookahead import (
    ConfidenceThreshold,
    FixedGamma,
    HeuristicPlusTwoMinusOne,
    LookaheadPolicy,
    OptimalStatic,
    Oracle,
)
from specsim.sim import CardCost, StreamConfig, simulate_stream

from ._common import check_positive_int, check_probability, md_table, mean_se, setting

__all__ = ["Config", "run", "figures", "summary", "METRICS"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study lookahead --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    draft: str = "llama-3.2-1b"
    hardware: str = "h200"
    tensor_parallel: int = 2
    prompt: int = 512
    tokens: int = 1024
    streams: int = 24
    fast_streams: int = 6
    alpha: float = 0.75
    spread: float = setting(
        0.2, "Markov acceptance: the states are alpha +/- spread", "probability"
    )
    persistence: float = 0.95
    fixed_gamma: int = setting(5, "gamma of the fixed policy", "tokens")
    search_max_gamma: int = setting(
        10, "the searched best static gamma runs over 1 to this", "tokens"
    )
    threshold: float = setting(
        0.6, "confidence threshold of the adaptive policy: drafting stops below it", "probability"
    )
    threshold_max_gamma: int = setting(
        8, "most draft tokens the adaptive policy proposes", "tokens"
    )
    heuristic_initial: int = setting(20, "first gamma of the +2/-1 heuristic", "tokens")
    oracle_max_gamma: int = setting(16, "most draft tokens the oracle proposes", "tokens")

    def __post_init__(self) -> None:
        check_probability(
            [self.alpha, self.threshold, self.persistence], "alpha, threshold and persistence"
        )
        for key in (
            "tokens",
            "streams",
            "fast_streams",
            "fixed_gamma",
            "search_max_gamma",
            "threshold_max_gamma",
            "heuristic_initial",
            "oracle_max_gamma",
            "tensor_parallel",
        ):
            check_positive_int(getattr(self, key), key)
        check_positive_int(self.prompt, "prompt", minimum=0)
        for key in ("streams", "fast_streams"):
            if getattr(self, key) < 2:
                raise ValueError(
                    f"{key}: need at least 2 streams for an error, got {getattr(self, key)}"
                )


METRICS = ("tokens_per_s", "speedup", "energy_j_per_token", "energy_wasted_share", "mean_gamma")


def _metrics(cfg: StreamConfig, seed: int) -> dict[str, float]:
    m = simulate_stream(cfg, np.random.default_rng(seed)).metrics()
    return {
        "tokens_per_s": float(m["tokens_per_s"]),
        "speedup": float(m["speedup"]),
        "energy_j_per_token": float(m["energy_j_per_token"]),
        "baseline_energy_j_per_token": float(m["baseline_energy_j_per_token"]),
        "energy_wasted_share": float(m["energy_j_wasted"]) / float(m["energy_j"]),
        "mean_gamma": float(m["mean_gamma"]),
    }


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """One row per (acceptance, policy, stream)."""
    cfg = config
    streams = int(cfg.fast_streams if fast else cfg.streams)
    target, draft = load_model(cfg.target), load_model(cfg.draft)
    hw = load_hardware(cfg.hardware)
    cost = CardCost(
        deployment=Deployment(target=target, hardware=hw, tensor_parallel=int(cfg.tensor_parallel)),
        draft=draft,
    )
    tokens, prompt, alpha = int(cfg.tokens), int(cfg.prompt), float(cfg.alpha)
    # c as the simulator sees it: a draft step over a target step at the mid-run context.
    mid = cost.blocks(np.zeros(1, dtype=np.int64), np.array([prompt + tokens // 2]))
    c = float(mid.draft_time[0] / mid.verify_time[0])
    processes: dict[str, AcceptanceProcess] = {
        "i.i.d.": IIDAcceptance(alpha=alpha),
        "Markov-modulated": MarkovAcceptance.two_state(
            mean=alpha, spread=float(cfg.spread), persistence=float(cfg.persistence)
        ),
    }
    policies: dict[str, LookaheadPolicy] = {
        f"fixed (gamma = {int(cfg.fixed_gamma)})": FixedGamma(gamma=int(cfg.fixed_gamma)),
        "best static (theory)": OptimalStatic(alpha=alpha, c=c),  # the library's max_gamma
        "adaptive per token": ConfidenceThreshold(
            threshold=float(cfg.threshold), max_gamma=int(cfg.threshold_max_gamma)
        ),
        "+2/-1 heuristic": HeuristicPlusTwoMinusOne(initial=int(cfg.heuristic_initial)),
        "oracle": Oracle(max_gamma=int(cfg.oracle_max_gamma)),
    }
    rows: list[dict[str, Any]] = []
    for acc_name, acc in processes.items():
        seeds = rng.integers(2**63 - 1, size=streams)  # the same draws for every policy

        def one(
            policy: LookaheadPolicy,
            s: int,
            acc: AcceptanceProcess = acc,
            seeds: np.ndarray = seeds,
        ) -> dict[str, float]:
            sc = StreamConfig(  # max_gamma: the simulator's default, above every cap here
                tokens=tokens, prompt=prompt, acceptance=acc, policy=policy, cost=cost
            )
            return _metrics(sc, int(seeds[s]))

        search = {
            g: [one(FixedGamma(gamma=g), s) for s in range(streams)]
            for g in range(1, int(cfg.search_max_gamma) + 1)
        }
        best_g = max(search, key=lambda g: np.mean([r["tokens_per_s"] for r in search[g]]))
        results = {name: [one(p, s) for s in range(streams)] for name, p in policies.items()}
        results["best static (searched)"] = search[best_g]
        for name, per_stream in results.items():
            for s, m in enumerate(per_stream):
                rows.append(
                    {
                        "acceptance": acc_name,
                        "policy": name,
                        "stream": s,
                        "alpha": alpha,
                        "c": c,
                        "searched_gamma": best_g,
                        **m,
                    }
                )
    return pd.DataFrame(rows)


def _aggregate(df: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (acc, pol), g in df.groupby(["acceptance", "policy"], sort=False):
        row: dict[str, Any] = {"acceptance": acc, "policy": pol}
        for m in (
            "tokens_per_s",
            "speedup",
            "energy_j_per_token",
            "energy_wasted_share",
            "mean_gamma",
        ):
            row[m], row[f"{m}_se"] = mean_se(g[m].to_numpy())
        out.append(row)
    return pd.DataFrame(out)


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Tokens/s and J/token per policy, i.i.d. and Markov side by side (bars: 95% CIs)."""
    agg = _aggregate(df)
    fig, axes = figure(2, width=5.6, height=4.8)
    for ax, (metric, label) in zip(
        axes,
        (
            ("tokens_per_s", "throughput of one stream (tokens/s)"),
            ("energy_j_per_token", "energy per token (J)"),
        ),
        strict=True,
    ):
        bars = agg.assign(ci=1.96 * agg[f"{metric}_se"])
        grouped_bars(
            ax, bars, category="policy", value=metric, hue="acceptance", err="ci", horizontal=True
        )
        ax.set_xlabel(label)
        ax.set_ylabel("lookahead policy")
    base = df["baseline_energy_j_per_token"].mean()
    axes[1].axvline(
        base,
        color="0.2",
        linestyle=(0, (4, 2)),
        linewidth=1.2,
        label=f"plain decoding ({base:.2f} J/token)",
    )
    axes[0].set_title("throughput", fontsize=10)
    axes[1].set_title("energy", fontsize=10)
    legend_outside(fig, ncols=3)
    r0 = df.iloc[0]
    return {
        "lookahead": describe(
            fig,
            title=f"Lookahead policies on one stream: throughput and energy, i.i.d. against "
            f"Markov-modulated acceptance\n(alpha = {r0['alpha']:g}, c = {r0['c']:.3f})",
            alt=f"Two horizontal grouped bar charts over {agg['policy'].nunique()} lookahead "
            "policies: left the tokens per second of one stream, right the joules per token, "
            "one bar per acceptance process (i.i.d. and Markov-modulated, told apart by colour "
            "and hatch) with 95% intervals over streams; a dashed line marks plain decoding's "
            "energy per token.",
        )
    }


def summary(df: pd.DataFrame) -> str:
    """Per acceptance: each policy's tokens/s, speedup and J/token; the best and the oracle gap."""
    agg = _aggregate(df)
    r0 = df.iloc[0]
    lines = [f"### Lookahead policies (alpha = {r0['alpha']:g}, c = {r0['c']:.3f})", ""]
    show = agg[
        [
            "acceptance",
            "policy",
            "tokens_per_s",
            "tokens_per_s_se",
            "speedup",
            "energy_j_per_token",
            "energy_wasted_share",
            "mean_gamma",
        ]
    ]
    lines += [md_table(show), ""]
    for acc, g in agg.groupby("acceptance", sort=False):
        real = g[g["policy"] != "oracle"]
        best = real.loc[real["tokens_per_s"].idxmax()]
        oracle = g[g["policy"] == "oracle"].iloc[0]
        searched = int(df.loc[df["acceptance"] == acc, "searched_gamma"].iloc[0])
        theory = g[g["policy"] == "best static (theory)"].iloc[0]
        lines.append(
            f"- {acc}: best non-oracle policy is {best['policy']} at {best['tokens_per_s']:.1f} "
            f"+/- {1.96 * best['tokens_per_s_se']:.1f} tokens/s ({best['energy_j_per_token']:.3f} "
            f"J/token); the theory's static gamma gets {theory['tokens_per_s']:.1f} (the best "
            f"static gamma by search is {searched}); the oracle "
            f"{oracle['tokens_per_s']:.1f} ({oracle['tokens_per_s'] / best['tokens_per_s']:.2f}x "
            "the best)."
        )
    return "\n".join(lines) + "\n"
