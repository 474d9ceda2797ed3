"""The plan's inputs: every bad value an error naming it; a TOML request; proposers for
another target refused with both cards named."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanRequest, request_from_toml
from specsim.plan.options import build_option


def _dep(target: str = "llama-2-7b") -> Deployment:
    return Deployment(target=load_model(target), hardware=load_hardware("h100-sxm"))


def test_load_needs_one_of_batch_and_rate() -> None:
    with pytest.raises(ValueError, match="give a batch"):
        Load()
    with pytest.raises(ValueError, match="give a batch"):
        Load(batch=2, rate_per_s=1.0)
    with pytest.raises(ValueError, match="rate: expected"):
        Load(rate_per_s=-1.0)
    with pytest.raises(ValueError, match="workload: unknown preset 'nope'"):
        Load(rate_per_s=1.0, workload="nope")


def test_option_specs_refuse_what_does_not_apply() -> None:
    with pytest.raises(ValueError, match="needs a card"):
        OptionSpec(kind="heads")
    with pytest.raises(ValueError, match="alpha: kind .heads.: an assumed alpha applies"):
        OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3", alpha=0.5)
    with pytest.raises(ValueError, match="alpha: expected a probability"):
        OptionSpec(kind="draft", card="llama-68m", alpha=1.5)
    with pytest.raises(ValueError, match="kind: expected one of"):
        OptionSpec(kind="magic")


def test_a_proposer_for_another_target_names_both_cards() -> None:
    spec = OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3")
    with pytest.raises(ValueError) as err:
        build_option(spec, _dep("llama-2-7b"), where="--heads")
    assert "eagle-vicuna-7b-v1.3" in str(err.value) and "llama-2-7b" in str(err.value)


def test_a_draft_needs_an_acceptance_and_an_alpha_is_flagged_assumed() -> None:
    with pytest.raises(ValueError, match="--alpha A .assumed. or --acceptance FILE"):
        build_option(OptionSpec(kind="draft", card="llama-68m"), _dep(), where="--draft")
    opt = build_option(OptionSpec(kind="draft", card="llama-68m", alpha=0.6), _dep(), where="x")
    assert not opt.measured and "assumed" in opt.acceptance_source
    ngram = build_option(OptionSpec(kind="ngram"), _dep(), where="--ngram")
    assert ngram.measured and "sample corpus" in ngram.acceptance_source


def test_a_request_needs_an_option() -> None:
    with pytest.raises(ValueError, match="name at least one proposer"):
        PlanRequest(deployment=_dep(), options=(), load=Load(batch=1))
    twice = (OptionSpec(kind="ngram"), OptionSpec(kind="ngram"))
    with pytest.raises(ValueError, match="options: ngram given twice"):
        PlanRequest(deployment=_dep(), options=twice, load=Load(batch=1))


def test_request_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        '[deployment]\ntarget = "vicuna-7b-v1.3"\nhardware = "h100-sxm"\n'
        '[[options]]\nkind = "heads"\ncard = "eagle-vicuna-7b-v1.3"\n'
        '[[options]]\nkind = "ngram"\n'
        "[load]\nrate_per_s = 3.0\nprompt_tokens = 256\n"
        "[slo]\ntpot_p99_s = 0.01\n",
        encoding="utf-8",
    )
    req = request_from_toml(path)
    assert req.deployment.target.slug == "vicuna-7b-v1.3"
    assert [o.kind for o in req.options] == ["heads", "ngram"]
    assert req.load.rate_per_s == 3.0 and req.load.prompt_tokens == 256
    assert req.slo_tpot_p99_s == 0.01 and req.slo_ttft_p99_s is None
    text = path.read_text(encoding="utf-8")
    path.write_text("colour = 1\n" + text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"plan.toml: unknown key\(s\) \['colour'\]"):
        request_from_toml(path)
    path.write_text(text + "speed = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"plan.toml \[slo\]: unknown key\(s\) \['speed'\]"):
        request_from_toml(path)


def test_precise_serves_five_times_the_requests() -> None:
    load = Load(rate_per_s=1.0, requests=40)
    opts = (OptionSpec(kind="ngram"),)
    assert PlanRequest(deployment=_dep(), options=opts, load=load).requests == 40
    assert PlanRequest(deployment=_dep(), options=opts, load=load, precise=True).requests == 200
