"""Serving workloads: when requests arrive and how long their prompts and outputs are.

A workload is a small frozen config with one method, ``sample(rng)``, that
returns a table with one row per request: ``arrival_s``, ``prompt_tokens``
and ``output_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

__all__ = ["PoissonWorkload", "TraceWorkload", "Workload"]

IntRange = int | tuple[int, int]


def _draw_lengths(rng: np.random.Generator, spec: IntRange, n: int) -> NDArray[np.int64]:
    if isinstance(spec, tuple):
        return rng.integers(spec[0], spec[1] + 1, size=n)
    return np.full(n, int(spec), dtype=np.int64)


def _check_range(spec: IntRange, name: str, minimum: int) -> None:
    lo, hi = spec if isinstance(spec, tuple) else (spec, spec)
    if not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in (lo, hi)):
        raise ValueError(f"{name}: expected an integer or a (low, high) pair, got {spec!r}")
    if lo < minimum or hi < lo:
        raise ValueError(f"{name}: expected {minimum} <= low <= high, got {spec!r}")


@dataclass(frozen=True, kw_only=True)
class PoissonWorkload:
    """``requests`` arrivals at ``rate_per_s``; lengths fixed or uniform on ``(low, high)``."""

    rate_per_s: float
    requests: int
    prompt_tokens: IntRange
    output_tokens: IntRange

    def __post_init__(self) -> None:
        if not (np.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise ValueError(f"rate_per_s: expected a finite rate > 0, got {self.rate_per_s!r}")
        if isinstance(self.requests, bool) or self.requests < 1:
            raise ValueError(f"requests: expected an integer >= 1, got {self.requests!r}")
        _check_range(self.prompt_tokens, "prompt_tokens", 1)
        _check_range(self.output_tokens, "output_tokens", 1)

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        n = self.requests
        return pd.DataFrame(
            {
                "arrival_s": np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=n)),
                "prompt_tokens": _draw_lengths(rng, self.prompt_tokens, n),
                "output_tokens": _draw_lengths(rng, self.output_tokens, n),
            }
        )


@dataclass(frozen=True, kw_only=True)
class TraceWorkload:
    """A recorded trace: arrival time, prompt length and output length per request."""

    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0 or len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError(
                "trace: arrival_s, prompt_tokens and output_tokens must be non-empty and of equal "
                f"length, got {n}, {len(self.prompt_tokens)}, {len(self.output_tokens)}"
            )
        arr = np.asarray(self.arrival_s, dtype=float)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(np.diff(arr) < 0):
            raise ValueError("trace: arrival_s must be finite, >= 0 and non-decreasing")
        for name in ("prompt_tokens", "output_tokens"):
            if min(getattr(self, name)) < 1:
                raise ValueError(f"trace: every {name} must be >= 1")

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "arrival_s": np.asarray(self.arrival_s, dtype=float),
                "prompt_tokens": np.asarray(self.prompt_tokens, dtype=np.int64),
                "output_tokens": np.asarray(self.output_tokens, dtype=np.int64),
            }
        )


Workload = PoissonWorkload | TraceWorkload
