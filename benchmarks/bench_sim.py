"""Simulator event rates against bare simpy, in the same run.

Run: .venv/bin/python benchmarks/bench_sim.py
Goals (issue 5): single stream with plain parameters >= 300,000 target passes
per CPU-second; serving at batch 64 with the cost model >= 20,000 batch
iterations per CPU-second. CPU time (time.process_time), best of 3.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine, table  # noqa: E402

from specsim.acceptance import IIDAcceptance  # noqa: E402
from specsim.cards import load_hardware, load_model  # noqa: E402
from specsim.policies import FixedGamma  # noqa: E402
from specsim.sim import (  # noqa: E402
    CardCost,
    PlainCost,
    ServingConfig,
    StreamConfig,
    TraceWorkload,
    simulate_serving,
    simulate_stream,
)


def cpu_rate(fn, count) -> float:  # type: ignore[no-untyped-def]
    best = 0.0
    for _ in range(3):
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


def stream(engine: str) -> int:
    tokens = 1_000_000 if engine == "fast" else 100_000
    cfg = StreamConfig(tokens=tokens, acceptance=IIDAcceptance(alpha=0.7),
                       policy=FixedGamma(gamma=4), cost=PlainCost(c=0.05), max_gamma=4)  # fmt: skip
    r = simulate_stream(cfg, np.random.default_rng(0), engine=engine)  # type: ignore[arg-type]
    r.metrics()
    return int(r.blocks.gamma.shape[0])


def serving() -> int:
    n = 64
    cost = CardCost(target=load_model("llama-2-7b"), draft=load_model("llama-68m"),
                    hardware=load_hardware("a100-80gb"))  # fmt: skip
    work = TraceWorkload(arrival_s=(0.0,) * n, prompt_tokens=(256,) * n, output_tokens=(2048,) * n)
    cfg = ServingConfig(workload=work, cost=cost, acceptance=IIDAcceptance(alpha=0.7),
                        policy=FixedGamma(gamma=4), max_batch=n, max_gamma=4)  # fmt: skip
    r = simulate_serving(cfg, np.random.default_rng(0))
    return len(r.iterations_spec) + len(r.iterations_plain)


def main() -> None:
    bare = cpu_rate(bare_simpy, None)
    fast = cpu_rate(lambda: stream("fast"), None)
    events = cpu_rate(lambda: stream("events"), None)
    serve = cpu_rate(serving, None)
    print(f"## Simulator event rates ({machine()}; CPU time, best of 3)\n")
    print(
        table(
            [
                ("bare simpy: timeouts per CPU-second", f"{bare:,.0f}"),
                ("single stream, fast engine: target passes per CPU-second (goal 300,000)",
                 f"{fast:,.0f} ({fast / bare:.2f}x bare simpy)"),
                ("single stream, events engine (simpy processes): passes per CPU-second",
                 f"{events:,.0f} ({events / bare:.2f}x bare simpy)"),
                ("serving, batch 64, cost model: iterations per CPU-second (goal 20,000)",
                 f"{serve:,.0f} ({serve / bare:.3f}x bare simpy)"),
            ]
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
