"""Run every benchmark script (benchmarks/bench_*.py) in turn and print its markdown.

Run: make bench   (or .venv/bin/python benchmarks/run.py [NAME ...])
The figures in docs/performance.md are pasted from this output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(names: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in names]
    status = 0
    for script in scripts:
        done = subprocess.run([sys.executable, str(script)], check=False)
        status = status or done.returncode
        print()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
