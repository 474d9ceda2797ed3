"""Batched verify against the floor of reading its probability arrays once.

Run: .venv/bin/python benchmarks/bench_sampling.py
Goal (issue 2): batch 64, gamma 8, V = 32,000, float64; verify_batch within 4x
of one numpy sum over the same arrays.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_time, machine, table  # noqa: E402

from specsim.sampling import verify_batch  # noqa: E402

BATCH, GAMMA, VOCAB = 64, 8, 32_000


def main() -> None:
    rng = np.random.default_rng(0)
    q = rng.random((BATCH, GAMMA, VOCAB))
    q /= q.sum(-1, keepdims=True)
    p = rng.random((BATCH, GAMMA + 1, VOCAB))
    p /= p.sum(-1, keepdims=True)
    toks = rng.integers(0, VOCAB, size=(BATCH, GAMMA))
    floor = best_time(lambda: (q.sum(), p.sum()))
    run = best_time(lambda: verify_batch(toks, q, p, rng))
    mb = (p.nbytes + q.nbytes) / 1e6
    print(f"## verify_batch (batch {BATCH}, gamma {GAMMA}, V {VOCAB:,}, float64; {machine()})\n")
    print(
        table(
            [
                ("probability arrays", f"{mb:.0f} MB"),
                ("floor: numpy sum over both arrays", f"{floor * 1e3:.1f} ms"),
                ("verify_batch (validation included)", f"{run * 1e3:.1f} ms"),
                ("ratio (goal < 4x)", f"{run / floor:.2f}x"),
            ]
        )
    )


if __name__ == "__main__":
    main()
