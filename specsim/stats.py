"""Interval statistics shared by calibration, measurement and the fidelity page.

One estimator, one interval: :func:`ratio_interval` is the ratio of sums of paired blocks
(speculative time per emitted token, a speedup) with its delta-method standard error and a
Student t interval, used wherever a measured ratio carries an interval, so the same data
give the same interval on every page.

>>> ri = ratio_interval([1.0, 3.0], [1.0, 1.0])
>>> ri.estimate, round(ri.se, 12), round(ri.half, 4)  # t(0.975, 1 dof) = 12.7062
(2.0, 1.0, 12.7062)
>>> ri.bounds() == (2.0, ri.low, ri.high)
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats

__all__ = ["RatioInterval", "ratio_interval", "t_quantile"]


def t_quantile(dof: float, *, level: float = 0.95) -> float:
    """The two-sided ``level`` quantile of Student's t with ``dof`` degrees of freedom (at
    least 1)."""
    if not 0 < level < 1:
        raise ValueError(f"level: expected a probability in (0, 1), got {level!r}")
    return float(stats.t.ppf(0.5 + level / 2, max(dof, 1.0)))


class RatioInterval(NamedTuple):
    """A ratio of sums with its standard error and the half-width of its interval."""

    estimate: float
    se: float
    half: float

    @property
    def low(self) -> float:
        return self.estimate - self.half

    @property
    def high(self) -> float:
        return self.estimate + self.half

    def bounds(self) -> tuple[float, float, float]:
        """``(estimate, low, high)``."""
        return self.estimate, self.low, self.high


def ratio_interval(
    num: Sequence[float] | np.ndarray, den: Sequence[float] | np.ndarray, *, level: float = 0.95
) -> RatioInterval:
    """``R = sum(num) / sum(den)`` over ``n`` independent paired blocks, its standard error
    ``se = sqrt(sum((num - R den)^2) / (n (n - 1))) / mean(den)`` (the delta method for a
    ratio estimator, Cochran 1977, *Sampling Techniques*, eq. 6.9) and the half-width
    ``t(level; n - 1) se`` of its ``level`` interval (Student t with ``n - 1`` degrees of
    freedom: exact for normal blocks, and the normal quantile for many blocks).

    Assumes independent blocks: a slow drift shared by neighbours makes it too narrow.
    Needs at least two blocks of equal length, finite values and a positive ``sum(den)``;
    a ValueError names what is wrong.
    """
    x, y = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(
            f"num, den: need two equal-length 1-d arrays of >= 2 paired blocks, got "
            f"shapes {x.shape} and {y.shape}"
        )
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or y.sum() <= 0:
        raise ValueError("num, den: values must be finite and sum(den) > 0")
    n, r = len(x), float(x.sum() / y.sum())
    se = math.sqrt(float(((x - r * y) ** 2).sum()) / (n * (n - 1))) / float(y.mean())
    return RatioInterval(r, se, t_quantile(n - 1, level=level) * se)
