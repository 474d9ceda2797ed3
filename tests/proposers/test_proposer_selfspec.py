"""Self-speculation: E of L target layers per draft step, the LayerSkip card, bad input named."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.cards import load_hardware, load_model
from specsim.cards.proposer_cards import SelfSpecCard, load_proposer_card
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape
from specsim.proposers.protocol import ProposerProtocol
from specsim.proposers.selfspec import SelfSpeculation, early_exit_card

SLUG = "layerskip-llama-2-7b-e8"
CARD = load_proposer_card(SLUG)
assert isinstance(CARD, SelfSpecCard)
TARGET = load_model("llama-2-7b")
DEP = Deployment(target=TARGET, hardware=load_hardware("a100-80gb"))
LS = SelfSpeculation.from_card(CARD)


def with_layers(**changes: object) -> SelfSpeculation:
    """The LayerSkip proposer with card fields replaced (the checks run again)."""
    return SelfSpeculation.from_card(dataclasses.replace(CARD, **changes))


def chain(n: int) -> list[int]:
    return [-1, *range(n - 1)]


def target_step(*, batch: int, context: int) -> tuple[float, float, float]:
    """One target pass over one new position: the price of one draft step when E = L."""
    cost = DEP.pass_cost(PassShape.chain(context=context, new=1, batch=batch))
    return cost.time_s, cost.energy_j, cost.flops


def test_it_is_a_proposer_that_cannot_overlap() -> None:
    assert isinstance(LS, ProposerProtocol)
    assert not LS.overlappable
    assert LS.memory_bytes(DEP) == 0.0 and LS.kv_bytes_per_token(DEP) == 0.0
    LS.check_target(TARGET)


@pytest.mark.parametrize("batch", [1, 16])
def test_with_every_layer_a_draft_step_is_one_target_step(batch: int) -> None:
    full = with_layers(exit_layer=TARGET.layers)
    contexts = np.array([0, 512, 3000])
    for depth in (1, 3, 6):
        got = full.draft_costs(chain(depth), deployment=DEP, batch=batch, context=contexts)
        for i, c in enumerate(contexts):
            # Step d drafts the depth-d token after the context and the d - 1 drafts above it.
            steps = [target_step(batch=batch, context=int(c) + j) for j in range(depth)]
            want = tuple(math.fsum(s[f] for s in steps) for f in range(3))
            assert (got.time_s[i], got.energy_j[i], got.flops[i]) == pytest.approx(want, rel=1e-12)


def test_a_step_is_e_of_l_layers_plus_the_lm_head() -> None:
    """The step time is affine in E: a head part (LM head, per-pass work) that every exit pays,
    and E times one layer's share, with E = L the full target step."""
    layers = TARGET.layers
    times = {
        e: with_layers(exit_layer=e).draft_cost(chain(1), deployment=DEP, batch=4, context=700)
        for e in (2, 8, 20, layers)
    }
    t = {e: c.time_s for e, c in times.items()}
    per_layer = (t[20] - t[2]) / 18
    head = t[layers] - layers * per_layer
    assert t[8] == pytest.approx(head + 8 * per_layer, rel=1e-12)
    assert t[layers] == pytest.approx(target_step(batch=4, context=700)[0], rel=1e-12)
    assert head > 0.0 and per_layer > 0.0
    # The shipped card, at E = 8 of 32: more than a quarter of a step (the whole LM head).
    ls = LS.draft_cost(chain(1), deployment=DEP, batch=4, context=700).time_s
    assert ls == pytest.approx(t[8], rel=1e-12)
    assert 8 / layers * t[layers] < ls < t[layers]


def test_skipping_layers_costs_what_keeping_as_many_costs() -> None:
    skip = with_layers(exit_layer=None, skip_layers=tuple(range(8, TARGET.layers)))
    kept = LS.draft_cost(chain(4), deployment=DEP, batch=2, context=100)
    assert skip.draft_cost(chain(4), deployment=DEP, batch=2, context=100) == kept
    assert "24 skipped" in skip.name


def test_trees_step_once_per_depth_over_the_frontier() -> None:
    tree = [-1, -1, 0, 0, 1]  # depth 1: the root expands; depth 2: nodes 0 and 1 expand
    got = LS.draft_cost(tree, deployment=DEP, batch=1, context=50).time_s
    early = dataclasses.replace(DEP, target=early_exit_card(TARGET, 8))
    root = early.pass_cost(PassShape.tree(context=50, parents=[-1])).time_s
    # Two frontier nodes after context 51, each attending to the context and itself.
    two = early.pass_cost(PassShape.tree(context=51, parents=[-1, -1])).time_s
    assert got == pytest.approx(root + two, rel=1e-12)


def test_the_card_reproduces_the_published_acceptance_rate() -> None:
    assert (CARD.target, CARD.exit_layer, CARD.max_depth, CARD.exit_head_params) == (
        "llama-2-7b",
        8,
        6,
        0,
    )
    assert CARD.assumed_depths == tuple(range(1, 7))
    acc = LS.acceptance
    # acceptance_rate = accepted drafts / drafted tokens, 6 drafts a round: 0.7945 (README).
    accepted = math.fsum(
        math.prod(acc.conditional(j, 0) for j in range(1, d + 1)) for d in range(1, 7)
    )
    assert accepted / 6 == pytest.approx(0.7945407949388027, abs=5e-4)
    assert "facebookresearch/LayerSkip" in acc.source and "assumed" in acc.source
    with pytest.raises(ValueError, match=r"field 'max_depth' is 6"):
        LS.draft_cost(chain(7), deployment=DEP, batch=1, context=10)


