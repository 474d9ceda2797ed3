"""How many accelerators a service needs, with and without speculative decoding.

For a request rate, a mix of prompt and output lengths (uniform on the given
ranges) and an SLO on the 99th percentiles of time per output token (TPOT) and
time to first token (TTFT), the study finds, on each accelerator card:

1. the tensor parallelism of one replica: the smallest power of two whose
   memory holds the weights and the KV cache of ``max_batch`` requests of the
   longest kind (``tensor_parallel = 0``; a ValueError when not even 16 devices
   hold them), or the configured one;
2. the largest Poisson request rate one replica sustains at the SLO, with and
   without speculation (:func:`specsim.sim.simulate_serving` serves each
   workload both ways in one run, with common random numbers across rates): a
   geometric grid of rates, then bisection on the last interval;
3. the replicas (and accelerators, replicas x tensor parallelism) needed for
   ``rate_per_s``, assuming a load balancer that splits the Poisson stream
   evenly (a split Poisson stream is Poisson), checked by simulating one
   replica at its share; and the rate one accelerator sustains.

Speculation: ``policy = "adaptive"`` is :class:`specsim.policies.LoadAdaptive`
(the gamma that maximizes expected tokens per second at the current batch,
shrinking as passes turn compute-bound); ``"fixed"`` is ``FixedGamma(gamma)``.
The fast form uses ``fast_policy`` (fixed by default: the adaptive policy
costs about ten times more simulation time).
Assumptions: alpha is assumed, i.i.d.; the draft shares the target's devices;
every request's KV cache is reserved on admission (no preemption).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from specsim.acceptance import IIDAcceptance
from specsim.cards import HardwareCard, load_hardware, load_model
from specsim.policies import FixedGamma, LoadAdaptive, LookaheadPolicy
from specsim.sim import CardCost, PoissonWorkload, ServingConfig, simulate_serving

from ._common import check_positive_int, check_probability, figure, md_table, smallest_tp
from ._common import config as _config

__all__ = ["DEFAULTS", "run", "figures", "summary", "MODES"]

DEFAULTS: dict[str, Any] = {
    "target": "llama-3.1-70b",
    "draft": "llama-3.2-1b",
    "hardware": ("h100-sxm", "h200"),
    "tensor_parallel": 0,
    "alpha": 0.7,  # assumed acceptance of the draft
    "policy": "adaptive",
    "fast_policy": "fixed",  # LoadAdaptive costs ~10x more simulation time
    "gamma": 4,
    "max_gamma": 6,
    "max_batch": 64,
    "rate_per_s": 20.0,
    "prompt_tokens": (256, 2048),
    "output_tokens": (64, 512),
    "slo_tpot_p99_s": 0.05,
    "slo_ttft_p99_s": 2.0,
    "rate_min": 0.5,
    "rate_max": 32.0,
    "rates": 7,
    "fast_rates": 4,
    "bisect": 4,
    "fast_bisect": 2,
    "requests": 300,
    "fast_requests": 60,
}
MODES = ("speculative", "plain")


def _check(cfg: dict[str, Any]) -> None:
    check_probability(cfg["alpha"], "alpha", "capacity")
    for key in (
        "gamma",
        "max_gamma",
        "max_batch",
        "rates",
        "fast_rates",
        "requests",
        "fast_requests",
    ):
        check_positive_int(cfg[key], key, "capacity")
    for key in ("bisect", "fast_bisect", "tensor_parallel"):
        check_positive_int(cfg[key], key, "capacity", minimum=0)
    for key in ("prompt_tokens", "output_tokens"):
        v = cfg[key]
        if len(v) != 2 or int(v[0]) < 1 or int(v[1]) < int(v[0]):
            raise ValueError(
                f"study 'capacity': {key} must be 'low,high' with 1 <= low <= high, got {v!r}"
            )
    for key in ("rate_per_s", "slo_tpot_p99_s", "slo_ttft_p99_s", "rate_min", "rate_max"):
        if not float(cfg[key]) > 0:
            raise ValueError(f"study 'capacity': {key} must be > 0, got {cfg[key]!r}")
    if float(cfg["rate_max"]) <= float(cfg["rate_min"]):
        raise ValueError("study 'capacity': rate_max must exceed rate_min")
    for key in ("policy", "fast_policy"):
        if cfg[key] not in ("adaptive", "fixed"):
            raise ValueError(
                f"study 'capacity': {key} must be 'adaptive' or 'fixed', got {cfg[key]!r}"
            )


def run(
    config: dict[str, Any] | None, rng: np.random.Generator, *, fast: bool = False
) -> pd.DataFrame:
    """Rows of kind "probe" (one serving run per rate and mode), "answer" and "check"."""
    cfg = _config(DEFAULTS, config, "capacity")
    _check(cfg)
    target, draft = load_model(cfg["target"]), load_model(cfg["draft"])
    alpha, gmax = float(cfg["alpha"]), int(cfg["max_gamma"])
    policy_name = str(cfg["fast_policy"] if fast else cfg["policy"])
    policy: LookaheadPolicy = (
        LoadAdaptive(alpha=alpha, max_gamma=gmax)
        if policy_name == "adaptive"
        else FixedGamma(gamma=int(cfg["gamma"]))
    )
    prompt = (int(cfg["prompt_tokens"][0]), int(cfg["prompt_tokens"][1]))
    output = (int(cfg["output_tokens"][0]), int(cfg["output_tokens"][1]))
    requests = int(cfg["fast_requests"] if fast else cfg["requests"])
    n_rates = int(cfg["fast_rates"] if fast else cfg["rates"])
    steps = int(cfg["fast_bisect"] if fast else cfg["bisect"])
    grid = np.geomspace(float(cfg["rate_min"]), float(cfg["rate_max"]), n_rates)
    slo_tpot, slo_ttft = float(cfg["slo_tpot_p99_s"]), float(cfg["slo_ttft_p99_s"])
    need = int(cfg["max_batch"]) * (prompt[1] + output[1] + gmax + 1)  # KV tokens, worst case
    rows: list[dict[str, Any]] = []
    for hw_name in cfg["hardware"]:
        hw = load_hardware(hw_name)
        seed = int(rng.integers(2**63 - 1))  # common random numbers across rates

        def replica(tp: int, hw: HardwareCard = hw) -> tuple[CardCost, int]:
            """The cost source of one replica on ``tp`` devices and its KV capacity (tokens)."""
            cost = CardCost(target=target, draft=draft, hardware=hw, tensor_parallel=tp)
            try:
                probe = ServingConfig(
                    workload=PoissonWorkload(
                        rate_per_s=1.0, requests=1, prompt_tokens=prompt, output_tokens=output
                    ),
                    cost=cost,
                    acceptance=IIDAcceptance(alpha=alpha),
                    policy=policy,
                    max_batch=int(cfg["max_batch"]),
                    max_gamma=gmax,
                )
                return cost, probe.kv_capacity() or 0
            except ValueError:
                return cost, 0

        tp = int(cfg["tensor_parallel"]) or smallest_tp(
            lambda tp: replica(tp)[1] >= need,
            where="capacity",
            what=f"{target.slug} + {draft.slug} with the KV cache of {int(cfg['max_batch'])} "
            f"requests of up to {need // int(cfg['max_batch'])} tokens",
            hardware=hw.slug,
        )
        cost, capacity = replica(tp)
        base = {"hardware": hw_name, "tensor_parallel": tp, "kv_capacity_tokens": capacity}

        def serve(
            rate: float,
            kind: str,
            base: dict[str, Any] = base,
            cost: CardCost = cost,
            seed: int = seed,
        ) -> dict[str, bool]:
            wl = PoissonWorkload(
                rate_per_s=rate, requests=requests, prompt_tokens=prompt, output_tokens=output
            )
            sc = ServingConfig(
                workload=wl,
                cost=cost,
                acceptance=IIDAcceptance(alpha=alpha),
                policy=policy,
                max_batch=int(cfg["max_batch"]),
                max_gamma=gmax,
            )
            m = simulate_serving(sc, np.random.default_rng(seed)).metrics()
            ok = {}
            for mode, pre in (("speculative", ""), ("plain", "plain_")):
                tpot, ttft = float(m[f"{pre}tpot_p99"]), float(m[f"{pre}ttft_p99"])
                ok[mode] = tpot <= slo_tpot and ttft <= slo_ttft
                rows.append(
                    {
                        **base,
                        "kind": kind,
                        "mode": mode,
                        "rate_per_s": rate,
                        "tpot_p99_s": tpot,
                        "ttft_p99_s": ttft,
                        "throughput_tokens_per_s": float(m[f"{pre}throughput_tokens_per_s"]),
                        "meets_slo": ok[mode],
                        "requests": requests,
                        "mean_gamma": float(m["mean_gamma"]) if mode == "speculative" else 0.0,
                    }
                )
            return ok

        passed = [serve(float(r), "probe") for r in grid]
        for mode in MODES:
            good = [bool(p[mode]) for p in passed]
            k = good.index(False) if False in good else len(good)  # first failing rate
            lo = float(grid[k - 1]) if k > 0 else 0.0
            hi = float(grid[k]) if k < len(grid) else math.inf
            for _ in range(steps if 0 < k < len(grid) else 0):
                mid = math.sqrt(lo * hi)
                if serve(mid, "probe")[mode]:
                    lo = mid
                else:
                    hi = mid
            answer: dict[str, Any] = {
                **base,
                "kind": "answer",
                "mode": mode,
                "max_rate_per_replica": lo,
                "first_failing_rate": hi,
                "rate_per_s": float(cfg["rate_per_s"]),
            }
            if lo > 0:
                replicas = math.ceil(float(cfg["rate_per_s"]) / lo)
                answer.update(
                    replicas=replicas, accelerators=replicas * tp, rate_per_accelerator=lo / tp
                )
                share = float(cfg["rate_per_s"]) / replicas
                answer["check_meets_slo"] = serve(share, f"check {mode}")[mode]
            rows.append(answer)
    df = pd.DataFrame(rows)
    df["slo_tpot_p99_s"], df["slo_ttft_p99_s"] = slo_tpot, slo_ttft
    df["alpha"], df["policy"] = alpha, policy_name
    return df


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """p99 TPOT and TTFT against rate per replica, speculative and plain, SLO lines."""
    pr = df[df["kind"] == "probe"].sort_values("rate_per_s")
    fig, axes = figure(2, width=5.6)
    for ax, (metric, slo, label) in zip(
        axes,
        (
            ("tpot_p99_s", "slo_tpot_p99_s", "p99 TPOT (s)"),
            ("ttft_p99_s", "slo_ttft_p99_s", "p99 TTFT (s)"),
        ),
        strict=True,
    ):
        sns.lineplot(
            data=pr, x="rate_per_s", y=metric, hue="hardware", style="mode", marker="o", ax=ax
        )
        ax.axhline(
            float(df[slo].iloc[0]), color="tab:red", linestyle="--", linewidth=1, label="SLO"
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("requests per second to one replica")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    axes[0].set_title("one replica under load", fontsize=10)
    ans = df[df["kind"] == "answer"].dropna(subset=["accelerators"])
    if not ans.empty:
        per_hw = [
            f"{hw}: " + ", ".join(f"{int(r.accelerators)} {r.mode}" for r in g.itertuples())
            for hw, g in ans.groupby("hardware", sort=False)
        ]
        axes[1].set_title(
            f"accelerators for {ans['rate_per_s'].iloc[0]:g} requests/s\n" + "; ".join(per_hw),
            fontsize=9,
        )
    return {"capacity": fig}


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
