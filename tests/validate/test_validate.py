"""The simulator against the closed forms, the dropped assumptions, and measured runs."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost import step_cost_grid
from specsim.validate.forms import assumptions_dropped, blocks_needed, check_grid, predict_runs


def test_small_grid_passes_and_intervals_are_tight_enough() -> None:
    df = check_grid(
        np.random.default_rng(3),
        alphas=(0.1, 0.5, 0.95),
        gammas=(1, 4, 10),
        cs=(0.0, 0.2),
        relative=0.01,
    )
    assert df["ok"].all(), df.loc[~df["ok"]]
    e = df[df.quantity == "tokens_per_pass"]
    half = (e["ci_high"] - e["ci_low"]) / 2
    assert (half / e["simulated"] < 0.012).all()
    # Standardized errors look standard normal, not degenerate (a test that can fail).
    assert 0.4 < df["z"].std() < 2.0


def test_blocks_needed_grows_with_variance() -> None:
    assert blocks_needed(0.9, 10) > blocks_needed(0.9, 1)


def test_assumptions_table_shows_known_directions() -> None:
    df = assumptions_dropped(np.random.default_rng(1), tokens=20_000)
    base = df[df["assumption dropped"] == "none"].iloc[0]
    assert abs(base.error_pct) < 2.0
    batch = df[df["assumption dropped"] == "batch 1"].iloc[0]
    assert batch.error_pct > 10.0  # the formula over-predicts once passes are shared by 64


@pytest.mark.parametrize("bad", [0, -0.01, float("nan")])
def test_bad_relative_and_z_are_errors(bad: float) -> None:
    with pytest.raises(ValueError, match="relative"):
        blocks_needed(0.5, 3, relative=bad)
    with pytest.raises(ValueError, match="z:"):
        check_grid(np.random.default_rng(0), alphas=(0.5,), gammas=(1,), cs=(0.0,), z=bad)


# Fidelity: measured runs (predict_runs) on synthetic traces ----------------------------------

CPU_CARD = str(Path(__file__).parents[2] / "models" / "calibrated" / "cpu-epyc-2vcpu.toml")


def _spec_rows(run_id: str, batch: int, device: str, block_s: float) -> tuple[list, list]:
    """Four blocks of gamma 3 emitting 2 tokens each (8 tokens), ``block_s`` per block."""
    blocks, positions = [], []
    for block in range(4):
        for seq in range(batch):
            blocks.append(
                {
                    "run_id": run_id,
                    "target": "gpt-like-97m",
                    "draft": "gpt-like-6m",
                    "dtype": "float32",
                    "device": device,
                    "temperature": 1.0,
                    "gamma": 3,
                    "batch": batch,
                    "prompt_len": 64,
                    "vocab": 8192,
                    "block": block,
                    "seq": seq,
                    "context": 64 + 2 * block,
                    "accepted": 1,
                    "emitted": 2,
                    "draft_s": 0.6 * block_s,
                    "target_s": 0.3 * block_s,
                    "verify_s": 0.1 * block_s,
                }
            )
            for i in range(3):
                positions.append(
                    {
                        "run_id": run_id,
                        "block": block,
                        "seq": seq,
                        "position": i + 1,
                        "alpha": 0.5,
                        "accepted": i < 1,
                        "reached": i <= 1,
                        "draft_pass_s": 0.0,
                    }
                )
    return blocks, positions


def _ar_rows(run_id: str, batch: int, device: str, step_s: float) -> list:
    return [
        {
            "run_id": run_id,
            "model": "gpt-like-97m",
            "dtype": "float32",
            "device": device,
            "temperature": 1.0,
            "batch": batch,
            "prompt_len": 64,
            "step": s,
            "context": 64 + s,
            "forward_s": 0.9 * step_s,
            "sample_s": 0.1 * step_s,
        }
        for s in range(8)
    ]


def _two_batch_traces(device8: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    # Batch 1: 0.1 s per block of 2 tokens (0.05 s/token) against a 0.05 s plain step:
    # speedup 1.0. Batch 8: 0.2 s per block (0.1 s/token) against 0.25 s: speedup 2.5.
    b1, p1 = _spec_rows("sd/b1", 1, "cpu", 0.1)
    b8, p8 = _spec_rows("sd/b8", 8, device8, 0.2)
    ar = _ar_rows("ar/b1", 1, "cpu", 0.05) + _ar_rows("ar/b8", 8, device8, 0.25)
    return pd.DataFrame(b1 + b8), pd.DataFrame(ar), pd.DataFrame(p1 + p8)


def test_predict_runs_pairs_each_run_with_the_plain_run_of_its_batch() -> None:
    spec, ar, pos = _two_batch_traces()
    card = load_hardware(CPU_CARD)
    out = predict_runs(spec, ar, pos, card, np.random.default_rng(0), seeds=2)
    out = out.set_index("run_id")
    # Pooling the batch-8 plain run into the batch-1 twin reported 3.0 here.
    assert out.loc["sd/b1", "measured_speedup"] == pytest.approx(1.0)
    assert out.loc["sd/b8", "measured_speedup"] == pytest.approx(2.5)
    assert out.loc["sd/b1", "batch"] == 1 and out.loc["sd/b8", "batch"] == 8
    # Replay at the run's own batch: 8 sequences per pass, not one.
    target, draft = load_model("gpt-like-97m"), load_model("gpt-like-6m")
    ctx = 64 + 2 * np.arange(4)
    for run_id, b in (("sd/b1", 1), ("sd/b8", 8)):
        kw = dict(batch=b, context=ctx, dtype="float32")
        block_s = (
            3 * step_cost_grid(draft, card, new_tokens=1, **kw).time_s
            + step_cost_grid(target, card, new_tokens=4, **kw).time_s
        )
        ar_s = step_cost_grid(
            target, card, batch=b, context=64 + np.arange(8), new_tokens=1, dtype="float32"
        ).time_s.mean()
        row = out.loc[run_id]
        assert row["replay_token_s"] == pytest.approx(block_s.sum() / 8, rel=1e-12)
        assert row["replay_speedup"] == pytest.approx(ar_s / (block_s.sum() / 8), rel=1e-12)
    assert out.loc["sd/b8", "replay_token_s"] > out.loc["sd/b1", "replay_token_s"]
    # The stream simulator is single-sequence: no simulated figures at batch 8.
    assert np.isfinite(out.loc["sd/b1", ["simulated_token_s", "simulated_speedup"]]).all()
    simulated = [f"simulated_{c}" for c in ("token_s", "speedup", "latency_error", "speedup_error")]
    assert out.loc["sd/b8", simulated].isna().all()


def test_predict_runs_does_not_pair_runs_across_devices() -> None:
    spec, ar, pos = _two_batch_traces()
    ar.loc[ar.run_id == "ar/b8", "device"] = "cuda"
    with pytest.raises(ValueError, match=r"sd/b8"):
        predict_runs(spec, ar, pos, load_hardware(CPU_CARD), np.random.default_rng(0), seeds=1)


def test_predict_runs_checks_seeds() -> None:
    spec, ar, pos = _two_batch_traces()
    card = load_hardware(CPU_CARD)
    for bad in (0, -1, True, 1.5):
        error = ValueError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError
        with pytest.raises(error, match="seeds: expected an integer >= 1, got"):
            predict_runs(spec, ar, pos, card, np.random.default_rng(0), seeds=bad)  # type: ignore[arg-type]


# The verdict's interval, the summary and specsim validate's output ---------------------------
def _small_checks() -> pd.DataFrame:
    return check_grid(
        np.random.default_rng(5), alphas=(0.3, 0.8), gammas=(2, 5), cs=(0.0, 0.1), relative=0.03
    )


def test_the_pass_interval_is_the_one_the_verdict_uses() -> None:
    """Issue 13: a 99% interval was printed while the verdict allowed |z| <= 4.5."""
    from specsim.validate.forms import Z_CHECK

    df = _small_checks()
    inside = (df["pass_low"] - 1e-12 <= df["formula"]) & (df["formula"] <= df["pass_high"] + 1e-12)
    assert (inside == df["ok"]).all()
    half = (df["pass_high"] - df["pass_low"]) / 2
    assert np.allclose(half, Z_CHECK * df["se"])
    assert (df["ci_high"] - df["ci_low"] < df["pass_high"] - df["pass_low"]).all()
    # A check the verdict fails lies outside its printed interval, and the other way round.
    shifted = check_grid(
        np.random.default_rng(5), alphas=(0.8,), gammas=(5,), cs=(0.0,), relative=0.03, z=0.01
    )
    bad = shifted[~shifted["ok"]]
    outside = (bad["formula"] < bad["pass_low"]) | (bad["formula"] > bad["pass_high"])
    assert len(bad) and outside.all()


def test_check_summary_counts_and_worst_z() -> None:
    from specsim.validate.forms import check_summary

    df = _small_checks()
    s = check_summary(df)
    assert list(s["quantity"]) == ["tokens_per_pass", "walltime_speedup", "ops_factor"]
    assert (s["checks"] == 8).all() and (s["passed"] + s["failed"] == s["checks"]).all()
    for r in s.itertuples():
        g = df[df["quantity"] == r.quantity]
        assert r.worst_abs_z == pytest.approx(g["z"].abs().max())


@pytest.fixture
def small_validate(monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame:
    import specsim.cli.validate as cli_validate

    checks = _small_checks()
    dropped = pd.DataFrame(
        [
            {
                "case": "baseline",
                "assumption dropped": "none",
                "quantity": "walltime_speedup",
                "simulated": 2.0,
                "formula": 2.01,
                "error_pct": 0.5,
            }
        ]
    )
    monkeypatch.setattr(
        cli_validate, "validation_tables", lambda rng, quick, progress=None: (checks, dropped)
    )
    return checks


def test_validate_prints_a_summary_by_default_and_the_grid_when_verbose(
    small_validate: pd.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    from specsim.cli import main

    assert main(["validate", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "8 of 8" in out and "worst |z|" in out and "99% interval" not in out
    assert "24 of 24 checks pass (|z| <= 4.5)" in out and "--verbose" in out
    assert len(out.splitlines()) < 20
    assert main(["validate", "--quick", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "pass interval (+-4.5 se)" in out and len(out.splitlines()) > 24


def test_validate_json_and_csv(
    small_validate: pd.DataFrame, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from specsim.cli import main

    csv = tmp_path / "checks.csv"
    assert main(["validate", "--quick", "--json", "--csv", str(csv)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["z_limit"] == 4.5 and record["failed"] == 0
    assert len(record["summary"]) == 3 and len(record["checks"]) == 24
    assert len(pd.read_csv(csv)) == 24
    assert main(["validate", "--quick", "--csv", str(csv)]) == 2  # no overwrite without --force
    assert "--csv" in capsys.readouterr().err


# The queueing table (specsim.validate.queueing) in `specsim validate` ---------------------
def _queueing_table(*, failing: bool = False) -> pd.DataFrame:
    from specsim.validate.queueing import QUEUEING_COLUMNS

    rows = [
        ["M/D/1", "rho s / (2 (1 - rho))", 0.5, 1, 20000, 0.51, 0.01, 0.5, 0.5, 1.0, True, "x"],
        [
            "M/G/1",
            "pk",
            0.6,
            1,
            8000,
            1.2 if failing else 0.95,
            0.01,
            0.95,
            0.95,
            25.0 if failing else 0.0,
            not failing,
            "y",
        ],
        [
            "JSQ, M/M/k bounds",
            "b",
            0.7,
            2,
            3000,
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            None,
            "skipped: no replicas",
        ],
    ]
    return pd.DataFrame(rows, columns=QUEUEING_COLUMNS)


@pytest.fixture(autouse=True)
def _small_queueing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI tests of this module run a stand-in queueing table (the real one is
    tests/validate/test_validate_queueing.py's), so that they stay fast."""
    import specsim.cli.validate as cli_validate

    monkeypatch.setattr(cli_validate, "queueing_checks", lambda rng, quick: _queueing_table())


def test_validate_prints_the_queueing_line_and_the_table_when_verbose(
    small_validate: pd.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    from specsim.cli import main

    assert main(["validate", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "queueing theory" in out and "2 of 2 queueing checks pass (|z| <= 4.5), 1 skipped" in out
    assert "M/D/1" not in out
    assert main(["validate", "--quick", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "M/D/1" in out and "skipped: no replicas" in out and "ok" in out


def test_a_failing_queueing_check_fails_validate(
    small_validate: pd.DataFrame,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    import specsim.cli.validate as cli_validate
    from specsim.cli import main

    monkeypatch.setattr(
        cli_validate, "queueing_checks", lambda rng, quick: _queueing_table(failing=True)
    )
    assert main(["validate", "--quick"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "1 of 2 queueing checks pass" in out  # the table shows the failure
    assert main(["validate", "--quick", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["queueing_failed"] == 1 and len(record["queueing"]) == 3
    assert record["queueing"][2]["pass"] is None
