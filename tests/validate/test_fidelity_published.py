"""The published plain-decoding figures: committed with sources, in sample only where a fit
used them, and predicted without their own value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from specsim.calibrate.fixed_costs import fit_fixed, stack_rows
from specsim.calibrate.plain_rows import read_plain_rows
from specsim.cards import load_stack
from specsim.validate.fidelity import published as pub

ROOT = Path(__file__).resolve().parents[2]
FIXED = ("gpt-fast-stack", "research-cuda-graphs")  # committed fits that use published rows


@pytest.fixture(scope="module")
def decode() -> pd.DataFrame:
    return pub.read_published()


def test_every_row_has_a_source_and_a_card(decode: pd.DataFrame) -> None:
    assert tuple(decode.columns) == pub.DECODE_COLUMNS
    assert decode["id"].is_unique
    assert decode["source"].str.startswith("https://").all()
    assert (decode["where"].str.len() > 5).all()
    assert set(decode["quantity"]) <= {"tokens_per_s", "ms_per_token"}
    spec = pub.speculative_held_out()
    assert spec["source"].str.startswith("https://").all()
    assert (spec["why_not_scored"].str.len() > 10).all()


def test_in_sample_rows_are_the_fitted_points_and_reproduce(decode: pd.DataFrame) -> None:
    fitted = pub.stack_fit_rows()
    assert len(fitted) == int((decode["fitted_by"] != "").sum()) == 12
    assert fitted["family"].str.startswith("in-sample: ").all()
    assert fitted["fitted_on"].str.startswith("itself: ").all()
    # the profiles' closed-form fits reproduce their points to rounding; a stack's fixed host
    # costs are least squares over many rows: there the residual is the fit's own
    closed = ~fitted["fitted_on"].str.contains("fixed host costs")
    assert (fitted.loc[closed, "error"].abs() < 1e-3).all()
    fits = {s: fit_fixed(stack_rows(read_plain_rows(), s), load_stack(s)) for s in FIXED}
    worst = {s: float(abs(f.errors).max()) for s, f in fits.items()}
    for _, r in fitted[~closed].iterrows():
        stack = next(s for s in FIXED if s in str(r["family"]))
        assert abs(float(r["error"])) <= worst[stack] * 1.05 + 1e-3, r["anchor"]


def test_out_of_sample_rows_use_no_fit_of_their_own(decode: pd.DataFrame) -> None:
    rows = pd.DataFrame(pub.published_rows())
    held = decode[decode["fitted_by"] == ""]
    assert len(rows) == len(held) == 10
    assert not rows["family"].str.startswith("in-sample").any()
    assert rows["fitted_on"].str.startswith("nothing of this source").all()
    # the prediction does not read the row's value: three times the value, same prediction
    for _, r in held.iterrows():
        tripled = r.copy()
        tripled["value"] = 3 * float(r["value"])
        assert pub.predict_published(tripled) == pub.predict_published(r)


def test_known_answer_tokens_per_second(decode: pd.DataFrame) -> None:
    """A microbatch row's tokens per second is its new tokens over one pass's time."""
    from specsim.cards import compose, load_hardware, load_model, load_stack
    from specsim.cost import step_cost

    r = decode[decode["id"] == "llamacpp-3090-d32k-u64"].iloc[0]
    hw = load_hardware("rtx-3090")
    t = step_cost(
        load_model("llama-3.1-8b"),
        hw,
        batch=1,
        context=33024,
        new_tokens=64,
        weights="q4_0",
        runtime=compose(load_stack("llama.cpp"), hw),
    ).time_s
    assert pub.predict_published(r) == pytest.approx(64 / t, rel=1e-12)


def test_a_file_without_its_columns_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / pub.PUBLISHED
    folder.mkdir(parents=True)
    shutil.copy(ROOT / pub.PUBLISHED / "speculative.csv", folder / "speculative.csv")
    (folder / "decode.csv").write_text("id,source\nx,https://example.org\n")
    with pytest.raises(ValueError, match="missing column"):
        pub.read_published(root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no file"):
        pub.read_published("other.csv", root=tmp_path)
