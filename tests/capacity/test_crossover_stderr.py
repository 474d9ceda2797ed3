"""The crossover search's standard errors: the sample standard deviation over replicates
(``ddof = 1``) over the square root of their count, by hand on known numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specsim.capacity.crossover import crossing, summarize


def test_the_standard_error_is_the_sample_deviation_over_root_n() -> None:
    df = pd.DataFrame({"x": [1, 1, 1, 2, 2], "speedup": [1.0, 2.0, 3.0, 0.5, 0.9]})
    out = summarize(df, by=["x"], metrics=["speedup"]).set_index("x")
    # x = 1: mean 2, sample variance ((-1)^2 + 0 + 1^2) / (3 - 1) = 1, se = 1 / sqrt 3
    assert out.loc[1, "speedup"] == pytest.approx(2.0)
    assert out.loc[1, "speedup_se"] == pytest.approx(1.0 / math.sqrt(3.0), rel=1e-12)
    # x = 2: sample standard deviation |0.9 - 0.5| / sqrt 2, over sqrt 2: 0.2
    assert out.loc[2, "speedup_se"] == pytest.approx(0.2, rel=1e-12)


def test_the_crossing_interval_follows_those_errors() -> None:
    """The interval of a crossing between x = 1 and 2 is where mean -/+ 1.96 se cross 1."""
    df = pd.DataFrame({"x": [1, 1, 1, 2, 2, 2], "s": [1.1, 1.3, 1.2, 0.7, 0.9, 0.8]})
    agg = summarize(df, by=["x"], metrics=["s"])
    se = agg["s_se"].to_numpy()
    assert se == pytest.approx([0.1 / math.sqrt(3.0)] * 2, rel=1e-12)
    c = crossing(agg["x"], agg["s"], agg["s_se"])
    assert c.kind == "crosses"
    # log-linear between (1, y1) and (2, y2): x = 2^((y1 - 1) / (y1 - y2)) for each bound
    for y1, y2, at in ((1.2 - 1.96 * se[0], 0.8 - 1.96 * se[1], c.low), (1.2, 0.8, c.at)):
        assert at == pytest.approx(2.0 ** ((y1 - 1.0) / (y1 - y2)), rel=1e-9)
