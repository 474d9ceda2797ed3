r"""Tokens per pass under hidden-Markov (bursty) acceptance, exactly.

The closed forms of :mod:`specsim.theory.numeric` assume i.i.d. acceptances
(Leviathan et al. 2023, Section 3.1). Real acceptances cluster: easy and hard
stretches of text. This module solves the simplest model of that exactly, the
process that :class:`specsim.acceptance.processes.MarkovAcceptance` samples: a hidden state
``s`` per output position, acceptance probability ``alphas[s]`` in state ``s``,
and a state that is kept from one position to the next with probability
``persistence`` (:math:`\rho`) and otherwise redrawn from ``weights`` (:math:`w`,
also the stationary law).

The calculation. With the transition matrix :math:`P = \rho I + (1 - \rho)
\mathbf{1} w^\top` and :math:`D = \mathrm{diag}(\alpha_s)`, the row vector
:math:`e_s (DP)^n` holds the probability that the first ``n`` drafts of a block
that starts in state ``s`` are all accepted, by the state ``n`` positions later.
So the block accepts at least ``j`` drafts with probability
:math:`P(N \ge j \mid s) = [(DP)^{j-1} D \mathbf{1}]_s`, and its mean tokens are

.. math:: r(s) = 1 + \sum_{j=1}^{\gamma} P(N \ge j \mid s).

A block that ends after ``n < gamma`` acceptances has its rejection at position
``n``; the next block starts one position later, so the state at the next block's
start follows the kernel

.. math:: K = \sum_{n<\gamma} (DP)^n (I - D) P + (DP)^{\gamma} P

(the last term: every draft accepted, the bonus position, then the next block).
The long-run tokens per pass of a stream of consecutive blocks are
:math:`\mu \cdot r`, with :math:`\mu` the stationary law of ``K``: the
renewal-reward theorem over the Markov chain of block-start states (Ross,
*Stochastic Processes*, 2nd ed., 1996, Theorem 3.6.1, applied to the Markov
renewal process of block starts). A single block started from the stationary
state law has mean :math:`w \cdot r`.

Assumptions: a fixed lookahead ``gamma``; acceptance of the ``k``-th draft of a
block depends only on the hidden state at its position (no position weights);
``persistence < 1`` (so that the chain mixes); blocks follow each other with no
gap. With ``persistence = 0`` every result equals
:func:`specsim.theory.expected_tokens` at the mean acceptance ``w . alphas``.

>>> from specsim.theory import expected_tokens
>>> iid = markov_tokens_per_pass(alphas=(0.9, 0.5), weights=(0.5, 0.5), persistence=0.0, gamma=4)
>>> round(iid, 12) == round(expected_tokens(0.7, 4), 12)
True
>>> bursty = dict(alphas=(0.95, 0.45), weights=(0.5, 0.5), persistence=0.9, gamma=4)
>>> round(markov_tokens_per_pass(**bursty), 4), round(expected_tokens(0.7, 4), 4)
(2.5807, 2.7731)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

__all__ = ["markov_chain", "markov_block_terms", "block_start_law", "markov_tokens_per_pass"]

FloatArray = NDArray[np.float64]


def markov_chain(
    *, alphas: Sequence[float], weights: Sequence[float], persistence: float
) -> tuple[FloatArray, FloatArray]:
    """``(D, P)``: the diagonal of acceptance probabilities and the transition matrix.

    Raises ValueError naming the argument when ``alphas`` and ``weights`` differ in
    length or are empty, an alpha is outside [0, 1], the weights are not a
    probability vector, or ``persistence`` is outside [0, 1).
    """
    a = np.asarray(alphas, dtype=float)
    w = np.asarray(weights, dtype=float)
    if a.ndim != 1 or a.shape[0] == 0 or a.shape != w.shape:
        raise ValueError(
            f"markov_chain: alphas and weights must be 1-d of the same non-zero length, "
            f"got shapes {a.shape} and {w.shape}"
        )
    if not np.all((a >= 0.0) & (a <= 1.0)):
        raise ValueError(f"markov_chain: alphas must be probabilities in [0, 1], got {alphas!r}")
    if not (np.all(w >= 0.0) and abs(float(w.sum()) - 1.0) <= 1e-9):
        raise ValueError(f"markov_chain: weights must be >= 0 and sum to 1, got {weights!r}")
    rho = float(persistence)
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"markov_chain: persistence must be in [0, 1), got {persistence!r}")
    trans = rho * np.eye(w.shape[0]) + (1.0 - rho) * np.outer(np.ones(w.shape[0]), w)
    return np.diag(a), trans


def _check_gamma(gamma: int, where: str) -> int:
    if isinstance(gamma, bool) or not isinstance(gamma, int | np.integer) or gamma < 0:
        raise ValueError(f"{where}: gamma must be a non-negative integer, got {gamma!r}")
    return int(gamma)


def markov_block_terms(
    *, alphas: Sequence[float], weights: Sequence[float], persistence: float, gamma: int
) -> tuple[FloatArray, FloatArray]:
    """``(r, K)``: a block's mean tokens by start state, and the block-start kernel.

    See the module docstring for the two formulas.
    """
    g = _check_gamma(gamma, "markov_block_terms")
    d, trans = markov_chain(alphas=alphas, weights=weights, persistence=persistence)
    s = d.shape[0]
    dp = d @ trans
    power = np.eye(s)  # (DP)^n
    tokens = np.ones(s)
    kernel = np.zeros((s, s))
    for _ in range(g):
        tokens += power @ d @ np.ones(s)
        kernel += power @ (np.eye(s) - d) @ trans
        power = power @ dp
    kernel += power @ trans
    return tokens, kernel


def _stationary(kernel: FloatArray) -> FloatArray:
    """The stationary law of a stochastic matrix: mu (K - I) = 0 with sum(mu) = 1."""
    s = kernel.shape[0]
    lhs = np.vstack([(kernel - np.eye(s)).T, np.ones(s)])
    rhs = np.concatenate([np.zeros(s), [1.0]])
    mu, *_ = np.linalg.lstsq(lhs, rhs, rcond=None)  # least squares on the stacked system
    return np.asarray(mu, dtype=float)


def block_start_law(
    *, alphas: Sequence[float], weights: Sequence[float], persistence: float, gamma: int
) -> FloatArray:
    """Long-run share of blocks that start in each hidden state (the stationary law of K)."""
    _, kernel = markov_block_terms(
        alphas=alphas, weights=weights, persistence=persistence, gamma=gamma
    )
    return _stationary(kernel)


def markov_tokens_per_pass(
    *,
    alphas: Sequence[float],
    weights: Sequence[float],
    persistence: float,
    gamma: int,
    start: Literal["stream", "stationary"] = "stream",
) -> float:
    """Exact expected tokens per pass with fixed lookahead ``gamma`` under Markov acceptance.

    ``start="stream"``: the long-run mean over a stream of consecutive blocks, each
    starting right after the previous one ends (what
    :func:`specsim.sim.simulate_stream` measures as ``tokens_per_target_pass``):
    :math:`\\mu \\cdot r`. ``start="stationary"``: one block whose first position's
    state is drawn from the stationary law ``weights``: :math:`w \\cdot r`. Both
    equal :func:`specsim.theory.expected_tokens` at the mean acceptance when
    ``persistence = 0``. The module docstring gives the calculation, its
    assumptions and the reference (renewal-reward over the chain of block starts).
    """
    if start not in ("stream", "stationary"):
        raise ValueError(
            f"markov_tokens_per_pass: start must be 'stream' or 'stationary', got {start!r}"
        )
    tokens, kernel = markov_block_terms(
        alphas=alphas, weights=weights, persistence=persistence, gamma=gamma
    )
    law = _stationary(kernel) if start == "stream" else np.asarray(weights, dtype=float)
    return float(law @ tokens)
