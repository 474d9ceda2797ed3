"""Token-tree verification is exact: proven by enumeration, checked by chi-square, batched."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specsim import sampling
from specsim.sampling import laws as enum
from specsim.sampling import tree, typical

# Trees of depth <= 3 and width <= 3 (the bound), from a star to a full binary tree.
SHAPES = [
    [-1],
    [-1, -1, -1],
    [-1, 0, 1],
    [-1, -1, 0, 0, 1],
    [-1, -1, -1, 0, 0, 0, 1, 3],
    [-1, -1, 0, 0, 1, 1, 2, 3, 4, 5],
    [-1, -1, -1, 0, 0, 0, 1, 1, 2, 3, 3, 3],
]


def _row(rng: np.random.Generator, vocab: int, zeros: bool) -> np.ndarray:
    r = rng.dirichlet(np.full(vocab, 0.7))
    if zeros:
        r[rng.random(vocab) < 0.3] = 0.0
        if r.sum() == 0.0:
            r[int(rng.integers(vocab))] = 1.0
    return r / r.sum()


class Tables:
    """Context-dependent p(.|ctx) and q(.|ctx) for every context up to ``depth`` tokens,
    callable (for the enumerations) and as arrays indexed by a context's code (for fast
    drafting of many trees)."""

    def __init__(self, rng: np.random.Generator, vocab: int, depth: int, zeros: bool) -> None:
        self.vocab = vocab
        self.p = [
            np.array([_row(rng, vocab, zeros) for _ in range(vocab**n)]) for n in range(depth + 1)
        ]
        self.q = [
            np.array([_row(rng, vocab, zeros) for _ in range(vocab**n)]) for n in range(depth + 1)
        ]

    def code(self, ctx: tuple[int, ...]) -> int:
        return int(np.ravel_multi_index(ctx, (self.vocab,) * len(ctx))) if ctx else 0

    def target(self, ctx: tuple[int, ...]) -> np.ndarray:
        return self.p[len(ctx)][self.code(ctx)]

    def draft(self, ctx: tuple[int, ...]) -> np.ndarray:
        return self.q[len(ctx)][self.code(ctx)]


def tables(rng: np.random.Generator, vocab: int, depth: int, zeros: bool = True):
    t = Tables(rng, vocab, depth, zeros)
    return t.target, t.draft


def _depth(parents) -> int:
    return int(tree.tree_depths(parents).max())


def draw_trees(parents, t: Tables, n, rng, *, replacement=True):
    """Draft ``n`` trees from context-dependent q and gather their p rows (B, n+1, V)."""
    depths = tree.tree_depths(parents)
    m, vocab = len(parents), t.vocab
    toks = np.zeros((n, m), np.int64)
    law = np.zeros((n, m, vocab))
    p = np.zeros((n, m + 1, vocab))
    p[:, 0] = t.p[0][0]
    code = np.zeros((n, m), np.int64)  # each node's context, coded base vocab
    for i, par in enumerate(parents):
        parent_code = code[:, par] if par >= 0 else np.zeros(n, np.int64)
        row = t.q[depths[i] - 1][parent_code].copy()
        if not replacement:
            for j in range(i):
                if parents[j] == par:
                    row[np.arange(n), toks[:, j]] = 0.0
            row /= row.sum(axis=1, keepdims=True)
        law[:, i] = row
        cdf = np.cumsum(row, axis=1)
        toks[:, i] = np.minimum((cdf < rng.random(n)[:, None] * cdf[:, -1:]).sum(axis=1), vocab - 1)
        code[:, i] = parent_code * vocab + toks[:, i]
        p[:, i + 1] = t.p[depths[i]][code[:, i]]
    return toks, law, p


def _chi_square(samples: np.ndarray, law: dict, n: int) -> float:
    counts: dict[tuple[int, ...], int] = {}
    for row in samples:
        key = tuple(int(t) for t in row if t >= 0)
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) <= set(law), "a sequence of probability 0 was emitted"
    keys = sorted(law)
    expected = np.array([law[k] * n for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys])
    small = expected < 5  # pool thin cells so the chi-square approximation holds
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    return float(stats.chisquare(observed, expected).pvalue)


# --- exactness by enumeration --------------------------------------------------------------


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.integers(2, 4),
    shape=st.sampled_from(SHAPES),
    method=st.sampled_from(["mss", "rrs"]),
    zeros=st.booleans(),
)
def test_tree_verification_is_exact_by_enumeration(seed, vocab, shape, method, zeros) -> None:
    """Every path enumerated, p and q context-dependent: the output is the target's law."""
    rng = np.random.default_rng(seed)
    depth = _depth(shape)
    p, q = tables(rng, vocab, depth + 1, zeros)
    try:
        law = enum.enumerate_tree(shape, p, q, method=method)
    except ValueError as err:  # without replacement, more siblings than tokens to draw
        assert method == "rrs" and "no token left" in str(err)
        return
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(1 <= len(s) <= depth + 1 for s in law)
    for length in range(1, depth + 2):
        full = enum.extend_law(law, p, length)
        ref = enum.autoregressive_law(p, length, vocab)
        assert enum.total_variation(full, ref) <= 1e-12


