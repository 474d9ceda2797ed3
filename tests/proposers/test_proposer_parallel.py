"""Parallel drafting: one pass over the tree's positions, the PARD card, and bad input named."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.cards import load_hardware, load_model
from specsim.cards.proposer_cards import (
    ParallelDraftCard,
    list_proposer_cards,
    load_proposer_card,
)
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape
from specsim.proposers.parallel import ParallelDraft
from specsim.proposers.protocol import ProposerProtocol
from specsim.proposers.selfspec import SelfSpeculation
from specsim.proposers.tables import tree_depths

SLUG = "pard-llama-3.2-1b-llama-3.1-8b"
CARD = Path(__file__).resolve().parents[2] / "models" / "proposers" / f"{SLUG}.toml"
TARGET = load_model("llama-3.1-8b")
DEP = Deployment(target=TARGET, hardware=load_hardware("a100-80gb"))
PARD = ParallelDraft.from_card(SLUG)


def chain(n: int) -> list[int]:
    return [-1, *range(n - 1)]


def roofline_pass(k: int, *, batch: int, context: int) -> tuple[float, float, float]:
    """The draft's pass over ``k`` positions, priced independently through PassShape."""
    cost = DEP.on_model(PARD.draft).pass_cost(PassShape.chain(context=context, new=k, batch=batch))
    return cost.time_s, cost.energy_j, cost.flops


def test_it_is_a_proposer() -> None:
    assert isinstance(PARD, ProposerProtocol)
    assert PARD.overlappable
    assert PARD.name == f"parallel draft {SLUG} (k=12)"
    PARD.check_target(TARGET)


@pytest.mark.parametrize("batch", [1, 8])
def test_a_k_deep_tree_costs_one_roofline_pass_over_k_positions(batch: int) -> None:
    contexts = np.array([0, 100, 4096])
    for k in (1, 4, PARD.k):
        got = PARD.draft_costs(chain(k), deployment=DEP, batch=batch, context=contexts)
        for i, c in enumerate(contexts):
            want = roofline_pass(k, batch=batch, context=int(c))
            assert (got.time_s[i], got.energy_j[i], got.flops[i]) == pytest.approx(want, rel=1e-12)


def test_a_block_drafter_always_runs_its_k_positions() -> None:
    block = dataclasses.replace(PARD, pass_positions="k")
    shallow = block.draft_cost(chain(3), deployment=DEP, batch=2, context=300)
    assert shallow.time_s == pytest.approx(roofline_pass(PARD.k, batch=2, context=300)[0])
    depth = PARD.draft_cost(chain(3), deployment=DEP, batch=2, context=300)
    assert depth.time_s == pytest.approx(roofline_pass(3, batch=2, context=300)[0])
    assert depth.time_s < shallow.time_s


def test_width_costs_nothing_one_pass_serves_every_rank() -> None:
    tree = [-1, -1, -1, 0, 0, 1, 2, 3]  # depth 3, three candidates at depth 1
    wide = PARD.draft_cost(tree, deployment=DEP, batch=4, context=1000)
    narrow = PARD.draft_cost(chain(3), deployment=DEP, batch=4, context=1000)
    assert wide == narrow
    empty = PARD.draft_cost([], deployment=DEP, batch=4, context=1000)
    assert (empty.time_s, empty.energy_j, empty.flops) == (0.0, 0.0, 0.0)


def test_one_pass_is_cheaper_than_k_steps_and_grows_as_a_memory_bound_pass() -> None:
    one = DEP.on_model(PARD.draft).pass_cost(PassShape.chain(context=512, new=1))
    assert one.bound == "memory"
    # The weights' share of one pass, read at peak bandwidth (a lower bound on its time).
    weights_s = one.memory_time_s * one.weight_bytes / one.bytes
    times = [
        PARD.draft_cost(chain(k), deployment=DEP, batch=1, context=512).time_s
        for k in range(1, PARD.k + 1)
    ]
    assert times[0] == pytest.approx(one.time_s, rel=1e-12)
    for k, t in enumerate(times, start=1):
        assert k == 1 or t < k * one.time_s  # below k sequential draft steps
        # Each extra position adds its own bytes and work, never another read of the weights.
        assert t <= one.time_s + (k - 1) * (one.time_s - weights_s)
        bound = DEP.on_model(PARD.draft).pass_cost(PassShape.chain(context=512, new=k)).bound
        assert bound == "memory"
    assert all(b > a for a, b in zip(times, times[1:], strict=False))


