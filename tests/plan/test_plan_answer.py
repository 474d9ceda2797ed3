"""A served plan: intervals around the estimates, the JSON round trip, the bad loads
(a rate the hardware cannot serve, an SLO no option meets) answered in words."""

from __future__ import annotations

import json

import pytest

from specsim.cards import load_hardware, load_model, load_runtime
from specsim.cli import jsonout
from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanAnswer, PlanRequest, plan, render_text

DEP = Deployment(
    target=load_model("vicuna-7b-v1.3"),
    hardware=load_hardware("h100-sxm"),
    runtime=load_runtime("vllm-h100"),
)
HEADS = OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3")


def _served(rate: float, requests: int = 60, **kw: object) -> PlanAnswer:
    load = Load(rate_per_s=rate, requests=requests, prompt_tokens=128, output_tokens=64)
    return plan(PlanRequest(deployment=DEP, options=(HEADS,), load=load, **kw))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def answer() -> PlanAnswer:
    return _served(2.0, slo_tpot_p99_s=0.05, price_per_gpu_hour=2.5)


def test_every_estimate_sits_in_its_interval(answer: PlanAnswer) -> None:
    assert [r.label for r in answer.rows] == ["no speculation", "heads eagle-vicuna-7b-v1.3"]
    for r in answer.rows:
        for est in (r.tpot_p50_s, r.ttft_p50_s, r.throughput_tokens_per_s, r.accepted_length):
            assert est is not None and est.low <= est.value <= est.high
        assert r.stable is True
        assert r.cost_per_mtok is not None and r.goodput_requests_per_s is not None
    spec = answer.rows[1]
    assert spec.accepted_length.value > 1.5 and answer.rows[0].accepted_length.value == 1.0
    # cost per million tokens is the price over the throughput (one GPU)
    thr = spec.throughput_tokens_per_s.value
    assert spec.cost_per_mtok is not None
    assert spec.cost_per_mtok.value == pytest.approx(2.5 / 3600 / thr * 1e6)


def test_the_json_round_trip(answer: PlanAnswer) -> None:
    text = jsonout.dumps(answer.as_dict())
    back = json.loads(text)
    assert back == json.loads(json.dumps(jsonout.finite_or_null(answer.as_dict())))
    assert back["verdict"] == answer.verdict.sentence
    assert [o["label"] for o in back["options"]] == [r.label for r in answer.rows]
    assert back["options"][1]["tree"] == list(answer.rows[1].tree)
    assert render_text(answer).splitlines()[0] == back["verdict"]


def test_a_rate_beyond_the_hardware_says_not_stable_and_what_it_serves() -> None:
    a = _served(400.0, requests=300)
    assert a.rows[0].stable is False
    assert a.verdict.sentence.startswith("NOT STABLE")
    serve = a.serveable_rate_per_s
    assert serve is not None and 0 < serve < 400
    assert f"about {serve:.3g} req/s" in a.verdict.sentence


def test_a_run_too_short_to_see_the_overload_is_not_stable_by_the_closed_form() -> None:
    a = _served(400.0, requests=30)  # 30 requests are too few for the engine to tell
    assert all(r.stable is False for r in a.rows)
    assert "(closed form)" in a.rows[0].stability_reason
    assert a.verdict.sentence.startswith("NOT STABLE") and a.verdict.choice is None


def test_an_slo_no_option_meets_is_said() -> None:
    a = _served(2.0, slo_tpot_p99_s=1e-4)
    assert a.verdict.choice is None
    assert a.verdict.sentence.startswith("No option meets the SLO (p99 TPOT <= 0.1 ms)")


@pytest.mark.parametrize(
    ("target", "spec"),
    [
        ("llama-2-7b", OptionSpec(kind="draft", card="llama-68m", alpha=0.6)),
        ("vicuna-7b-v1.3", OptionSpec(kind="heads", card="medusa-vicuna-7b-v1.3")),
        ("mimo-7b", OptionSpec(kind="heads", card="mtp-mimo-7b")),
        ("llama-2-7b", OptionSpec(kind="ngram")),
        ("llama-3.1-8b", OptionSpec(kind="parallel", card="pard-llama-3.2-1b-llama-3.1-8b")),
        ("llama-2-7b", OptionSpec(kind="selfspec", card="layerskip-llama-2-7b-e8")),
    ],
    ids=lambda x: x if isinstance(x, str) else x.kind,
)
def test_every_proposer_kind_is_answered(target: str, spec: OptionSpec) -> None:
    dep = Deployment(target=load_model(target), hardware=load_hardware("a100-80gb"))
    a = plan(PlanRequest(deployment=dep, options=(spec,), load=Load(batch=4)))
    row = a.rows[1]
    # a closed batch: the accepted length is the tree's expected tokens per pass (>= 1), and
    # TPOT is the pass over them
    assert row.accepted_length.value >= 1.0
    assert (a.verdict.choice == row.label) == (
        row.throughput_tokens_per_s.value > a.rows[0].throughput_tokens_per_s.value
    )
