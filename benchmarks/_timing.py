"""Timing helpers shared by the benchmark scripts: best-of-n wall time, markdown rows.

Benchmarks report ratios against a baseline timed in the same run, because the
machines are shared and absolute times are noisy.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], *, repeat: int = 7, number: int = 1) -> float:
    """Best (minimum) seconds per call over `repeat` rounds of `number` calls."""
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"


def table(rows: list[tuple[str, str]]) -> str:
    out = ["| quantity | value |", "| --- | --- |"]
    out += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out)
