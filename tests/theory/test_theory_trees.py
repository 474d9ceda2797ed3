"""Closed forms for token trees: known answers, invariants, symbolic = numeric, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from specsim import theory
from specsim.theory import token_trees as trees

# --- known answers -------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [0, 1, 2, 5, 9])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
def test_chain_is_the_geometric_series(gamma: int, alpha: float) -> None:
    parents = [-1, *range(gamma - 1)] if gamma else []
    accept = np.full((max(gamma, 1), 1), alpha)
    e = theory.expected_tokens_tree(parents, accept)
    assert e == pytest.approx(theory.expected_tokens(alpha, gamma), rel=1e-14)
    assert e == pytest.approx(sum(alpha**j for j in range(gamma + 1)), rel=1e-14)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_star_of_k_children_is_one_plus_the_chance_one_is_accepted(k: int) -> None:
    ranks = np.array([0.5, 0.3, 0.2, 0.6, 0.1])[:k]
    e = theory.expected_tokens_tree([-1] * k, ranks[None, :])
    assert e == pytest.approx(2.0 - math.prod(1.0 - ranks), abs=1e-15)


def test_empty_tree_is_plain_decoding() -> None:
    assert theory.expected_tokens_tree([], [[0.9]]) == 1.0
    assert theory.tree_positions_per_token([], [[0.9]]) == 1.0


def test_hand_worked_tree() -> None:
    # Root children: A (rank 0, 0.8) and B (rank 1, 0.5 given A rejected); A has a child C
    # (0.6). Reach: A .8, B .2 * .5 = .1, C .8 * .6 = .48; E = 1 + .8 + .1 + .48.
    e = theory.expected_tokens_tree([-1, -1, 0], [[0.8, 0.5], [0.6, 0.0]])
    assert e == pytest.approx(2.38, abs=1e-15)


def test_ops_factor_of_a_chain_is_theorem_3_11() -> None:
    for alpha, gamma, c_hat in [(0.2, 5, 0.0), (0.7, 3, 0.05), (0.9, 8, 0.3)]:
        parents = [-1, *range(gamma - 1)]
        accept = np.full((gamma, 1), alpha)
        got = theory.tree_ops_factor(parents, accept, c_hat)
        assert got == pytest.approx(theory.ops_factor(alpha, gamma, c_hat), rel=1e-13)
        assert theory.tree_positions_per_token(parents, accept) == pytest.approx(
            theory.ops_factor(alpha, gamma, 0.0), rel=1e-13
        )


def test_draft_positions_count_the_root_and_inner_nodes() -> None:
    assert theory.tree_draft_positions([-1, 0, 1, 2]) == 4  # a chain of 4: 4 draft steps
    assert theory.tree_draft_positions([-1, -1, -1]) == 1  # a star: one draft step
    assert theory.tree_draft_positions([-1, -1, 0, 0, 1]) == 3


# --- invariants ----------------------------------------------------------------------------


@st.composite
def trees_and_tables(draw: st.DrawFn) -> tuple[list[int], np.ndarray]:
    n = draw(st.integers(0, 12))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    depths, ranks = theory.tree_depths_ranks(parents)
    shape = (max(depths, default=1), max(ranks, default=0) + 1)
    probs = draw(
        st.lists(st.floats(0.0, 1.0), min_size=shape[0] * shape[1], max_size=shape[0] * shape[1])
    )
    return parents, np.array(probs).reshape(shape)


@settings(max_examples=80)
@given(trees_and_tables(), st.integers(0, 10_000))
def test_bounds_and_monotone_in_every_probability(case, seed: int) -> None:
    parents, accept = case
    e = theory.expected_tokens_tree(parents, accept)
    assert 1.0 <= e <= len(parents) + 1.0 + 1e-12
    # Raising p_{d,r} moves reach from the later ranks of a node to rank r, so E is
    # monotone in it when the subtrees below are alike: always at the deepest level (all
    # leaves: the level's reach is 1 - prod(1 - p)) and in a chain.
    rng = np.random.default_rng(seed)
    d = accept.shape[0] - 1
    r = int(rng.integers(accept.shape[1]))
    up = accept.copy()
    up[d, r] = min(1.0, up[d, r] + 0.1)
    assert theory.expected_tokens_tree(parents, up) >= e - 1e-12


@settings(max_examples=60)
@given(trees_and_tables())
def test_every_probability_raises_a_star_and_a_chain(case) -> None:
    _, accept = case
    for parents, table in (
        ([-1] * accept.shape[1], accept[:1]),
        ([-1, *range(accept.shape[0] - 1)], accept[:, :1]),
    ):
        base = theory.expected_tokens_tree(parents, table)
        for idx in np.ndindex(table.shape):
            up = table.copy()
            up[idx] = min(1.0, up[idx] + 0.05)
            assert theory.expected_tokens_tree(parents, up) >= base - 1e-12


@settings(max_examples=40)
@given(trees_and_tables())
def test_symbolic_polynomial_equals_numeric_twin(case) -> None:
    parents, accept = case
    poly = theory.tree_polynomial(parents)
    depths, ranks = theory.tree_depths_ranks(parents)
    subs = {
        theory.accept_symbol(d + 1, r): float(accept[d, r])
        for d in range(accept.shape[0])
        for r in range(accept.shape[1])
    }
    assert float(poly.subs(subs)) == pytest.approx(
        theory.expected_tokens_tree(parents, accept), abs=1e-12
    )
    # Each node's term is a product over its path of one p per rank up to its own.
    bound = max(depths, default=0) * (max(ranks, default=0) + 1)
    assert sp.Poly(poly, *subs).total_degree() <= bound


def test_array_form_broadcasts_over_tables() -> None:
    parents = [-1, -1, 0, 1]
    tables = np.random.default_rng(4).random((7, 3, 2, 2))
    grid = theory.expected_tokens_tree_array(parents, tables)
    assert grid.shape == (7, 3)
    for idx in np.ndindex(7, 3):
        assert grid[idx] == theory.expected_tokens_tree(parents, tables[idx])


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parents", "error", "message"),
    [
        ([-1, 1], ValueError, "entry 1 is 1: a cycle"),
        ([-1, 0, 5], ValueError, "entry 2 is 5: a cycle or a forward edge"),
        ([-1, -2], ValueError, "entry 1 is -2: a missing parent"),
        ([-1, 0.5], TypeError, "entry 1 must be an integer"),
        ([-1, True], TypeError, "entry 1 must be an integer"),
        ("ab", TypeError, "parents: expected a sequence"),
    ],
)
def test_bad_trees_are_named(parents, error, message) -> None:
    with pytest.raises(error, match=message):
        theory.expected_tokens_tree(parents, [[0.5, 0.5]] * 3)


@pytest.mark.parametrize(
    ("accept", "message"),
    [
        ([[0.5, 1.2]], r"accept\[0, 1\] = 1.2 is not a probability"),
        ([[np.nan, 0.5]], r"accept\[0, 0\] = nan"),
        ([0.5, 0.5], "must be 2-D"),
        ([[0.5]], r"node 1 sits at depth 1, rank 1; the tree needs at least \(2, 2\)"),
        ([[0.5, 0.5]], r"node 2 sits at depth 2, rank 0"),
    ],
)
def test_bad_acceptance_tables_are_named(accept, message) -> None:
    with pytest.raises(ValueError, match=message):
        theory.expected_tokens_tree([-1, -1, 0], accept)


def test_bad_c_hat_is_named() -> None:
    with pytest.raises(ValueError, match="c_hat"):
        trees.tree_ops_factor([-1], [[0.5]], -1.0)


# --- sympy ---------------------------------------------------------------------------------


def test_the_tree_derivation_is_proved() -> None:
    (result,) = trees.derive()
    failed = [c.statement for c in result.claims if not c.holds]
    assert not failed and result.proved
    assert any("Theorem 3.11" in c.statement for c in result.claims)
    assert any("star" in c.statement for c in result.claims)


# --- several drafts ------------------------------------------------------------------------


def _lp_optimum(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """SpecTr's optimal transport as a linear program (an independent route): maximize the
    mass of a coupling of q^k and p on pairs (tuple, token in the tuple)."""

    vocab = len(p)
    tuples = list(itertools.product(range(vocab), repeat=k))
    pairs = [(t, y) for t in range(len(tuples)) for y in set(tuples[t])]
    a_ub = np.zeros((len(tuples) + vocab, len(pairs)))
    for col, (t, y) in enumerate(pairs):
        a_ub[t, col] = 1.0
        a_ub[len(tuples) + y, col] = 1.0
    b_ub = np.concatenate([[math.prod(q[x] for x in t) for t in tuples], p])
    res = linprog(-np.ones(len(pairs)), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    assert res.status == 0
    return float(-res.fun)


@pytest.mark.parametrize("seed", range(6))
def test_optimal_multidraft_equals_the_linear_program(seed: int) -> None:
    gen = np.random.default_rng(seed)
    vocab = 3 + seed % 2
    p, q = gen.dirichlet(np.ones(vocab)), gen.dirichlet(np.ones(vocab))
    for k in (1, 2, 3):
        best = theory.optimal_multidraft_acceptance(p, q, k)
        assert best == pytest.approx(_lp_optimum(p, q, k), abs=1e-9)
        for rule in (theory.kseq_acceptance, theory.mss_acceptance):
            assert rule(p, q, k) <= best + 1e-12  # no exact verifier beats the optimum


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1), st.integers(2, 5))
def test_acceptance_grows_with_k_and_starts_at_the_overlap(seed: int, vocab: int) -> None:
    gen = np.random.default_rng(seed)
    p, q = gen.dirichlet(np.ones(vocab)), gen.dirichlet(np.ones(vocab))
    overlap = float(np.minimum(p, q).sum())
    table = theory.multidraft_acceptance_by_k(p, q, 4)
    for rule in ("kseq", "mss", "rrs", "optimal"):
        values = table[rule]
        assert values[0] == pytest.approx(overlap, abs=1e-12)
        assert all(b >= a - 1e-12 for a, b in zip(values, values[1:], strict=False))
        assert all(0.0 <= v <= 1.0 + 1e-12 for v in values)


def test_kseq_closed_form_and_a_hand_example() -> None:
    # p = q: one candidate is always accepted, rho = 1.
    assert theory.kseq_acceptance([0.3, 0.7], [0.3, 0.7], 3) == pytest.approx(1.0)
    # Disjoint supports: nothing is ever accepted, whatever k.
    assert theory.kseq_acceptance([1.0, 0.0], [0.0, 1.0], 4) == 0.0
    assert theory.mss_acceptance([1.0, 0.0], [0.0, 1.0], 4) == 0.0
    # MSS by hand: alpha = 0.7, residual (1, 0, 0), then alpha' = q(0) = 0.2.
    assert theory.mss_acceptance([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2) == pytest.approx(0.76)
    with pytest.raises(ValueError, match="infeasible"):
        theory.kseq_acceptance([0.9, 0.1], [0.1, 0.9], 3, rho=1.0)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        theory.mss_acceptance([0.5, 0.5], [0.5, 0.5], 0)
    with pytest.raises(ValueError, match="sum to 1"):
        theory.optimal_multidraft_acceptance([0.5, 0.6], [0.5, 0.5], 2)


def test_marginal_rank_acceptance_converts_and_sums_below_one() -> None:
    marginal = np.array([[0.5, 0.3, 0.1], [0.6, 0.0, 0.4]])
    cond = theory.accept_from_marginal(marginal)
    # A star's expected tokens is 1 + the chance that some rank is accepted: sum of marginals.
    e = theory.expected_tokens_tree([-1, -1, -1], cond[:1])
    assert e == pytest.approx(1.0 + 0.9, abs=1e-15)
    np.testing.assert_allclose(cond[1], [0.6, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"ranks of depth 2 sum to 1.1 > 1"):
        theory.accept_from_marginal([[0.5, 0.2], [0.6, 0.5]])
