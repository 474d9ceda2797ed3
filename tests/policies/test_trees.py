"""The tree optimizer: the dynamic program against brute force, pricing, shrinking, bad input."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import (
    best_trees,
    chain_tree,
    check_budget,
    evaluate_tree,
    kary_tree,
    optimize_tree,
    tree_tokens,
)
from specsim.proposers import (
    LOOKUP_COST,
    DraftModel,
    NGram,
    RankAcceptance,
    check_tree,
    frontier_widths,
    tree_depths,
)
from specsim.theory import expected_tokens_tree

ACC = RankAcceptance(accept=((0.75, 0.35, 0.2), (0.7, 0.3, 0.15), (0.65, 0.3)))


def oracle_tokens(parents: tuple[int, ...], acc: RankAcceptance) -> float:
    """Expected tokens by enumerating every outcome of the walk (independent of the theory)."""
    n = len(parents)
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    depth = [0] * n
    for i, p in enumerate(parents):
        depth[i] = 1 if p < 0 else depth[p] + 1
    total = 0.0
    for bits in itertools.product((False, True), repeat=n):
        prob = 1.0
        for i, b in enumerate(bits):
            r = kids[parents[i]].index(i)
            a = acc.conditional(depth[i], r)
            prob *= a if b else 1.0 - a
        node, accepted = -1, 0
        while True:
            nxt = next((c for c in kids.get(node, []) if bits[c]), None)
            if nxt is None:
                break
            node, accepted = nxt, accepted + 1
        total += prob * (accepted + 1)
    return total


def all_trees(n: int) -> list[tuple[int, ...]]:
    """Every tree of n nodes in topological order (with repeats of one shape)."""
    return [t for t in itertools.product(*[range(-1, i) for i in range(n)])]


def test_tree_tokens_is_the_theory_and_the_enumeration() -> None:
    for t in [(), (-1,), (-1, 0, 0, 1), (-1, -1, -1, 0, 1, 3)]:
        assert tree_tokens(t, ACC) == pytest.approx(oracle_tokens(t, ACC), abs=1e-12)
    t = (-1, 0, 1)
    chain = RankAcceptance(accept=((0.6,),))
    assert tree_tokens(t, chain) == pytest.approx((1 - 0.6**4) / (1 - 0.6))
    assert tree_tokens(t, chain) == pytest.approx(expected_tokens_tree(list(t), [[0.6]] * 3))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_the_program_finds_the_best_tree_of_each_size_by_brute_force(n: int) -> None:
    best = max(oracle_tokens(t, ACC) for t in all_trees(n))
    found = max(tree_tokens(t, ACC) for t in best_trees(ACC, budget=n) if len(t) <= n)
    assert found == pytest.approx(best, abs=1e-12)


def test_best_trees_respect_the_depth_bound_and_the_budget() -> None:
    for t in best_trees(ACC, budget=8, max_depth=3):
        assert len(t) <= 8 and check_tree(t) == t
        assert max(tree_depths(t), default=0) <= 3


def test_a_chain_is_best_when_only_the_first_rank_is_ever_accepted() -> None:
    acc = RankAcceptance(accept=((0.9, 0.0),))
    best = max(best_trees(acc, budget=6), key=lambda t: tree_tokens(t, acc))
    assert best == chain_tree(6)


def test_kary_and_chain_shapes() -> None:
    assert kary_tree(2, 6) == (-1, -1, 0, 0, 1, 1)
    assert chain_tree(4) == (-1, 0, 1, 2)
    assert frontier_widths(kary_tree(2, 6)) == (1, 2)


CARDS: dict[str, Any] = {
    "deployment": Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"))
}
DRAFT = DraftModel(card=load_model("llama-68m"), acceptance=ACC)


def test_the_best_tree_shrinks_towards_a_chain_and_no_speculation_as_the_batch_grows() -> None:
    trees = best_trees(ACC, budget=24, max_depth=8)
    sizes, specs = [], []
    for batch in (1, 16, 64, 128):
        o = optimize_tree(
            proposer=DRAFT, batch=batch, budget=24, max_depth=8, candidates=trees, **CARDS
        )
        assert o.best.tokens_per_s >= max(
            o.chain.tokens_per_s, o.kary.tokens_per_s, o.none.tokens_per_s
        ) * (1 - 1e-12)
        sizes.append(o.best.nodes)
        specs.append(o.best.tokens_per_s / o.none.tokens_per_s)
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    assert specs == sorted(specs, reverse=True)
    # At batch 1 verification is nearly free: a real tree beats the best chain.
    o1 = optimize_tree(proposer=DRAFT, batch=1, budget=24, max_depth=8, candidates=trees, **CARDS)
    assert o1.best.tokens_per_s > 1.05 * o1.chain.tokens_per_s
    assert max(frontier_widths(o1.best.parents)) > 1


def test_an_expensive_proposer_at_a_large_batch_stops_speculating() -> None:
    weak = DraftModel(
        card=load_model("llama-160m"), acceptance=RankAcceptance(accept=((0.3, 0.1),))
    )
    o = optimize_tree(proposer=weak, batch=128, budget=8, **CARDS)
    assert o.best.nodes == 0 and o.best.kind == "best tree"
    assert o.best.tokens_per_s == pytest.approx(o.none.tokens_per_s)


def test_a_lookup_proposer_adds_only_its_host_search() -> None:
    ngram = NGram(acceptance=ACC, threads=2)
    p = evaluate_tree(kary_tree(2, 6), proposer=ngram, batch=4, context=700, **CARDS)
    c = LOOKUP_COST
    # Two rounds of two sequences, each searching its 700 tokens and drafting 6 nodes.
    host = 2 * (c.per_sequence_s + c.per_context_token_s * 700 + c.per_draft_token_s * 6)
    assert p.draft_s == pytest.approx(host, rel=1e-12) and p.verify_s > 0.0
    assert p.discarded_share == pytest.approx((6 - (p.tokens_per_pass - 1)) / 7)
    assert math.isclose(p.tokens_per_s, 4 * p.tokens_per_pass / (p.verify_s + p.draft_s))


@pytest.mark.parametrize(
    "parents, match",
    [
        ((-1, 2, 1), "cycle"),
        ((-1, 5), "missing parent"),
        ((-1, -3), "missing parent"),
        ((1, -1), "comes after"),
        ((-1, 1), "cycle"),
        ((-1, 0.5), r"entry 1: expected an integer, got 0\.5 \(a parent index\)"),
    ],
)
def test_bad_trees_are_named(parents: tuple[int, ...], match: str) -> None:
    with pytest.raises(TypeError if "integer" in match else ValueError, match=match):
        check_tree(parents)


def test_a_budget_smaller_than_the_tree_is_named() -> None:
    with pytest.raises(ValueError, match="budget: 3 .* smaller than the tree's 4 nodes"):
        check_budget((-1, 0, 0, 1), 3)
    with pytest.raises(ValueError, match="budget"):
        evaluate_tree((-1, 0, 0, 1), proposer=DRAFT, batch=1, budget=2, **CARDS)


def test_ranks_whose_probabilities_do_not_sum_below_one_are_named() -> None:
    with pytest.raises(ValueError, match="depth 2: the ranks' probabilities sum to 1.1"):
        RankAcceptance.from_marginal([[0.5, 0.2], [0.6, 0.5]])
    ok = RankAcceptance.from_marginal([[0.5, 0.25]])
    assert ok.accept == ((0.5, 0.5),)
    assert ok.marginal(1, 1) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="depth 1, rank 1"):
        RankAcceptance(accept=((0.5, 1.5),))
    with pytest.raises(ValueError, match="rows of probabilities"):
        RankAcceptance(accept=(0.5,))  # type: ignore[arg-type]
