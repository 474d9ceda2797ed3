"""When requests arrive: Poisson, Gamma renewal (bursty by a coefficient of variation), on-off,
or as a recorded trace says (:class:`TraceWorkload`, :func:`read_request_trace`).

An arrival process is a small frozen config with one method, ``times(rng, n)``:
the first ``n`` arrival times in seconds, non-decreasing, measured from 0 (the
first arrival comes after one inter-arrival time, as in a stationary renewal
process started at an arrival epoch). Each carries its long-run
``rate_per_s`` and, where one exists, the inter-arrival time's mean and squared
coefficient of variation (``interarrival_scv``), so that queueing formulas
(:mod:`specsim.theory.queueing`) can be evaluated on the same object the
simulator samples (the habit of Ciw's distributions).

- :class:`PoissonArrivals`: exponential inter-arrival times (``scv = 1``).
- :class:`GammaArrivals`: Gamma inter-arrival times with mean ``1 / rate`` and
  coefficient of variation ``cv`` (shape ``1 / cv^2``): ``cv < 1`` is more
  regular than Poisson, ``cv > 1`` burstier, ``cv = 1`` is Poisson.
- :class:`OnOffArrivals`: an interrupted Poisson process: Poisson at
  ``rate_on_per_s`` during on periods, silent during off periods, the periods
  exponential with means ``mean_on_s`` and ``mean_off_s`` (Fischer and
  Meier-Hellstern, "The Markov-modulated Poisson process (MMPP) cookbook",
  Performance Evaluation 18, 1993: the two-state MMPP with one rate 0).
  Its inter-arrival times are i.i.d. hyperexponential (Kuczura, "The interrupted
  Poisson process as an overflow process", Bell System Technical Journal 52,
  1973); the squared coefficient of variation below is that renewal process's.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from specsim.checks import check_int, check_size

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TRACE_COLUMNS",
    "Arrivals",
    "GammaArrivals",
    "OnOffArrivals",
    "PoissonArrivals",
    "PoissonWorkload",
    "TraceWorkload",
    "check_rate",
    "read_request_trace",
]

IntRange = int | tuple[int, int]
Ints = NDArray[np.int64]

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
"""A request trace file's columns (CSV with this header; other columns are ignored)."""


