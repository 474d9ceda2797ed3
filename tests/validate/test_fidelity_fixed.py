"""The fixed host costs' out-of-sample families (specsim.validate.fidelity.fixed) and the
plan's flags that read them (specsim.plan.fidelity)."""

from __future__ import annotations

import pandas as pd
import pytest

from specsim.cards import compose, load_hardware, load_model, load_stack
from specsim.cost.deployment import Deployment
from specsim.plan.fidelity import COVERAGE, fidelity_flags, read_summary
from specsim.plan.fidelity.coverage import _KEPT, _LOSO
from specsim.plots.fidelity import STACK_QUANTITIES
from specsim.validate.fidelity.fixed import KEPT_FAMILY, LOSO_FAMILY, QUANTITY, fixed_cost_rows
from specsim.validate.fidelity.rows import COLUMNS


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return pd.DataFrame(fixed_cost_rows(), columns=list(COLUMNS))


def test_each_stack_has_one_family_and_every_row_is_out_of_sample(rows: pd.DataFrame) -> None:
    assert (LOSO_FAMILY, KEPT_FAMILY) == (_LOSO, _KEPT) and QUANTITY in STACK_QUANTITIES
    loso = rows[rows["family"].str.startswith("plain decode steps, leave-one-source-out")]
    assert set(loso["family"]) == {
        LOSO_FAMILY.format(stack=s) for s in ("gpt-fast-stack", "research-cuda-graphs")
    }
    assert loso["fitted_on"].str.contains("refitted without this (?:source|row)").all()
    kept = rows[~rows.index.isin(loso.index)]
    assert kept["fitted_on"].str.startswith("nothing of this row").all()
    assert rows["anchor"].is_unique
    assert (rows["unit"] == "ms").all() and (rows["measured"] > 0).all()


def test_every_family_is_behind_a_coverage_entry() -> None:
    summary = read_summary()
    plain = set(summary[summary["family"].str.startswith("plain decode steps")]["family"])
    assert len(plain) == 6 and plain <= set(COVERAGE)


def test_a_plan_on_deepseek_v3_under_tensorrt_llm_names_the_out_of_sample_miss() -> None:
    b200 = load_hardware("b200")
    dep = Deployment(
        target=load_model("deepseek-v3"),
        hardware=b200,
        runtime=compose(load_stack("tensorrt-llm"), b200),
        weights="bfloat16",
        expert_weights="nvfp4",
        tensor_parallel=8,
        expert_parallel=8,
    )
    flags = fidelity_flags(dep, ["none"], cards=[None])
    kept = "previous numbers kept: tensorrt-llm"
    assert any(kept in f and "median error 37%" in f for f in flags)
