"""The numeric twins of specsim.theory on a 10^6-point (alpha, gamma, c) grid, against one
elementwise numpy power over the same grid.

Run: .venv/bin/python benchmarks/bench_theory.py
Goal (issue 3): the twins evaluate 10^6 points "in well under a second"; the baseline,
timed in the same run, is ``np.power(alpha, gamma + 1)``, the one operation the naive
closed form cannot do without.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_time, machine, table  # noqa: E402

from specsim import theory  # noqa: E402

SIDE = 100  # 100 alphas x 100 gammas x 100 c = 10^6 points


def main() -> None:
    alpha, gamma, c = (
        x.ravel()
        for x in np.meshgrid(
            np.linspace(0.0, 1.0, SIDE),
            np.arange(SIDE, dtype=np.float64),
            np.linspace(0.0, 0.5, SIDE),
            indexing="ij",
        )
    )
    n = alpha.size
    exponent = gamma + 1.0
    power = best_time(lambda: np.power(alpha, exponent))
    e = best_time(lambda: theory.expected_tokens(alpha, gamma))
    w = best_time(lambda: theory.walltime_speedup(alpha, gamma, c))
    ops = best_time(lambda: theory.ops_factor(alpha, gamma, c))
    var = best_time(lambda: theory.tokens_variance(alpha, gamma))

    def every_twin() -> None:
        theory.expected_tokens(alpha, gamma)
        theory.tokens_variance(alpha, gamma)
        theory.walltime_speedup(alpha, gamma, c)
        theory.ops_factor(alpha, gamma, c)
        theory.target_calls_per_token(alpha, gamma)
        theory.draft_calls_per_token(alpha, gamma)

    everything = best_time(every_twin, repeat=3)
    a2, c2 = np.meshgrid(np.linspace(0.0, 1.0, 100), np.linspace(0.0, 0.5, 100))
    best_gamma = best_time(lambda: theory.optimal_gamma(a2, c2, 64), repeat=3)

    print(f"## specsim.theory numeric twins ({n:,} (alpha, gamma, c) points; {machine()})\n")
    print(
        table(
            [
                ("baseline: one np.power(alpha, gamma + 1) over 10^6", f"{power * 1e3:.1f} ms"),
                ("expected_tokens, 10^6 points (validation included)", f"{e * 1e3:.1f} ms"),
                ("ratio to the baseline", f"{e / power:.1f}x"),
                ("walltime_speedup, 10^6 points", f"{w * 1e3:.1f} ms ({w / power:.1f}x)"),
                ("ops_factor, 10^6 points", f"{ops * 1e3:.1f} ms ({ops / power:.1f}x)"),
                ("tokens_variance, 10^6 points", f"{var * 1e3:.1f} ms ({var / power:.1f}x)"),
                (
                    "all six closed-form twins, 10^6 points each",
                    f"{everything * 1e3:.1f} ms ({everything / power:.1f}x)",
                ),
                ("optimal_gamma, 10^4 (alpha, c) points x 65 gammas", f"{best_gamma * 1e3:.1f} ms"),
                (
                    "goal: 10^6 points well under 1 s",
                    "met" if max(e, w, ops, var) < 0.25 else "NOT met",
                ),
            ]
        )
    )


if __name__ == "__main__":
    main()
