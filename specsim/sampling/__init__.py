"""Exact speculative sampling: acceptance, correction and block verification.

A draft model proposes a token ``x ~ q``; the target accepts it with probability
``min(1, p(x)/q(x))``; at the first rejection it emits a sample of the
*correction* (residual) distribution ``normalize(max(0, p - q))``. The token a
verification position emits is then distributed exactly as ``p``
(Leviathan, Kalman & Matias 2023, arXiv:2211.17192, Section 2.3 and Appendix
A.1, "Correctness of Speculative Sampling"; Chen et al. 2023, arXiv:2302.01318,
Section 4.2 and Theorem 1). The probability of acceptance is the overlap
``alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q)`` (Leviathan et al., Section
3.2: Definition 3.2, Theorem 3.5 and Corollary 3.6).

The chain's verification lives in :mod:`specsim.sampling.chain` (re-exported
here). Token trees, each batched over many trees at once: SpecInfer's multi-step
speculative sampling, sampling without replacement (recursive rejection
sampling) and greedy verification in :mod:`specsim.sampling.tree`, Medusa's
typical acceptance (not exact) in :mod:`specsim.sampling.typical`; several
drafts (SpecTr's k-sequential selection, multi-step sampling) in
:mod:`specsim.sampling.multidraft`; the exact output laws by enumeration in
:mod:`specsim.sampling.laws`.

The chain's functions take float64 arrays whose last axis is the vocabulary and
broadcasts over leading axes; none loops in Python over the vocabulary. Random
functions take a :class:`numpy.random.Generator`; nothing seeds globals.

Example, the two-token case of a draft that over-proposes token B:

>>> import numpy as np
>>> p, q = np.array([0.8, 0.2]), np.array([0.4, 0.6])
>>> round(acceptance_rate(p, q), 12)
0.6
>>> correction_distribution(p, q).tolist()
[1.0, 0.0]
>>> float(np.max(np.abs(emitted_distribution(p, q) - p))) <= 1e-15
True
"""

from __future__ import annotations

from specsim.sampling.chain import (
    RESIDUAL_FLOOR,
    SUM_TOLERANCE,
    BatchBlockResult,
    BlockResult,
    acceptance_rate,
    check_distribution,
    correction_distribution,
    emitted_distribution,
    enumerate_block,
    verify,
    verify_batch,
)

__all__ = [
    "SUM_TOLERANCE",
    "RESIDUAL_FLOOR",
    "BlockResult",
    "BatchBlockResult",
    "check_distribution",
    "acceptance_rate",
    "correction_distribution",
    "emitted_distribution",
    "verify",
    "verify_batch",
    "enumerate_block",
]
