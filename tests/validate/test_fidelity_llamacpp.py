"""llama.cpp's committed speculative runs predicted held out (specsim.validate.fidelity.llamacpp):
every row is out of sample, and the figures docs/llama-cpp.md quotes hold."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from specsim.validate.fidelity.llamacpp import BENCH, LINE, MEASURED, llamacpp_rows
from specsim.validate.fidelity.rows import COLUMNS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return pd.DataFrame(llamacpp_rows(), columns=list(COLUMNS))


def test_two_families_of_one_thread_cells(table: pd.DataFrame) -> None:
    assert table.groupby("family").size().to_dict() == {LINE: 20, BENCH: 20}
    assert table["anchor"].str.contains(" t1 ").all()
    assert table["fitted_on"].str.endswith("this cell's accepted counts").all()
    assert not table[["measured", "predicted", "error"]].isna().any().any()


def test_the_quoted_figures(table: pd.DataFrame) -> None:
    line, bench = table[table["family"] == LINE], table[table["family"] == BENCH]
    assert (
        line["error"].abs().median() < 0.10 and (line["verdict"] == "within interval").sum() >= 16
    )
    assert (bench["error"] < -0.1).all()  # the host's work between passes is left out


def _slow_down(log: Path, factor: float) -> None:
    text = log.read_text()
    sub = lambda m: f"{m.group(1)}{float(m.group(2)) * factor:8.3f} seconds"  # noqa: E731
    log.write_text(re.sub(r"(decoded\s+\d+ tokens in\s+)([0-9.]+) seconds", sub, text))


def test_a_cells_own_times_do_not_move_its_prediction(tmp_path: Path, table: pd.DataFrame) -> None:
    shutil.copytree(ROOT / MEASURED, tmp_path / MEASURED)
    for log in (tmp_path / MEASURED / "speculative").glob("tiny-t1-k4-*.log"):
        _slow_down(log, 3.0)
    rebuilt = pd.DataFrame(llamacpp_rows(root=tmp_path), columns=list(COLUMNS))
    for family in (LINE, BENCH):
        before = table[(table["family"] == family) & (table["anchor"] == "tiny t1 k4")].iloc[0]
        after = rebuilt[(rebuilt["family"] == family) & (rebuilt["anchor"] == "tiny t1 k4")]
        assert after.iloc[0]["predicted"] == pytest.approx(before["predicted"])
        assert after.iloc[0]["measured"] == pytest.approx(3 * before["measured"], rel=1e-2)
