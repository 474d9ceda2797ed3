"""What specsim calibrate refuses, and how it says so (issue 25): a fit without degrees of
freedom, flags with bad values, a model a trace names that no card describes; and the
passes past a card's positions, which it fits as measured and counts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.cards import fit_card, past_positions, predict, trust_problems
from specsim.cards import load_hardware, load_model
from specsim.cli import main
from specsim.traces.io import Trace, write_trace

TRUE = {
    "compute_efficiency": 0.6,
    "memory_efficiency": 0.7,
    "layer_overhead_s": 3e-5,
    "pass_overhead_s": 2e-4,
}


def _passes(rows: list[dict[str, object]], *, noise: float = 0.0) -> pd.DataFrame:
    hw = dataclasses.replace(load_hardware("a100-80gb"), **TRUE)
    cfg = pd.DataFrame(rows).assign(dtype="bfloat16")
    time_s = predict(cfg, hw)
    rng = np.random.default_rng(5)
    reps = [
        cfg.assign(repeat=r, time_s=time_s * np.exp(noise * rng.standard_normal(len(cfg))))
        for r in range(3)
    ]
    return pd.concat(reps, ignore_index=True)


def _write(folder: Path, passes: pd.DataFrame) -> Path:
    frame = passes.assign(device="cuda", source_len=0, peak_mem_bytes=np.nan, energy_j=np.nan)
    meta = {"device_name": "NVIDIA A100", "device": "cuda"}
    return write_trace(folder / "passes.csv", Trace(kind="passes", data=frame, meta=meta))


def _grid(model: str = "llama-68m") -> list[dict[str, object]]:
    return [
        {"model": model, "batch": b, "context": c, "new_tokens": n}
        for b in (1, 8, 64)
        for c in (128, 1024)
        for n in (1, 4)
    ]


def test_a_one_row_fit_has_no_degrees_of_freedom_and_is_untrusted() -> None:
    one = _passes([{"model": "llama-68m", "batch": 1, "context": 128, "new_tokens": 1}])
    from specsim.calibrate.cards import summarize_passes

    fit = fit_card(summarize_passes(one), load_hardware("a100-80gb"))
    assert all(np.isinf(v) for v in fit.stderr.values())
    assert "no degrees of freedom" in trust_problems(fit)[0]


def test_the_cli_refuses_a_one_row_trace_and_force_marks_it(tmp_path: Path, capsys) -> None:
    _write(
        tmp_path / "tr",
        _passes([{"model": "llama-68m", "batch": 1, "context": 128, "new_tokens": 1}]),
    )
    out = tmp_path / "card.toml"
    argv = ["calibrate", str(tmp_path / "tr"), "--base", "a100-80gb", "--holdout", "none"]
    assert main([*argv, "--out", str(out)]) == 2
    assert "1 configuration(s) for 4 parameters" in capsys.readouterr().err
    assert not out.exists()
    assert main([*argv, "--out", str(out), "--force"]) == 0
    card = load_hardware(str(out))
    assert card.calibration is not None
    assert "no degrees of freedom" in card.calibration["untrusted"][0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mem-capacity", "-1"], "--mem-capacity: expected a finite number of bytes > 0, got -1"),
        (["--mem-capacity", "nan"], "--mem-capacity: expected a finite number"),
        (["--power", "10", "5", "--power-source", "x"], "--power: IDLE_W 10 exceeds MAX_W 5"),
        (["--power", "-1", "5", "--power-source", "x"], "--power: expected IDLE_W >= 0"),
        (["--power", "1", "5"], "--power-source: say where --power comes from"),
    ],
)
def test_bad_flags_are_blamed_on_the_flag(tmp_path: Path, capsys, flags, message) -> None:
    _write(tmp_path / "tr", _passes(_grid()))
    argv = [
        "calibrate",
        str(tmp_path / "tr"),
        "--base",
        "a100-80gb",
        "--out",
        str(tmp_path / "c.toml"),
    ]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "a100-80gb.toml" not in err


def test_an_unknown_model_is_reported_with_the_trace_that_named_it(tmp_path: Path, capsys) -> None:
    passes = _passes(_grid())
    passes.loc[passes.index[:3], "model"] = "no-such-model"
    where = _write(tmp_path / "tr", passes)
    argv = ["calibrate", str(where), "--base", "a100-80gb", "--out", str(tmp_path / "c.toml")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"model 'no-such-model', named in the 'model' column of trace {where}" in err


def test_passes_past_a_cards_positions_are_fitted_and_counted(tmp_path: Path, capsys) -> None:
    limit = load_model("llama-68m").max_position
    rows = _grid() + [
        {"model": "llama-68m", "batch": b, "context": limit, "new_tokens": n}
        for b in (1, 8)
        for n in (1, 4)
    ]
    passes = _passes(rows)
    from specsim.calibrate.cards import summarize_passes

    cfg = summarize_passes(passes)
    assert past_positions(cfg) == 4
    # Noise-free times made by the cost model: the fit recovers the parameters, past rows too.
    fit = fit_card(cfg, load_hardware("a100-80gb"))
    assert fit.residuals["rel_error"].abs().max() < 1e-6
    _write(tmp_path / "tr", passes)
    argv = ["calibrate", str(tmp_path / "tr"), "--base", "a100-80gb", "--holdout", "none"]
    assert main([*argv, "--out", str(tmp_path / "c.toml")]) == 0
    assert "4 past their model card's max_position, fitted as measured" in capsys.readouterr().out


def test_an_unwritable_output_is_refused_before_the_fit(tmp_path: Path, capsys) -> None:
    _write(tmp_path / "tr", _passes(_grid()))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = [
        "calibrate",
        str(tmp_path / "tr"),
        "--base",
        "a100-80gb",
        "--out",
        str(tmp_path / "c.toml"),
    ]
    assert main([*argv, "--residuals", str(blocker / "r.csv")]) == 2
    out, err = capsys.readouterr()
    assert "--residuals:" in err and "is a file" in err
    assert "Fitted" not in out
    assert not (tmp_path / "c.toml").exists()
