"""The vectorised cost model on 10^5 passes against one elementwise numpy max over them.

Run: .venv/bin/python benchmarks/bench_cost.py
Goal (issue 4): 10^5 configurations (batch, context, new tokens) through
step_cost_grid "well under a second"; the baseline, timed in the same run, is a single
np.maximum over two arrays of the same length (the cheapest possible roofline).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_time, machine, table  # noqa: E402

from specsim.cards import load_hardware, load_model  # noqa: E402
from specsim.cost import step_cost, step_cost_grid  # noqa: E402

N = 100_000


def main() -> None:
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 65, N)
    context = rng.integers(0, 4097, N)
    new = rng.integers(1, 9, N)
    model, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    flops, nbytes = rng.random(N), rng.random(N)
    floor = best_time(lambda: np.maximum(flops, nbytes))
    grid = best_time(
        lambda: step_cost_grid(
            model, hw, batch=batch, context=context, new_tokens=new, check_memory=False
        ),
        repeat=5,
    )
    one = best_time(
        lambda: step_cost(model, hw, batch=8, context=512, new_tokens=4), repeat=5, number=200
    )
    print(f"## step_cost_grid ({N:,} passes of llama-2-7b on a100-80gb; {machine()})\n")
    print(
        table(
            [
                ("baseline: one np.maximum over two arrays of 10^5", f"{floor * 1e3:.3f} ms"),
                ("step_cost_grid, 10^5 passes (validation included)", f"{grid * 1e3:.1f} ms"),
                ("ratio to the baseline", f"{grid / floor:.0f}x"),
                ("per pass, vectorised", f"{grid / N * 1e9:.0f} ns"),
                ("step_cost, one pass (scalar path)", f"{one * 1e6:.0f} us"),
                ("goal: 10^5 passes well under 1 s", "met" if grid < 0.1 else "NOT met"),
            ]
        )
    )


if __name__ == "__main__":
    main()
