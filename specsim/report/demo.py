"""The two-token demonstration of exact speculative sampling, as data.

A draft that over-proposes token B: p = (0.8, 0.2), q = (0.4, 0.6). The
acceptance is 0.6, every rejected B is corrected to A, and the emitted token
is distributed exactly as p. :func:`two_token_demo` computes those facts and
checks them by Monte Carlo with :func:`specsim.sampling.verify_batch`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specsim import sampling
from specsim.checks import check_size

__all__ = ["SamplingDemo", "two_token_demo"]


@dataclass(frozen=True, kw_only=True)
class SamplingDemo:
    """The numbers the demo shows; the Monte Carlo fields come with standard errors."""

    target: tuple[float, ...]
    draft: tuple[float, ...]
    acceptance: float
    correction: tuple[float, ...]
    emitted: tuple[float, ...]
    max_deviation: float
    blocks: int
    mc_acceptance: float
    mc_acceptance_se: float
    mc_emitted: tuple[float, ...]
    mc_emitted_se: tuple[float, ...]
    rejected_b_corrected_to_a: float | None  # None when no proposal of B was rejected


def two_token_demo(
    rng: np.random.Generator,
    *,
    target: tuple[float, ...] = (0.8, 0.2),
    draft: tuple[float, ...] = (0.4, 0.6),
    blocks: int = 100_000,
) -> SamplingDemo:
    """Exact quantities for one verification position, and a Monte Carlo check of them."""
    if blocks < 2:
        raise ValueError(f"blocks: need at least 2 Monte Carlo blocks, got {blocks}")
    check_size(blocks, name="blocks", limit="blocks")
    p, q = np.asarray(target, dtype=float), np.asarray(draft, dtype=float)
    emitted = sampling.emitted_distribution(p, q)
    vocab = p.shape[-1]
    toks = rng.choice(vocab, p=q, size=(blocks, 1))
    out = sampling.verify_batch(
        toks, np.broadcast_to(q, (blocks, 1, vocab)), np.broadcast_to(p, (blocks, 2, vocab)), rng
    )
    first = out.tokens[:, 0]
    freq = np.bincount(first, minlength=vocab) / blocks
    rejected = out.accepted == 0
    rejected_b = rejected & (toks[:, 0] == 1)
    corrected = float(np.mean(first[rejected_b] == 0)) if rejected_b.any() else None
    acc = float(out.accepted.mean())
    return SamplingDemo(
        target=tuple(p.tolist()),
        draft=tuple(q.tolist()),
        acceptance=float(sampling.acceptance_rate(p, q)),
        correction=tuple(sampling.correction_distribution(p, q).tolist()),
        emitted=tuple(emitted.tolist()),
        max_deviation=float(np.max(np.abs(emitted - p))),
        blocks=blocks,
        mc_acceptance=acc,
        mc_acceptance_se=math.sqrt(acc * (1 - acc) / blocks),
        mc_emitted=tuple(freq.tolist()),
        mc_emitted_se=tuple(np.sqrt(freq * (1 - freq) / blocks).tolist()),
        rejected_b_corrected_to_a=corrected,
    )
