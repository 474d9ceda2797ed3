"""The plan's weak-assumption flags read the fidelity page: a covered family that misses its
goal is named with its errors, an option on a checked model pair says which family covers it,
one on covered hardware and stack but another model pair says so, an uncovered deployment
says no check covers it, and the committed summary is the fresh one."""

from __future__ import annotations

import pandas as pd
import pytest

from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanRequest, plan
from specsim.plan.answer import PlanAnswer
from specsim.plan.fidelity import (
    COVERAGE,
    Coverage,
    fidelity_coverage,
    fidelity_flags,
    read_summary,
)
from specsim.plan.render import render_text
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


def _plan(target: str, hardware: str, runtime: str | None, spec: OptionSpec) -> PlanAnswer:
    dep = Deployment(target=target, hardware=hardware, runtime=runtime)
    return plan(PlanRequest(deployment=dep, options=(spec,), load=Load(batch=1)))


def test_a_plan_on_a_covered_model_pair_names_the_family() -> None:
    answer = _plan(
        "llama-160m",
        XEON,
        "cpu-xeon-eager-rows",
        OptionSpec(kind="draft", card="llama-68m", alpha=0.7),
    )
    cov = answer.assumed["fidelity"]
    assert [c["status"] for c in cov.values()] == ["same pair", "same pair"]
    assert LLAMA_JOINT in cov["draft llama-68m"]["families"]
    assert "on the same model pair (llama-160m + llama-68m)" in cov["draft llama-68m"]["line"]
    # said in the answer's assumptions, and no weak line says the pair is unchecked
    assert "covered by" in render_text(answer)
    assert not [w for w in answer.weak if "other model pair" in w or "no held-out" in w]


def test_another_model_pair_on_covered_hardware_says_so() -> None:
    # plain decoding of llama-2-7b under vllm-v1 on the H100: the family checked llama-3.1-8b
    answer = _plan("llama-2-7b", "h100-sxm", "vllm-v1", OptionSpec(kind="ngram"))
    plain = answer.assumed["fidelity"]["no speculation"]
    assert plain["status"] == "other pair"
    assert plain["families"] == ["vLLM v0.19.1 on H100 (vllm-v1 stack)"]
    hit = [w for w in answer.weak if "same hardware and stack, other model pair" in w]
    assert len(hit) == 1 and "checked llama-3.1-8b; not llama-2-7b" in hit[0]
    # a draft on covered CPU hardware, but not the pair the family ran
    dep = Deployment(target="llama-160m", hardware=XEON, runtime="cpu-xeon-eager-rows")
    other = fidelity_coverage(dep, ["draft"], ["llama-160m"])[0]
    assert other.status == "other pair" and "llama-160m + llama-68m" in other.line


def test_uncovered_hardware_says_no_held_out_check() -> None:
    answer = _plan("llama-3.1-8b", "l40s", "vllm-v1", OptionSpec(kind="ngram"))
    assert {c["status"] for c in answer.assumed["fidelity"].values()} == {"none"}
    assert [w for w in answer.weak if w.startswith("fidelity")] == [
        "fidelity: no held-out check covers vllm-v1 on l40s (bfloat16 weights), docs/fidelity.md"
    ]


def test_coverage_needs_pairs_that_agree_with_its_kinds() -> None:
    with pytest.raises(ValueError, match="at least one pair"):
        Coverage(hardware="a40", runtime=None, weights=("float16",), kinds=("none",), pairs=())
    with pytest.raises(ValueError, match="disagree"):
        Coverage(
            hardware="a40",
            runtime=None,
            weights=("float16",),
            kinds=("none",),
            pairs=(("llama-2-7b", "llama-68m"),),
        )
    dep = Deployment(target="llama-2-7b", hardware="a40")
    with pytest.raises(ValueError, match="2 kinds but 1 cards"):
        fidelity_coverage(dep, ["none", "draft"], [None])


def test_every_coverage_pair_names_model_cards() -> None:
    from specsim.cards import load_model

    for c in COVERAGE.values():
        for target, draft in c.pairs:
            load_model(target)
            if draft is not None:
                load_model(draft)
