"""The measured alphas of the tiny real-text pairs (issue 15): the loader's checks, and the shift
study's measured part against direct computations from the committed CSV and the theory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.realtext import (
    DRAFTS,
    alpha_cell,
    measured_dir,
    read_alpha_positions,
    read_alpha_summary,
)
from specsim.acceptance.shift import implied_speedup, shift_costs, table3_comparison
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, cost_coefficient, verification_factor
from specsim.report.studies import load_study, run_study
from specsim.theory import optimal_gamma, walltime_speedup

SUMMARY = measured_dir() / "alpha-summary.csv"
# ../shared/data/leviathan2023_table3.csv, line 4 (Leviathan et al. 2023, Table 3).
TABLE3_GPT = ("GPT-like (97M)", "GPT-like (6M)", 0.88, 0.89)


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    return pd.read_csv(SUMMARY)


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    return run_study("shift", overrides={"what_if": False}, seed=5, fast=True).data


def test_the_committed_summary_reads_and_has_every_cell(raw: pd.DataFrame) -> None:
    s = read_alpha_summary()
    assert len(s) == len(raw) == 4 * 5 * 6 * 2
    assert set(s["draft"]) == set(DRAFTS)
    row = alpha_cell(s, draft="draft-en", corpus="de", temperature=0.0)
    direct = raw[
        (raw["draft"] == "draft-en")
        & (raw["corpus"] == "de")
        & (raw["temperature"] == 0.0)
        & (raw["text"] == "test")
    ]
    assert float(row["alpha_mean"]) == float(direct["alpha_mean"].iloc[0])
    pos = read_alpha_positions()
    assert pos["alpha"].between(0, 1).all()


def test_a_missing_column_is_named(raw: pd.DataFrame, tmp_path: Path) -> None:
    bad = tmp_path / "alpha-summary.csv"
    raw.drop(columns=["ci_high"]).to_csv(bad, index=False)
    with pytest.raises(ValueError, match=r"alpha-summary\.csv.*missing column.*'ci_high'"):
        read_alpha_summary(bad)


def test_a_wrong_draft_name_is_named(raw: pd.DataFrame, tmp_path: Path) -> None:
    bad = tmp_path / "alpha-summary.csv"
    raw.assign(draft=raw["draft"].replace("draft-en", "draft-fr")).to_csv(bad, index=False)
    with pytest.raises(ValueError, match=r"'draft' has unknown value\(s\) \['draft-fr'\]"):
        read_alpha_summary(bad)
    with pytest.raises(ValueError, match="unknown draft 'draft-fr'"):
        alpha_cell(read_alpha_summary(), draft="draft-fr", corpus="en", temperature=0.0)
    with pytest.raises(ValueError, match="temperature 0.5 was not measured"):
        alpha_cell(read_alpha_summary(), draft="draft-en", corpus="en", temperature=0.5)


def test_bad_values_are_named(raw: pd.DataFrame, tmp_path: Path) -> None:
    bad = tmp_path / "s.csv"
    raw.assign(alpha_mean=raw["alpha_mean"].where(raw.index != 3, 1.5)).to_csv(bad, index=False)
    with pytest.raises(ValueError, match=r"'alpha_mean' must lie in \[0, 1\], got 1.5 \(row 5\)"):
        read_alpha_summary(bad)
    pd.concat([raw, raw.iloc[:1]]).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="appears twice"):
        read_alpha_summary(bad)


def test_study_numbers_equal_direct_computations(raw: pd.DataFrame, measured: pd.DataFrame) -> None:
    cfg = load_study("shift").Config()
    m = measured[measured["part"] == "measured"]
    assert len(m) == len(raw)
    t, d, hw = (
        load_model(cfg.measured_target),
        load_model(cfg.measured_draft),
        load_hardware(cfg.measured_hardware),
    )
    c = float(cost_coefficient(d, Deployment(target=t, hardware=hw), batch=1, context=cfg.context))
    v = np.asarray(
        verification_factor(t, hw, np.arange(cfg.max_gamma + 1), batch=1, context=cfg.context),
        dtype=float,
    )
    for draft, corpus, temp in (
        ("draft-en", "de", 0.0),
        ("draft-code", "code", 1.0),
        ("draft-distil", "licences", 1.3),
    ):
        direct = raw[
            (raw["draft"] == draft)
            & (raw["corpus"] == corpus)
            & (raw["temperature"] == temp)
            & (raw["text"] == "test")
        ].iloc[0]
        row = m[
            (m["draft"] == draft)
            & (m["corpus"] == corpus)
            & (m["temperature"] == temp)
            & (m["text"] == "test")
        ].iloc[0]
        alpha = float(direct["alpha_mean"])
        assert row["mean_alpha"] == alpha
        assert (row["ci_low"], row["ci_high"]) == (direct["ci_low"], direct["ci_high"])
        g = int(optimal_gamma(alpha, c, max_gamma=cfg.max_gamma, v=v))
        assert implied_speedup(alpha, c, tuple(v))[0] == g
        assert row["gamma"] == g and row["c"] == pytest.approx(c, rel=1e-12)
        assert row["speedup"] == pytest.approx(float(walltime_speedup(alpha, g, c, v[g])), 1e-12)
        assert row["speedup_low"] <= row["speedup"] <= row["speedup_high"]


def test_shift_costs_and_summary(measured: pd.DataFrame) -> None:
    shift = load_study("shift")
    costs = shift_costs(measured)
    assert shift.shift_costs is shift_costs  # the study re-exports the library's
    assert costs["speedup lost (%)"].is_monotonic_decreasing
    m = measured[(measured["part"] == "measured") & (measured["text"] == "test")]
    en = m[(m["draft"] == "draft-en") & (m["corpus"] == "en") & (m["temperature"] == 0.0)]
    de = m[(m["draft"] == "draft-en") & (m["corpus"] == "de") & (m["temperature"] == 0.0)]
    row = costs[(costs["draft"] == "draft-en") & (costs["to"] == "de, T = 0")].iloc[0]
    lost = 100 * (1 - de["speedup"].iloc[0] / en["speedup"].iloc[0])
    assert row["speedup lost (%)"] == pytest.approx(lost)
    text = shift.summary(measured)
    top = costs.iloc[0]
    assert f"- Costliest shift: {top['shift']} ({top['draft']}, {top['from']} to " in text
    assert "What-if" not in text  # what_if = false leaves the synthetic part out


def test_summary_sets_table3_beside_the_measured_pairs(measured: pd.DataFrame) -> None:
    shift = load_study("shift")
    if not shift.LEVIATHAN_TABLE3.is_file():
        pytest.skip("the published Table 3 data (leviathan2023_table3.csv) is not beside this copy")
    text = shift.summary(measured)
    target, draft, a0, a1 = TABLE3_GPT
    assert f"| {target} / {draft} (Table 3, lm1b) | 16 | {a0:.2f} | {a1:.2f} |" in text
    assert "far less trained" in text


def test_summary_says_when_table3_is_absent(
    measured: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shift = load_study("shift")
    monkeypatch.setattr(shift, "LEVIATHAN_TABLE3", tmp_path / "absent.csv")
    df = shift.run(shift.Config(what_if=False), np.random.default_rng(0))
    assert not (df["part"] == "paper").any()
    assert table3_comparison(df).empty
    text = shift.summary(df)
    assert "Table 3 are not in this copy of specsim" in text and "comparison is left out" in text
    assert str(tmp_path) not in text  # no path outside the checkout
