"""The stacks' fixed host costs fitted on published plain decode steps
(specsim.calibrate.plain_rows, fixed_costs, fixed_loso, fixed_toml)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.fixed_costs import (
    PRIOR,
    TERMS,
    design,
    fit_fixed,
    prior_stack,
    stack_rows,
    with_terms,
)
from specsim.calibrate.fixed_loso import commit_decision, decisions
from specsim.calibrate.fixed_toml import StackResult, fit_all, main, write_stacks
from specsim.calibrate.plain_rows import (
    PLAIN_COLUMNS,
    PlainRow,
    modelled_step_s,
    read_plain_rows,
)
from specsim.cards import load_model, load_stack
from specsim.cards.stack_files import load_stack as load_stack_file
from specsim.cards.stack_files import stacks_dir

COMMITTED = ("gpt-fast-stack", "research-cuda-graphs")


Fits = tuple[list[StackResult], pd.DataFrame]


@pytest.fixture(scope="module")
def fits() -> Fits:
    return fit_all()


def _row(**kw: object) -> PlainRow:
    base: dict[str, object] = {
        "id": "r",
        "origin": "test",
        "group": "g",
        "source": "s",
        "stack": "sglang",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "weights": "bfloat16",
        "expert_weights": "",
        "group_size": None,
        "tensor_parallel": 1,
        "expert_parallel": 1,
        "batch": 1,
        "context": 512,
        "graphs": "on",
        "step_s": 0.01,
        "step_low": 0.0099,
        "step_high": 0.0101,
    }
    base.update(kw)
    return PlainRow(**base)  # type: ignore[arg-type]


def test_each_terms_column_is_what_the_cost_model_charges() -> None:
    """pass: 1; layer: the layer count; sequence: the batch; eager: the layers off the graph
    path (here a batch SGLang captures, so only the graphs-off row pays it)."""
    rows = [_row(id="on", batch=8), _row(id="off", batch=8, graphs="off")]
    d = design(rows, load_stack("sglang"))
    layers = load_model("llama-3.1-8b").layers
    assert d.X[:, TERMS.index("pass_overhead_s")] == pytest.approx([1.0, 1.0])
    assert d.X[:, TERMS.index("layer_overhead_s")] == pytest.approx([layers, layers])
    assert d.X[:, TERMS.index("sequence_overhead_s")] == pytest.approx([8.0, 8.0])
    assert d.X[:, TERMS.index("eager_layer_overhead_s")] == pytest.approx([0.0, layers])


def test_a_known_answer_is_recovered_term_by_term() -> None:
    """Rows priced by a stack with known host terms (two layer counts, three batches, rows
    with and without graphs) give those terms back."""
    truth = {
        "pass_overhead_s": 1.2e-3,
        "layer_overhead_s": 4e-5,
        "sequence_overhead_s": 2.5e-5,
        "eager_layer_overhead_s": 3e-5,
    }
    stack = with_terms(load_stack("sglang"), truth)
    rows = []
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4)):
        for batch in (1, 4, 16):
            for graphs in ("on", "off"):
                r = _row(id=f"{model}-{batch}-{graphs}", model=model, tensor_parallel=tp)
                r = dataclasses.replace(r, batch=batch, graphs=graphs)
                t = modelled_step_s(r, stack)
                rows.append(dataclasses.replace(r, step_s=t, step_low=t, step_high=t))
    fit = fit_fixed(rows, load_stack("sglang"))
    assert set(fit.estimate) == set(TERMS)
    for term, value in truth.items():
        assert fit.estimate[term] == pytest.approx(value, rel=1e-6), term
    assert np.abs(fit.errors).max() < 1e-9


def test_unidentified_terms_keep_the_previous_numbers() -> None:
    """One layer count and one batch: only the per-pass term is fitted (SGLang's order); the
    others stay at the previous numbers."""
    rows = [_row(id="a", step_s=0.0075, step_low=0.0074, step_high=0.0076), _row(id="b")]
    # whatever the file now holds, an unfitted term is the previous number
    odd = with_terms(load_stack("sglang"), dict.fromkeys(TERMS, 1e-3))
    fit = fit_fixed(rows, odd)
    assert list(fit.estimate) == ["pass_overhead_s"]
    prior = prior_stack(load_stack("sglang"))
    assert prior.eager_layer_overhead_s == PRIOR["sglang"]["eager_layer_overhead_s"]
    for term in ("layer_overhead_s", "sequence_overhead_s", "eager_layer_overhead_s"):
        assert getattr(fit.stack, term) == getattr(prior, term)


def test_a_fit_without_degrees_of_freedom_is_an_error_naming_the_stack() -> None:
    with pytest.raises(ValueError, match=r"'sglang': 1 row\(s\) leave no degree of freedom"):
        fit_fixed([_row()], load_stack("sglang"))
    with pytest.raises(ValueError, match="no rows to fit"):
        fit_fixed([], load_stack("sglang"))
    with pytest.raises(ValueError, match=r"rows of other stacks \['vllm-v1'\]"):
        fit_fixed([_row(), _row(id="x", stack="vllm-v1")], load_stack("sglang"))
    with pytest.raises(ValueError, match="no plain decode rows for stack 'vllm-v9'"):
        stack_rows([_row()], "vllm-v9")
    with pytest.raises(ValueError, match="unknown term"):
        with_terms(load_stack("sglang"), {"draft_step_overhead_s": 1.0})


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"graphs": "maybe"}, "graphs must be"),
        ({"step_low": 0.02}, "outside its interval"),
        ({"batch": 0}, "batch must be >= 1"),
    ],
)
def test_bad_rows_are_named(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _row(id="bad", **changes)


def test_a_table_without_a_column_or_with_a_bad_use_is_named(tmp_path: Path) -> None:
    (tmp_path / "models/measured/plain-decode").mkdir(parents=True)
    (tmp_path / "models/measured/published").mkdir(parents=True)
    root = Path(__file__).resolve().parents[2]
    shutil.copy(
        root / "models/measured/published/decode.csv",
        tmp_path / "models/measured/published/decode.csv",
    )
    plain = tmp_path / "models/measured/plain-decode/decode.csv"
    text = (root / "models/measured/plain-decode/decode.csv").read_text(encoding="utf-8")
    plain.write_text(text.replace(",graphs,", ",graph,", 1), encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['graphs'\]"):
        read_plain_rows(root=tmp_path)
    plain.write_text(text.replace(",fit,", ",maybe,", 1), encoding="utf-8")
    with pytest.raises(ValueError, match="column 'use' must be 'fit' or 'none'"):
        read_plain_rows(root=tmp_path)
    assert tuple(text.splitlines()[0].split(",")) == PLAIN_COLUMNS


def test_the_refit_gives_the_committed_numbers(fits: Fits) -> None:
    """Each committed stack file holds its refit (to the four digits written); every other
    stack keeps its previous numbers."""
    results, _ = fits
    committed = {r.slug for r in results if r.decision.commit}
    assert committed == set(COMMITTED)
    for res in results:
        shipped = load_stack(res.slug)
        if res.slug in committed:
            assert res.fit is not None
            for term, value in res.fit.estimate.items():
                assert getattr(shipped, term) == pytest.approx(value, rel=1e-3, abs=1e-12), term
                assert term not in shipped.assumptions
        else:
            for term in TERMS:
                assert getattr(shipped, term) == PRIOR.get(res.slug, {}).get(term, 0.0), term


def test_a_committed_fit_beats_the_previous_numbers_out_of_sample(fits: Fits) -> None:
    _, table = fits
    for slug in COMMITTED:
        d = commit_decision(table, slug)
        assert d.commit and d.median < d.prior_median, slug
    assert commit_decision(table, "vllm-v0").method == "none"  # one row: no check, no commit


def test_the_committed_stacks_price_their_rows_as_the_fit(fits: Fits) -> None:
    """The shipped stacks, through the cost model, give the fit's own in-sample steps."""
    results, _ = fits
    for res in results:
        if res.slug not in COMMITTED or res.fit is None:
            continue
        shipped = load_stack(res.slug)
        priced = np.array([modelled_step_s(r, shipped) for r in res.fit.rows])
        assert priced == pytest.approx(res.fit.fitted_s, rel=2e-3), res.slug


def test_a_held_out_source_does_not_move_its_own_prediction() -> None:
    """Multiplying a source's measured steps by three leaves its held-out predictions as
    they were (the refit never sees them), and moves the other sources' ones."""
    rows = read_plain_rows()
    mine = stack_rows(rows, "gpt-fast-stack")
    group = sorted({r.group for r in mine})[0]
    bent = [
        dataclasses.replace(
            r, step_s=3 * r.step_s, step_low=3 * r.step_low, step_high=3 * r.step_high
        )
        if r.group == group
        else r
        for r in mine
    ]
    before, _ = decisions(mine)
    after, _ = decisions(bent)
    same = before["left_out"] == group
    assert after.loc[same, "predicted_s"].to_numpy() == pytest.approx(
        before.loc[same, "predicted_s"].to_numpy(), rel=1e-12
    )
    assert not np.allclose(after.loc[~same, "predicted_s"], before.loc[~same, "predicted_s"])


def test_writing_changes_only_the_fitted_lines(fits: Fits, tmp_path: Path) -> None:
    results, _ = fits
    for slug in COMMITTED:
        shutil.copy(stacks_dir() / f"{slug}.toml", tmp_path / f"{slug}.toml")
    before = {s: (tmp_path / f"{s}.toml").read_text(encoding="utf-8") for s in COMMITTED}
    assert sorted(write_stacks(results, tmp_path)) == sorted(COMMITTED)
    for slug in COMMITTED:
        after = (tmp_path / f"{slug}.toml").read_text(encoding="utf-8")
        assert after == before[slug]  # the committed files are the writer's output
        st = load_stack_file(str(tmp_path / f"{slug}.toml"))
        res = next(r for r in results if r.slug == slug)
        assert res.fit is not None
        for term, value in res.fit.estimate.items():
            assert getattr(st, term) == pytest.approx(value, rel=1e-3, abs=1e-12)


def test_the_command_prints_every_stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--loso", str(tmp_path / "loso.csv")]) == 0
    out = capsys.readouterr().out
    for slug in ("gpt-fast-stack", "tensorrt-llm", "vllm-v0", "hf-transformers", "sglang"):
        assert f"{slug}: " in out
    assert "not committed" in out and (tmp_path / "loso.csv").is_file()
