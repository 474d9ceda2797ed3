"""Engine benchmark outputs (specsim.calibrate.engine_outputs) and the stack fit on them
(specsim.calibrate.stack_fit, ``specsim calibrate --engine-output``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.engine_outputs import (
    DecodeRun,
    read_all_outputs,
    read_engine_output,
    read_engine_outputs,
)
from specsim.calibrate.spec_fit import ForcedRun, iteration_s
from specsim.calibrate.stack_fit import fit_stack, roofline_steps
from specsim.cards import load_hardware, load_model
from specsim.cards.stack_files import compose, load_stack
from specsim.cli import main
from specsim.cost import step_cost

SAMPLES = Path(__file__).resolve().parents[2] / "models" / "measured" / "engine-samples"
BATCHES = (1, 4, 16, 64)
CONTEXTS = (256.0, 1024.0)


def test_samples_read_with_their_fields() -> None:
    serve = read_engine_output(SAMPLES / "vllm-serve-b4.json")
    assert [(r.batch, r.context, r.step_s) for r in serve] == [(4, 192.0, 0.010)]
    one = read_engine_output(SAMPLES / "sglang-one-batch.jsonl")  # the note line skipped
    assert [(r.batch, r.step_s) for r in one] == [(1, 0.009), (16, 0.011)]
    llama = read_engine_output(SAMPLES / "llama-bench.json")  # the pp test skipped
    assert [(r.batch, r.context, r.step_s) for r in llama] == [(1, 64.0, 0.01)]


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"median_tpot_ms": 10.0, "random_input_len": 8, "random_output_len": 8}, "max_concurr"),
        ({"batch_size": 2, "input_len": 8, "output_len": 8, "median_decode_latency": -1}, "pos"),
        ({"avg_latency": 1.0}, "not a known engine output"),
    ],
)
def test_bad_records_name_the_field(tmp_path: Path, record: dict, match: str) -> None:
    path = tmp_path / "out.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=match):
        read_engine_output(path)


def _synthetic(rng: np.random.Generator, *, noise_s: float, repeats: int) -> list[DecodeRun]:
    """Runs priced by a known profile (pass 1.5 ms, 20 us a sequence) plus Gaussian noise."""
    runs = [
        DecodeRun(engine="test", source=f"syn {b} {c}", batch=b, context=c, step_s=0.0)
        for b in BATCHES
        for c in CONTEXTS
        for _ in range(repeats)
    ]
    stack, hw, model = load_stack("vllm-v1"), load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    roof = roofline_steps(runs, stack=stack, hardware=hw, model=model)
    b = np.array([r.batch for r in runs], dtype=float)
    t = roof + 1.5e-3 + 20e-6 * b + rng.normal(0.0, noise_s, len(runs))
    return [dataclasses.replace(r, step_s=float(x)) for r, x in zip(runs, t, strict=True)]


def test_fit_recovers_a_known_profile_within_its_standard_errors() -> None:
    rng = np.random.default_rng(20261201)
    runs = _synthetic(rng, noise_s=50e-6, repeats=3)
    stack, hw, model = load_stack("vllm-v1"), load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    fit = fit_stack(runs, stack=stack, hardware=hw, model=model)
    for name, true in (("pass_overhead_s", 1.5e-3), ("sequence_overhead_s", 20e-6)):
        # 4 standard errors: a false failure about once in 16,000 seeds
        assert abs(fit.estimate[name] - true) < 4 * fit.stderr[name], name
        assert fit.stderr[name] < 0.5 * true  # the noise level lets the fit identify it
    assert fit.stack.pass_overhead_s == fit.estimate["pass_overhead_s"]


def test_fit_refuses_one_batch_size() -> None:
    runs = [DecodeRun(engine="t", source="s", batch=4, context=100.0, step_s=0.01)] * 3
    stack, hw, model = load_stack("vllm-v1"), load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    with pytest.raises(ValueError, match="two batch sizes"):
        fit_stack(runs, stack=stack, hardware=hw, model=model)


def test_cli_writes_a_stack_that_loads_back(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rng = np.random.default_rng(7)
    runs = _synthetic(rng, noise_s=20e-6, repeats=1)
    path = tmp_path / "one-batch.jsonl"
    rows = [
        {"batch_size": r.batch, "input_len": int(r.context) - 64, "output_len": 128}
        | {"median_decode_latency": r.step_s}
        for r in runs
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows))
    out = tmp_path / "fitted.toml"
    argv = ["calibrate", "--engine-output", str(path), "--stack", "vllm-v1"]
    argv += ["--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--out", str(out), "--json"]
    argv += ["--plot", str(tmp_path / "fit.png"), "--residuals", str(tmp_path / "res.csv")]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    st = load_stack(out)
    assert (tmp_path / "fit.png").stat().st_size > 0
    # the written stack, priced by the cost model, gives the fit's predictions back
    res = pd.read_csv(tmp_path / "res.csv")
    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    rt = compose(st, hw)
    priced = [
        float(step_cost(model, hw, batch=int(b), context=c, new_tokens=1, runtime=rt).time_s)
        for b, c in zip(res["batch"], res["context"], strict=True)
    ]
    assert np.allclose(priced, res["predicted_s"], rtol=1e-9)
    assert st.pass_overhead_s == pytest.approx(record["estimate"]["pass_overhead_s"])
    assert "sequence_overhead_s" not in st.assumptions
    assert str(path) in out.read_text()  # the sources name the file read
    assert "fitted_on" in out.read_text()


def test_cli_needs_the_cards(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["calibrate", "--engine-output", str(SAMPLES / "llama-bench.json")]
    assert main([*argv, "--stack", "llama.cpp", "--out", str(tmp_path / "x.toml")]) == 2
    assert "needs --hardware" in capsys.readouterr().err


def test_vllm_latency_step_is_the_slope_over_output_lengths() -> None:
    files = [SAMPLES / f"vllm-latency-b1-o{o}.pytorch.json" for o in (64, 192)]
    (run,) = read_engine_outputs(files)
    # the samples' latencies are 0.03 s + 8 ms per output token
    assert (run.batch, run.context) == (1, 128 + 64.0)
    assert run.step_s == pytest.approx(0.008, rel=1e-9)
    with pytest.raises(ValueError, match="one output length"):
        read_engine_outputs(files[:1])


def test_vllm_latency_output_json_names_the_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "lat.json"
    path.write_text(json.dumps({"avg_latency": 1.0, "latencies": [1.0], "percentiles": {}}))
    with pytest.raises(ValueError, match="SAVE_TO_PYTORCH_BENCHMARK_FORMAT"):
        read_engine_output(path)


def test_trtllm_bench_report(tmp_path: Path) -> None:
    (run,) = read_engine_output(SAMPLES / "trtllm-bench-b8.json")
    assert (run.batch, run.context, run.step_s) == (8, 192.0, pytest.approx(0.0083))
    report = json.loads((SAMPLES / "trtllm-bench-b8.json").read_text())
    del report["streaming_metrics"]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(ValueError, match="--streaming"):
        read_engine_output(path)


SPEC_TRUE = {
    "speculation_overhead_s": 3e-4,
    "rejection_s_per_token": 5e-6,
    "draft_step_overhead_s": 2e-4,
}


def _forced_files(tmp_path: Path, rng: np.random.Generator, *, noise_s: float) -> list[str]:
    """vllm bench serve results: plain runs (pass 1.5 ms, 20 us a sequence) and forced
    acceptance runs priced by a known speculative profile, with Gaussian noise on the step."""
    stack, hw = load_stack("vllm-v1"), load_hardware("h100-sxm")
    model, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    plain = dataclasses.replace(stack, pass_overhead_s=1.5e-3, sequence_overhead_s=20e-6)
    true = dataclasses.replace(plain, **SPEC_TRUE)
    files = []
    for b in BATCHES:
        run = DecodeRun(engine="t", source="t", batch=b, context=1024.0 + 128.0, step_s=0.0)
        (step,) = roofline_steps([run], stack=plain, hardware=hw, model=model) + 1.5e-3 + 20e-6 * b
        files.append(_serve_result(tmp_path / f"plain-b{b}.json", b, step + rng.normal(0, noise_s)))
        for k, accept in ((1, 1.8), (3, 2.5), (5, 3.1)):
            forced = ForcedRun(
                source="t", batch=b, context=1152.0, k=k, accept_len=accept, step_s=0
            )
            step = iteration_s(forced, stack=true, hardware=hw, model=model, draft=draft)
            tpot = (step + rng.normal(0, noise_s)) / accept
            meta = {"num_speculative_tokens": str(k), "synthetic_acceptance_length": str(accept)}
            files.append(_serve_result(tmp_path / f"spec-b{b}-k{k}.json", b, tpot, meta))
    return files


def _serve_result(path: Path, batch: int, tpot_s: float, meta: dict | None = None) -> str:
    rec = {"max_concurrency": batch, "random_input_len": 1024, "random_output_len": 256}
    path.write_text(json.dumps(rec | {"median_tpot_ms": tpot_s * 1e3} | (meta or {})))
    return str(path)


def test_forced_acceptance_runs_recover_the_speculative_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    files = _forced_files(tmp_path, np.random.default_rng(20261202), noise_s=30e-6)
    out = tmp_path / "spec.toml"
    argv = ["calibrate", "--engine-output", *files, "--stack", "vllm-v1", "--hardware"]
    argv += ["h100-sxm", "--model", "llama-3.1-8b", "--out", str(out), "--json"]
    assert main([*argv, "--draft", "llama-3.2-1b"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["runs"], record["forced_runs"]) == (4, 12)
    truth = {"pass_overhead_s": 1.5e-3, "sequence_overhead_s": 20e-6, **SPEC_TRUE}
    for name, true in truth.items():
        # 4 standard errors: a false failure about once in 16,000 seeds per term
        assert abs(record["estimate"][name] - true) < 4 * record["stderr"][name], name
        assert record["stderr"][name] < 0.5 * true, name
    st = load_stack(out)
    assert st.rejection_s_per_token == pytest.approx(record["estimate"]["rejection_s_per_token"])
    assert "rejection_s_per_token" not in st.assumptions
    assert main([*argv, "--force"]) == 2  # forced runs without --draft
    assert "need --draft" in capsys.readouterr().err


def test_a_speculative_sglang_run_needs_its_lookahead_and_is_not_read_as_plain() -> None:
    sample = SAMPLES / "sglang-serve-spec-b4.jsonl"
    with pytest.raises(
        ValueError, match=r"record 1: a speculative SGLang run .*--speculative-steps"
    ):
        read_all_outputs([sample, SAMPLES / "vllm-serve-b4.json"])
    runs, forced = read_all_outputs([sample, SAMPLES / "vllm-serve-b4.json"], speculative_steps=3)
    assert [(r.batch, r.step_s) for r in runs] == [(4, 0.010)]  # only the vLLM plain run
    assert [(f.batch, f.k, f.accept_len, f.context) for f in forced] == [(4, 3, 2.5, 192.0)]
    assert forced[0].step_s == pytest.approx(0.006 * 2.5)
    with pytest.raises(ValueError, match=r"accept_length 2.5 within \[1, k \+ 1\]"):
        read_all_outputs([sample, SAMPLES / "vllm-serve-b4.json"], speculative_steps=1)
    with pytest.raises(ValueError, match="--speculative-steps"):
        read_all_outputs([sample], speculative_steps=0)


def test_a_speculative_trtllm_report_checks_its_lookahead() -> None:
    sample = [SAMPLES / "trtllm-bench-spec-b8.json", SAMPLES / "trtllm-bench-b8.json"]
    with pytest.raises(ValueError, match="speculative trtllm-bench run .*--speculative-steps"):
        read_all_outputs(sample)
    runs, forced = read_all_outputs(sample, speculative_steps=3)
    assert [(r.engine, r.batch) for r in runs] == [("trtllm-bench", 8)]
    assert [(f.batch, f.k, f.accept_len) for f in forced] == [(8, 3, 2.5)]
    assert forced[0].step_s == pytest.approx(4.4e-3 * 2.5)
    with pytest.raises(ValueError, match="disagrees with the report.* 3.00 drafts a step"):
        read_all_outputs(sample, speculative_steps=5)


def test_speculative_steps_per_file() -> None:
    sample = [SAMPLES / "trtllm-bench-spec-b8.json", SAMPLES / "trtllm-bench-b8.json"]
    _, forced = read_all_outputs(sample, speculative_steps=[3, 1])  # the plain file's K unused
    assert [f.k for f in forced] == [3]
    with pytest.raises(ValueError, match=r"one per --engine-output file \(2\), got 3"):
        read_all_outputs(sample, speculative_steps=[3, 3, 3])


def test_sglang_speculative_runs_fit_like_vllm_forced_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same synthetic runs written as SGLang results (accept_length, K given per file)
    give the vLLM forced runs' fit exactly."""
    files = _forced_files(tmp_path, np.random.default_rng(20261202), noise_s=30e-6)
    sglang, steps = [], []
    for f in files:
        rec = json.loads(Path(f).read_text())
        k = int(rec.pop("num_speculative_tokens", 1))
        if "synthetic_acceptance_length" in rec:
            rec["accept_length"] = float(rec.pop("synthetic_acceptance_length"))
        out = tmp_path / f"sglang-{Path(f).stem}.jsonl"
        out.write_text(json.dumps(rec) + "\n")
        sglang.append(str(out))
        steps.append(str(k))
    common = ["--stack", "vllm-v1", "--hardware", "h100-sxm", "--model", "llama-3.1-8b"]
    common += ["--draft", "llama-3.2-1b", "--json"]
    assert (
        main(["calibrate", "--engine-output", *files, *common, "--out", str(tmp_path / "v.toml")])
        == 0
    )
    vllm = json.loads(capsys.readouterr().out)
    argv = ["calibrate", "--engine-output", *sglang, "--speculative-steps", *steps, *common]
    assert main([*argv, "--out", str(tmp_path / "s.toml")]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["forced_runs"] == vllm["forced_runs"] == 12
    assert got["estimate"] == pytest.approx(vllm["estimate"], rel=1e-12)
