"""Published numbers the closed forms are checked against.

:data:`LEVIATHAN_TABLE1` is Table 1 of Leviathan, Kalman & Matias, "Fast Inference
from Transformers via Speculative Decoding", ICML 2023 (arXiv:2211.17192),
Section 3.5, as printed. ``docs/derivations.md`` and the ``paper`` study both read
it; the test suite keeps its own independent copy.
"""

from __future__ import annotations

__all__ = ["LEVIATHAN_TABLE1"]

LEVIATHAN_TABLE1: tuple[tuple[float, int, float, float], ...] = (
    (0.6, 2, 1.53, 1.96),
    (0.7, 3, 1.58, 2.53),
    (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69),
    (0.9, 2, 1.11, 2.71),
    (0.9, 10, 1.60, 6.86),
)
"""Rows ``(alpha, gamma, operations factor, walltime improvement)`` with c = c_hat = 0,
both factors as printed (two decimals)."""
