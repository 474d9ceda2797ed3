"""MagicDec's streaming self-speculation card: published acceptance by context, the proposer."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.cards import load_model
from specsim.cards.proposer_cards import StreamingSelfSpecCard, load_proposer_card
from specsim.cost.deployment import Deployment
from specsim.proposers import RankAcceptance, SelfSpeculation
from specsim.proposers.budget import StreamingSelfSpec

SLUG = "magicdec-llama-3.1-8b-streaming-512"
CARD_FILE = Path(__file__).resolve().parents[2] / "models" / "proposers" / f"{SLUG}.toml"
PUBLISHED = {4000: 0.84, 8000: 0.83, 16000: 0.82, 32000: 0.81, 64000: 0.79, 100000: 0.79}


def test_the_card_holds_the_published_rates_and_reads_between_them() -> None:
    card = load_proposer_card(SLUG)
    assert isinstance(card, StreamingSelfSpecCard)
    assert (card.target, card.budget, card.max_depth) == ("llama-3.1-8b", 512, 8)
    assert dict(zip(card.contexts, card.context_accept, strict=True)) == PUBLISHED
    for context, rate in PUBLISHED.items():
        assert card.accept_at(context) == rate
    # Between two measured contexts: between their rates, exactly halfway at the geometric mean.
    assert card.accept_at((4000 * 8000) ** 0.5) == pytest.approx(0.835, abs=1e-12)
    assert 0.81 < card.accept_at(20000) < 0.82
    # Outside: the nearest measured rate (no extrapolation).
    assert card.accept_at(1024) == 0.84 and card.accept_at(131072) == 0.79
    assert card.assumed_depths == tuple(range(1, 9))


def test_the_proposer_of_the_card_is_streaming_self_speculation_at_that_context() -> None:
    sd = StreamingSelfSpec.from_card(SLUG, context=32000)
    assert sd.budget == 512 and sd.target == "llama-3.1-8b" and sd.max_depth == 8
    assert sd.acceptance.accept == ((0.81,),) * 8
    assert "assumed" in sd.acceptance.source and "index.html" in sd.acceptance.source
    by_hand = StreamingSelfSpec(
        target="llama-3.1-8b", budget=512, acceptance=RankAcceptance(accept=((0.81,),) * 8)
    )
    dep = Deployment(target=load_model("llama-3.1-8b"), hardware="h100-sxm")
    for context in (4096, 32768):
        got = sd.draft_cost([-1, 0, 1], deployment=dep, batch=32, context=context)
        want = by_hand.draft_cost([-1, 0, 1], deployment=dep, batch=32, context=context)
        assert got.time_s == want.time_s


def test_a_card_of_another_kind_is_refused_both_ways() -> None:
    with pytest.raises(ValueError, match="kind 'self-speculation', not streaming-self-spec"):
        StreamingSelfSpec.from_card("layerskip-llama-2-7b-e8", context=4096)
    with pytest.raises(ValueError, match=f"proposer card '{SLUG}': kind 'streaming-self-spec"):
        SelfSpeculation.from_card(SLUG)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("contexts = [4000, 8000,", "contexts = [8000, 4000,", "'contexts' must be ascending"),
        (
            "contexts = [4000,",
            "contexts = [256,",
            "'contexts' has 256 tokens, below the KV budget 512",
        ),
        ("0.79, 0.79]", "0.79]", "'context_accept' has 5 rates for 6 contexts"),
        ("0.84, 0.83", "1.84, 0.83", "expected a probability in \\[0, 1\\], got 1.84"),
        ("assumed_depths = [1, 2, 3, 4, 5, 6, 7, 8]", "assumed_depths = [9]", "names depth 9"),
    ],
)
def test_bad_cards_name_the_field_and_the_file(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    text = CARD_FILE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / f"{SLUG}.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises((ValueError, TypeError), match=message) as err:
        load_proposer_card(path)
    assert str(path) in str(err.value)
    with pytest.raises(ValueError, match="context must be a positive number"):
        load_proposer_card(SLUG).accept_at(-1.0)  # type: ignore[union-attr]
