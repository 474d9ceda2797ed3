"""Runtime-profile calibration: intervals and the stop rule, the fit on synthetic data, the
end-to-end prediction, and the refusals (another device, missing columns)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.profile import (
    ROW_KNOTS,
    check_fit_device,
    enough_blocks,
    fit_profile,
    predict_profile,
    predict_profile_runs,
    profile_configs,
    profile_trust_problems,
)
from specsim.cards import RuntimeProfile, load_hardware, load_model, load_runtime
from specsim.cli import main
from specsim.cost import WEIGHT_FORMATS, step_cost_grid
from specsim.traces.io import Trace, write_trace

CARD = "cpu-epyc-2vcpu"


def true_profile() -> RuntimeProfile:
    """A profile with row-dependent efficiencies and an int8 factor: the fit's known answer."""
    return RuntimeProfile(
        slug="truth",
        name="truth",
        stack="test",
        compute_efficiency=0.1,
        memory_efficiency=0.25,
        layer_overhead_s=2e-4,
        pass_overhead_s=1.5e-3,
        sources={"test": "synthetic"},
        fitted_on=CARD,
        kinds=["cpu"],
        compute_efficiency_rows=dict(
            zip(map(str, ROW_KNOTS), (0.1, 0.12, 0.15, 0.2, 0.3, 0.4, 0.5), strict=True)
        ),
        memory_efficiency_rows=dict(
            zip(map(str, ROW_KNOTS), (0.25, 0.2, 0.15, 0.12, 0.1, 0.1, 0.1), strict=True)
        ),
        format_memory_factor={"int8": 1.6},
    )


def synthetic_passes(noise: float, seed: int = 0) -> pd.DataFrame:
    card, prof = load_hardware(CARD), true_profile()
    rows = [
        {"model": m, "dtype": "float32", "weights": w, "batch": 1, "context": c, "new_tokens": n}
        for m, w, c, n in itertools.product(
            ("gpt-like-97m", "llama-68m"), ("fp32", "int8"), (64, 256), ROW_KNOTS
        )
    ]
    cfg = pd.DataFrame(rows)
    t = predict_profile(cfg, card, prof)
    rng = np.random.default_rng(seed)
    reps = [
        cfg.assign(repeat=r, time_s=t * np.exp(noise * rng.standard_normal(len(t))))
        for r in range(3)
    ]
    return pd.concat(reps, ignore_index=True)


# Intervals and the stop rule ---------------------------------------------------------------


def test_stop_rule() -> None:
    rng = np.random.default_rng(1)
    spec = np.full(400, 0.1)
    plain = 0.05 * rng.integers(1, 5, 400)
    assert not enough_blocks(plain[:20], spec[:20], halfwidth=0.5, min_blocks=30)
    assert enough_blocks(plain[:30], spec[:30], halfwidth=0.5, min_blocks=30)
    assert not enough_blocks(plain[:30], spec[:30], halfwidth=0.05, min_blocks=30)
    assert enough_blocks(plain, spec, halfwidth=0.1, min_blocks=30)


# The fit -------------------------------------------------------------------------------------


def test_fit_recovers_a_known_profile_within_its_standard_errors() -> None:
    cfg = profile_configs(synthetic_passes(noise=0.02))
    card = load_hardware(CARD)
    base = dataclasses.replace(true_profile(), slug="fitted")
    fit = fit_profile(cfg, card, base=base)
    truth = true_profile()
    known = {
        "pass_overhead_s": truth.pass_overhead_s,
        "layer_overhead_s": truth.layer_overhead_s,
        "format_memory_factor.int8": 1.6,
        "format_compute_factor.int8": 1.0,
        "format_dequant_ops.int8": WEIGHT_FORMATS["int8"].dequant_ops,
        **{
            f"compute_efficiency_rows.{k}": v
            for k, v in (truth.compute_efficiency_rows or {}).items()
        },
        **{
            f"memory_efficiency_rows.{k}": v
            for k, v in (truth.memory_efficiency_rows or {}).items()
        },
    }
    assert set(fit.params) == set(known)
    determined = [k for k in known if np.isfinite(fit.stderr[k])]
    assert len(determined) >= 8  # the overheads, the int8 factor and the binding efficiencies
    for name in determined:
        z = (fit.params[name] - known[name]) / fit.stderr[name]
        assert abs(z) <= 4.5, (name, fit.params[name], known[name], fit.stderr[name])
    assert fit.rms_log_error < 0.05 and fit.profile.fitted_on == CARD
    undetermined = [k for k in known if k not in determined]
    problems = " ".join(profile_trust_problems(fit))
    assert all(f"{k} = " in problems for k in undetermined)


