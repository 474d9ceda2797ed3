"""Points per second of a single-stream sweep: 1 process, 2 local processes, a 2-worker
Dask LocalCluster, in one run, with the scaling efficiency rate_N / (N rate_1).

Run: .venv/bin/python benchmarks/bench_sweep.py [--points N]
Each point is one single-stream simulation (the +2/-1 heuristic policy, which
walks the stream block by block, over 20,000 tokens); wall times include
starting the pool or the cluster. The three output files must be identical.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import machine, table  # noqa: E402

from specsim.sweep.run import run_sweep, spec_from_dict  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=120, help="points in the sweep")
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens per point")
    args = parser.parse_args()
    n_c = 10
    alphas = [
        round(0.5 + 0.45 * i / max(args.points // n_c - 1, 1), 4) for i in range(args.points // n_c)
    ]
    config = {
        "tokens": args.tokens,
        "acceptance": {"kind": "iid", "alpha": 0.7},
        "policy": {"kind": "heuristic"},
        "cost": {"kind": "plain", "c": 0.05},
    }
    spec = spec_from_dict(
        {
            "sweep": {"seed": 1, "seeds": 1},
            "config": config,
            "grid": {"acceptance.alpha": alphas, "cost.c": [0.01 * (k + 1) for k in range(n_c)]},
        }
    )
    n = len(alphas) * n_c
    runs = [
        ("1 process", {"workers": 1}),
        ("2 local processes", {"workers": 2}),
        ("2-worker Dask LocalCluster", {"workers": 2, "dask": True}),
    ]
    rows: list[tuple[str, str]] = [
        ("machine", machine()),
        ("points", f"{n} x 1 seed, {args.tokens:,} tokens each"),
    ]
    # Start-up alone: the same executor on a 2-point sweep of 10 tokens each.
    tiny = spec_from_dict(
        {
            "sweep": {"seed": 1, "seeds": 1},
            "config": dict(config, tokens=10),
            "grid": {"cost.c": [0.01, 0.02]},
        }
    )
    rates: dict[str, float] = {}
    net: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        outputs = []
        for k, (name, kw) in enumerate(runs):
            start = time.perf_counter()
            run_sweep(tiny, Path(tmp) / f"tiny{k}.csv", **kw)  # type: ignore[arg-type]
            startup = time.perf_counter() - start
            out = Path(tmp) / f"{k}.csv"
            start = time.perf_counter()
            run_sweep(spec, out, **kw)  # type: ignore[arg-type]
            wall = time.perf_counter() - start
            rates[name] = n / wall
            net[name] = n / max(wall - startup, 1e-9)
            outputs.append(out.read_bytes())
            rows.append((f"{name}: wall time (start-up alone)", f"{wall:.2f} s ({startup:.2f} s)"))
        identical = all(o == outputs[0] for o in outputs)
    for name, kw in runs:
        workers = int(kw["workers"])
        rows.append(
            (f"{name}: points/s (without start-up)", f"{rates[name]:.2f} ({net[name]:.2f})")
        )
        if workers > 1:
            eff = rates[name] / (workers * rates["1 process"])
            eff_net = net[name] / (workers * net["1 process"])
            rows.append(
                (f"{name}: scaling efficiency (without start-up)", f"{eff:.0%} ({eff_net:.0%})")
            )
    rows.append(("results identical across the three", "yes" if identical else "NO"))
    print("## Sweeps: points per second (issue 7)\n")
    print("Command: `.venv/bin/python benchmarks/bench_sweep.py`\n")
    print(table(rows))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
