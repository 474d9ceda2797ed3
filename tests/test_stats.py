"""The intervals of specsim.stats: known answers, bad input, and their coverage."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from specsim.stats import (
    mean_interval,
    proportion_interval,
    quantile_interval,
    ratio_interval,
    t_quantile,
    z_quantile,
)


def test_known_answers() -> None:
    ri = ratio_interval([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert ri.bounds() == (2.0, 2.0, 2.0)  # proportional blocks: no spread
    x = np.array([1.0, 2.0, 3.0, 6.0])
    ri = ratio_interval(x, np.ones(4))
    assert ri.estimate == pytest.approx(3.0) and ri.se == pytest.approx(x.std(ddof=1) / 2.0)
    assert ri.half == pytest.approx(3.182446305 * ri.se, rel=1e-6)  # t(0.975, 3)
    assert ri.low == pytest.approx(3.0 - ri.half) and ri.high == pytest.approx(3.0 + ri.half)
    # se = sqrt(((1-2)^2 + (3-2)^2) / (2 * 1)) / 1 = 1; t(0.975, 1) = 12.7062
    assert ratio_interval([1.0, 3.0], [1.0, 1.0]).half == pytest.approx(12.706205, rel=1e-6)
    assert t_quantile(10**6) == pytest.approx(1.959964, rel=1e-5)  # the normal quantile


def test_bad_input_is_named() -> None:
    for num, den in (([1.0], [1.0]), ([1.0, 2.0], [1.0]), ([1.0, 2.0], [0.0, 0.0])):
        with pytest.raises(ValueError, match="num, den"):
            ratio_interval(num, den)
    with pytest.raises(ValueError, match="num, den"):
        ratio_interval([1.0, np.nan], [1.0, 1.0])
    with pytest.raises(ValueError, match="level"):
        ratio_interval([1.0, 2.0], [1.0, 1.0], level=1.0)


def test_the_interval_covers_the_true_ratio_95_percent_of_the_time() -> None:
    """Blocks like a speculative run's: spec time about constant, plain time proportional to
    a random token count. 2000 runs of 200 blocks; coverage within 4.5 standard errors."""
    rng = np.random.default_rng(7)
    runs, n, hits = 2000, 200, 0
    emitted = rng.integers(1, 5, size=(runs, n)).astype(float)  # mean 2.5 tokens
    spec = 0.12 + 0.01 * rng.standard_normal((runs, n))
    plain = emitted * (0.05 + 0.005 * rng.standard_normal((runs, n)))
    truth = 2.5 * 0.05 / 0.12
    for i in range(runs):
        ri = ratio_interval(plain[i], spec[i])
        hits += ri.low <= truth <= ri.high
    se = np.sqrt(0.95 * 0.05 / runs)
    assert abs(hits / runs - 0.95) <= 4.5 * se


def test_mean_interval_known_answers() -> None:
    mi = mean_interval([1.0, 2.0, 3.0, 6.0])
    assert mi.estimate == 3.0 and mi.se == pytest.approx(np.std([1, 2, 3, 6], ddof=1) / 2)
    assert mi.half == pytest.approx(3.182446305 * mi.se, rel=1e-6)  # t(0.975, 3)
    assert z_quantile(0.99) == pytest.approx(2.5758293, rel=1e-7)
    for bad in ([1.0], [1.0, np.inf]):
        with pytest.raises(ValueError, match="x: need >= 2 finite"):
            mean_interval(bad)
    with pytest.raises(ValueError, match="level"):
        z_quantile(0.0)


# Quantile and proportion intervals ------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "q", "confidence"),
    [(50, 0.5, 0.95), (400, 0.99, 0.95), (1000, 0.99, 0.9), (368, 0.99, 0.95)],
)
def test_order_statistic_ranks_are_the_binomial_ones(n: int, q: float, confidence: float) -> None:
    # On the sample 1..n the interval's ends are its ranks.
    low, high = quantile_interval(np.arange(1.0, n + 1), q, confidence=confidence)
    tail = (1 - confidence) / 2
    b = stats.binom(n, q)
    lo = 0 if math.isinf(low) else int(low)
    hi = n + 1 if math.isinf(high) else int(high)
    # Each side misses with probability at most a/2 (P(B < l) and P(B >= u))...
    assert b.cdf(lo - 1) <= tail + 1e-12 and b.sf(hi - 1) <= tail + 1e-12
    # ...and no tighter rank would do.
    assert lo == 0 or b.cdf(lo) > tail
    assert hi == n + 1 or b.sf(hi - 2) > tail
    assert b.cdf(hi - 1) - b.cdf(lo - 1) >= confidence - 1e-12


def test_a_p99_needs_368_requests_for_an_upper_bound() -> None:
    x = np.arange(1.0, 368.0)
    assert math.isinf(quantile_interval(x, 0.99)[1])  # 367: 0.99**367 > 0.025
    assert quantile_interval(np.arange(1.0, 369.0), 0.99)[1] == 368.0


def test_proportion_interval_known_ends() -> None:
    assert proportion_interval(0, 20) == (0.0, pytest.approx(1 - 0.025 ** (1 / 20)))
    assert proportion_interval(20, 20) == (pytest.approx(0.025 ** (1 / 20)), 1.0)
    low, high = proportion_interval(90, 100)
    assert low < 0.9 < high
    with pytest.raises(ValueError, match="successes"):
        proportion_interval(5, 4)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"q": 1.0}, "q: expected"),
        ({"confidence": 1.5}, "confidence"),
        ({"batches": 1}, "batches"),
        ({"batches": 50}, "batches: 50 batches"),
    ],
)
def test_quantile_interval_rejects_bad_input(kwargs: dict[str, Any], fragment: str) -> None:
    args = {"q": 0.99, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        quantile_interval(np.arange(10.0), args.pop("q"), **args)
    with pytest.raises(ValueError, match="finite"):
        quantile_interval([1.0, np.nan], 0.5)
