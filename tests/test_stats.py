"""The one ratio interval (specsim.stats): known answers, bad input, and its coverage."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.stats import ratio_interval, t_quantile


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
