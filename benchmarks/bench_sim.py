"""Simulator event rates against bare simpy, in the same run.

Run: .venv/bin/python benchmarks/bench_sim.py
Goals (issue 5): single stream with plain parameters >= 300,000 target passes
per CPU-second; serving at batch 64 with the cost model >= 20,000 batch
iterations per CPU-second (whole simulate_serving calls: the workload and
acceptance draws, the speculative run and its plain twin, their tables; and the
speculative run alone, without the twin).
CPU time (time.process_time), best of 3 (serving: best of 5).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_time, machine, table  # noqa: E402

from specsim.acceptance.processes import IIDAcceptance  # noqa: E402
from specsim.cards import load_hardware, load_model  # noqa: E402
from specsim.cost import Deployment  # noqa: E402
from specsim.policies.lookahead import FixedGamma  # noqa: E402
from specsim.sim import (  # noqa: E402
    CardCost,
    PlainCost,
    PoissonWorkload,
    ServingConfig,
    StreamConfig,
    TraceWorkload,
    simulate_serving,
    simulate_stream,
)


def cpu_rate(fn, count, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = 0.0
    for _ in range(repeats):
        t = time.process_time()
        n = fn()
        best = max(best, (n if count is None else count) / (time.process_time() - t))
    return best


def bare_simpy(n: int = 300_000) -> int:
    env = simpy.Environment()

    def proc(env: simpy.Environment):  # type: ignore[no-untyped-def]
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(proc(env))
    env.run()
    return n


def stream(method: str) -> int:
    tokens = 1_000_000 if method == "fast" else 100_000
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=4),
        cost=PlainCost(c=0.05),
        max_gamma=4,
    )
    r = simulate_stream(cfg, np.random.default_rng(0), method=method)  # type: ignore[arg-type]
    r.metrics()
    return int(r.blocks.gamma.shape[0])


def serving(kind: str, twin: bool = True) -> tuple[int, float]:
    """Iterations of a speculative serving run and its plain twin, and their mean batch.

    ``closed``: 64 requests (prompt 256, output 1024) all present at t = 0, so the
    batch stays at 64 until the last requests drain. ``open``: 600 Poisson arrivals
    (prompt 128-512, output 64-1024) faster than the accelerator serves them, so
    continuous batching keeps the batch near 64 while requests join and leave.
    Llama-2-7B with Llama-68M on an A100-80GB, i.i.d. alpha = 0.7, gamma = 4.
    """
    cost = CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )
    work: TraceWorkload | PoissonWorkload
    if kind == "closed":
        work = TraceWorkload(
            arrival_s=(0.0,) * 64, prompt_tokens=(256,) * 64, output_tokens=(1024,) * 64
        )
    else:
        work = PoissonWorkload(
            rate_per_s=200.0, requests=600, prompt_tokens=(128, 512), output_tokens=(64, 1024)
        )
    cfg = ServingConfig(
        workload=work,
        cost=cost,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=4),
        max_batch=64,
        max_gamma=4,
        plain_twin=twin,
    )
    r = simulate_serving(cfg, np.random.default_rng(0))
    it = pd.concat([r.iterations_spec, r.iterations_plain])
    return len(it), float(it["batch"].mean())


def iteration_parts() -> list[tuple[str, str]]:
    """Microseconds per call of the pieces of one serving iteration at batch 64."""
    cost = CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )
    rows = []
    for g in (0, 4):
        t = best_time(
            lambda: cost.uniform_iteration(batch=64, context_sum=40_000, gamma=g),  # noqa: B023
            number=2000,
        )
        passes = "1 pass" if g == 0 else f"{g + 1} passes"
        rows.append((f"cost model, one iteration at gamma = {g} ({passes}): us", f"{t * 1e6:.1f}"))
    return rows


def main() -> None:
    bare = cpu_rate(bare_simpy, None)
    fast = cpu_rate(lambda: stream("fast"), None)
    events = cpu_rate(lambda: stream("events"), None)
    # Short runs on a shared machine: best of 5.
    closed = cpu_rate(lambda: serving("closed")[0], None, repeats=5)
    opened = cpu_rate(lambda: serving("open")[0], None, repeats=5)
    alone = cpu_rate(lambda: serving("open", twin=False)[0], None, repeats=5)
    b_closed, b_open = serving("closed")[1], serving("open")[1]
    print(f"## Simulator event rates ({machine()}; CPU time, best of 3)\n")
    print(
        table(
            [
                ("bare simpy: timeouts per CPU-second", f"{bare:,.0f}"),
                (
                    "single stream, fast method: target passes per CPU-second (goal 300,000)",
                    f"{fast:,.0f} ({fast / bare:.2f}x bare simpy)",
                ),
                (
                    "single stream, events method (simpy processes): passes per CPU-second",
                    f"{events:,.0f} ({events / bare:.2f}x bare simpy)",
                ),
                (
                    f"serving, closed batch of 64 (mean batch {b_closed:.1f}), cost model: "
                    "iterations per CPU-second (goal 20,000)",
                    f"{closed:,.0f} ({closed / bare:.3f}x bare simpy)",
                ),
                (
                    f"serving, Poisson arrivals at saturation (mean batch {b_open:.1f}), "
                    "cost model: iterations per CPU-second (goal 20,000)",
                    f"{opened:,.0f} ({opened / bare:.3f}x bare simpy)",
                ),
                (
                    "the same, the speculative run alone (plain_twin = False): iterations per "
                    "CPU-second",
                    f"{alone:,.0f} ({alone / bare:.3f}x bare simpy)",
                ),
            ]
            + [("bare simpy: us per timeout", f"{1e6 / bare:.1f}")]
            + iteration_parts()
        )
    )


if __name__ == "__main__":
    main()
