"""Serving as engines do it (issue 17): iterations per CPU-second, and what preemption costs.

Run: .venv/bin/python benchmarks/bench_serving_engine.py
Goal (issue 17): serving with a paged KV cache, chunked prefill and 8 replicas
at >= 50% of the single-replica reservation model's iterations per CPU-second,
in the same run. Whole simulate_serving calls (the workload and acceptance
draws, the speculative run and its plain twin, their tables), CPU time
(time.process_time), best of 3.

Workload per replica, as benchmarks/bench_sim.py's open serving run: Poisson
arrivals at 200 requests/s (600 requests a replica; 8 replicas get 1600/s and
4800), prompts 128-512 tokens, outputs 64-1024, faster than a replica serves
them, so its batch stays near 64 while requests join and leave. Llama-2-7B
verifies for Llama-68M on an A100-80GB, i.i.d. alpha = 0.7, gamma = 4. Paged:
16-token blocks (vLLM's default) in the card's memory after the weights;
chunked: 2048 tokens an iteration (vLLM's default max_num_batched_tokens
with chunked prefill). With the card's cache no run here ever preempts, so
after the last arrival paged and chunked runs drain in bulk as the
reservation model does (specsim.sim.serving.drain, specsim.sim.serving.chunk_drain);
tests/sim/serving/test_serving_fastpath.py checks the drained tables against the engine
stepped iteration by iteration, bit for bit.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine, table  # noqa: E402

from specsim.acceptance.processes import IIDAcceptance  # noqa: E402
from specsim.cards import load_hardware, load_model  # noqa: E402
from specsim.cost import Deployment  # noqa: E402
from specsim.policies.lookahead import FixedGamma  # noqa: E402
from specsim.sim import CardCost, PoissonWorkload, ServingConfig, simulate_serving  # noqa: E402

COST = CardCost(
    deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
    draft=load_model("llama-68m"),
)


def config(**kw: Any) -> ServingConfig:
    replicas = int(kw.get("replicas", 1))
    work = PoissonWorkload(
        rate_per_s=200.0 * replicas,
        requests=600 * replicas,
        prompt_tokens=(128, 512),
        output_tokens=(64, 1024),
    )
    return ServingConfig(
        workload=work,
        cost=COST,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=4),
        max_batch=64,
        max_gamma=4,
        **kw,
    )


def rate(cfg: ServingConfig, repeats: int = 3) -> tuple[float, float]:
    """Best iterations per CPU-second of whole runs, and the mean batch."""
    best, batch = 0.0, 0.0
    for _ in range(repeats):
        t = time.process_time()
        r = simulate_serving(cfg, np.random.default_rng(0))
        dt = time.process_time() - t
        it = pd.concat([r.iterations_spec, r.iterations_plain])
        best, batch = max(best, len(it) / dt), float(it["batch"].mean())
    return best, batch


def preemption_cost() -> list[tuple[str, str]]:
    """The same seed with a cache of 20,000 tokens against the card's 123,470 (paged both)."""
    rows = []
    free = simulate_serving(config(kv_block_tokens=16), np.random.default_rng(0))
    tight = simulate_serving(
        config(kv_block_tokens=16, kv_capacity_tokens=20_000), np.random.default_rng(0)
    )
    a, b = free.metrics(), tight.metrics()
    counts = [
        f"{int(r.iterations_spec['preempted'].sum()):,} / "
        f"{int(r.iterations_spec['recomputed_tokens'].sum()):,}"
        for r in (free, tight)
    ]
    rows.append(
        ("preemptions / tokens recomputed: card's cache / 20,000 tokens", " and ".join(counts))
    )
    for key in ("throughput_tokens_per_s", "e2e_p50_s", "e2e_p99_s", "ttft_p99_s", "mean_batch"):
        rows.append((f"{key}: card's cache / 20,000 tokens", f"{a[key]:.4g} / {b[key]:.4g}"))
    return rows


def main() -> None:
    base, b0 = rate(config())
    rows = [
        (
            f"single replica, reservation (today's engine; mean batch {b0:.1f}): "
            "iterations per CPU-second",
            f"{base:,.0f}",
        )
    ]
    variants: list[tuple[str, dict[str, Any]]] = [
        (
            "8 replicas, join-shortest-queue, reservation",
            {"replicas": 8, "router": "join-shortest-queue"},
        ),
        ("single replica, paged KV", {"kv_block_tokens": 16}),
        ("single replica, chunked prefill", {"token_budget": 2048}),
        (
            "single replica, paged KV + chunked prefill",
            {"kv_block_tokens": 16, "token_budget": 2048},
        ),
        (
            "8 replicas, round-robin, paged KV + chunked prefill (goal >= 50%)",
            {"kv_block_tokens": 16, "token_budget": 2048, "replicas": 8},
        ),
        (
            "8 replicas, join-shortest-queue, paged KV + chunked prefill (goal >= 50%)",
            {
                "kv_block_tokens": 16,
                "token_budget": 2048,
                "replicas": 8,
                "router": "join-shortest-queue",
            },
        ),
    ]
    for name, kw in variants:
        r, b = rate(config(**kw))
        rows.append(
            (
                f"{name} (mean batch {b:.1f}): iterations per CPU-second",
                f"{r:,.0f} ({r / base:.0%} of the reservation model)",
            )
        )
    print(f"## Serving engine features ({machine()}; CPU time, best of 3)\n")
    print(table(rows))
    print("\n### What preemption costs (one replica, same seed)\n")
    print(table(preemption_cost()))


if __name__ == "__main__":
    main()
