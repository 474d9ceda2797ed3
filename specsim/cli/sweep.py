"""``specsim sweep SPEC.toml``: a grid or random sweep over simulator config fields."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specsim.sweep import read_spec, run_sweep, sweep_points

HELP = (
    "Run a parameter sweep from a TOML spec on local processes or a Dask cluster, streaming "
    "rows to CSV/Parquet (resumable)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC.toml", help="the sweep spec (see specsim.sweep)")
    parser.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="output .csv or .parquet (default: out/SPEC.csv)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="processes (local pool or LocalCluster workers; default 1)",
    )
    parser.add_argument(
        "--dask",
        action="store_true",
        help="run on a local Dask cluster bound to 127.0.0.1 (sweep extra)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run on an existing Dask cluster, e.g. tcp://host:8786",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished points already in --out, compute the rest",
    )


def run(args: argparse.Namespace) -> int:
    spec = read_spec(args.spec)
    out = Path(args.out) if args.out else Path("out") / (Path(args.spec).stem + ".csv")
    total = len(sweep_points(spec))
    start = time.perf_counter()
    print(
        f"sweep {args.spec}: {total} points x {spec.seeds} seeds "
        f"({spec.config.get('mode', 'stream')}, {spec.mode}) -> {out}",
        file=sys.stderr,
    )

    last = [0.0]

    def progress(done: int, n: int) -> None:
        now = time.perf_counter()
        if done == n or now - last[0] >= 1.0:  # at most one line a second
            last[0] = now
            print(f"  {done}/{n} points ({now - start:.1f} s)", file=sys.stderr)

    result = run_sweep(
        spec,
        out,
        workers=args.workers,
        dask=args.dask,
        scheduler=args.scheduler,
        resume=args.resume,
        progress=progress,
    )
    print(
        f"computed {result.computed} points, skipped {result.skipped} already in {out}; "
        f"{result.rows} rows in {time.perf_counter() - start:.1f} s"
    )
    print(f"output: {result.path.resolve()}")
    return 0
