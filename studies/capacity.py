"""How many accelerators a service needs, with and without speculative decoding.

For a request rate, a mix of prompt and output lengths (uniform on the given
ranges) and an SLO on the 99th percentiles of time per output token (TPOT) and
time to first token (TTFT), the study runs the capacity search of
:mod:`specsim.capacity` on each accelerator card: the tensor parallelism of one
replica (the smallest power of two whose memory holds the weights and the KV
cache of ``max_batch`` requests of the longest kind, with ``tensor_parallel =
0``, or the configured one), the largest Poisson request rate one replica
sustains at the SLO with and without speculation (a geometric grid of rates,
then bisection), the replicas and accelerators needed for ``rate_per_s``
(checked by simulating one replica at its share) and the rate one accelerator
sustains.

Speculation: ``policy = "adaptive"`` is :class:`specsim.policies.LoadAdaptive`
(the gamma that maximizes expected tokens per second at the current batch,
shrinking as passes turn compute-bound); ``"fixed"`` is ``FixedGamma(gamma)``.
The fast form uses ``fast_policy`` (fixed by default: the adaptive policy
costs about ten times more simulation time).
Assumptions: alpha is assumed, i.i.d.; the draft shares the target's devices;
every request's KV cache is reserved on admission (no preemption).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.capacity import MODES, SLO, search_capacity
from specsim.cards import load_hardware, load_model
from specsim.plots import describe, figure, legend_outside, plot_lines
from specsim.policies import FixedGamma, LoadAdaptive, LookaheadPolicy

from ._common import check_positive, check_positive_int, check_probability, md_table

__all__ = ["Config", "run", "figures", "summary", "MODES"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study capacity --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    draft: str = "llama-3.2-1b"
    hardware: tuple[str, ...] = ("h100-sxm", "h200")
    tensor_parallel: int = 0
    alpha: float = 0.7  # assumed acceptance of the draft
    policy: Literal["adaptive", "fixed"] = "adaptive"
    fast_policy: Literal["adaptive", "fixed"] = (
        "fixed"  # LoadAdaptive costs ~10x more simulation time
    )
    gamma: int = 4
    max_gamma: int = 6
    max_batch: int = 64
    rate_per_s: float = 20.0
    prompt_tokens: tuple[int, int] = (256, 2048)
    output_tokens: tuple[int, int] = (64, 512)
    slo_tpot_p99_s: float = 0.05
    slo_ttft_p99_s: float = 2.0
    rate_min: float = 0.5
    rate_max: float = 32.0
    rates: int = 7
    fast_rates: int = 4
    bisect: int = 4
    fast_bisect: int = 2
    requests: int = 300
    fast_requests: int = 60

    def __post_init__(self) -> None:
        check_probability(self.alpha, "alpha")
        for key in (
            "gamma",
            "max_gamma",
            "max_batch",
            "rates",
            "fast_rates",
            "requests",
            "fast_requests",
        ):
            check_positive_int(getattr(self, key), key)
        for key in ("bisect", "fast_bisect", "tensor_parallel"):
            check_positive_int(getattr(self, key), key, minimum=0)
        for key in ("prompt_tokens", "output_tokens"):
            low, high = getattr(self, key)
            if not 1 <= low <= high:
                raise ValueError(
                    f"{key} must be 'low,high' with 1 <= low <= high, got {(low, high)}"
                )
        for key in ("rate_per_s", "slo_tpot_p99_s", "slo_ttft_p99_s", "rate_min", "rate_max"):
            check_positive(getattr(self, key), key)
        if self.rate_max <= self.rate_min:
            raise ValueError("rate_max must exceed rate_min")


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Rows of kind "probe" (one serving run per rate and mode), "answer" and "check"
    (:func:`specsim.capacity.search_capacity` on each accelerator card)."""
    cfg = config
    target, draft = load_model(cfg.target), load_model(cfg.draft)
    policy_name = cfg.fast_policy if fast else cfg.policy
    policy: LookaheadPolicy = (
        LoadAdaptive(alpha=cfg.alpha, max_gamma=cfg.max_gamma)
        if policy_name == "adaptive"
        else FixedGamma(gamma=cfg.gamma)
    )
    slo = SLO(tpot_p99_s=cfg.slo_tpot_p99_s, ttft_p99_s=cfg.slo_ttft_p99_s)
    rates = np.geomspace(cfg.rate_min, cfg.rate_max, cfg.fast_rates if fast else cfg.rates)
    rows: list[dict[str, Any]] = []
    for hw_name in cfg.hardware:
        rows += search_capacity(
            target=target,
            draft=draft,
            hardware=load_hardware(hw_name),
            policy=policy,
            alpha=cfg.alpha,
            max_gamma=cfg.max_gamma,
            max_batch=cfg.max_batch,
            prompt_tokens=cfg.prompt_tokens,
            output_tokens=cfg.output_tokens,
            slo=slo,
            rates=rates.tolist(),
            bisect=cfg.fast_bisect if fast else cfg.bisect,
            requests=cfg.fast_requests if fast else cfg.requests,
            rate_per_s=cfg.rate_per_s,
            seed=int(rng.integers(2**63 - 1)),  # common random numbers across rates
            tensor_parallel=cfg.tensor_parallel,
            where="study 'capacity'",
        )
    df = pd.DataFrame(rows)
    df["slo_tpot_p99_s"], df["slo_ttft_p99_s"] = slo.tpot_p99_s, slo.ttft_p99_s
    df["alpha"], df["policy"] = cfg.alpha, policy_name
    return df


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """p99 TPOT and TTFT against the load per accelerator, speculative and plain, SLO lines.

    The load is the replica's request rate over its tensor-parallel degree, so that
    cards with replicas of different sizes compare per accelerator.
    """
    pr = df[df["kind"] == "probe"].copy()
    tp = pr.groupby("hardware", sort=False)["tensor_parallel"].first().astype(int)
    pr["rate_per_device"] = pr["rate_per_s"] / pr["tensor_parallel"]
    pr["card"] = [f"{h} (replica of {tp[h]})" for h in pr["hardware"]]
    fig, axes = figure(2, width=5.6)
    for ax, (metric, slo, label) in zip(
        axes,
        (
            ("tpot_p99_s", "slo_tpot_p99_s", "p99 time per output token, TPOT (s)"),
            ("ttft_p99_s", "slo_ttft_p99_s", "p99 time to first token, TTFT (s)"),
        ),
        strict=True,
    ):
        plot_lines(ax, pr, x="rate_per_device", y=metric, hue="card", style="mode")
        ax.axhline(float(df[slo].iloc[0]), color="0.2", linestyle=(0, (1, 2)), linewidth=1.2,
                   label="SLO")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("load per accelerator (requests/s)")
        ax.set_ylabel(label)
    ans = df[df["kind"] == "answer"].dropna(subset=["accelerators"])
    title = "Latency of one replica against load per accelerator, with and without speculation"
    if not ans.empty:
        per_hw = [
            f"{tp[hw]} x {hw} per replica: "
            + ", ".join(f"{int(r.accelerators)} {r.mode}" for r in g.itertuples())
            for hw, g in ans.groupby("hardware", sort=False)
        ]
        title += (
            f"\naccelerators for {ans['rate_per_s'].iloc[0]:g} requests/s: " + "; ".join(per_hw)
        )
    legend_outside(fig, where="right")
    cards = ", ".join(f"{h} with {n} per replica" for h, n in tp.items())
    return {
        "capacity": describe(
            fig,
            title=title,
            alt=f"Two line charts, log-log: p99 time per output token and p99 time to first "
            f"token of one serving replica against the request rate per accelerator, for "
            f"{cards}, speculative (solid) and plain (dashed) decoding; a dotted line marks "
            f"each SLO. A replica meets the SLO where both of its lines lie below the SLO line.",
        )
    }


