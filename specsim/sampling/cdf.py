"""Exact inverse-CDF sampling of one index per row, with a two-level search (a speed trick
for large vocabularies); every verifier of :mod:`specsim.sampling` samples through it."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["inverse_cdf"]

FloatArray = NDArray[np.float64]

_CDF_BLOCK = 256


def inverse_cdf(weights: FloatArray, u: FloatArray) -> NDArray[np.int64]:
    """Sample one index per row of non-negative ``weights`` from uniforms ``u`` in [0, 1).

    Exact inverse-CDF sampling: index ``i`` is chosen iff
    ``cdf[i-1] <= u * total < cdf[i]``, so a zero-weight token is never chosen
    and the weights need not be normalized. A speed trick: the search runs in
    two levels (sums of blocks of 256 tokens, then one block), because a full
    ``cumsum`` over a 32k vocabulary costs far more than a sum.
    """
    *lead, vocab = weights.shape
    nblocks = -(-vocab // _CDF_BLOCK)
    padded = weights
    if nblocks * _CDF_BLOCK != vocab:
        pad = np.zeros((*lead, nblocks * _CDF_BLOCK - vocab))
        padded = np.concatenate([weights, pad], axis=-1)
    blocks = padded.reshape(*lead, nblocks, _CDF_BLOCK)
    block_cdf = np.cumsum(blocks.sum(axis=-1), axis=-1)
    threshold = u * block_cdf[..., -1]
    b = np.minimum(np.count_nonzero(block_cdf <= threshold[..., None], axis=-1), nblocks - 1)
    before = np.where(
        b > 0, np.take_along_axis(block_cdf, np.maximum(b - 1, 0)[..., None], -1)[..., 0], 0.0
    )
    chosen = np.take_along_axis(blocks, b[..., None, None], axis=-2)[..., 0, :]
    within = np.maximum(threshold - before, 0.0)
    j = np.count_nonzero(np.cumsum(chosen, axis=-1) <= within[..., None], axis=-1)
    # Rounding between the block sums and the in-block cumsum can push j past the
    # block's last positive weight; clamp it there so a zero weight is never chosen.
    last_positive = _CDF_BLOCK - 1 - np.argmax(chosen[..., ::-1] > 0.0, axis=-1)
    return (b * _CDF_BLOCK + np.minimum(j, last_positive)).astype(np.int64)
