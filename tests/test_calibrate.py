"""Calibration recovers known parameters from synthetic data and reports held-out error."""

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate import (
    PARAMETERS,
    calibrated_card,
    card_from_ceilings,
    fit_card,
    holdout_errors,
    predict,
    summarize_passes,
)
from specsim.cards import load_hardware, load_model, write_hardware_card

TRUE = {
    "compute_efficiency": 0.6,
    "memory_efficiency": 0.7,
    "layer_overhead_s": 3e-5,
    "pass_overhead_s": 2e-4,
}


def synthetic(noise: float, seed: int = 0) -> tuple[pd.DataFrame, object]:
    hw = dataclasses.replace(load_hardware("a100-80gb"), **TRUE)
    rows = []
    for model, b, ctx, n in itertools.product(
        ("llama-68m", "llama-160m", "llama-2-7b"), (1, 8, 64, 256), (128, 1024), (1, 4, 8)
    ):
        rows.append(
            {"model": model, "dtype": "bfloat16", "batch": b, "context": ctx, "new_tokens": n}
        )
    cfg = pd.DataFrame(rows)
    t = predict(cfg, hw)
    rng = np.random.default_rng(seed)
    reps = []
    for r in range(3):
        d = cfg.copy()
        d["repeat"] = r
        d["time_s"] = t * np.exp(noise * rng.standard_normal(len(t)))
        reps.append(d)
    return pd.concat(reps, ignore_index=True), hw


def test_fit_recovers_known_parameters() -> None:
    passes, _ = synthetic(noise=0.02)
    cfg = summarize_passes(passes)
    assert (cfg["repeats"] == 3).all()
    base = load_hardware("a100-80gb")  # starts from the card's own defaults
    fit = fit_card(cfg, base)
    for k in PARAMETERS:
        assert abs(fit.params[k] - TRUE[k]) < max(5 * fit.stderr[k], 0.05 * TRUE[k]), k
    assert fit.rms_log_error < 0.03
    assert set(fit.table()["parameter"]) == set(PARAMETERS)


def test_holdout_predicts_left_out_batches() -> None:
    passes, _ = synthetic(noise=0.01, seed=1)
    cfg = summarize_passes(passes)
    ho = holdout_errors(cfg, load_hardware("a100-80gb"), by="batch")
    assert set(ho["held_out"]) == {"batch=1", "batch=8", "batch=64", "batch=256"}
    assert ho["rel_error"].abs().median() < 0.03


def test_calibrated_card_round_trips(tmp_path) -> None:
    passes, _ = synthetic(noise=0.0)
    fit = fit_card(summarize_passes(passes), load_hardware("a100-80gb"))
    card = calibrated_card(fit, slug="a100-synthetic", name="synthetic", trace="in-memory")
    path = write_hardware_card(card, tmp_path / "a100-synthetic.toml", header="test card")
    back = load_hardware(str(path))
    assert back == dataclasses.replace(card, source_path=back.source_path)
    assert back.calibration["trace"] == "in-memory"


def test_card_from_ceilings_uses_measured_peaks() -> None:
    ceil = pd.DataFrame(
        {"op": ["matmul", "matmul", "copy"], "dtype": ["float32"] * 3, "rate": [1e11, 1.2e11, 2e10]}
    )
    card = card_from_ceilings(
        ceil,
        slug="cpu-x",
        name="cpu",
        kind="cpu",
        mem_capacity=1e10,
        idle_power_w=1.0,
        max_power_w=2.0,
        sources={"m": "measured"},
    )
    assert card.peak("float32") == 1.2e11 and card.mem_bandwidth == 2e10


def test_bad_traces_raise() -> None:
    with pytest.raises(ValueError, match="missing column"):
        summarize_passes(pd.DataFrame({"model": ["x"]}))
    passes, _ = synthetic(noise=0.0)
    with pytest.raises(ValueError, match="at least two"):
        holdout_errors(summarize_passes(passes[passes.batch == 1]), load_hardware("a100-80gb"))
    _ = load_model  # the loader resolves slugs inside predict
