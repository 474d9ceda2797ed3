"""Typical acceptance (Medusa): fast, and **not exact**: the output is not the target's law.

Medusa (Cai et al., ICML 2024, arXiv:2401.10774, Section 2.3.1) accepts a candidate
token ``x`` at a position whose target distribution is ``p`` when

    p(x) > min(epsilon, delta * exp(-H(p))),   H(p) = -sum_y p(y) log p(y),

a hard floor ``epsilon`` and an entropy-scaled one ``delta exp(-H)``: confident
positions demand a likely token, uncertain ones accept more. A candidate path is
accepted up to its first failing token and the longest accepted prefix among all
candidates wins. Here the candidates are the root-to-node paths of a token tree
(``parents`` as in :mod:`specsim.sampling.tree`): the deepest node whose whole path
passes is chosen, ties going to the lowest node index (the first candidate in
topological order), and the pass then emits one token sampled from the target
after that node (a plain target sample when no node passes).

Nothing corrects the bias: a token the target rates at ``p(x)`` is emitted with
probability up to ``q(x)``-driven frequencies instead. How far the output is from
the target's law is computed exactly, by enumeration, by
:func:`specsim.sampling.laws.typical_deviation`; a user sees what the speed
costs in fidelity.

>>> import numpy as np
>>> p = np.array([0.5, 0.3, 0.2])
>>> round(float(typical_threshold(p, epsilon=0.09, delta=0.3)), 4)  # 0.3 e^-H = 0.107 > eps
0.09
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.sampling.cdf import inverse_cdf
from specsim.sampling.chain import FloatArray
from specsim.sampling.tree import BatchTreeResult, assemble_tree_result, check_tree_inputs

__all__ = [
    "EXACT",
    "check_typical_parameters",
    "typical_threshold",
    "typical_tree_batch",
]

EXACT = False
"""Typical acceptance is not an exact sampler (Medusa, Section 2.3.1)."""


def check_typical_parameters(epsilon: float, delta: float) -> tuple[float, float]:
    """``(epsilon, delta)`` as floats, or ValueError naming the one that is not finite >= 0."""
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
            raise TypeError(f"{name}: expected a number, got {value!r}")
        if not (np.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return float(epsilon), float(delta)


def typical_threshold(p: ArrayLike, *, epsilon: float, delta: float) -> FloatArray | float:
    """``min(epsilon, delta * exp(-H(p)))`` over the last axis (entropy in nats)."""
    eps, dl = check_typical_parameters(epsilon, delta)
    arr = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(arr > 0.0, arr * np.log(np.where(arr > 0.0, arr, 1.0)), 0.0)
    out = np.minimum(eps, dl * np.exp(terms.sum(axis=-1)))
    return float(out) if out.ndim == 0 else out


def typical_tree_batch(
    parents: Sequence[int],
    draft_tokens: ArrayLike,
    target_probs: ArrayLike,
    rng: np.random.Generator,
    *,
    epsilon: float,
    delta: float,
) -> BatchTreeResult:
    """Typical acceptance over ``B`` trees of the shape ``parents`` at once (NOT exact).

    ``draft_tokens (B, n)``, ``target_probs (B, n + 1, V)`` (row 0 at the root, row
    ``i + 1`` after node ``i``). Draws ``rng.random(B)`` for the last token. No loop over
    trees; one vectorized step per node.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    eps, dl = check_typical_parameters(epsilon, delta)
    depths, toks, _, p = check_tree_inputs(parents, draft_tokens, None, target_probs)
    batch, n = toks.shape
    # Only positions with children need a threshold: leaves' rows skip the entropy (a speed
    # trick; the entropy's logarithm over the vocabulary is the costly part).
    inner = sorted({int(par) + 1 for par in parents})
    threshold = np.zeros((batch, n + 1))
    if inner:
        threshold[:, inner] = np.asarray(
            typical_threshold(p[:, inner], epsilon=eps, delta=dl)
        ).reshape(batch, len(inner))
    ok = np.zeros((batch, n), dtype=bool)  # node i's whole path passes
    rows = np.arange(batch)
    for i, par in enumerate(parents):
        passes = p[rows, par + 1, toks[:, i]] > threshold[:, par + 1]
        ok[:, i] = passes if par < 0 else passes & ok[:, par]
    score: NDArray[np.int64] = np.where(ok, depths[None, :], 0)
    if n:
        best = np.argmax(score, axis=1)  # the first node of greatest depth
        cur = np.where(score[rows, best] > 0, best, -1).astype(np.int64)
    else:
        cur = np.full(batch, -1, dtype=np.int64)
    last = inverse_cdf(p[rows, cur + 1], np.asarray(rng.random(batch), dtype=np.float64))
    return assemble_tree_result(tuple(int(x) for x in parents), depths, toks, cur, last)
