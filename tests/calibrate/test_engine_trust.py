"""The engine fit's trust check (specsim.calibrate.engine_trust): a clean fit passes, a file
written in the wrong unit is named with its field and the slip, whichever way it slipped."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.calibrate.engine_outputs import DecodeRun
from specsim.calibrate.engine_trust import (
    RESIDUAL_LIMIT,
    check_runs,
    find_slip,
    fit_explained,
    fit_problems,
    worst_error,
)
from specsim.calibrate.stack_fit import StackFit, fit_stack, roofline_steps
from specsim.cards import load_hardware, load_model
from specsim.cards.stack_files import load_stack

STACK, HW, MODEL = load_stack("vllm-v1"), load_hardware("h100-sxm"), load_model("llama-3.1-8b")


def _refit(runs: list[DecodeRun]) -> StackFit:
    return fit_stack(runs, stack=STACK, hardware=HW, model=MODEL)


def _runs(rng: np.random.Generator) -> list[DecodeRun]:
    """Two files' runs priced by a known profile (1.5 ms a pass, 20 us a sequence) and noise:
    ``a.json`` in vLLM's serving format (ms), ``b.jsonl`` in SGLang's one-batch format (s)."""
    runs = [
        DecodeRun(engine=engine, source=f"{name} record {i}", batch=b, context=640.0, step_s=0.0)
        for engine, name in (("serve", "a.json"), ("sglang-one-batch", "b.jsonl"))
        for i, b in enumerate((1, 4, 16, 64))
    ]
    roof = roofline_steps(runs, stack=STACK, hardware=HW, model=MODEL)
    b = np.array([r.batch for r in runs], dtype=float)
    t = roof + 1.5e-3 + 20e-6 * b + rng.normal(0.0, 20e-6, len(runs))
    return [dataclasses.replace(r, step_s=float(x)) for r, x in zip(runs, t, strict=True)]


def _slipped(runs: list[DecodeRun], file: str, factor: float) -> list[DecodeRun]:
    return [
        dataclasses.replace(r, step_s=r.step_s * factor) if r.source.startswith(file) else r
        for r in runs
    ]


def test_a_clean_fit_is_trusted() -> None:
    runs = _runs(np.random.default_rng(11))
    fit = _refit(runs)
    assert worst_error(fit.residuals)[0] < 0.05
    assert fit_problems(fit, runs, _refit) == []


@pytest.mark.parametrize(
    ("file", "factor", "words"),
    [
        ("a.json", 1e-3, "a.json: its median_tpot_ms values look like seconds, not milliseconds"),
        ("b.jsonl", 1e3, "b.jsonl: its median_decode_latency values look like milliseconds, not"),
    ],
)
def test_a_unit_slip_is_named_with_its_file_and_field(file: str, factor: float, words: str) -> None:
    runs = _slipped(_runs(np.random.default_rng(12)), file, factor)
    assert words in find_slip(runs, _refit)
    try:
        fit = fit_explained(runs, _refit)
    except ValueError as exc:  # seconds in a ms field: the fit goes below the roofline
        assert words in str(exc)
        return
    problems = fit_problems(fit, runs, _refit)
    assert len(problems) == 1 and words in problems[0]
    assert worst_error(fit.residuals)[0] > RESIDUAL_LIMIT


def test_no_slip_is_invented_for_runs_that_no_rescaling_fits() -> None:
    # one file's runs 10 times too long (not a unit): no file rescaled by 1000 fits them
    bad = _slipped(_runs(np.random.default_rng(13)), "a.json", 10.0)
    fit = _refit(bad)
    assert find_slip(bad, _refit) == ""
    (problem,) = fit_problems(fit, bad, _refit)
    assert "no one file's times rescaled by 1000 fit either" in problem


def test_a_run_the_cost_model_refuses_names_its_file_record_and_fields() -> None:
    far = DecodeRun(engine="serve", source="a.json record 3", batch=4, context=1e6, step_s=0.01)
    with pytest.raises(
        ValueError,
        match=r"a\.json record 3: batch 4 \(max_concurrency\) at a "
        r"context of 1e\+06 tokens \(random_input_len \+ random_output_len / 2\)",
    ):
        check_runs([far], stack=STACK, hardware=HW, model=MODEL)
