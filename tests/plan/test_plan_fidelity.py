"""The plan's weak-assumption flags read the fidelity page: a covered family that misses its
goal is named with its errors, an uncovered deployment says no check covers it, and the
committed summary is the fresh one."""

from __future__ import annotations

import pandas as pd
import pytest

from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanRequest, plan
from specsim.plan.fidelity import COVERAGE, fidelity_flags, read_summary
from specsim.validate.fidelity import fidelity_summary, fidelity_table

XEON = "models/calibrated/cpu-xeon-2vcpu.toml"
LLAMA_JOINT = (
    "CPU interleaved runs, llama-160m + llama-68m "
    "(runtime profile fitted on fp32, int8 and int4 passes)"
)


def test_the_committed_summary_is_a_fresh_computation() -> None:
    fresh = fidelity_summary(fidelity_table())
    committed = read_summary()
    assert list(committed["family"]) == list(fresh["family"])
    assert list(committed["quantity"]) == list(fresh["quantity"])
    assert list(committed["goal met"]) == list(fresh["goal met"])
    for col in ("median |error|", "worst |error|"):
        pd.testing.assert_series_equal(committed[col], fresh[col], rtol=1e-5, check_dtype=False)


def test_every_covered_family_is_on_the_fidelity_page() -> None:
    assert set(COVERAGE) <= set(read_summary()["family"])


def _joint_row(quantity: str) -> pd.Series:
    s = read_summary()
    return s[(s["family"] == LLAMA_JOINT) & (s["quantity"] == quantity)].iloc[0]


def test_a_covered_family_that_misses_its_goal_is_flagged_with_its_errors() -> None:
    row = _joint_row("per-token latency")
    assert not row["goal met"]  # the real table: this family misses its latency goal
    dep = Deployment(target="llama-160m", hardware=XEON, runtime="cpu-xeon-eager-rows")
    flags = fidelity_flags(dep, ["none", "draft"])
    hit = [f for f in flags if LLAMA_JOINT in f and "per-token latency" in f]
    assert len(hit) == 1
    assert f"median error {row['median |error|']:.0%}" in hit[0]
    assert "on cpu-xeon-2vcpu under cpu-xeon-eager-rows" in hit[0]
    assert "docs/fidelity.md" in hit[0]


def test_a_family_that_meets_its_goal_raises_no_flag() -> None:
    s = read_summary().copy()
    s.loc[s["family"] == LLAMA_JOINT, "goal met"] = True
    dep = Deployment(target="llama-160m", hardware=XEON, runtime="cpu-xeon-eager-rows")
    assert not [f for f in fidelity_flags(dep, ["draft"], summary=s) if LLAMA_JOINT in f]
    # the vLLM family meets its goal: plain decoding under vllm-h100 is covered, unflagged
    vllm = Deployment(target="llama-3.1-8b", hardware="h100-sxm", runtime="vllm-h100")
    assert fidelity_flags(vllm, ["none"]) == []
    assert fidelity_flags(vllm, ["none", "heads"]) == [
        "fidelity: no held-out check covers heads proposers under vllm-h100 on h100-sxm, "
        "docs/fidelity.md"
    ]


def test_an_uncovered_deployment_says_no_check_covers_it() -> None:
    dep = Deployment(target="vicuna-7b-v1.3", hardware="l40s")
    assert fidelity_flags(dep, ["none", "draft"]) == [
        "fidelity: no held-out check covers gpt-fast on l40s (float16 weights), docs/fidelity.md"
    ]
    int4 = Deployment(target="t5-xxl", hardware="tpu-v4", weights="int4", group_size=128)
    assert (
        "no held-out check covers t5x-tpu-v4 on tpu-v4 (int4 weights)"
        in fidelity_flags(int4, ["draft"])[0]
    )


@pytest.mark.parametrize(
    ("hardware", "runtime", "flagged"),
    [(XEON, "cpu-xeon-eager-rows", LLAMA_JOINT), ("l40s", None, "no held-out check covers")],
)
def test_the_plan_answer_carries_the_flags(
    hardware: str, runtime: str | None, flagged: str
) -> None:
    dep = Deployment(target="llama-160m", hardware=hardware, runtime=runtime)
    spec = OptionSpec(kind="draft", card="llama-68m", alpha=0.7)
    answer = plan(PlanRequest(deployment=dep, options=(spec,), load=Load(batch=1)))
    assert any(flagged in w and w.startswith("fidelity: ") for w in answer.weak)
