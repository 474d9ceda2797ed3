"""How many accelerators a service needs, with and without speculative decoding.

For a request rate, a mix of prompt and output lengths (uniform on the given
ranges) and an SLO on the 99th percentiles of time per output token (TPOT) and
time to first token (TTFT), the study runs the capacity search of
:mod:`specsim.capacity.planner` on each accelerator card: the tensor parallelism of one
replica (the smallest power of two whose memory holds the weights and the KV
cache of ``max_batch`` requests of the longest kind, with ``tensor_parallel =
0``, or the configured one); the largest Poisson request rate one replica
sustains at the SLO with and without speculation, by bisection to
``precision`` (relative), each p99 judged by its order-statistic 95%
interval, widened for the correlation between requests, from at least
``requests`` requests (doubled while undecided, up to ``max_requests``); the
replicas and accelerators needed for ``rate_per_s`` (checked by simulating them
behind the router, round-robin), with the interval the search leaves; and the
crossover, the largest rate at which the speculative p99 TPOT is shown below
plain decoding's.

Speculation: ``policy = "adaptive"`` is :class:`specsim.policies.lookahead.LoadAdaptive`
(the gamma that maximizes expected tokens per second at the current batch,
shrinking as passes turn compute-bound); ``"fixed"`` is ``FixedGamma(gamma)``.
The fast form uses ``fast_policy`` (fixed by default: the adaptive policy
costs about 1.5 times a fixed gamma in a capacity search, ``docs/capacity.md``) and
``fast_max_requests``.
Assumptions: alpha is assumed, i.i.d.; the draft shares the target's devices;
every request's KV cache is reserved on admission (no preemption); a run
starts empty, and its first ``warmup`` share of requests (5%, by arrival) is
left out of the p99s and goodput; the limit is monotone in the rate. The
serving runs of a card's search go to ``workers`` processes (the answer does
not depend on how many).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.planner import MODES, SLO, Search, kv_capacity, search_capacity, smallest_tp
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, verification_positions
from specsim.policies.lookahead import FixedGamma, LoadAdaptive, LookaheadPolicy
from specsim.sim import CardCost, PoissonWorkload, ServingConfig

from ._capacity_figures import figures
from ._capacity_pools import pool_rows, pool_summary
from ._common import check_positive, check_positive_int, check_probability, md_table

__all__ = ["Config", "run", "figures", "summary", "MODES"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study capacity --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    draft: str = "llama-3.2-1b"
    hardware: tuple[str, ...] = ("h100-sxm", "h200")
    tensor_parallel: int = 0  # 0: the smallest size whose memory holds max_batch requests
    alpha: float = 0.7  # assumed acceptance of the draft
    policy: Literal["adaptive", "fixed"] = "adaptive"
    fast_policy: Literal["adaptive", "fixed"] = (
        "fixed"  # LoadAdaptive costs ~1.5x a fixed gamma in a capacity search (docs/capacity.md)
    )
    gamma: int = 4
    max_gamma: int = 6
    max_batch: int = 64
    rate_per_s: float = 20.0  # the service's total request rate [requests/s]
    prompt_tokens: tuple[int, int] = (256, 2048)
    output_tokens: tuple[int, int] = (64, 512)
    slo_tpot_p99_s: float = 0.05
    slo_ttft_p99_s: float = 2.0
    rate_min: float = field(
        default=0.5,
        metadata={"doc": "lowest request rate per replica searched", "unit": "requests/s"},
    )
    rate_max: float = field(
        default=32.0,
        metadata={"doc": "highest request rate per replica searched", "unit": "requests/s"},
    )
    precision: float = field(
        default=0.02,
        metadata={
            "doc": "relative precision of the largest rate a replica sustains (bisection)",
            "unit": "fraction",
        },
    )
    requests: int = 800  # at least 368 bound a p99 at 95%
    max_requests: int = field(
        default=3200,
        metadata={
            "doc": "most requests per serving run while its verdict is undecided (doubling)",
            "unit": "count",
        },
    )
    fast_max_requests: int = 1600
    crossover: bool = field(
        default=True,
        metadata={"doc": "also find the largest rate at which speculation lowers the p99 TPOT"},
    )
    crossover_precision: float = field(
        default=0.05,
        metadata={
            "doc": "relative precision of the crossover rate (bisection)",
            "unit": "fraction",
        },
    )
    warmup: float = field(
        default=0.05,
        metadata={
            "doc": "share of each run's requests, the first to arrive, left out of its p99s "
            "and goodput (warm-up)",
            "unit": "fraction",
        },
    )
    disaggregated: bool = field(
        default=False,
        metadata={
            "doc": "size separate prefill and decode pools instead (the (P, D) walk of "
            "specsim.capacity.disagg, the KV cache over the card's interconnect)"
        },
    )
    max_prefill: int = field(
        default=6,
        metadata={"doc": "disaggregated: most prefill replicas walked", "unit": "count"},
    )
    max_decode: int = field(
        default=8,
        metadata={"doc": "disaggregated: most decode replicas walked", "unit": "count"},
    )
    workers: int = field(
        default=0,
        metadata={
            "doc": "processes serving a search's runs (0: the CPUs this process may use, at "
            "most 2; 1: one process); the results do not depend on it",
            "unit": "count",
        },
    )

    def __post_init__(self) -> None:
        check_probability(self.alpha, "alpha")
        for key in (
            "gamma",
            "max_gamma",
            "max_batch",
            "requests",
            "max_requests",
            "fast_max_requests",
            "max_prefill",
            "max_decode",
        ):
            check_positive_int(getattr(self, key), key)
        check_positive_int(self.tensor_parallel, "tensor_parallel", minimum=0)
        check_positive_int(self.workers, "workers", minimum=0)
        if not 0 <= self.warmup <= 0.5:
            raise ValueError(f"warmup must be in [0, 0.5], got {self.warmup}")
        for key in ("prompt_tokens", "output_tokens"):
            low, high = getattr(self, key)
            if not 1 <= low <= high:
                raise ValueError(
                    f"{key} must be 'low,high' with 1 <= low <= high, got {(low, high)}"
                )
        for key in (
            "rate_per_s",
            "slo_tpot_p99_s",
            "slo_ttft_p99_s",
            "rate_min",
            "rate_max",
            "precision",
            "crossover_precision",
        ):
            check_positive(getattr(self, key), key)
        if self.rate_max <= self.rate_min:
            raise ValueError("rate_max must exceed rate_min")
        # max_requests against requests is checked for the mode that runs (``run``).


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Rows of kind "probe" (one per serving run and mode), "answer" (per card and mode)
    and "crossover" (per card): :func:`specsim.capacity.planner.search_capacity` on each card."""
    cfg = config
    most = "fast_max_requests" if fast else "max_requests"
    if getattr(cfg, most) < cfg.requests:
        raise ValueError(
            f"study 'capacity': {most} must be at least requests ({cfg.requests}), "
            f"got {getattr(cfg, most)}"
        )
    target, draft = load_model(cfg.target), load_model(cfg.draft)
    policy_name = cfg.fast_policy if fast else cfg.policy
    policy: LookaheadPolicy = (
        LoadAdaptive(alpha=cfg.alpha, max_gamma=cfg.max_gamma)
        if policy_name == "adaptive"
        else FixedGamma(gamma=cfg.gamma)
    )
    slo = SLO(tpot_p99_s=cfg.slo_tpot_p99_s, ttft_p99_s=cfg.slo_ttft_p99_s)
    search = Search(
        rate_min=cfg.rate_min,
        rate_max=cfg.rate_max,
        precision=cfg.precision,
        crossover_precision=cfg.crossover_precision,
        requests=cfg.requests,
        warmup=cfg.warmup,
        max_requests=int(getattr(cfg, most)),
    )
    need = cfg.max_batch * (
        cfg.prompt_tokens[1] + cfg.output_tokens[1] + verification_positions(cfg.max_gamma)
    )
    rows: list[dict[str, Any]] = []
    for hw_name in cfg.hardware:
        hardware = load_hardware(hw_name)

        def replica(tp: int, hardware: Any = hardware) -> ServingConfig:
            return ServingConfig(
                workload=PoissonWorkload(
                    rate_per_s=1.0,
                    requests=cfg.requests,
                    prompt_tokens=cfg.prompt_tokens,
                    output_tokens=cfg.output_tokens,
                ),
                cost=CardCost(
                    deployment=Deployment(target=target, hardware=hardware, tensor_parallel=tp),
                    draft=draft,
                ),
                acceptance=IIDAcceptance(alpha=cfg.alpha),
                policy=policy,
                max_batch=cfg.max_batch,
                max_gamma=cfg.max_gamma,
            )

        tp = cfg.tensor_parallel or smallest_tp(
            lambda tp: kv_capacity(replica(tp)) >= need,
            where="study 'capacity'",
            what=f"{target.slug} + {draft.slug} with the KV cache of {cfg.max_batch} "
            f"requests of up to {need // cfg.max_batch} tokens",
            hardware=hardware.slug,
        )
        serving = replica(tp)
        if cfg.disaggregated:  # two pools: studies/_capacity_pools.py
            rows += pool_rows(
                serving,
                hardware=hardware,
                slo=slo,
                rate_per_s=cfg.rate_per_s,
                requests=(cfg.requests, int(getattr(cfg, most))),
                pools=(cfg.max_prefill, cfg.max_decode),
                seed=int(rng.integers(2**63 - 1)),
            )
            continue
        rows += search_capacity(
            serving,
            slo=slo,
            search=search,
            rate_per_s=cfg.rate_per_s,
            seed=int(rng.integers(2**63 - 1)),  # common random numbers across rates
            base={
                "hardware": hardware.slug,
                "tensor_parallel": tp,
                "target": target.slug,
                "draft": draft.slug,
                "kv_capacity_tokens": kv_capacity(serving),
            },
            crossover=cfg.crossover,
            workers=cfg.workers or None,
        )
    df = pd.DataFrame(rows)
    df["slo_tpot_p99_s"], df["slo_ttft_p99_s"] = slo.tpot_p99_s, slo.ttft_p99_s
    df["alpha"], df["policy"], df["precision"] = cfg.alpha, policy_name, cfg.precision
    return df


