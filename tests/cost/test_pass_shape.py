"""The pass shape: its sums against brute-force enumeration, chains as trees, trees costed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cards import load_hardware, load_model
from specsim.cost import (
    Deployment,
    PassShape,
    chain_pairs,
    chain_pairs_exact,
    chain_sums,
    pass_cost,
    step_cost,
    verification_positions,
)
from specsim.sim import CardCost, PlainCost


def brute_force(context: list[int], parents: list[list[int]]) -> tuple[int, int, int]:
    """(T, S, R) by listing every (query, key) pair: each new position attends to its
    sequence's cached tokens, its ancestors and itself."""
    T = S = 0
    for ctx, par in zip(context, parents, strict=True):
        for j in range(len(par)):
            keys = {("cached", k) for k in range(ctx)}
            node = j
            while node >= 0:
                keys.add(("new", node))
                node = par[node]
            S += len(keys)
            T += 1
    return T, S, sum(context)


def chain_parents(n: int) -> list[int]:
    return list(range(-1, n - 1))


@st.composite
def trees(draw: st.DrawFn) -> list[int]:
    n = draw(st.integers(1, 12))
    return [draw(st.integers(-1, i - 1)) for i in range(n)]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    context=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    new=st.lists(st.integers(1, 9), min_size=6, max_size=6),
)
def test_chain_sums_equal_enumeration(context: list[int], new: list[int]) -> None:
    new = new[: len(context)]
    shape = PassShape.chain(context=np.array(context), new=np.array(new))
    assert tuple(shape.sums()) == brute_force(context, [chain_parents(n) for n in new])
    assert shape.tokens == sum(new) and shape.batch == len(context)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(context=st.integers(0, 300), n=st.integers(0, 9), batch=st.integers(1, 4))
def test_the_integer_chain_pairs_are_the_pairs_enumerated(context: int, n: int, batch: int) -> None:
    """The integer twin the drains and chunked prefill keep: ``batch`` chains of ``n`` after
    ``context`` each (their contexts' sum ``batch * context``), as listed pair by pair."""
    listed = brute_force([context] * batch, [chain_parents(n)] * batch)[1]
    exact = chain_pairs_exact(batch * context, n, batch)
    assert type(exact) is int and exact == listed == chain_pairs(batch * context, n, batch)
    arr = chain_pairs_exact(np.array([context, 0]), np.array([n, n]))
    assert arr.dtype == np.int64 and arr.tolist() == [listed // batch, n * (n + 1) // 2]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(context=st.lists(st.integers(0, 300), min_size=1, max_size=4), parents=trees())
def test_tree_sums_equal_enumeration(context: list[int], parents: list[int]) -> None:
    shape = PassShape.tree(context=np.array(context), parents=parents)
    assert tuple(shape.sums()) == brute_force(context, [parents] * len(context))


@pytest.mark.parametrize("n", [1, 2, 5, 10])
def test_a_chain_is_the_tree_of_one_branch(n: int) -> None:
    chain = PassShape.chain(context=[7, 300], new=n)
    tree = PassShape.tree(context=[7, 300], parents=chain_parents(n))
    assert chain.sums() == tree.sums()
    assert tree.depths == tuple(range(1, n + 1)) and chain.depths is None


def test_the_homogeneous_form_equals_the_shape() -> None:
    # chain_sums is what grids and the simulator's fast paths use, on floats or arrays.
    shape = PassShape.chain(context=[10, 20, 30], gamma=4)
    assert chain_sums(3.0, 60.0, verification_positions(4.0)) == shape.sums()
    enc = shape.sums(encoder=64.0)
    assert enc.pairs == shape.sums().pairs + 15 * 64 and enc.cached == 60 + 3 * 64
    grid = chain_sums(np.array([1.0, 4.0]), np.array([5.0, 40.0]), np.array([2.0, 3.0]))
    assert grid[1].tolist() == [2 * 5 + 3, 3 * 40 + 4 * 6]
    assert chain_pairs(100, 3) == 306


def test_gamma_gives_gamma_plus_one_positions() -> None:
    assert verification_positions(4) == 5
    assert PassShape.chain(context=0, gamma=np.array([0, 3])).new.tolist() == [1, 4]
    assert PassShape.chain(context=5, gamma=2, batch=3).new.tolist() == [3, 3, 3]
    assert PassShape.prefill([4, 9]).sums() == (13.0, 10.0 + 45.0, 0.0)


def test_shape_arrays_are_read_only() -> None:
    shape = PassShape.chain(context=np.array([1, 2]), new=np.array([1, 1]))
    with pytest.raises(ValueError, match="read-only"):
        shape.context[0] = 5


@pytest.mark.parametrize(
    ("kwargs", "err", "fragment"),
    [
        ({"context": 1}, ValueError, "exactly one of gamma and new"),
        ({"context": 1, "new": 0}, ValueError, "new: expected integers >= 1"),
        ({"context": -1, "new": 1}, ValueError, "context"),
        ({"context": 1.5, "new": 1}, TypeError, "context"),
        ({"context": [1, 2], "new": [1, 2, 3]}, ValueError, "context: expected 3 values"),
    ],
)
def test_bad_chains_name_the_argument(kwargs: dict, err: type, fragment: str) -> None:
    with pytest.raises(err, match=fragment):
        PassShape.chain(**kwargs)


@pytest.mark.parametrize("parents", [[0], [-1, 1], [-1, -2], []])
def test_bad_trees_name_the_entry(parents: list[int]) -> None:
    with pytest.raises(ValueError, match="parents"):
        PassShape.tree(context=1, parents=parents)


def test_a_tree_of_ten_positions_costs_between_its_chains() -> None:
    m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    parents = [-1, 0, 0, 1, 1, 2, 2, 3, 4, 5]
    tree = pass_cost(m, hw, PassShape.tree(context=[512] * 8, parents=parents))
    chain = step_cost(m, hw, batch=8, context=512, new_tokens=10)
    assert tree.tokens == chain.tokens == 80
    assert tree.flops < chain.flops  # fewer (query, key) pairs than the chain of ten
    assert tree.time_s <= chain.time_s and tree.bytes == chain.bytes
    chain_shape = PassShape.tree(context=[512] * 8, parents=chain_parents(10))
    assert pass_cost(m, hw, chain_shape) == chain
    card = CardCost(deployment=Deployment(target=m, hardware=hw), draft=None)
    assert card.verify_pass(PassShape.tree(context=512, parents=parents)).time_s > 0
    assert PlainCost(c=0.1, v=(1.0, 1.5)).verify_pass(chain_shape).time_s == 1.5