def summary(df: pd.DataFrame) -> str:
    """The accelerators needed and the rate one accelerator sustains, per card and mode."""
    ans = df[df["kind"] == "answer"]
    r0 = df.iloc[0]
    lines = [
        f"### Capacity at the SLO (p99 TPOT <= {r0['slo_tpot_p99_s'] * 1e3:g} ms, p99 TTFT "
        f"<= {r0['slo_ttft_p99_s']:g} s; alpha = {r0['alpha']:g}, policy {r0['policy']})",
        "",
    ]
    cols = [
        "hardware",
        "tensor_parallel",
        "mode",
        "max_rate_per_replica",
        "rate_per_accelerator",
        "replicas",
        "accelerators",
        "check_meets_slo",
    ]
    lines += [md_table(ans[[c for c in cols if c in ans.columns]]), ""]
    rate = float(ans["rate_per_s"].iloc[0])
    for hw, g in ans.groupby("hardware", sort=False):
        a = g.set_index("mode")
        if a["max_rate_per_replica"].min() <= 0:
            lines.append(f"- {hw}: one replica misses the SLO even at the lowest rate probed.")
            continue
        s, p = a.loc["speculative"], a.loc["plain"]
        lines.append(
            f"- {hw} ({int(s['tensor_parallel'])} per replica): {int(s['accelerators'])} "
            f"accelerators with speculative decoding against {int(p['accelerators'])} without for "
            f"{rate:g} requests/s; one accelerator sustains {s['rate_per_accelerator']:.2f} "
            f"requests/s with it and {p['rate_per_accelerator']:.2f} without."
        )
    return "\n".join(lines) + "\n"
