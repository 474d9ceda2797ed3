"""Acceptance in engines' forms (:mod:`specsim.proposers.engine_forms`): exact round trips
to the engines' own means, and one clear error for each bad value."""

from __future__ import annotations

import math

import pytest

from specsim.policies.tree_optimizer import tree_tokens
from specsim.proposers import build_proposer
from specsim.proposers.engine_forms import (
    ACCEPT_LENGTH,
    PER_POSITION,
    accept_length_acceptance,
    alpha_from_accept_length,
    parse_accept_length,
    parse_per_position,
    per_position_acceptance,
)


def chain(k: int) -> list[int]:
    return [-1, *range(k - 1)]


@pytest.mark.parametrize(
    "rates", [[0.8, 0.6, 0.3], [1.0, 1.0], [0.5], [0.7, 0.0, 0.0], [0.9, 0.81, 0.729, 0.6]]
)
def test_rates_round_trip_to_one_plus_their_sum(rates: list[float]) -> None:
    acc = per_position_acceptance(rates, given="a test")
    assert acc.depths == len(rates) == acc.max_depth and acc.ranks == 1
    for i in range(1, len(rates) + 1):  # every prefix chain: the engine's own mean
        assert tree_tokens(chain(i), acc) == pytest.approx(1 + sum(rates[:i]), abs=1e-12)
    assert PER_POSITION in acc.source and "(a test)" in acc.source


def test_rates_past_a_zero_are_zero() -> None:
    acc = per_position_acceptance([0.4, 0.0, 0.0], given="x")
    assert [acc.conditional(d, 0) for d in (1, 2, 3)] == [0.4, 0.0, 0.0]


@pytest.mark.parametrize(("length", "k"), [(2.9, 3), (1.0, 4), (5.0, 4), (1.5, 1), (3.2, 7)])
def test_accept_length_round_trips(length: float, k: int) -> None:
    a = alpha_from_accept_length(length, k)
    assert 0.0 <= a <= 1.0
    assert math.fsum(a**j for j in range(k + 1)) == pytest.approx(length, abs=1e-12)
    acc = accept_length_acceptance(length, k, given="a test")
    assert tree_tokens(chain(k), acc) == pytest.approx(length, abs=1e-12)
    assert ACCEPT_LENGTH in acc.source and acc.max_depth is None


def test_the_ends_are_exact() -> None:
    assert alpha_from_accept_length(1.0, 3) == 0.0
    assert alpha_from_accept_length(4.0, 3) == 1.0


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ([], "at least one rate"),
        ([0.5, 0.7], "position 2's rate 0.7 is above position 1's 0.5"),
        ([1.2], "position 1: expected a rate in [0, 1]"),
        ([float("nan")], "position 1: expected a rate in [0, 1]"),
        (["a"], "expected rates in [0, 1]"),
        ("0.5", "expected a list of rates"),
    ],
)
def test_bad_rates_are_refused(rates: object, message: str) -> None:
    with pytest.raises(ValueError, match="^acceptance_per_position: ") as err:
        per_position_acceptance(rates, given="x")  # type: ignore[arg-type]
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("length", "k", "message"),
    [
        (0.9, 3, "in [1, k + 1] = [1, 4]"),
        (4.5, 3, "in [1, k + 1] = [1, 4]"),
        (float("inf"), 3, "in [1, k + 1]"),
        (2.0, 0, "an integer >= 1"),
        (True, 3, "in [1, k + 1]"),
    ],
)
def test_bad_lengths_are_refused(length: float, k: int, message: str) -> None:
    with pytest.raises(ValueError, match="^accept_length: ") as err:
        alpha_from_accept_length(length, k)
    assert message in str(err.value)


def test_flags_parse_or_name_themselves() -> None:
    assert parse_per_position("0.8,0.6", flag="--f") == (0.8, 0.6)
    assert parse_accept_length("2.9@3", flag="--g") == (2.9, 3)
    for text in ("2.9", "2.9@x", "@3", "x@3"):
        with pytest.raises(ValueError, match="^--g: expected L@K"):
            parse_accept_length(text, flag="--g")
    with pytest.raises(ValueError, match=r"^--g: expected a mean accepted length in \[1, k \+ 1\]"):
        parse_accept_length("5@3", flag="--g")
    with pytest.raises(ValueError, match="^--f: expected rates separated by commas"):
        parse_per_position("0.8;0.6", flag="--f")
    with pytest.raises(ValueError, match="^--f: position 2's rate"):
        parse_per_position("0.5,0.6", flag="--f")


@pytest.mark.parametrize(
    ("kind", "card"),
    [
        ("heads", "eagle-vicuna-7b-v1.3"),
        ("parallel", "pard-llama-3.2-1b-llama-3.1-8b"),
        ("selfspec", "layerskip-llama-2-7b-e8"),
    ],
)
def test_a_cards_kind_takes_an_acceptance_in_place_of_its_cards(kind: str, card: str) -> None:
    own = build_proposer(kind, card=card).acceptance
    given = accept_length_acceptance(2.5, 3, given="a test")
    p = build_proposer(kind, card=card, acceptance=given)
    assert p.acceptance.accept == given.accept and p.acceptance.max_depth == own.max_depth
    deep = per_position_acceptance([0.5] * ((own.max_depth or 0) + 1), given="a test")
    with pytest.raises(ValueError, match=f"measured to depth {deep.depths}, but .* at most"):
        build_proposer(kind, card=card, acceptance=deep)
