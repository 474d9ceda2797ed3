"""Command-line start-up: three specsim commands against starting Python and importing numpy.

Run: .venv/bin/python benchmarks/bench_cli.py [--runs N]
Goal (issue 12), as ratios to ``python -c "import numpy"`` timed in the same run:
``specsim --help`` and ``specsim theory --alpha 0.7 --gamma 4 --c 0.05`` at most 2x,
``specsim simulate --alpha 0.7 --gamma 4 --c 0.05 --tokens 1000 --json`` at most 3x.

Each command is a fresh subprocess (the console script ``specsim`` beside this
Python, as a user starts it), run ``--runs`` times round-robin with the others so
that a change in the machine's load hits them all alike; the figure is the best
(minimum) run, in wall time and in CPU time (user + system of the child, which a
second busy core does not inflate). The ratios use the CPU times.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPECSIM = Path(sys.executable).parent / "specsim"

# label -> (command, goal as a ratio to the baseline, or None for the baseline)
CASES: dict[str, tuple[list[str], float | None]] = {
    'python -c "import numpy" (baseline)': ([sys.executable, "-c", "import numpy"], None),
    "specsim --help": ([str(SPECSIM), "--help"], 2.0),
    "specsim theory --alpha 0.7 --gamma 4 --c 0.05": (
        [str(SPECSIM), "theory", "--alpha", "0.7", "--gamma", "4", "--c", "0.05"],
        2.0,
    ),
    "specsim simulate --alpha 0.7 --gamma 4 --c 0.05 --tokens 1000 --json": (
        [
            str(SPECSIM),
            "simulate",
            "--alpha",
            "0.7",
            "--gamma",
            "4",
            "--c",
            "0.05",
            "--tokens",
            "1000",
            "--json",
        ],
        3.0,
    ),
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command`` (which must succeed)."""
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    subprocess.run(
        command,
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return time.perf_counter() - wall0, _children_cpu() - cpu0


def measure(runs: int) -> dict[str, tuple[float, float]]:
    """Best wall and best CPU seconds of each case over ``runs`` round-robin rounds."""
    for command, _ in CASES.values():
        run_once(command)  # warm-up: byte-code caches and the page cache
    best = {label: (float("inf"), float("inf")) for label in CASES}
    for _ in range(runs):
        for label, (command, _) in CASES.items():
            wall, cpu = run_once(command)
            best[label] = (min(best[label][0], wall), min(best[label][1], cpu))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds (best of; default 7)")
    args = parser.parse_args(argv)
    if not SPECSIM.is_file():
        print(f"no console script at {SPECSIM}: install specsim (make) first", file=sys.stderr)
        return 2
    best = measure(args.runs)
    base_wall, base_cpu = next(iter(best.values()))
    rows = []
    met = True
    for label, (_, goal) in CASES.items():
        wall, cpu = best[label]
        if goal is None:
            rows.append((label, f"{wall * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU"))
            continue
        ratio = cpu / base_cpu
        met = met and ratio <= goal
        rows.append(
            (
                label,
                f"{wall * 1e3:.0f} ms wall ({wall / base_wall:.2f}x), {cpu * 1e3:.0f} ms CPU "
                f"({ratio:.2f}x; goal <= {goal:g}x: {'met' if ratio <= goal else 'NOT met'})",
            )
        )
    print(f"## Command-line start-up (best of {args.runs} runs each; {machine()})\n")
    print(table(rows))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
