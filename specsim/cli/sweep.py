"""``specsim sweep SPEC.toml``: a grid or random sweep over simulator config fields."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specsim.cli import jsonout
from specsim.cli.output import check_file
from specsim.sim import StreamConfig
from specsim.sweep.executors import DEFAULT_CONNECT_TIMEOUT_S
from specsim.sweep.run import read_spec, run_sweep, sweep_points

HELP = (
    "Run a parameter sweep from a TOML spec on local processes or a Dask cluster, streaming "
    "rows to CSV/Parquet (resumable)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC.toml", help="the sweep spec (docs/howto/sweep.md)")
    parser.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="output .csv or .parquet (default: out/SPEC.csv)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes (local pool or LocalCluster workers; default 1; not with --scheduler)",
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
        help="run on an existing Dask cluster, e.g. tcp://host:8786 (its workers, not --workers)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for the --scheduler to answer "
        f"(default {DEFAULT_CONNECT_TIMEOUT_S:g} s)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished points already in --out, compute the rest",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object (points, computed, skipped, rows, seconds, "
        "output)",
    )


def run(args: argparse.Namespace) -> int:
    _refuse_local_workers_with_scheduler(args)
    workers = 1 if args.workers is None else args.workers
    spec = read_spec(args.spec)
    out = Path(args.out) if args.out else Path("out") / (Path(args.spec).stem + ".csv")
    # A folder or an unwritable place is refused here; an existing file is run_sweep's to
    # judge (continued with --resume, refused without).
    check_file(out, option="--out", force=True)
    total = len(sweep_points(spec))
    start = time.perf_counter()
    print(
        f"sweep {args.spec}: {total} points x {spec.seeds} seeds "
        f"({'stream' if isinstance(spec.config.config, StreamConfig) else 'serving'}, "
        f"{spec.mode}) -> {out}",
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
        workers=workers,
        dask=args.dask,
        scheduler=args.scheduler,
        resume=args.resume,
        progress=progress,
        connect_timeout=args.connect_timeout,
    )
    seconds = time.perf_counter() - start
    if args.json:
        print(
            jsonout.dumps(
                {
                    "spec": str(args.spec),
                    "points": result.points,
                    "seeds": spec.seeds,
                    "computed": result.computed,
                    "skipped": result.skipped,
                    "rows": result.rows,
                    "seconds": seconds,
                    "output": str(result.path.resolve()),
                }
            )
        )
        return 0
    print(
        f"computed {result.computed} points, skipped {result.skipped} already in {out}; "
        f"{result.rows} rows in {seconds:.1f} s"
    )
    print(f"output: {result.path.resolve()}")
    return 0


def _refuse_local_workers_with_scheduler(args: argparse.Namespace) -> None:
    """A ValueError naming ``--workers`` or ``--dask`` given with ``--scheduler``."""
    if args.scheduler is not None:
        clash = [
            f for f, on in (("--workers", args.workers is not None), ("--dask", args.dask)) if on
        ]
        if clash:
            raise ValueError(
                f"{', '.join(clash)}: not with --scheduler, which runs on that cluster's workers"
            )