def test_greedy_tree_follows_the_target_argmax() -> None:
    rng = np.random.default_rng(3)
    for shape in SHAPES:
        p, q = tables(rng, 3, _depth(shape) + 1)
        law = enum.enumerate_tree(shape, p, q, method="greedy")
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
        greedy: tuple[int, ...] = ()
        for _ in range(_depth(shape) + 1):
            greedy += (int(np.argmax(p(greedy))),)
        assert all(s == greedy[: len(s)] for s in law)


def test_a_chain_tree_is_the_chain_block() -> None:
    rng = np.random.default_rng(5)
    p, q = tables(rng, 3, 4)
    law = enum.enumerate_tree([-1, 0, 1], p, q)
    block = sampling.enumerate_block(p, q, 3)
    assert set(law) == set(block)
    assert max(abs(law[s] - block[s]) for s in law) <= 1e-15


# --- the samplers against the enumerated law -----------------------------------------------


@pytest.mark.parametrize(
    ("shape", "replacement"),
    [([-1, -1, 0, 0, 1], True), ([-1, -1, 0, 0, 1], False), ([-1, -1, -1, 0, 3], True)],
)
def test_sampler_matches_enumeration_chi_square(shape, replacement) -> None:
    """Chi-square goodness of fit of verify_tree_batch to the enumerated law.

    Fails with probability 0.001 under the null (the sampler is exact) for a random seed;
    the seeds are fixed for reproducibility, not picked.
    """
    t = Tables(np.random.default_rng(11), 3, _depth(shape) + 1, zeros=False)
    law = enum.enumerate_tree(shape, t.target, t.draft, method="mss" if replacement else "rrs")
    n = 20_000
    rng = np.random.default_rng(7)
    toks, drawn, rows = draw_trees(shape, t, n, rng, replacement=replacement)
    out = tree.verify_tree_batch(shape, toks, drawn, rows, rng)
    assert _chi_square(out.tokens, law, n) > 1e-3


def test_greedy_sampler_matches_enumeration() -> None:
    shape = [-1, -1, 0, 0, 1]
    t = Tables(np.random.default_rng(12), 3, 4, zeros=True)
    law = enum.enumerate_tree(shape, t.target, t.draft, method="greedy")
    n = 20_000
    rng = np.random.default_rng(8)
    toks, _, rows = draw_trees(shape, t, n, rng)
    state = rng.bit_generator.state
    out = tree.verify_tree_batch(shape, toks, None, rows, rng, greedy=True)
    assert rng.bit_generator.state == state  # greedy draws no random numbers
    assert _chi_square(out.tokens, law, n) > 1e-3


def test_sample_tree_tokens_without_replacement_draws_distinct_siblings() -> None:
    shape = [-1, -1, -1, 0, 0]
    rng = np.random.default_rng(2)
    q = np.broadcast_to(rng.dirichlet(np.ones(4)), (500, len(shape), 4))
    toks, law = tree.sample_tree_tokens(shape, q, rng, replacement=False)
    assert np.all(toks[:, 0] != toks[:, 1]) and np.all(toks[:, 1] != toks[:, 2])
    assert np.all(toks[:, 3] != toks[:, 4])
    assert np.all(law[np.arange(500), 1, toks[:, 0]] == 0.0)
    with pytest.raises(ValueError, match="no token left"):
        tree.sample_tree_tokens([-1, -1, -1], np.full((2, 3, 2), 0.5), rng, replacement=False)


# --- batched, single, and the chain --------------------------------------------------------


def test_batched_and_single_agree_exactly() -> None:
    gen = np.random.default_rng(3)
    shape, batch, vocab = [-1, -1, 0, 1, 1, 2], 12, 30
    q = gen.dirichlet(np.ones(vocab), size=(batch, len(shape)))
    p = gen.dirichlet(np.ones(vocab), size=(batch, len(shape) + 1))
    toks, law = tree.sample_tree_tokens(shape, q, gen)
    batched = tree.verify_tree_batch(shape, toks, law, p, np.random.default_rng(99))
    single = np.random.default_rng(99)
    for b in range(batch):
        one = tree.verify_tree(shape, toks[b], law[b], p[b], single)
        row = batched.row(b)
        assert (one.accepted, one.path) == (row.accepted, row.path)
        assert one.tokens.tolist() == row.tokens.tolist()
        assert len(one.path) == one.accepted
        assert [int(toks[b, i]) for i in one.path] == one.tokens[:-1].tolist()


