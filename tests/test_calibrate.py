"""Calibration recovers known parameters from synthetic data and reports held-out error."""

import dataclasses
import itertools
from pathlib import Path

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


# End-to-end runs (predict_runs) on synthetic traces --------------------------------------

CPU_CARD = str(Path(__file__).parents[1] / "models" / "calibrated" / "cpu-epyc-2vcpu.toml")


def _spec_rows(run_id: str, batch: int, device: str, block_s: float) -> tuple[list, list]:
    """Four blocks of gamma 3 emitting 2 tokens each (8 tokens), ``block_s`` per block."""
    blocks, positions = [], []
    for block in range(4):
        for seq in range(batch):
            blocks.append({
                "run_id": run_id, "target": "gpt-like-97m", "draft": "gpt-like-6m",
                "dtype": "float32", "device": device, "temperature": 1.0, "gamma": 3,
                "batch": batch, "prompt_len": 64, "vocab": 8192, "block": block, "seq": seq,
                "context": 64 + 2 * block, "accepted": 1, "emitted": 2,
                "draft_s": 0.6 * block_s, "target_s": 0.3 * block_s, "verify_s": 0.1 * block_s,
            })  # fmt: skip
            for i in range(3):
                positions.append({
                    "run_id": run_id, "block": block, "seq": seq, "position": i + 1,
                    "alpha": 0.5, "accepted": i < 1, "reached": i <= 1, "draft_pass_s": 0.0,
                })  # fmt: skip
    return blocks, positions


def _ar_rows(run_id: str, batch: int, device: str, step_s: float) -> list:
    return [
        {"run_id": run_id, "model": "gpt-like-97m", "dtype": "float32", "device": device,
         "temperature": 1.0, "batch": batch, "prompt_len": 64, "step": s, "context": 64 + s,
         "forward_s": 0.9 * step_s, "sample_s": 0.1 * step_s}
        for s in range(8)
    ]  # fmt: skip


def _two_batch_traces(device8: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    # Batch 1: 0.1 s per block of 2 tokens (0.05 s/token) against a 0.05 s plain step:
    # speedup 1.0. Batch 8: 0.2 s per block (0.1 s/token) against 0.25 s: speedup 2.5.
    b1, p1 = _spec_rows("sd/b1", 1, "cpu", 0.1)
    b8, p8 = _spec_rows("sd/b8", 8, device8, 0.2)
    ar = _ar_rows("ar/b1", 1, "cpu", 0.05) + _ar_rows("ar/b8", 8, device8, 0.25)
    return pd.DataFrame(b1 + b8), pd.DataFrame(ar), pd.DataFrame(p1 + p8)


def test_predict_runs_pairs_each_run_with_the_plain_run_of_its_batch() -> None:
    from specsim.calibrate import predict_runs
    from specsim.cost import step_cost_grid

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
        block_s = (3 * step_cost_grid(draft, card, new_tokens=1, **kw).time_s
                   + step_cost_grid(target, card, new_tokens=4, **kw).time_s)  # fmt: skip
        ar_s = step_cost_grid(target, card, batch=b, context=64 + np.arange(8), new_tokens=1,
                              dtype="float32").time_s.mean()  # fmt: skip
        row = out.loc[run_id]
        assert row["replay_token_s"] == pytest.approx(block_s.sum() / 8, rel=1e-12)
        assert row["replay_speedup"] == pytest.approx(ar_s / (block_s.sum() / 8), rel=1e-12)
    assert out.loc["sd/b8", "replay_token_s"] > out.loc["sd/b1", "replay_token_s"]
    # The stream simulator is single-sequence: no simulated figures at batch 8.
    assert np.isfinite(out.loc["sd/b1", ["simulated_token_s", "simulated_speedup"]]).all()
    simulated = [f"simulated_{c}" for c in ("token_s", "speedup", "latency_error", "speedup_error")]
    assert out.loc["sd/b8", simulated].isna().all()


def test_predict_runs_does_not_pair_runs_across_devices() -> None:
    from specsim.calibrate import predict_runs

    spec, ar, pos = _two_batch_traces()
    ar.loc[ar.run_id == "ar/b8", "device"] = "cuda"
    with pytest.raises(ValueError, match=r"sd/b8"):
        predict_runs(spec, ar, pos, load_hardware(CPU_CARD), np.random.default_rng(0), seeds=1)


def test_predict_runs_checks_seeds() -> None:
    from specsim.calibrate import predict_runs

    spec, ar, pos = _two_batch_traces()
    card = load_hardware(CPU_CARD)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="seeds"):
            predict_runs(spec, ar, pos, card, np.random.default_rng(0), seeds=bad)  # type: ignore[arg-type]
