import math

import numpy as np
import pytest

from specsim.report.demo import two_token_demo


def test_demo_exact_values_and_monte_carlo_agree() -> None:
    d = two_token_demo(np.random.default_rng(0), blocks=50_000)
    assert d.acceptance == pytest.approx(0.6, abs=1e-15)
    assert d.correction == (1.0, 0.0)
    assert d.max_deviation <= 1e-15
    assert d.rejected_b_corrected_to_a == 1.0
    # Monte Carlo within 4.4 standard errors (false alarm ~1e-5).
    assert abs(d.mc_acceptance - 0.6) < 4.4 * d.mc_acceptance_se
    for f, se, p in zip(d.mc_emitted, d.mc_emitted_se, d.target, strict=True):
        assert abs(f - p) < 4.4 * se
    assert math.isfinite(d.mc_acceptance_se)


def test_demo_rejects_too_few_blocks() -> None:
    with pytest.raises(ValueError, match="blocks"):
        two_token_demo(np.random.default_rng(0), blocks=1)