def test_the_card_reproduces_its_published_mean_accepted_length() -> None:
    card = load_proposer_card(SLUG)
    assert isinstance(card, ParallelDraftCard)
    assert (card.draft, card.target, card.k, card.pass_positions) == (
        "llama-3.2-1b",
        "llama-3.1-8b",
        12,
        "tree-depth",
    )
    # Every depth is derived (a constant alpha fitted to the mean), so every depth is flagged.
    assert card.assumed_depths == tuple(range(1, 13))
    acc = PARD.acceptance
    accepted = math.fsum(
        math.prod(acc.conditional(j, 0) for j in range(1, d + 1)) for d in range(1, 13)
    )
    # 5.6 tokens per pass (vLLM PR 18541); the card's alpha is rounded to four places.
    assert 1.0 + accepted == pytest.approx(5.6, abs=5e-3)
    assert "vllm-project/vllm/pull/18541" in acc.source
    assert "assumed" in acc.source
    assert acc.conditional(1, 1) == 0.0  # one rank: chains only
    with pytest.raises(ValueError, match="max_depth 12"):
        acc.conditional(13, 0)


def test_memory_is_the_draft_weights_and_its_kv_per_token() -> None:
    d = PARD.draft
    assert PARD.memory_bytes(DEP) == pytest.approx(d.shape_params * 2.0)  # bfloat16
    per_token = d.layers * 2 * d.kv_heads * d.head_dim * 2.0
    assert PARD.kv_bytes_per_token(DEP) == pytest.approx(per_token)
    masks = dataclasses.replace(PARD, extra_params=d.d_model)
    assert masks.memory_bytes(DEP) - PARD.memory_bytes(DEP) == pytest.approx(d.d_model * 2.0)


def test_a_tree_deeper_than_k_is_refused_naming_k() -> None:
    with pytest.raises(ValueError, match=r"13 deep .* at most k = 12"):
        PARD.draft_cost(chain(13), deployment=DEP, batch=1, context=10)


def test_another_target_is_refused_naming_both() -> None:
    other = Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"))
    with pytest.raises(ValueError, match=r"'llama-3.1-8b'.*'llama-2-7b'"):
        PARD.draft_cost(chain(2), deployment=other, batch=1, context=10)
    anyone = dataclasses.replace(PARD, target=None)
    with pytest.raises(ValueError, match="tokenizer"):  # Llama 2's vocabulary is not Llama 3's
        anyone.check_target(load_model("llama-2-7b"))