def _interval(r: Any) -> str:
    low, high = int(r["accelerators_low"]), int(r["accelerators"])
    return f"{high}" if low == high else f"{high} (at least {low})"


def _crossover(c: Any) -> str:
    """Where speculation stops lowering the p99 TPOT, in words."""
    status, low = str(c["status"]), float(c["crossover_rate"])
    if status == "above rate_max":
        return f"speculation lowers the p99 TPOT at every rate searched (to {low:g} requests/s)"
    if low <= 0:
        return f"speculation is not shown to lower the p99 TPOT ({status})"
    text = f"speculation lowers the p99 TPOT up to {low:.2f} requests/s per replica"
    if status == "decided":
        return text + f" and not from {c['first_failing_rate']:.2f}"
    return (
        text
        + " (above it, not distinguishable from plain decoding"
        + (
            ""
            if math.isinf(c["first_failing_rate"])
            else f" until {c['first_failing_rate']:.2f}, where it loses"
        )
        + ")"
    )


def summary(df: pd.DataFrame) -> str:
    """The accelerators needed and the rate one accelerator sustains, per card and mode,
    and where speculation stops paying."""
    if "prefill_replicas" in df.columns:  # the disaggregated form
        return pool_summary(df)
    ans = df[df["kind"] == "answer"]
    r0 = df.iloc[0]
    lines = [
        f"### Capacity at the SLO (p99 TPOT <= {r0['slo_tpot_p99_s'] * 1e3:g} ms, p99 TTFT "
        f"<= {r0['slo_ttft_p99_s']:g} s; alpha = {r0['alpha']:g}, policy {r0['policy']}, "
        f"rates to {r0['precision']:.0%})",
        "",
    ]
    cols = [
        "hardware",
        "tensor_parallel",
        "mode",
        "max_rate_per_replica",
        "rate_high",
        "first_failing_rate",
        "status",
        "rate_per_accelerator",
        "replicas",
        "replicas_status",
        "accelerators",
        "accelerators_low",
    ]
    lines += [md_table(ans[[c for c in cols if c in ans.columns]]), ""]
    rate = float(ans["rate_per_s"].iloc[0])
    cross = df[df["kind"] == "crossover"].set_index("hardware")
    for hw, g in ans.groupby("hardware", sort=False):
        a = g.set_index("mode")
        tp = int(a["tensor_parallel"].iloc[0])
        parts = []
        for mode, name in (("speculative", "with speculative decoding"), ("plain", "without")):
            r = a.loc[mode]
            if r["max_rate_per_replica"] <= 0:
                parts.append(f"none shown to meet the SLO {name} ({r['status']})")
            else:
                limit = (
                    f"rate limit to {r['precision']:.0%}"
                    if r["status"] == "decided"
                    else f"undecided from {r['rate_high'] / tp:.2f} to "
                    f"{r['first_failing_rate'] / tp:.2f}"
                    if r["status"] == "undecided"
                    else str(r["status"])
                )
                parts.append(
                    f"{_interval(r)} {name} ({r['rate_per_accelerator']:.2f} "
                    f"requests/s per accelerator, {limit})"
                )
        text = f"- {hw} ({tp} per replica), accelerators for {rate:g} requests/s: " + (
            "; ".join(parts)
        )
        if hw in cross.index:
            text += "; " + _crossover(cross.loc[hw])
        lines.append(text + ".")
    lines += overloaded_probes(df)
    return "\n".join(lines) + "\n"


def overloaded_probes(df: pd.DataFrame) -> list[str]:
    """A line per card on the probe runs whose queue grew without bound (``stable`` False):
    they never count as holding the SLO, whatever their latency percentiles."""
    if "stable" not in df.columns:
        return []
    probes = df[df["kind"] == "probe"]
    out = []
    for hw, g in probes.groupby("hardware", sort=False):
        bad = g[g["stable"] == False]  # noqa: E712 - a column of True, False and None
        if len(bad):
            low = float(bad["rate_per_s"].min())
            out.append(
                f"- {hw}: {len(bad)} of {len(g)} probe runs were overloaded (the queue grew "
                f"without bound; from {low:.3g} requests/s): none counts as holding the SLO."
            )
    return [""] + out if out else []