def test_fit_recovers_a_stacks_format_numbers_and_says_what_few_rows_leave_open() -> None:
    """Known answer: dynamic int8 (GEMMs in int8: a compute factor) and weight-only int4
    measured at 1, 2 and 4 rows only, with a slow kernel's dequantization work. The fit
    recovers each determined number within 4.5 standard errors; int4 gets no compute
    factor (its kernel computes in float32, trace column ``quant``)."""
    card = load_hardware(CARD)
    truth = dataclasses.replace(
        true_profile(),
        format_memory_factor={"int8": 1.6, "int4": 1.2},
        format_compute_factor={"int8": 3.0},
        format_dequant_ops={"int8": 0.5, "int4": 300.0},
    )
    rows = [
        {
            "model": m,
            "dtype": "float32",
            "weights": w,
            "quant": q,
            "batch": 1,
            "context": c,
            "new_tokens": n,
        }
        for m, (w, q, knots), c in itertools.product(
            ("gpt-like-97m", "llama-68m"),
            (
                ("fp32", "none", ROW_KNOTS),
                ("int8", "dynamic", ROW_KNOTS),
                ("int4", "weight-only", (1, 2, 4)),
            ),
            (64, 256),
        )
        for n in knots
    ]
    cfg = pd.DataFrame(rows)
    t = predict_profile(cfg, card, truth) * np.exp(
        0.02 * np.random.default_rng(3).standard_normal(len(cfg))
    )
    fit = fit_profile(
        profile_configs(cfg.assign(time_s=t)),
        card,
        base=dataclasses.replace(true_profile(), slug="fitted"),
    )
    assert "format_compute_factor.int4" not in fit.params
    known = {
        "format_memory_factor.int8": 1.6,
        "format_compute_factor.int8": 3.0,
        "format_dequant_ops.int8": 0.5,
        "format_memory_factor.int4": 1.2,
        "format_dequant_ops.int4": 300.0,
    }
    assert set(known) <= set(fit.params)
    for name in ("format_compute_factor.int8", "format_dequant_ops.int4"):
        assert np.isfinite(fit.stderr[name]) and fit.stderr[name] < 0.2 * known[name], name
    for name, value in known.items():
        if np.isfinite(fit.stderr[name]):
            z = (fit.params[name] - value) / fit.stderr[name]
            assert abs(z) <= 4.5, (name, fit.params[name], value, fit.stderr[name])
    assert fit.profile.format_dequant_ops is not None and fit.rms_log_error < 0.05
    prof = fit.profile
    assert set(prof.format_dequant_ops or {}) == {"int8", "int4"}
    assert set(prof.format_compute_factor or {}) == {"int8"}


def test_a_trace_without_the_fits_columns_is_refused_naming_them() -> None:
    passes = synthetic_passes(noise=0.0).drop(columns=["new_tokens", "time_s"])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['new_tokens', 'time_s'\]"):
        profile_configs(passes)


def test_a_fit_on_data_from_another_device_is_refused() -> None:
    card = load_hardware(CARD)
    with pytest.raises(ValueError, match="measured on a cuda device, but card 'cpu-epyc-2vcpu'"):
        check_fit_device({"device": "cuda", "device_name": "NVIDIA H200"}, card)
    # The card's ceilings came from models/measured/cpu, measured on "AMD EPYC".
    with pytest.raises(ValueError, match="'Intel Xeon'.*'AMD EPYC'.*another device"):
        check_fit_device({"device": "cpu", "device_name": "Intel Xeon"}, card)
    check_fit_device({"device": "cpu", "device_name": "AMD EPYC"}, card)


def _write_passes(folder: Path, device_name: str) -> None:
    meta = {"device_name": device_name, "device": "cpu", "dtype": "float32", "threads": 1}
    write_trace(
        folder / "passes.csv",
        Trace(
            kind="passes",
            data=synthetic_passes(0.02).assign(
                device="cpu", source_len=0, peak_mem_bytes=np.nan, energy_j=np.nan
            ),
            meta=meta,
        ),
    )


def test_cli_fits_writes_and_reloads_a_profile(tmp_path: Path, capsys) -> None:
    _write_passes(tmp_path / "t", "AMD EPYC")
    out = tmp_path / "cpu-synthetic.toml"
    code = main(
        [
            "calibrate",
            str(tmp_path / "t"),
            "--profile",
            "--base",
            CARD,
            "--out",
            str(out),
            "--force",
            "--residuals",
            str(tmp_path / "r.csv"),
            "--json",
        ]
    )
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    text = out.read_text()
    assert text.startswith("# Fitted by: specsim calibrate") and "stderr" in text
    prof = load_runtime(out)
    assert prof.fitted_on == CARD and prof.format_memory_factor is not None
    se = record["stderr"]["pass_overhead_s"]
    assert abs(prof.pass_overhead_s - 1.5e-3) <= 4.5 * se
    assert record["in_sample_abs_rel_error"]["worst"] < 0.1
    assert main(["calibrate", str(tmp_path / "t"), "--profile", "--out", str(out)]) == 2
    assert "needs --base" in capsys.readouterr().err


