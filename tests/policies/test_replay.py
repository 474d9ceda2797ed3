"""Replays of measured acceptance sequences, and predictions of the measured real runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.policies import replay as rp
from specsim.policies.lookahead import FixedGamma, Oracle
from specsim.policies.signal import signal_draw
from specsim.theory import expected_tokens


def _iid_draws(rng: np.random.Generator, alpha: float, m: int, n: int) -> list:
    out = []
    for _ in range(m):
        acc = rng.random(n) < alpha
        out.append(signal_draw(accepted=acc, predicted=np.full(n, alpha)))
    return out


def test_cost_model_is_checked() -> None:
    with pytest.raises(ValueError, match=r"CostModel\.c"):
        rp.CostModel(c=-1.0, v=(1.0, 1.0))
    with pytest.raises(ValueError, match=r"CostModel\.v"):
        rp.CostModel(c=0.1, v=(2.0, 1.0))
    assert rp.CostModel(c=0.1, v=(1.0, 1.2, 1.3)).block(2) == pytest.approx(1.5)


def test_fixed_gamma_replay_matches_equation_1_and_oracle_reads_the_runs() -> None:
    draws = _iid_draws(np.random.default_rng(2), 0.6, 30, 300)
    cost = rp.CostModel(c=0.1, v=(1.0,) + (1.0,) * 8)
    for g in (0, 1, 3, 8):
        tok, blk, _, drafted = rp.replay(draws, FixedGamma(gamma=g), cost)
        est = tok.sum() / blk.sum()
        per = tok / blk
        se = per.std(ddof=1) / np.sqrt(len(per))
        assert abs(est - expected_tokens(0.6, g)) <= 4.5 * se + 1e-12
        assert drafted.sum() == g * blk.sum()
    tok8, blk8, _, _ = rp.replay(draws, FixedGamma(gamma=8), cost)
    tok_o, blk_o, time_o, drafted_o = rp.replay(draws, Oracle(max_gamma=8), cost)
    # The oracle drafts exactly the run that is accepted: the same blocks as gamma = 8,
    # but it pays only for the drafts it keeps.
    np.testing.assert_array_equal(tok_o, tok8)
    np.testing.assert_array_equal(blk_o, blk8)
    np.testing.assert_allclose(time_o, blk_o + 0.1 * drafted_o)
    with pytest.raises(ValueError, match="outside"):
        rp.replay(draws[:1], FixedGamma(gamma=9), cost)


def _committed() -> tuple[pd.DataFrame, pd.DataFrame]:
    from specsim.acceptance.realtext import measured_dir

    try:
        d = measured_dir()
    except FileNotFoundError:
        pytest.skip("models/measured/real is not in this checkout")
    cols = [
        "run_id",
        "draft",
        "temperature",
        "corpus",
        "prompt",
        "gamma",
        "block",
        "emitted",
        "draft_s",
        "target_s",
        "verify_s",
    ]
    return pd.read_csv(d / "specdec.csv", usecols=cols), pd.read_csv(d / "autoregressive.csv")


def test_measured_cost_and_policy_comparison_on_committed_data() -> None:
    from specsim.acceptance.realtext import read_alpha_positions

    sd, ar = _committed()
    pos = read_alpha_positions()
    cost = rp.measured_cost(sd, ar)
    assert 0 < cost.c < 2 and cost.max_gamma == 8 and cost.v[0] == 1.0
    assert all(b >= a for a, b in zip(cost.v[1:], cost.v[2:], strict=False))
    cell = ("draft-distil", 1.0, "en")
    card = rp.CostModel(c=0.05, v=(1.0,) * 9)
    rows = rp.replay_cells(pos, card, cells=[cell])
    assert set(rows.policy) == {*(f"fixed-{g}" for g in range(9)), "oracle", "signal"}
    by = rows.set_index("policy")
    assert by.loc["oracle", "tokens_per_pass"] == pytest.approx(
        by.loc["fixed-8", "tokens_per_pass"]
    )
    assert by.loc["fixed-0", "speedup"] == pytest.approx(1.0)
    cmp = rp.compare_policies(rows)
    best = max(by.loc[f"fixed-{g}", "speedup"] for g in range(9))
    assert cmp.speedup_best_fixed.iloc[0] == pytest.approx(best)
    assert cmp.gain.iloc[0] == pytest.approx(by.loc["signal", "speedup"] / best - 1)
    assert np.isfinite(cmp.gain_se).all()


def test_predicted_runs_equal_measured_with_measured_tokens() -> None:
    """Identity: with each run's own tokens per block, the prediction is the measurement."""
    sd, ar = _committed()
    sd = sd[sd.draft == "draft-en"]
    per_run = sd.groupby("run_id").emitted.mean()
    runs = rp.predict_speedups(
        sd,
        ar,
        {
            "own": lambda r: per_run[r.run_id],
            "theorem": lambda r: expected_tokens(0.3, int(r.gamma)),
        },
    )
    np.testing.assert_allclose(runs.pred_own, runs.measured, rtol=1e-9)
    table = rp.prediction_table(runs)
    assert len(table) == 2 * 4 and (table.runs == 6).all()
    assert np.allclose(table.err_own, 0.0, atol=1e-9)
    with pytest.raises(ValueError, match="plain twin"):
        rp.predict_speedups(sd, ar[ar.corpus == "en"], {"own": lambda r: 1.0})
