"""Several drafts verified exactly: enumeration proofs, chi-square, acceptance vs theory."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specsim import sampling
from specsim.sampling import laws as enum
from specsim.sampling import multidraft as md
from specsim.theory import multidraft as tmd


def _row(rng: np.random.Generator, vocab: int, zeros: bool) -> np.ndarray:
    r = rng.dirichlet(np.full(vocab, 0.7))
    if zeros:
        r[rng.random(vocab) < 0.3] = 0.0
        if r.sum() == 0.0:
            r[int(rng.integers(vocab))] = 1.0
    return r / r.sum()


def tables(rng: np.random.Generator, vocab: int, depth: int, zeros: bool = True):
    p, q = {}, {}
    for n in range(depth + 1):
        for ctx in itertools.product(range(vocab), repeat=n):
            p[ctx], q[ctx] = _row(rng, vocab, zeros), _row(rng, vocab, zeros)
    return p.__getitem__, q.__getitem__


# --- exactness by enumeration --------------------------------------------------------------


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.integers(2, 4),
    k=st.integers(1, 3),
    length=st.integers(0, 2),
    method=st.sampled_from(md.METHODS),
    zeros=st.booleans(),
)
def test_multidraft_is_exact_by_enumeration(seed, vocab, k, length, method, zeros) -> None:
    rng = np.random.default_rng(seed)
    p, q = tables(rng, vocab, length + 1, zeros)
    law = enum.enumerate_multidraft(p, q, k, length, method=method)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    for n in range(1, length + 2):
        full = enum.extend_law(law, p, n)
        assert enum.total_variation(full, enum.autoregressive_law(p, n, vocab)) <= 1e-12


@pytest.mark.parametrize("method", md.METHODS)
def test_one_draft_is_the_chain(method: str) -> None:
    p, q = tables(np.random.default_rng(2), 3, 3)
    law = enum.enumerate_multidraft(p, q, 1, 2, method=method)
    block = sampling.enumerate_block(p, q, 2)
    assert set(law) == set(block)
    assert max(abs(law[s] - block[s]) for s in law) <= 1e-12


# --- the sampler against the enumerated law ------------------------------------------------


def _draw(p, q, k: int, length: int, n: int, rng: np.random.Generator):
    vocab = len(p(()))
    toks = np.zeros((n, k, length), np.int64)
    qs = np.zeros((n, k, length, vocab))
    ps = np.zeros((n, k, length + 1, vocab))
    for b, i in itertools.product(range(n), range(k)):
        ctx: tuple[int, ...] = ()
        for j in range(length):
            qs[b, i, j], ps[b, i, j] = q(ctx), p(ctx)
            toks[b, i, j] = rng.choice(vocab, p=qs[b, i, j])
            ctx += (int(toks[b, i, j]),)
        ps[b, i, length] = p(ctx)
    return toks, qs, ps


@pytest.mark.parametrize("method", md.METHODS)
def test_sampler_matches_enumeration_chi_square(method: str) -> None:
    """Chi-square fit of verify_multidraft_batch to the enumerated law (false alarm 0.001;
    fixed seeds for reproducibility)."""
    p, q = tables(np.random.default_rng(31), 3, 3, zeros=False)
    k, length, n = 3, 2, 6_000
    law = enum.enumerate_multidraft(p, q, k, length, method=method)
    rng = np.random.default_rng(17)
    out = md.verify_multidraft_batch(*_draw(p, q, k, length, n, rng), rng, method=method)
    counts: dict[tuple[int, ...], int] = {}
    for row in out.tokens:
        key = tuple(int(t) for t in row if t >= 0)
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) <= set(law)
    keys = sorted(law)
    expected = np.array([law[s] * n for s in keys])
    observed = np.array([counts.get(s, 0) for s in keys])
    small = expected < 5
    expected = np.append(expected[~small], expected[small].sum())
    observed = np.append(observed[~small], observed[small].sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-3


# --- acceptance at one position: sampler, enumeration and theory agree ---------------------


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("method", md.METHODS)
def test_first_position_acceptance_matches_the_closed_forms(k: int, method: str) -> None:
    gen = np.random.default_rng(k)
    vocab, n = 6, 20_000
    p1, q1 = gen.dirichlet(np.ones(vocab)), gen.dirichlet(np.ones(vocab))
    toks = gen.choice(vocab, p=q1, size=(n, k, 1))
    out = md.verify_multidraft_batch(
        toks,
        np.broadcast_to(q1, (n, k, 1, vocab)),
        np.broadcast_to(p1, (n, k, 2, vocab)),
        gen,
        method=method,
    )
    closed = (tmd.kseq_acceptance if method == "kseq" else tmd.mss_acceptance)(p1, q1, k)
    rate = out.accepted.mean()
    se = math.sqrt(closed * (1 - closed) / n)
    assert abs(rate - closed) <= 4.5 * se + 1e-12
    # The enumeration gives the same number exactly: accepted iff two tokens come out.
    law = enum.enumerate_multidraft(lambda c: p1, lambda c: q1, k, 1, method=method)
    assert sum(w for s, w in law.items() if len(s) == 2) == pytest.approx(closed, abs=1e-12)
    assert closed <= tmd.optimal_multidraft_acceptance(p1, q1, k) + 1e-12


def test_kseq_rho_is_feasible_and_the_same_in_sampling_and_theory() -> None:
    gen = np.random.default_rng(6)
    for _ in range(20):
        p1, q1 = gen.dirichlet(np.ones(5)), gen.dirichlet(np.ones(5))
        for k in (1, 2, 3, 5):
            rho = float(md.kseq_rho(p1, q1, k))
            assert 1.0 <= rho <= k
            assert rho == pytest.approx(tmd.kseq_rho_star(p1, q1, k), abs=1e-11)
            assert np.all(md.kseq_residual(p1, q1, np.float64(k), np.float64(rho)) >= 0.0)
    assert float(md.kseq_rho([0.5, 0.5], [0.5, 0.5], 3)) == 1.0  # p == q: rho = 1 suffices


def test_bad_inputs_are_named() -> None:
    rng = np.random.default_rng(0)
    toks = np.zeros((1, 2, 1), np.int64)
    q = np.full((1, 2, 1, 2), 0.5)
    p = np.full((1, 2, 2, 2), 0.5)
    with pytest.raises(ValueError, match="method"):
        md.verify_multidraft_batch(toks, q, p, rng, method="beam")
    with pytest.raises(ValueError, match="target_probs: expected shape"):
        md.verify_multidraft_batch(toks, q, p[:, :, :1], rng)
    with pytest.raises(ValueError, match=r"drafts\[0, 1, 0\] = 3 is out of range"):
        md.verify_multidraft_batch(np.array([[[0], [3]]]), q, p, rng)
    with pytest.raises(ValueError, match="draft probability 0"):
        md.verify_multidraft_batch(toks, np.array([[[[0.0, 1.0]], [[0.5, 0.5]]]]), p, rng)
    with pytest.raises(ValueError, match="k: expected an integer >= 1"):
        enum.enumerate_multidraft(lambda c: [1.0], lambda c: [1.0], 0, 1)
    with pytest.raises(ValueError, match="m: the number of candidates"):
        md.kseq_rho([0.5, 0.5], [0.5, 0.5], 0)