def write(tmp_path: Path, **changes: object) -> Path:
    """The shipped card with top-level fields replaced (a TOML line each)."""
    out: list[str] = []
    skipping = False
    for line in CARD.read_text(encoding="utf-8").splitlines():
        key = line.split("=", 1)[0].strip()
        if skipping:
            skipping = line.strip() != "]"  # the end of a multi-line array
        elif key in changes:
            out.append(f"{key} = {changes.pop(key)}")
            skipping = line.rstrip().endswith("[")
        else:
            out.append(line)
    out[out.index("[sources]") : out.index("[sources]")] = [
        f"{k} = {v}" for k, v in changes.items()
    ]
    path = tmp_path / f"{SLUG}.toml"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"k": 0}, r"field 'k': expected an integer >= 1, got 0"),
        ({"k": 4}, r"'accept' has 12 depths, deeper than the proposer drafts \(4\)"),
        ({"pass_positions": '"all"'}, r"field 'pass_positions' must be one of"),
        ({"extra_params": -1}, r"field 'extra_params': expected an integer >= 0"),
        ({"accept": "[[1.5]]", "assumed_depths": "[]"}, r"depth 1, rank 0: expected a probability"),
        ({"assumed_depths": "[13]"}, r"'assumed_depths' names depth 13"),
        ({"kind": '"heads"'}, r"field 'kind' must be one of"),
        ({"colour": '"red"'}, r"unknown field\(s\) \['colour'\]"),
    ],
)
def test_bad_cards_are_named_with_their_field_and_file(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    path = write(tmp_path, **changes)
    with pytest.raises((ValueError, TypeError), match=message) as err:
        load_proposer_card(path)
    assert str(path) in str(err.value)


def test_a_misnamed_card_or_another_kind_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path)
    renamed = path.rename(tmp_path / "pard.toml")
    with pytest.raises(ValueError, match=f"name the file {SLUG}.toml"):
        load_proposer_card(renamed)
    with pytest.raises(ValueError, match="not a parallel draft"):
        ParallelDraft.from_card("layerskip-llama-2-7b-e8")
    with pytest.raises(ValueError, match="not self-speculation"):
        SelfSpeculation.from_card(SLUG)
    with pytest.raises(ValueError, match=r"no proposer card .nonesuch. \(known: .*layerskip"):
        load_proposer_card("nonesuch")


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="batch: expected an integer >= 1, got 0"):
        PARD.draft_cost(chain(2), deployment=DEP, batch=0, context=10)
    with pytest.raises(ValueError, match="context: expected integers >= 0"):
        PARD.draft_costs(chain(2), deployment=DEP, batch=1, context=[5, -1])
    with pytest.raises(ValueError, match="context: expected integers >= 0"):
        PARD.draft_costs(chain(2), deployment=DEP, batch=1, context=[1.5])
    with pytest.raises(ValueError, match="parents: node 1 names a missing parent 7"):
        PARD.draft_cost([-1, 7], deployment=DEP, batch=1, context=10)
    with pytest.raises(ValueError, match="parallel draft k: expected an integer >= 1, got 0"):
        dataclasses.replace(PARD, k=0)


@st.composite
def trees(draw: st.DrawFn, *, max_nodes: int = 14) -> list[int]:
    """Token trees in topological order: each node's parent is an earlier node or the root."""
    n = draw(st.integers(min_value=1, max_value=max_nodes))
    return [draw(st.integers(min_value=-1, max_value=i - 1)) for i in range(n)]


@given(
    tree=trees(),
    batch=st.integers(min_value=1, max_value=64),
    context=st.integers(min_value=0, max_value=8000),
)
def test_any_tree_costs_the_pass_over_its_depth(tree: list[int], batch: int, context: int) -> None:
    depth = max(tree_depths(tree))
    if depth > PARD.k:
        with pytest.raises(ValueError, match="at most k = 12"):
            PARD.draft_cost(tree, deployment=DEP, batch=batch, context=context)
        return
    got = PARD.draft_cost(tree, deployment=DEP, batch=batch, context=context)
    want = roofline_pass(depth, batch=batch, context=context)
    assert (got.time_s, got.energy_j, got.flops) == pytest.approx(want, rel=1e-12)


def test_user_cards_are_found_on_the_search_path_first(tmp_path: Path) -> None:
    folder = tmp_path / "proposers"
    folder.mkdir()
    text = CARD.read_text(encoding="utf-8").replace("\nk = 12\n", "\nk = 16\n")
    (folder / f"{SLUG}.toml").write_text(text, encoding="utf-8")
    mine = load_proposer_card(SLUG, search_path=tmp_path)
    assert isinstance(mine, ParallelDraftCard) and mine.k == 16
    assert mine.source_path == str(folder / f"{SLUG}.toml")
    assert [c.slug for c in list_proposer_cards(search_path=tmp_path)] == [
        "dflash-qwen3-8b-b16",
        "layerskip-llama-2-7b-e8",
        "magicdec-llama-3.1-8b-streaming-512",
        SLUG,
        "peagle-gpt-oss-120b",
    ]
    assert ParallelDraft.from_card(SLUG, search_path=tmp_path).k == 16
    with pytest.raises(ValueError, match="no such folder"):
        load_proposer_card(SLUG, search_path=tmp_path / "missing")