def test_cli_refuses_a_profile_fit_on_another_devices_traces(tmp_path: Path, capsys) -> None:
    _write_passes(tmp_path / "t", "Intel Xeon")
    code = main(
        [
            "calibrate",
            str(tmp_path / "t"),
            "--profile",
            "--base",
            CARD,
            "--out",
            str(tmp_path / "x.toml"),
        ]
    )
    assert code == 2 and "another device" in capsys.readouterr().err
    assert not (tmp_path / "x.toml").exists()


# End to end -----------------------------------------------------------------------------------


def test_runs_timed_exactly_as_the_profile_says_are_predicted_exactly() -> None:
    """Known answer: block and step times made by the cost model itself give zero error."""
    card, prof = load_hardware(CARD), true_profile()
    t, d = load_model("gpt-like-97m"), load_model("gpt-like-6m")
    rng = np.random.default_rng(3)
    emitted = rng.integers(1, 5, 40)
    ctx = 64 + np.r_[0, np.cumsum(emitted)[:-1]]
    kw = dict(batch=1, dtype="float32", runtime=prof, check_memory=False)
    verify = step_cost_grid(t, card, context=ctx, new_tokens=4, **kw).time_s
    draft = step_cost_grid(d, card, context=ctx, new_tokens=1, **kw).time_s
    common = dict(
        target="gpt-like-97m",
        draft="gpt-like-6m",
        dtype="float32",
        device="cpu",
        temperature=1.0,
        gamma=3,
        batch=1,
        prompt_len=64,
        vocab=8192,
        seq=0,
    )
    sd = pd.DataFrame(
        {
            "run_id": "sd/x",
            "block": np.arange(40),
            "context": ctx,
            "accepted": emitted - 1,
            "emitted": emitted,
            "draft_s": 3 * draft,
            "target_s": verify,
            "verify_s": 0.0,
            **common,
        }
    )
    actx = 64 + np.arange(int(emitted.sum()))
    step = step_cost_grid(t, card, context=actx, new_tokens=1, **kw).time_s
    ar = pd.DataFrame(
        {
            "run_id": "ar/x",
            "model": "gpt-like-97m",
            "temperature": 1.0,
            "batch": 1,
            "prompt_len": 64,
            "step": np.arange(len(actx)),
            "context": actx,
            "forward_s": step,
            "sample_s": 0.0,
        }
    )
    runs = predict_profile_runs(sd, ar, card, prof)
    (r,) = runs.itertuples()
    assert r.paired and r.blocks == 40 and r.twin_steps == emitted.sum()
    assert abs(r.latency_error) < 1e-9 and abs(r.speedup_error) < 1e-9
    assert r.speedup_low < r.speedup < r.speedup_high and r.speedup_in_interval
    with pytest.raises(ValueError, match="not an interleaved pair"):
        predict_profile_runs(sd, ar.iloc[:-1], card, prof)


def test_errors_by_format_known_answer_and_missing_columns() -> None:
    from specsim.calibrate.formats import errors_by_format

    res = pd.DataFrame(
        {"weights": ["fp32", "fp32", "fp32", "int4"], "rel_error": [0.1, -0.3, 0.2, -0.9]}
    )
    out = errors_by_format(res).set_index("weights")
    assert out.loc["fp32", "configs"] == 3 and out.loc["int4", "configs"] == 1
    assert out.loc["fp32", "median_abs_error"] == pytest.approx(0.2)
    assert out.loc["fp32", "worst_abs_error"] == pytest.approx(0.3)
    assert out.loc["int4", "worst_abs_error"] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="rel_error"):
        errors_by_format(res.drop(columns=["rel_error"]))


def test_kernel_note_names_each_quantized_formats_kernel() -> None:
    from specsim.calibrate.formats import kernel_note

    cfg = pd.DataFrame(
        {
            "weights": ["fp32", "int8", "int8", "int4"],
            "quant": ["none", "dynamic", "dynamic", "weight-only"],
        }
    )
    note = kernel_note(cfg)
    assert "int4 weight-only, int8 dynamic;" in note and "fp32" not in note
    assert kernel_note(cfg.drop(columns=["quant"])) == ""
    assert kernel_note(cfg[cfg["weights"] == "fp32"]) == ""
