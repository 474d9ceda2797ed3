"""Request length distributions: on whole tokens >= 1, each with its exact ``mean`` and
``second_moment`` (as Ciw's distributions carry theirs), so that queueing formulas are
evaluated on the object the simulator samples (re-exported by
:mod:`specsim.sim.workload.workload`, which pairs them with arrival processes)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from specsim.checks import check_int
from specsim.sim.workload.arrivals import check_rate

__all__ = ["Empirical", "Fixed", "Geometric", "Lengths", "LogNormal", "Uniform", "Zipf"]

Ints = NDArray[np.int64]


def _whole(value: object, name: str, minimum: int = 1) -> int:
    return check_int(value, name=name, minimum=minimum, why="a length in tokens")


@dataclass(frozen=True, kw_only=True)
class Fixed:
    """Every request has ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        _whole(self.value, "value")

    @property
    def mean(self) -> float:
        return float(self.value)

    @property
    def second_moment(self) -> float:
        return float(self.value) ** 2

    def sample(self, rng: np.random.Generator, n: int) -> Ints:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class Uniform:
    """Uniform on the whole numbers ``low .. high`` (both included)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _whole(self.low, "low")
        if _whole(self.high, "high") < self.low:
            raise ValueError(f"high: expected >= low ({self.low}), got {self.high!r}")

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2.0

    @property
    def second_moment(self) -> float:
        width = self.high - self.low + 1
        return (width * width - 1) / 12.0 + self.mean**2

    def sample(self, rng: np.random.Generator, n: int) -> Ints:
        return rng.integers(self.low, self.high + 1, size=n)


@dataclass(frozen=True, kw_only=True)
class Geometric:
    """``P(L = k) = p (1 - p)^(k - 1)`` for k >= 1 with ``p = 1 / mean``: the discrete
    memoryless length (the count of decode steps until an end-of-sequence token that each
    step emits with probability p)."""

    mean_tokens: float

    def __post_init__(self) -> None:
        if check_rate(self.mean_tokens, "mean_tokens") < 1:
            raise ValueError(f"mean_tokens: expected a mean >= 1 token, got {self.mean_tokens!r}")

    @property
    def mean(self) -> float:
        return float(self.mean_tokens)

    @property
    def second_moment(self) -> float:
        p = 1.0 / self.mean_tokens
        return (2.0 - p) / (p * p)

    def sample(self, rng: np.random.Generator, n: int) -> Ints:
        return rng.geometric(1.0 / self.mean_tokens, size=n).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class Empirical:
    """``values[i]`` with probability ``counts[i] / sum(counts)`` (counts default to 1 each)."""

    values: tuple[int, ...]
    counts: tuple[float, ...] | None = None
    _p: NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.values, list):
            object.__setattr__(self, "values", tuple(self.values))
        if isinstance(self.counts, list):
            object.__setattr__(self, "counts", tuple(self.counts))
        if len(self.values) == 0:
            raise ValueError("values: expected at least one length")
        for i, v in enumerate(self.values):
            _whole(v, f"values[{i}]")
        w = np.ones(len(self.values)) if self.counts is None else np.asarray(self.counts, float)
        if w.shape != (len(self.values),):
            raise ValueError(f"counts: expected {len(self.values)} counts, got {len(w)}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("counts: expected finite counts >= 0 with a positive sum")
        object.__setattr__(self, "_p", w / w.sum())

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str], *, column: str = "tokens") -> Empirical:
        """From a CSV file: a ``column`` of lengths, one a row, or a histogram with a
        ``count`` column beside it."""
        import pandas as pd  # start-up: pandas costs ~0.3 s; only a lengths file needs it

        table = pd.read_csv(path)
        if column not in table.columns:
            raise ValueError(f"{path}: no column {column!r} (columns: {list(table.columns)})")
        counts = tuple(table["count"].astype(float)) if "count" in table.columns else None
        values = table[column].to_numpy()
        if values.dtype.kind not in "iu":
            raise ValueError(f"{path}: column {column!r} must hold whole numbers of tokens")
        return cls(values=tuple(int(v) for v in values), counts=counts)

    @property
    def mean(self) -> float:
        return float(self._p @ np.asarray(self.values, dtype=float))

    @property
    def second_moment(self) -> float:
        v = np.asarray(self.values, dtype=float)
        return float(self._p @ (v * v))

    def sample(self, rng: np.random.Generator, n: int) -> Ints:
        idx = rng.choice(len(self.values), size=n, p=self._p)
        return np.asarray(self.values, dtype=np.int64)[idx]


class _Tabled:
    """A distribution on ``low .. high`` given by its probabilities there: exact moments by
    summing over the support, sampling by inverting the distribution function."""

    low: int
    high: int

    def pmf(self) -> NDArray[np.float64]:  # pragma: no cover - each subclass has its own
        raise NotImplementedError

    @property
    def mean(self) -> float:
        return float(self.pmf() @ np.arange(self.low, self.high + 1, dtype=float))

    @property
    def second_moment(self) -> float:
        k = np.arange(self.low, self.high + 1, dtype=float)
        return float(self.pmf() @ (k * k))

    def sample(self, rng: np.random.Generator, n: int) -> Ints:
        cdf = np.cumsum(self.pmf())
        idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
        return self.low + np.minimum(idx, self.high - self.low).astype(np.int64)


def _bounds(low: int, high: int) -> None:
    _whole(low, "low")
    if _whole(high, "high") < low:
        raise ValueError(f"high: expected >= low ({low}), got {high!r}")
    if high - low > 10_000_000:
        raise ValueError(f"high: at most low + 10,000,000 tokens, got {high!r}")


@dataclass(frozen=True, kw_only=True)
class LogNormal(_Tabled):
    """``exp(N(ln median, sigma^2))`` rounded to the nearest whole token and cut to
    ``[low, high]`` (the mass below and above lands on the ends). Its moments are those
    of that rounded, cut variable, summed exactly over ``low .. high``."""

    median: float
    sigma: float
    high: int
    low: int = 1

    def __post_init__(self) -> None:
        check_rate(self.median, "median")
        check_rate(self.sigma, "sigma")
        _bounds(self.low, self.high)

    def pmf(self) -> NDArray[np.float64]:
        k = np.arange(self.low, self.high + 1, dtype=float)
        z_hi = (np.log(k + 0.5) - math.log(self.median)) / self.sigma
        from scipy.special import ndtr  # start-up: scipy costs ~0.1 s; only this pmf needs it

        cdf_hi = ndtr(z_hi)
        cdf_hi[-1] = 1.0
        cdf_lo = np.concatenate([[0.0], cdf_hi[:-1]])
        return np.asarray(cdf_hi - cdf_lo, dtype=np.float64)

    def sample(self, rng: np.random.Generator, n: int) -> Ints:
        x = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(np.floor(x + 0.5), self.low, self.high).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class Zipf(_Tabled):
    """A power law on whole numbers: ``P(L = k)`` proportional to ``k^-exponent`` for
    ``low <= k <= high`` (a truncated Zipf law; any exponent > 0 is a distribution)."""

    exponent: float
    high: int
    low: int = 1

    def __post_init__(self) -> None:
        check_rate(self.exponent, "exponent")
        _bounds(self.low, self.high)

    def pmf(self) -> NDArray[np.float64]:
        k = np.arange(self.low, self.high + 1, dtype=float)
        w = np.exp(-self.exponent * (np.log(k) - math.log(self.low)))  # scaled: no underflow
        return np.asarray(w / w.sum(), dtype=np.float64)


Lengths = Fixed | Uniform | Geometric | LogNormal | Zipf | Empirical
