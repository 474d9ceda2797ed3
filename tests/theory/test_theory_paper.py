"""The paper's own numbers, reproduced by the numeric twins.

Source: Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023 (arXiv:2211.17192 v2): Table 1 (Section 3.5), Table 2 (Section 4.1)
with its expected column and c from Table 4 (Appendix A.3), Table 3 (Section 4.2), and the
bigram example of Sections 3.6 and 4.2. Table 2 and the bigram alpha are copied here from
../shared/data/leviathan2023_table2.csv and leviathan2023_table3.csv, so a clean clone runs
these tests; test_the_copied_figures_match_the_shared_csv checks the copy when that
directory is present.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from specsim import theory

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

# Table 1 (Section 3.5), c = c_hat = 0: (alpha, gamma) -> (operations, speed), printed to 0.01.
TABLE1 = [
    (0.6, 2, 1.53, 1.96),
    (0.7, 3, 1.58, 2.53),
    (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69),
    (0.9, 2, 1.11, 2.71),
    (0.9, 10, 1.60, 6.86),
]

# Table 2 rows: (task, draft, temperature, gamma, alpha, c, expected walltime improvement).
TABLE2 = [
    ("EnDe", "T5-small", 0, 7, 0.75, 0.02, 3.2),
    ("EnDe", "T5-base", 0, 7, 0.80, 0.04, 3.3),
    ("EnDe", "T5-large", 0, 7, 0.82, 0.11, 2.5),
    ("EnDe", "T5-small", 1, 7, 0.62, 0.02, 2.3),
    ("EnDe", "T5-base", 1, 5, 0.68, 0.04, 2.4),
    ("EnDe", "T5-large", 1, 3, 0.71, 0.11, 2.0),
    ("CNNDM", "T5-small", 0, 5, 0.65, 0.02, 2.4),
    ("CNNDM", "T5-base", 0, 5, 0.73, 0.04, 2.6),
    ("CNNDM", "T5-large", 0, 3, 0.74, 0.11, 2.0),
    ("CNNDM", "T5-small", 1, 5, 0.53, 0.02, 1.9),
    ("CNNDM", "T5-base", 1, 3, 0.55, 0.04, 1.8),
    ("CNNDM", "T5-large", 1, 3, 0.56, 0.11, 1.6),
]
BIGRAM_ENDE_ALPHA = 0.20  # Table 3: T5-XXL (EnDe) target, bigram draft, t = 0

# Table 2's "expected" column (the paper's Table 4, Appendix A.3) is Theorem 3.8 rounded to
# 0.1. Recomputed from the *published* alpha and c, nine rows round to the printed value and
# these three do not: they sit 0.053, 0.066 and 0.059 below it. The cause is rounding of the
# inputs, not the formula: the paper printed alpha and c to two decimals (+-0.005 each), and
# moving them within that box moves the prediction by 0.03 to 0.08 on these rows, which with
# the 0.05 half-step of the printed value's own rounding reaches it
# (test_table2_rows_consistent_with_rounded_inputs shows this for all twelve rows). Tolerance
# for them: 0.07 (the largest gap, rounded up) plus that 0.05 half-step.
OFF_BY_ROUNDING = {("EnDe", "T5-base", 1), ("EnDe", "T5-large", 1), ("CNNDM", "T5-large", 1)}
HALF_STEP = 0.05
OFF_TOLERANCE = 0.07 + HALF_STEP
INPUT_HALF_STEP = 0.005


def test_the_copied_figures_match_the_shared_csv() -> None:
    table2, table3 = DATA / "leviathan2023_table2.csv", DATA / "leviathan2023_table3.csv"
    if not (table2.is_file() and table3.is_file()):
        pytest.skip("the published Table 2 and 3 data files are not beside this copy")
    with table2.open(newline="") as f:
        rows = [
            (
                r["task"],
                r["draft"],
                int(r["temperature"]),
                int(r["gamma"]),
                float(r["alpha"]),
                float(r["c"]),
                float(r["expected_speedup"]),
            )
            for r in csv.DictReader(f)
        ]
    assert rows == TABLE2
    with table3.open(newline="") as f:
        rows3 = list(csv.DictReader(f))
    bigram = next(r for r in rows3 if (r["target"], r["draft"]) == ("T5-XXL (EnDe)", "Bigram"))
    assert float(bigram["alpha_temp0"]) == BIGRAM_ENDE_ALPHA


@pytest.mark.parametrize(("a", "g", "ops", "speed"), TABLE1)
def test_table1(a: float, g: int, ops: float, speed: float) -> None:
    assert round(float(theory.ops_factor(a, g, 0.0)), 2) == ops
    assert round(float(theory.walltime_speedup(a, g, 0.0)), 2) == speed


def test_table2_expected_column() -> None:
    agree: list[tuple[str, str, int]] = []
    off: list[tuple[str, str, int]] = []
    for task, draft, temp, g, a, c, printed in TABLE2:
        key = (task, draft, temp)
        mine = float(theory.walltime_speedup(a, g, c))
        (off if key in OFF_BY_ROUNDING else agree).append(key)
        if key in OFF_BY_ROUNDING:
            assert round(mine, 1) != printed, key  # the list above is exactly right
            assert abs(mine - printed) <= OFF_TOLERANCE, (key, mine, printed)
        else:
            assert round(mine, 1) == printed, (key, mine, printed)
    assert len(agree) == 9 and set(off) == OFF_BY_ROUNDING


def test_table2_rows_consistent_with_rounded_inputs() -> None:
    # W grows with alpha and falls with c, so the extremes over the rounding box are corners.
    for task, draft, temp, g, a, c, printed in TABLE2:
        low = float(theory.walltime_speedup(a - INPUT_HALF_STEP, g, c + INPUT_HALF_STEP))
        high = float(theory.walltime_speedup(a + INPUT_HALF_STEP, g, max(c - INPUT_HALF_STEP, 0)))
        assert low - HALF_STEP <= printed <= high + HALF_STEP, (task, draft, temp, low, high)


def test_bigram_draft() -> None:
    # Sections 3.6 and 4.2: a bigram draft for EnDe, alpha = 0.2, c = 0, gamma = 3 -> 1.25X.
    a = BIGRAM_ENDE_ALPHA
    assert round(float(theory.walltime_speedup(a, 3, 0.0)), 2) == 1.25
    assert float(theory.walltime_speedup(a, 3, 0.0)) == pytest.approx(1.248, rel=1e-14)


def test_the_buried_bill() -> None:
    # Five guesses, a free draft, low agreement: 4.8x the operations per emitted token,
    # while the serial target calls per token still fall below 1.
    ops = float(theory.ops_factor(0.2, 5, 0.0))
    assert ops == pytest.approx(3125 / 651, rel=1e-14)
    assert round(ops, 1) == 4.8
    calls = float(theory.target_calls_per_token(0.2, 5))
    assert calls == pytest.approx(3125 / 3906, rel=1e-14) and calls < 1.0
    assert float(theory.walltime_speedup(0.2, 5, 0.0)) > 1.0


def test_negligible_cost_draft_is_bounded_by_the_oracle() -> None:
    # Section 3.6: with c = 0 the improvement is E, bounded by 1/(1 - alpha), approached as
    # gamma grows.
    for a in (0.2, 0.5, 0.75, 0.9):
        bound = float(theory.oracle_speedup_bound(a))
        assert float(theory.walltime_speedup(a, 3, 0.0)) < bound
        assert float(theory.walltime_speedup(a, 400, 0.0)) == pytest.approx(bound, rel=1e-12)