@pytest.mark.parametrize("greedy", [False, True])
def test_a_chain_tree_draws_exactly_what_verify_batch_draws(greedy: bool) -> None:
    gen = np.random.default_rng(4)
    batch, gamma, vocab = 64, 4, 50
    q = gen.dirichlet(np.ones(vocab), size=(batch, gamma))
    p = gen.dirichlet(np.ones(vocab), size=(batch, gamma + 1))
    toks = np.array([[gen.choice(vocab, p=q[b, i]) for i in range(gamma)] for b in range(batch)])
    chain = sampling.verify_batch(toks, q, p, np.random.default_rng(1), greedy=greedy)
    as_tree = tree.verify_tree_batch(
        [-1, 0, 1, 2], toks, q, p, np.random.default_rng(1), greedy=greedy
    )
    np.testing.assert_array_equal(chain.accepted, as_tree.accepted)
    np.testing.assert_array_equal(chain.tokens, as_tree.tokens)


def test_empty_tree_is_one_target_sample() -> None:
    p = np.array([[0.25, 0.75]])
    out = tree.verify_tree([], np.zeros(0, np.int64), np.zeros((0, 2)), p, np.random.default_rng(0))
    assert out.accepted == 0 and out.path == () and len(out.tokens) == 1


# --- typical acceptance: not exact, and by how much ----------------------------------------


def test_typical_acceptance_is_marked_not_exact_and_its_deviation_is_exact() -> None:
    assert typical.EXACT is False
    p = lambda ctx: np.array([0.6, 0.4])  # noqa: E731
    q = lambda ctx: np.array([0.1, 0.9])  # noqa: E731
    # Threshold min(0.3, big) = 0.3: both tokens pass, so the first token follows q, not p,
    # and the deviation is TV(p, q) = |0.6 - 0.1| = 0.5 (the later tokens are the target's).
    dev = enum.typical_deviation([-1], p, q, epsilon=0.3, delta=1e9)
    assert dev == pytest.approx(0.5, abs=1e-15)
    # With a threshold of 1 nothing passes: one target sample, no deviation at all.
    assert enum.typical_deviation([-1, -1, 0], p, q, epsilon=1.0, delta=1e9) <= 1e-15


def test_typical_sampler_matches_its_enumerated_law() -> None:
    shape = [-1, -1, 0, 1]
    t = Tables(np.random.default_rng(21), 3, 3, zeros=False)
    law = enum.enumerate_typical(shape, t.target, t.draft, epsilon=0.25, delta=0.5)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert enum.typical_deviation(shape, t.target, t.draft, epsilon=0.25, delta=0.5) > 0.01
    n = 20_000
    rng = np.random.default_rng(9)
    toks, _, rows = draw_trees(shape, t, n, rng)
    out = typical.typical_tree_batch(shape, toks, rows, rng, epsilon=0.25, delta=0.5)
    assert _chi_square(out.tokens, law, n) > 1e-3


# --- bad input -----------------------------------------------------------------------------


def test_bad_inputs_are_named() -> None:
    rng = np.random.default_rng(0)
    p = np.full((1, 3, 2), 0.5)
    q = np.full((1, 2, 2), 0.5)
    good = np.array([[0, 1]])
    with pytest.raises(ValueError, match="parents: entry 1"):
        tree.verify_tree_batch([-1, 1], good, q, p, rng)
    with pytest.raises(ValueError, match="parents: entry 1"):
        tree.verify_tree_batch([-1, -2], good, q, p, rng)
    with pytest.raises(ValueError, match=r"draft_tokens\[0, 1\] = 2 is out of range"):
        tree.verify_tree_batch([-1, 0], np.array([[0, 2]]), q, p, rng)
    with pytest.raises(ValueError, match="draft probability 0"):
        tree.verify_tree_batch([-1, 0], good, np.array([[[0.5, 0.5], [1.0, 0.0]]]), p, rng)
    with pytest.raises(ValueError, match="target_probs: expected shape"):
        tree.verify_tree_batch([-1, 0], good, q, p[:, :2], rng)
    with pytest.raises(ValueError, match="draft_probs: needed"):
        tree.verify_tree_batch([-1, 0], good, None, p, rng)
    with pytest.raises(TypeError, match="rng"):
        tree.verify_tree_batch([-1, 0], good, q, p, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon"):
        typical.typical_tree_batch([-1, 0], good, p, rng, epsilon=-0.1, delta=0.3)
    with pytest.raises(ValueError, match="method"):
        enum.enumerate_tree([-1], lambda c: [1.0], lambda c: [1.0], method="beam")
    with pytest.raises(ValueError, match="max_assignments"):
        enum.enumerate_typical(
            [-1] * 12,
            lambda c: [0.5, 0.5],
            lambda c: [0.5, 0.5],
            epsilon=0.1,
            delta=0.1,
            max_assignments=1000,
        )