def check_rate(value: float, name: str) -> float:
    """A finite number > 0 (a rate, a mean duration), or ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def _count(n: int) -> int:
    return check_int(n, name="n", minimum=1)


@dataclass(frozen=True, kw_only=True)
class PoissonArrivals:
    """Poisson arrivals at ``rate_per_s``: exponential inter-arrival times."""

    rate_per_s: float

    def __post_init__(self) -> None:
        check_rate(self.rate_per_s, "rate_per_s")

    @property
    def mean_interarrival_s(self) -> float:
        return 1.0 / self.rate_per_s

    @property
    def interarrival_scv(self) -> float:
        return 1.0

    def with_rate(self, rate_per_s: float) -> PoissonArrivals:
        return PoissonArrivals(rate_per_s=rate_per_s)

    def times(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        return np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=_count(n)))


@dataclass(frozen=True, kw_only=True)
class GammaArrivals:
    """A Gamma renewal process: inter-arrival mean ``1 / rate_per_s``, coefficient of
    variation ``cv`` (standard deviation over mean), so shape ``1 / cv^2``."""

    rate_per_s: float
    cv: float

    def __post_init__(self) -> None:
        check_rate(self.rate_per_s, "rate_per_s")
        if isinstance(self.cv, bool) or not isinstance(self.cv, int | float):
            raise ValueError(f"cv: expected a coefficient of variation > 0, got {self.cv!r}")
        if not (math.isfinite(self.cv) and self.cv > 0):
            raise ValueError(
                f"cv: expected a coefficient of variation > 0 (1 is Poisson), got {self.cv!r}"
            )

    @property
    def mean_interarrival_s(self) -> float:
        return 1.0 / self.rate_per_s

    @property
    def interarrival_scv(self) -> float:
        return float(self.cv) ** 2

    def with_rate(self, rate_per_s: float) -> GammaArrivals:
        """The same burstiness (cv) at another rate."""
        return GammaArrivals(rate_per_s=rate_per_s, cv=self.cv)

    def times(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        shape = 1.0 / float(self.cv) ** 2
        gaps = rng.gamma(shape, 1.0 / (shape * self.rate_per_s), size=_count(n))
        return np.cumsum(gaps)


@dataclass(frozen=True, kw_only=True)
class OnOffArrivals:
    """Poisson at ``rate_on_per_s`` while on, nothing while off; on and off periods are
    exponential with means ``mean_on_s`` and ``mean_off_s``. The run starts in the on
    state with the stationary probability ``mean_on_s / (mean_on_s + mean_off_s)``."""

    rate_on_per_s: float
    mean_on_s: float
    mean_off_s: float

    def __post_init__(self) -> None:
        check_rate(self.rate_on_per_s, "rate_on_per_s")
        check_rate(self.mean_on_s, "mean_on_s")
        check_rate(self.mean_off_s, "mean_off_s")

    @property
    def on_fraction(self) -> float:
        return self.mean_on_s / (self.mean_on_s + self.mean_off_s)

    @property
    def rate_per_s(self) -> float:
        """The long-run rate: the on rate times the fraction of time on."""
        return self.rate_on_per_s * self.on_fraction

    @property
    def mean_interarrival_s(self) -> float:
        return 1.0 / self.rate_per_s

    @property
    def interarrival_scv(self) -> float:
        """``1 + 2 r^2 / (lam (r1 + r2)^2)`` with ``lam`` the on rate, ``r1 = 1/mean_on_s``,
        ``r2 = 1/mean_off_s``: the squared coefficient of variation of the IPP's
        hyperexponential inter-arrival time (from its Laplace transform, Kuczura 1973)."""
        lam, r1, r2 = self.rate_on_per_s, 1.0 / self.mean_on_s, 1.0 / self.mean_off_s
        return 1.0 + 2.0 * lam * r1 / (r1 + r2) ** 2

    def with_rate(self, rate_per_s: float) -> OnOffArrivals:
        """The same on and off periods, the on rate scaled to give this long-run rate."""
        rate = check_rate(rate_per_s, "rate_per_s")
        return OnOffArrivals(
            rate_on_per_s=rate / self.on_fraction,
            mean_on_s=self.mean_on_s,
            mean_off_s=self.mean_off_s,
        )

    def times(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        n = _count(n)
        out: list[NDArray[np.float64]] = []
        got, t = 0, 0.0
        on = bool(rng.random() < self.on_fraction)
        while got < n:
            if not on:
                t += float(rng.exponential(self.mean_off_s))
                on = True
                continue
            d = float(rng.exponential(self.mean_on_s))
            k = int(rng.poisson(self.rate_on_per_s * d))
            if k:
                # Given their count, a Poisson process's points in a period are uniform on it.
                out.append(t + np.sort(rng.uniform(0.0, d, size=k)))
                got += k
            t += d
            on = False
        return np.concatenate(out)[:n]


Arrivals = PoissonArrivals | GammaArrivals | OnOffArrivals


# The first workloads: Poisson with fixed or uniform lengths, and a recorded trace -------
def _draw_lengths(rng: np.random.Generator, spec: IntRange, n: int) -> Ints:
    if isinstance(spec, tuple):
        return rng.integers(spec[0], spec[1] + 1, size=n)
    return np.full(n, int(spec), dtype=np.int64)


def _check_range(spec: IntRange, name: str, minimum: int) -> None:
    lo, hi = spec if isinstance(spec, tuple) else (spec, spec)
    for x in (lo, hi):
        check_int(x, name=name, why=f"an integer or a (low, high) pair, got {spec!r}")
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
        check_int(self.requests, name="requests", minimum=1)
        check_size(self.requests, name="requests", limit="requests")
        _check_range(self.prompt_tokens, "prompt_tokens", 1)
        _check_range(self.output_tokens, "output_tokens", 1)

    def with_rate(self, rate_per_s: float) -> PoissonWorkload:
        return dataclasses.replace(self, rate_per_s=rate_per_s)

    @property
    def mean_prompt_tokens(self) -> float:
        p = self.prompt_tokens
        return (p[0] + p[1]) / 2.0 if isinstance(p, tuple) else float(p)

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        import pandas as pd  # start-up: pandas costs ~0.3 s; only a drawn request table needs it

        n = self.requests
        return pd.DataFrame(
            {
                "arrival_s": np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=n)),
                "prompt_tokens": _draw_lengths(rng, self.prompt_tokens, n),
                "output_tokens": _draw_lengths(rng, self.output_tokens, n),
            }
        )


# Replay of a recorded trace ------------------------------------------------------------------
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
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError("trace: arrival_s must be finite and >= 0")
        back = np.flatnonzero(np.diff(arr) < 0)
        if back.size:
            i = int(back[0]) + 1
            raise ValueError(
                f"trace: arrival_s must be non-decreasing (sorted by arrival); request {i} "
                f"arrives at {arr[i]:g} s, before request {i - 1} at {arr[i - 1]:g} s"
            )
        for name in ("prompt_tokens", "output_tokens"):
            lengths = np.asarray(getattr(self, name))
            if lengths.min() < 1:
                i = int(np.argmin(lengths))
                raise ValueError(f"trace: every {name} must be >= 1; request {i} has {lengths[i]}")

    @property
    def mean_prompt_tokens(self) -> float:
        return float(np.mean(self.prompt_tokens))

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        import pandas as pd  # start-up: as in PoissonWorkload.sample

        return pd.DataFrame(
            {
                "arrival_s": np.asarray(self.arrival_s, dtype=float),
                "prompt_tokens": np.asarray(self.prompt_tokens, dtype=np.int64),
                "output_tokens": np.asarray(self.output_tokens, dtype=np.int64),
            }
        )


def read_request_trace(path: str | os.PathLike[str]) -> TraceWorkload:
    """A request trace from a CSV file with the header ``arrival_s,prompt_tokens,
    output_tokens`` (seconds from any origin >= 0, sorted by arrival; whole tokens >= 1;
    further columns are ignored). Errors name the file and the problem."""
    import pandas as pd  # start-up: as in PoissonWorkload.sample; only a trace file is read

    table = pd.read_csv(path)
    missing = [c for c in TRACE_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing}; a request trace has {list(TRACE_COLUMNS)}"
        )
    for c in TRACE_COLUMNS[1:]:
        if table[c].dtype.kind not in "iu":
            raise ValueError(f"{path}: column {c!r} must hold whole numbers of tokens")
    try:
        return TraceWorkload(
            arrival_s=tuple(table["arrival_s"].astype(float)),
            prompt_tokens=tuple(int(x) for x in table["prompt_tokens"]),
            output_tokens=tuple(int(x) for x in table["output_tokens"]),
        )
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
