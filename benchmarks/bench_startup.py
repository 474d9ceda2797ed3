"""Command-line start-up: specsim commands against starting Python and importing numpy.

Run: .venv/bin/python benchmarks/bench_startup.py [--runs N]
Goals, as ratios to ``python -c "import numpy"`` timed in the same run: ``specsim --help``
and ``specsim theory --alpha 0.7 --gamma 4 --c 0.05`` at most 2x, ``specsim simulate ...
--json`` (plain parameters, and the shipped stream config) at most 3x. ``specsim plan`` on
a closed batch is timed beside them, with no goal (it prices options; the figure shows what
its start-up leaves).

Each command is a fresh subprocess (the console script ``specsim`` beside this
Python, as a user starts it), run ``--runs`` times round-robin with the others so
that a change in the machine's load hits them all alike; the figure is the median run,
in wall time and in CPU time (user + system of the child, which a second busy core
does not inflate). The ratios use the CPU times. Which heavy packages each command
imports is tested, not timed: ``tests/test_startup.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPECSIM = Path(sys.executable).parent / "specsim"
SMALL = ("--set", "tokens=1000")  # the shipped config, on as many tokens as the flags run

# label -> (command, goal as a ratio to the baseline, or None for none)
BASELINE = 'python -c "import numpy" (baseline)'
CASES: dict[str, tuple[list[str], float | None]] = {
    BASELINE: ([sys.executable, "-c", "import numpy"], None),
    "specsim --help": ([str(SPECSIM), "--help"], 2.0),
    "specsim theory --alpha 0.7 --gamma 4 --c 0.05": (
        [str(SPECSIM), "theory", "--alpha", "0.7", "--gamma", "4", "--c", "0.05"],
        2.0,
    ),
    "specsim simulate --alpha 0.7 --gamma 4 --c 0.05 --tokens 1000 --json": (
        [str(SPECSIM), "simulate", *"--alpha 0.7 --gamma 4 --c 0.05 --tokens 1000 --json".split()],
        3.0,
    ),
    "specsim simulate studies/configs/stream-plain.toml --set tokens=1000 --json": (
        [str(SPECSIM), "simulate", "studies/configs/stream-plain.toml", "--json", *SMALL],
        3.0,
    ),
    "specsim plan (llama-2-70b, 4 x h100-sxm, a closed batch of 16)": (
        [
            *(str(SPECSIM), "plan", "--model", "llama-2-70b", "--hardware", "h100-sxm"),
            *("--tensor-parallel", "4", "--draft", "llama-2-7b", "--alpha", "0.7", "--ngram"),
            *("--batch", "16"),
        ],
        None,
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
        # this checkout's package, whichever one the console script was installed from
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)},
    )
    return time.perf_counter() - wall0, _children_cpu() - cpu0


def measure(runs: int) -> dict[str, tuple[float, float]]:
    """Median wall and median CPU seconds of each case over ``runs`` round-robin rounds."""
    # Byte code as an installed package has it (pip compiles it): a checkout run with
    # PYTHONDONTWRITEBYTECODE would otherwise compile every module on every start.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "specsim")], check=True)
    for command, _ in CASES.values():
        run_once(command)  # warm-up: the page cache
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in CASES}
    for _ in range(runs):
        for label, (command, _) in CASES.items():
            times[label].append(run_once(command))
    return {
        label: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
        for label, t in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds (median of; default 7)")
    args = parser.parse_args(argv)
    if not SPECSIM.is_file():
        print(f"no console script at {SPECSIM}: install specsim (make) first", file=sys.stderr)
        return 2
    median = measure(args.runs)
    base_wall, base_cpu = next(iter(median.values()))
    rows = []
    met = True
    for label, (_, goal) in CASES.items():
        wall, cpu = median[label]
        ratio = cpu / base_cpu
        if label == BASELINE:
            rows.append((label, f"{wall * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU"))
            continue
        if goal is None:
            rows.append((label, f"{wall * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU ({ratio:.2f}x)"))
            continue
        met = met and ratio <= goal
        rows.append(
            (
                label,
                f"{wall * 1e3:.0f} ms wall ({wall / base_wall:.2f}x), {cpu * 1e3:.0f} ms CPU "
                f"({ratio:.2f}x; goal <= {goal:g}x: {'met' if ratio <= goal else 'NOT met'})",
            )
        )
    print(f"## Command-line start-up (median of {args.runs} runs each; {machine()})\n")
    print(table(rows))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
