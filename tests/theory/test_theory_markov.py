"""Exact tokens per pass under hidden-Markov acceptance: known answers, enumeration, simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specsim.acceptance.processes import MarkovAcceptance
from specsim.policies.lookahead import FixedGamma
from specsim.sim import PlainCost, StreamConfig, simulate_stream
from specsim.theory import block_start_law, expected_tokens, markov_tokens_per_pass

THREE = {"alphas": (0.95, 0.6, 0.2), "weights": (0.3, 0.5, 0.2)}


def _by_enumeration(
    alphas: tuple[float, ...], weights: tuple[float, ...], rho: float, gamma: int
) -> tuple[float, float]:
    """(stationary-start mean, stream mean) by listing every state path and outcome of a block.

    Independent of the matrix calculation: a block is the hidden states of its
    gamma + 2 positions and the accept/reject outcome of its gamma drafts; the
    stream's block-start law is the fixed point of the start-to-start transition
    found by iterating it.
    """
    n = len(alphas)

    def step(s: int, t: int) -> float:
        return rho * (s == t) + (1 - rho) * weights[t]

    tokens, kernel = np.zeros(n), np.zeros((n, n))
    for path in itertools.product(range(n), repeat=gamma + 2):
        p_path = math.prod(step(path[i], path[i + 1]) for i in range(gamma + 1))
        for outcome in itertools.product((True, False), repeat=gamma):
            run = next((i for i, ok in enumerate(outcome) if not ok), gamma)
            if run < gamma and any(not ok for ok in outcome[run + 1 :]):
                continue  # drafts after the first rejection are never tried: count each once
            p = p_path
            for i in range(min(run + 1, gamma)):  # the accepted drafts and the rejected one
                p *= alphas[path[i]] if outcome[i] else 1 - alphas[path[i]]
            tokens[path[0]] += p * (run + 1)
            kernel[path[0], path[run + 1]] += p
    law = np.full(n, 1.0 / n)
    for _ in range(10_000):
        law = law @ kernel
    return float(np.dot(weights, tokens)), float(law @ tokens)


def test_no_persistence_is_the_iid_formula_at_the_mean() -> None:
    for g in range(7):
        for start in ("stream", "stationary"):
            got = markov_tokens_per_pass(**THREE, persistence=0.0, gamma=g, start=start)  # type: ignore[arg-type]
            assert got == pytest.approx(expected_tokens(0.625, g), rel=1e-12)


def test_known_answers() -> None:
    # gamma = 0 is plain decoding; acceptance 1 in every state gives gamma + 1.
    assert markov_tokens_per_pass(**THREE, persistence=0.8, gamma=0) == pytest.approx(1.0)
    every = {"alphas": (1.0, 1.0), "weights": (0.4, 0.6)}
    assert markov_tokens_per_pass(**every, persistence=0.7, gamma=5) == pytest.approx(6.0)


@pytest.mark.parametrize("rho, gamma", [(0.6, 3), (0.9, 4)])
def test_matches_enumeration_of_every_path(rho: float, gamma: int) -> None:
    stat, stream = _by_enumeration(THREE["alphas"], THREE["weights"], rho, gamma)
    kw = {**THREE, "persistence": rho, "gamma": gamma}
    assert markov_tokens_per_pass(**kw, start="stationary") == pytest.approx(stat, rel=1e-10)
    assert markov_tokens_per_pass(**kw) == pytest.approx(stream, rel=1e-10)
    assert block_start_law(**kw).sum() == pytest.approx(1.0)


def test_markov_acceptance_carries_its_mean_tokens() -> None:
    """MarkovAcceptance.mean_tokens against independent simulated streams (4 standard errors)."""
    proc = MarkovAcceptance.two_state(mean=0.7, spread=0.25, persistence=0.85)
    gamma = 4
    exact = proc.mean_tokens(gamma)
    assert exact == markov_tokens_per_pass(
        alphas=proc.alphas, weights=proc.weights, persistence=0.85, gamma=gamma
    )
    config = StreamConfig(
        tokens=40_000, acceptance=proc, policy=FixedGamma(gamma=gamma), cost=PlainCost(c=0.05)
    )
    runs = np.array(
        [
            simulate_stream(config, np.random.default_rng(100 + i)).metrics()[
                "tokens_per_target_pass"
            ]
            for i in range(12)
        ]
    )
    se = runs.std(ddof=1) / math.sqrt(runs.size)
    assert abs(runs.mean() - exact) < 4 * se
    # and the i.i.d. formula at the same mean is far outside that interval
    assert abs(runs.mean() - expected_tokens(0.7, gamma)) > 6 * se


def test_input_errors() -> None:
    kw = {**THREE, "persistence": 0.5}
    with pytest.raises(ValueError, match="gamma"):
        markov_tokens_per_pass(**kw, gamma=-1)
    with pytest.raises(ValueError, match="start"):
        markov_tokens_per_pass(**kw, gamma=2, start="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="persistence"):
        markov_tokens_per_pass(**THREE, persistence=1.0, gamma=2)
    with pytest.raises(ValueError, match="weights"):
        markov_tokens_per_pass(alphas=(0.5, 0.5), weights=(0.5, 0.6), persistence=0.5, gamma=2)
    with pytest.raises(ValueError, match="alphas"):
        markov_tokens_per_pass(alphas=(0.5, 1.5), weights=(0.5, 0.5), persistence=0.5, gamma=2)
    with pytest.raises(ValueError, match="same non-zero length"):
        markov_tokens_per_pass(alphas=(0.5,), weights=(0.5, 0.5), persistence=0.5, gamma=2)
