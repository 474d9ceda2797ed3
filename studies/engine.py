"""Serving as engines do it: paged KV with preemption, chunked prefill, replicas behind a router.

One deployment (Llama-3.1-70B with a Llama-3.2-1B draft on two H200s per replica, as
the capacity study sizes it) at a fixed arrival rate near the capacity study's limit
for a replica, served with speculation (a fixed gamma) and without (the plain twin, on
the same requests) by :func:`specsim.sim.simulate_serving`. Three parts, each against its first:

- ``memory`` (conversation workload): today's reservation of each request's whole KV
  footprint, a paged cache (``kv_block_tokens``) with the card's memory (which must give
  identical times: checked request by request), and both with a tight KV budget
  (``tight_kv_tokens``), where paging preempts (latest arrival first) by recompute or swap;
- ``prefill`` (code workload, long prompts): whole prompts against chunked prefill with
  each of ``token_budgets`` (Sarathi-Serve), and the lookahead run (the engine cuts it
  when the verification positions alone exceed the budget);
- ``replicas`` (conversation at ``replicas`` times the rate): behind each of ``routers``.

Each p99 carries its 95% order-statistic interval widened by ``batches`` batch means
over the requests in arrival order (:func:`specsim.stats.quantile_interval`);
goodput (requests meeting both SLO targets per second) its batch-means standard error
(:func:`specsim.stats.batch_means_se`). A difference is "beyond noise" when the
95% intervals do not overlap (goodput: more than 1.96 combined standard errors),
"undecided" when they overlap only because one has no upper bound.
Swap needs a host link the cards do not state: ``host_link_bandwidth`` is PCIe Gen5
x16, 64 GB/s a direction per device (H200 datasheet: "PCIe Gen5: 128GB/s", both ways).
Assumptions: alpha is assumed, i.i.d.; the draft shares the target's devices; prompt
and output lengths are drawn independently from the Azure 2023 traces' histograms
(Patel et al., ISCA 2024); arrivals are Poisson unless ``bursty``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, PresetWorkload, ServingConfig, goodput, simulate_serving
from specsim.sim.serving.router import ROUTERS
from specsim.sim.workload.workload import PRESETS
from specsim.stats import batch_means_se, quantile_interval

from ._common import check_positive, check_positive_int, check_probability
from ._engine_report import METRICS, PARTS, VS, Z95, figures, summary

__all__ = ["Config", "HostLinkedCost", "run", "figures", "summary", "PARTS"]


@dataclass(frozen=True, kw_only=True)
class HostLinkedCost(CardCost):
    """A CardCost with the host link (bytes/s a direction, per device) that swap needs."""

    host_link_bandwidth: float = 64e9


def _key(default: Any, doc: str, unit: str = "") -> Any:
    return field(default=default, metadata={"doc": doc, "unit": unit})


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study engine --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    draft: str = "llama-3.2-1b"
    hardware: str = "h200"
    tensor_parallel: int = _key(2, "devices per replica (2 H200s hold the 70B weights)", "devices")
    alpha: float = 0.7  # assumed acceptance of the draft
    gamma: int = 4
    max_batch: int = 64
    conversation: str = _key("azure-conversation-2023", "workload preset of parts memory, replicas")
    code: str = _key("azure-code-2023", "long-prompt workload preset of part prefill")
    bursty: bool = _key(False, "Gamma inter-arrivals of the trace's cv (false: Poisson)")
    rate_per_s: float = _key(2.5, "conversation rate per replica", "requests/s")
    code_rate_per_s: float = _key(1.5, "code arrival rate (part prefill)", "requests/s")
    kv_block_tokens: int = _key(16, "paged KV block size (vLLM's default)", "tokens")
    tight_kv_tokens: int = _key(24576, "the tight KV budget of part memory", "tokens")
    host_link_bandwidth: float = _key(64e9, "host link a direction per device (swap)", "bytes/s")
    token_budgets: tuple[int, ...] = _key((512, 2048), "chunked-prefill budgets", "tokens")
    replicas: int = _key(4, "replicas of part replicas", "count")
    routers: tuple[str, ...] = _key(tuple(ROUTERS), "routers compared in part replicas")
    slo_tpot_p99_s: float = 0.05
    slo_ttft_p99_s: float = 2.0
    requests: int = 4000  # per serving run (the replicas' run too)
    fast_requests: int = 800
    batches: int = _key(20, "batch means widening each p99 interval", "count")

    def __post_init__(self) -> None:
        check_probability(self.alpha, "alpha")
        for key in (
            "tensor_parallel",
            "gamma",
            "max_batch",
            "kv_block_tokens",
            "tight_kv_tokens",
            "token_budgets",
            "requests",
            "fast_requests",
        ):
            check_positive_int(getattr(self, key), key)
        check_positive_int(self.batches, "batches", minimum=2)
        check_positive_int(self.replicas, "replicas", minimum=2)  # for a router to choose
        for key in (
            "rate_per_s",
            "code_rate_per_s",
            "host_link_bandwidth",
            "slo_tpot_p99_s",
            "slo_ttft_p99_s",
        ):
            check_positive(getattr(self, key), key)
        if not self.token_budgets:
            raise ValueError("token_budgets: expected at least one budget, got ()")
        for key in ("conversation", "code"):
            if getattr(self, key) not in PRESETS:
                raise ValueError(
                    f"{key}: unknown workload {getattr(self, key)!r}; known: {sorted(PRESETS)}"
                )
        bad = [r for r in self.routers if r not in ROUTERS]
        if bad or not self.routers:
            raise ValueError(f"routers: expected some of {list(ROUTERS)}, got {self.routers!r}")
        # Each mode's own count; the one against ``batches`` is checked for the mode that runs.
        for key in ("requests", "fast_requests"):
            if getattr(self, key) < 60:
                raise ValueError(
                    f"{key}: need at least 60 for batch means, got {getattr(self, key)}"
                )


def _stats(req: pd.DataFrame, it: pd.DataFrame, cfg: Config) -> dict[str, Any]:
    """One mode's metrics with their intervals: p99s (batch-widened order statistics),
    goodput with its batch-means SE, preemptions, recomputed tokens, lookahead, balance."""
    req = req.sort_values("arrival_s", kind="stable")  # batch means run in arrival order
    arrival, first = req["arrival_s"].to_numpy(float), req["first_token_s"].to_numpy(float)
    finish, n_out = req["finish_s"].to_numpy(float), req["output_tokens"].to_numpy()
    tpot = np.where(n_out > 1, (finish - first) / np.maximum(n_out - 1, 1), 0.0)
    row: dict[str, Any] = {}
    e2e = finish - arrival
    for name, x in (("ttft", first - arrival), ("tpot", tpot[n_out > 1]), ("e2e", e2e)):
        k = cfg.batches if x.shape[0] >= 2 * cfg.batches else None
        row[f"{name}_p99_s"] = float(np.percentile(x, 99)) if x.shape[0] else 0.0
        row[f"{name}_p99_low_s"], row[f"{name}_p99_high_s"] = (
            quantile_interval(x, 0.99, batches=k) if x.shape[0] else (0.0, 0.0)
        )
    ok = ((first - arrival <= cfg.slo_ttft_p99_s) & (tpot <= cfg.slo_tpot_p99_s)).astype(float)
    span, se = float(finish.max() - arrival.min()), batch_means_se(ok)
    row.update(
        requests=len(req),
        goodput_fraction=float(ok.mean()),
        goodput_per_s=goodput(req, ttft_s=cfg.slo_ttft_p99_s, tpot_s=cfg.slo_tpot_p99_s),
        goodput_se=np.nan if se is None else se * len(req) / span,
    )
    pre = req["preemptions"].to_numpy(float) if "preemptions" in req else np.zeros(len(req))
    recomputed = int(np.sum(req.get("recomputed_tokens", 0)))
    prefilled, se = int(np.sum(it.get("prefill_tokens", 0))), batch_means_se(pre)
    row.update(
        preemptions=int(pre.sum()),
        preemptions_per_request=float(pre.mean()),
        preemptions_per_request_se=np.nan if se is None else se,
        recomputed_tokens=recomputed,
        recomputed_share=recomputed / prefilled if prefilled else 0.0,
        swap_s=float(np.sum(it.get("swap_s", 0.0))),
        mean_batch=float(it["batch"].mean()),
        mean_gamma=float(it["draft_tokens"].sum() / max(int(it["batch"].sum()), 1)),
        most_positions=int(it["positions"].max()),
    )
    if "replica" in req:
        per = req.assign(e2e=e2e).groupby("replica")
        counts, p99 = per.size(), per["e2e"].quantile(0.99)
        row.update(
            replica_requests_min=int(counts.min()),
            replica_requests_max=int(counts.max()),
            replica_e2e_p99_min_s=float(p99.min()),
            replica_e2e_p99_max_s=float(p99.max()),
        )
    return row


def _serve(base: ServingConfig, cfg: Config, seed: int, **kw: Any) -> list[dict[str, Any]]:
    """Serve ``base`` with ``kw`` (speculative and its plain twin, same requests): a row each."""
    config = replace(base, **kw)
    r = simulate_serving(config, np.random.default_rng(seed))
    settings = {
        "kv_block_tokens": config.kv_block_tokens or 0,
        "kv_capacity_tokens": config.kv_capacity() or 0,
        "preemption": config.preemption if config.kv_block_tokens else "",
        "token_budget": config.token_budget or 0,
        "replicas": config.replicas,
        "router": config.router if config.replicas > 1 else "",
    }
    modes: Any = (
        ("speculative", r.requests_spec, r.iterations_spec),
        ("plain", r.requests_plain, r.iterations_plain),
    )  # plain_twin is on
    return [
        {
            "mode": mode,
            **settings,
            **_stats(req, it, cfg),
            "_times": req[["first_token_s", "finish_s"]].to_numpy(),
        }
        for mode, req, it in modes
    ]


def _beyond(a: pd.Series, b: pd.Series, metric: str) -> str:
    """Whether ``a`` differs from the baseline ``b`` beyond noise (module docstring)."""
    if a[metric] == b[metric]:
        return "identical"
    if metric == "goodput_per_s":
        se = float(np.hypot(a["goodput_se"], b["goodput_se"]))
        apart = abs(a[metric] - b[metric]) > Z95 * se
    else:
        low, high = metric.replace("_s", "_low_s"), metric.replace("_s", "_high_s")
        apart = a[low] > b[high] or a[high] < b[low]
        if not apart and np.isinf([a[high], b[high]]).any():  # overlap only through inf
            return "undecided (no upper bound)"
    word = "higher" if a[metric] > b[metric] else "lower"
    return f"{word}, beyond noise" if apart else "within noise"


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Rows per (part, variant, mode); ``vs_*`` judge each against its ``baseline`` (the part's
    first setting; paged with the tight budget: reservation at that budget), same mode."""
    cfg = config
    key = "fast_requests" if fast else "requests"
    n = int(getattr(cfg, key))
    if n < 2 * cfg.batches:
        raise ValueError(
            f"study 'engine': {key}: need at least 2 x batches = {2 * cfg.batches} "
            f"requests for batch means, got {n}"
        )
    cost = HostLinkedCost(
        deployment=Deployment(
            target=load_model(cfg.target),
            hardware=load_hardware(cfg.hardware),
            tensor_parallel=cfg.tensor_parallel,
        ),
        draft=load_model(cfg.draft),
        host_link_bandwidth=cfg.host_link_bandwidth,
    )

    def base(preset: str, rate: float, requests: int) -> ServingConfig:
        return ServingConfig(
            workload=PresetWorkload(
                name=preset, requests=requests, rate_per_s=rate, bursty=cfg.bursty
            ),
            cost=cost,
            acceptance=IIDAcceptance(alpha=cfg.alpha),
            policy=FixedGamma(gamma=cfg.gamma),
            max_batch=cfg.max_batch,
            max_gamma=cfg.gamma,
        )

    conv, code = base(cfg.conversation, cfg.rate_per_s, n), base(cfg.code, cfg.code_rate_per_s, n)
    many = base(cfg.conversation, cfg.rate_per_s * cfg.replicas, n)
    paged, tight = {"kv_block_tokens": cfg.kv_block_tokens}, cfg.tight_kv_tokens
    plan: list[tuple[str, str, ServingConfig, dict[str, Any]]] = [
        ("memory", "reservation", conv, {}),
        ("memory", "paged", conv, paged),
        ("memory", "reservation, tight", conv, {"kv_capacity_tokens": tight}),
        ("memory", "paged, tight, recompute", conv, {**paged, "kv_capacity_tokens": tight}),
        (
            "memory",
            "paged, tight, swap",
            conv,
            {**paged, "kv_capacity_tokens": tight, "preemption": "swap"},
        ),
        ("prefill", "whole prompts", code, {}),
        *[("prefill", f"budget {b}", code, {"token_budget": b}) for b in cfg.token_budgets],
        *[("replicas", r, many, {"replicas": cfg.replicas, "router": r}) for r in cfg.routers],
    ]
    seed = int(rng.integers(2**63 - 1))  # common random numbers: every variant, same requests
    rows = []
    for part, variant, serving, kw in plan:
        wl: Any = serving.workload  # a PresetWorkload
        rows += [
            {
                "part": part,
                "variant": variant,
                "workload": wl.name,
                "rate_per_s": wl.rate_per_s,
                **row,
            }
            for row in _serve(serving, cfg, seed, **kw)
        ]
    df = pd.DataFrame(rows)
    for (part, _), sel in df.groupby(["part", "mode"], sort=False):
        first = sel.iloc[0]  # paged with the tight budget: the baseline is reservation at it
        res = sel[sel["variant"] == "reservation, tight"]
        for i, r in sel.iterrows():
            b = res.iloc[0] if "paged, tight" in str(r["variant"]) and len(res) else first
            df.loc[i, "baseline"] = b["variant"]
            for metric in METRICS:
                df.loc[i, VS[metric]] = _beyond(r, b, metric)
            if part == "memory":  # paged with memory enough must equal the reservation model
                df.loc[i, "same_times_as_reservation"] = bool(
                    np.array_equal(r["_times"], first["_times"], equal_nan=True)
                )
    df = df.drop(columns="_times")
    df["target"], df["draft"], df["hardware"] = cfg.target, cfg.draft, cfg.hardware
    df["tensor_parallel"], df["alpha"], df["gamma"] = cfg.tensor_parallel, cfg.alpha, cfg.gamma
    df["slo_ttft_p99_s"], df["slo_tpot_p99_s"] = cfg.slo_ttft_p99_s, cfg.slo_tpot_p99_s
    return df
