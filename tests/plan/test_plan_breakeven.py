"""The answer without an acceptance: the break-even is where the plan's own evaluation turns
speculation on (just above it pays, just below it does not), a draft that cannot pay is
said to, the published range quotes committed cards with their sources, and a draft that
cannot draft for the target is still refused."""

from __future__ import annotations

import json

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cli import jsonout
from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanAnswer, PlanRequest, plan, render_text
from specsim.plan.breakeven import KS, published
from specsim.theory.numeric import expected_tokens

DEP = Deployment(target=load_model("llama-3.1-8b"), hardware=load_hardware("h100-sxm"))
DRAFT = OptionSpec(kind="draft", card="llama-3.2-1b")


def _plan(*options: OptionSpec, batch: int = 1) -> PlanAnswer:
    return plan(PlanRequest(deployment=DEP, options=options, load=Load(batch=batch)))


@pytest.fixture(scope="module")
def answer() -> PlanAnswer:
    return _plan(DRAFT)


def test_the_root_is_where_the_plan_turns_speculation_on(answer: PlanAnswer) -> None:
    be = answer.break_evens["draft llama-3.2-1b"]
    assert be.status == "pays above" and be.alpha is not None and be.k is not None
    assert 0.0 < be.alpha < 1.0 and be.k in KS
    assert be.alpha == min(a for a in be.per_k.values() if a is not None)
    assert be.accepted_length == pytest.approx(float(expected_tokens(be.alpha, be.k)))
    below = _plan(OptionSpec(kind="draft", card="llama-3.2-1b", alpha=be.alpha - 0.01))
    above = _plan(OptionSpec(kind="draft", card="llama-3.2-1b", alpha=be.alpha + 0.01))
    assert not below.verdict.speculate and below.rows[1].plan == "none"
    assert above.verdict.speculate and above.rows[1].plan == f"chain k = {be.k}"
    plain, spec = above.rows[0].throughput_tokens_per_s, above.rows[1].throughput_tokens_per_s
    assert spec.value > plain.value


def test_the_answer_says_it_in_the_verdict_the_table_and_json(answer: PlanAnswer) -> None:
    be = answer.break_evens["draft llama-3.2-1b"]
    assert be.alpha is not None and be.accepted_length is not None
    text = answer.verdict.sentence
    assert text.startswith("No acceptance given for draft llama-3.2-1b: at batch 1, it pays")
    assert f"above {be.alpha:.2f} (mean accepted length {be.accepted_length:.3g} at k = " in text
    assert answer.verdict.choice is None and not answer.verdict.speculate
    assert [r.label for r in answer.rows] == ["no speculation"] and not answer.whatifs
    out = render_text(answer)
    assert f"{be.alpha:.2f} (k = {be.k}, length" in out and "break-even acceptance" in out
    data = json.loads(jsonout.dumps(answer.as_dict()))
    assert data["break_even"]["draft llama-3.2-1b"]["alpha"] == pytest.approx(be.alpha)


def test_published_pairs_are_committed_cards_of_the_target_family(answer: PlanAnswer) -> None:
    be = answer.break_evens["draft llama-3.2-1b"]
    cards = {p.card for p in be.published}
    assert {"eagle3-llama-3.1-8b", "pard-llama-3.2-1b-llama-3.1-8b"} <= cards
    assert "eagle-vicuna-7b-v1.3" not in cards  # another family, another tokenizer
    for p in be.published:
        assert load_model(p.target).family == "llama-3" and p.source.startswith("http")
        assert p.accepted_length == pytest.approx(float(expected_tokens(p.alpha, p.k)))
    pard = next(p for p in be.published if p.card.startswith("pard"))
    assert pard.alpha == pytest.approx(0.84, abs=0.005)  # the card's constant per-depth rate
    low, high = be.published_range or (0.0, 0.0)
    assert f"{low:.2f} to {high:.2f}" in answer.verdict.sentence
    assert published("no-such-family", k=4) == ()


def test_a_draft_that_cannot_pay_is_said_to_never_pay() -> None:
    own = OptionSpec(kind="draft", card="llama-3.1-8b")  # the target as its own draft
    answer = _plan(own, OptionSpec(kind="ngram"), batch=4)
    be = answer.break_evens["draft llama-3.1-8b"]
    assert be.status == "never" and be.alpha is None and set(be.per_k.values()) == {None}
    assert "it never pays, even with every drafted token accepted" in answer.verdict.sentence
    assert [r.label for r in answer.rows] == ["no speculation", "ngram"]  # still planned
    assert "never (not even at 1)" in render_text(answer)


def test_a_draft_for_another_tokenizer_is_still_refused() -> None:
    with pytest.raises(ValueError, match=r"llama-68m cannot draft for the target card 'llama-3"):
        _plan(OptionSpec(kind="draft", card="llama-68m"))
