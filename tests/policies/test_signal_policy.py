"""Predicted acceptance from a draft's signals and the prefix-threshold lookahead policy."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.acceptance.processes import AcceptanceDraw
from specsim.policies.lookahead import LookaheadPolicy, PolicyContext
from specsim.policies.replay import CostModel, calibrate_threshold, replay
from specsim.policies.signal import (
    AcceptanceModel,
    SignalThreshold,
    fit_acceptance_model,
    prefix_threshold,
    signal_draw,
)


def _ctx(conf: list[float], position: int = 0) -> PolicyContext:
    n = len(conf)
    draw = AcceptanceDraw(u=np.zeros(n), prob=np.ones(n), confidence=np.asarray(conf))
    return PolicyContext(position=position, draw=draw, last_gamma=None, last_accepted=None)


def test_logistic_fit_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(5)
    n = 6000
    prob = rng.uniform(0.01, 1.0, n)
    ent = rng.uniform(0.0, 5.0, n)
    truth = np.array([0.5, 0.8, -0.4])
    z = truth[0] + truth[1] * np.log(prob) + truth[2] * ent
    y = rng.random(n) < 1 / (1 + np.exp(-z))
    m = fit_acceptance_model(prob, ent, y)
    for est, se, t in zip(m.coef, m.se, truth, strict=True):
        assert abs(est - t) <= 4.5 * se
    assert m.n == n and m.mean_accept == pytest.approx(y.mean())
    pred = m.predict(prob, ent)
    assert ((pred > 0) & (pred < 1)).all()
    assert m.log_loss(prob, ent, y) < AcceptanceModel(coef=(0.0, 0.0, 0.0)).log_loss(prob, ent, y)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="draft_prob"):
        fit_acceptance_model([1.5], [1.0], [1])
    with pytest.raises(ValueError, match="draft_entropy"):
        fit_acceptance_model([0.5], [-1.0], [1])
    with pytest.raises(ValueError, match="accepted"):
        fit_acceptance_model([0.5, 0.5], [1.0, 1.0], [1, 2])
    with pytest.raises(ValueError, match="coef"):
        AcceptanceModel(coef=(0.0, float("nan"), 0.0))
    with pytest.raises(ValueError, match="threshold"):
        SignalThreshold(threshold=-0.1)
    with pytest.raises(ValueError, match="max_gamma"):
        SignalThreshold(threshold=0.5, max_gamma=0)
    with pytest.raises(ValueError, match="mean_accept"):
        prefix_threshold(c=0.1, mean_accept=0.0)
    with pytest.raises(ValueError, match="a draw"):
        SignalThreshold(threshold=0.5).choose(
            PolicyContext(position=0, draw=None, last_gamma=None, last_accepted=None)
        )


def test_threshold_formula_and_break_even() -> None:
    assert prefix_threshold(c=0.2) == pytest.approx(0.2)  # break-even: h = c
    assert prefix_threshold(c=0.2, rate=2.0, mean_accept=0.5, dv=0.05) == pytest.approx(1.0)


def test_policy_drafts_while_the_prefix_survives() -> None:
    pol = SignalThreshold(threshold=0.5, max_gamma=8)
    assert isinstance(pol, LookaheadPolicy)
    # P_k = 0.9, 0.72, 0.36: tokens 1 (P_0 = 1), 2 (0.9), 3 (0.72) are drafted, not 4.
    assert pol.choose(_ctx([0.9, 0.8, 0.5, 0.9, 0.9])) == 3
    # From position 2: P_1 = 0.5 (>= 0.5, go on), P_2 = 0.45: two tokens.
    assert pol.choose(_ctx([0.9, 0.8, 0.5, 0.9, 0.9], position=2)) == 2
    assert SignalThreshold(threshold=0.0, max_gamma=4).choose(_ctx([1.0] * 10)) == 4
    assert SignalThreshold(threshold=1.01).choose(_ctx([1.0] * 3)) == 0


def test_signal_draw_replays_the_flags() -> None:
    d = signal_draw(accepted=[True, False, True], predicted=[0.9, 0.1, 0.5])
    assert d.accepts(0, 3).tolist() == [True, False, True]
    assert d.confidence.tolist() == [0.9, 0.1, 0.5]


def test_derived_threshold_is_near_the_best_threshold() -> None:
    """With a perfect signal (each token's acceptance probability known), the threshold from
    the cost ratio by Dinkelbach's iteration reaches within 2% of the best threshold on a grid,
    and beats every fixed gamma when acceptance varies a lot from token to token."""
    rng = np.random.default_rng(9)
    draws = []
    for _ in range(20):
        a = np.where(rng.random(300) < 0.5, 0.95, 0.2)  # easy and hard tokens, i.i.d.
        draws.append(signal_draw(accepted=rng.random(300) < a, predicted=a))
    cost = CostModel(c=0.1, v=(1.0,) + (1.0,) * 8)
    h, rate = calibrate_threshold(draws, cost, mean_accept=0.575)

    def speed(pol: object) -> float:
        tok, _, time, _ = replay(draws, pol, cost)  # type: ignore[arg-type]
        return float(tok.sum() / time.sum())

    got = speed(SignalThreshold(threshold=h, max_gamma=8))
    assert got == pytest.approx(rate, rel=0.02)
    grid = max(speed(SignalThreshold(threshold=t, max_gamma=8)) for t in np.linspace(0, 1, 11))
    assert got >= 0.98 * grid
    from specsim.policies.lookahead import FixedGamma

    assert got > max(speed(FixedGamma(gamma=g)) for g in range(9))