def test_an_exit_head_of_its_own_is_its_only_memory() -> None:
    head = TARGET.d_model * TARGET.vocab
    own = with_layers(exit_head_params=head)
    assert own.memory_bytes(DEP) == pytest.approx(head * 2.0)  # float16 weights
    tp2 = dataclasses.replace(DEP, tensor_parallel=2)
    assert own.memory_bytes(tp2) == pytest.approx(head * 2.0 / 2)


def test_another_target_is_refused_naming_both() -> None:
    other = Deployment(target=load_model("llama-3.1-8b"), hardware=load_hardware("a100-80gb"))
    with pytest.raises(ValueError, match=r"'llama-2-7b'.*'llama-3.1-8b'"):
        LS.draft_cost(chain(2), deployment=other, batch=1, context=10)


def card_text(tmp_path: Path, old: str, new: str) -> Path:
    text = Path(str(CARD.source_path)).read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / f"{SLUG}.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "exit_layer = 8",
            "exit_layer = 0",
            r"field 'exit_layer': expected an integer >= 1, got 0",
        ),
        ("exit_layer = 8", "", r"give exactly one of 'exit_layer' and 'skip_layers'"),
        ("exit_layer = 8", "exit_layer = 8\nskip_layers = [3]", r"give exactly one of"),
        ("exit_layer = 8", "skip_layers = [3, 3]", r"'skip_layers' lists a layer twice"),
        ("max_depth = 6", "max_depth = 3", r"'accept' has 6 depths, deeper than .* \(3\)"),
        (
            'kind = "self-speculation"',
            'kind = "parallel"',
            r"unknown field\(s\) \['exit_head_params', 'exit_layer'",
        ),
    ],
)
def test_bad_cards_are_named_with_their_field_and_file(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = card_text(tmp_path, old, new)
    with pytest.raises((ValueError, TypeError), match=message) as err:
        load_proposer_card(path)
    assert str(path) in str(err.value)


def test_a_skip_set_that_removes_every_layer_is_refused(tmp_path: Path) -> None:
    every = ", ".join(map(str, range(TARGET.layers)))
    path = card_text(tmp_path, "exit_layer = 8", f"skip_layers = [{every}]")
    ls = SelfSpeculation.from_card(str(path))
    with pytest.raises(ValueError, match=r"'skip_layers' removes every one of the target's 32"):
        ls.draft_cost(chain(1), deployment=DEP, batch=1, context=10)
    assert str(path) in ls.card.source_path
    beyond = with_layers(exit_layer=None, skip_layers=(40,))
    with pytest.raises(ValueError, match=r"'skip_layers' names layer\(s\) \[40\]"):
        beyond.check_target(TARGET)
    deep = with_layers(exit_layer=33)
    with pytest.raises(ValueError, match=r"'exit_layer' is 33, but target 'llama-2-7b' has 32"):
        deep.check_target(TARGET)
    with pytest.raises(ValueError, match=r"layers: expected an integer in 1\.\.32"):
        early_exit_card(TARGET, 0)


@given(
    exits=st.lists(st.integers(min_value=1, max_value=32), min_size=2, max_size=2, unique=True),
    depth=st.integers(min_value=1, max_value=6),
    batch=st.integers(min_value=1, max_value=64),
    context=st.integers(min_value=0, max_value=4000),
)
def test_more_layers_cost_more_and_never_more_than_the_target(
    exits: list[int], depth: int, batch: int, context: int
) -> None:
    low, high = sorted(exits)
    cost = {
        e: with_layers(exit_layer=e).draft_cost(
            chain(depth), deployment=DEP, batch=batch, context=context
        )
        for e in (low, high, TARGET.layers)
    }
    assert cost[low].time_s < cost[high].time_s <= cost[TARGET.layers].time_s
    assert cost[low].flops < cost[high].flops


@pytest.mark.parametrize(("weights", "tp"), [("int8", 1), ("int8", 2), (None, 2)])
def test_a_draft_step_runs_in_the_deployments_formats_and_parallelism(
    weights: str | None, tp: int
) -> None:
    """Self-speculation drafts with the target's own layers: on a quantized or
    tensor-parallel deployment, E = L is one target step of that deployment (not of the
    target repriced in its card's dtype), and int8 weights make the step cheaper."""
    dep = dataclasses.replace(DEP, weights=weights, tensor_parallel=tp)
    full = with_layers(exit_layer=TARGET.layers)
    got = full.draft_cost(chain(1), deployment=dep, batch=4, context=700)
    want = dep.pass_cost(PassShape.chain(context=700, new=1, batch=4))
    assert got.time_s == pytest.approx(want.time_s, rel=1e-12)
    assert got.energy_j == pytest.approx(want.energy_j, rel=1e-12)
    ls, plain = (LS.draft_cost(chain(1), deployment=d, batch=4, context=700) for d in (dep, DEP))
    assert ls.time_s < plain.time_s
