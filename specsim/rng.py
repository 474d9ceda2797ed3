"""The keyed random generator shared by studies, problem sets and measurement units.

``keyed_rng(seed, key)`` is ``numpy.random.default_rng([seed, crc32(key)])``:
the same seed and key always give the same stream, and streams of different
keys are independent of each other and of the order they are asked for in.
"""

from __future__ import annotations

import zlib

import numpy as np

from specsim.checks import check_int

__all__ = ["check_seed", "keyed_rng"]


def check_seed(seed: int) -> int:
    """``seed`` as a Python int; a bool or a non-integer raises TypeError, a negative number
    ValueError (:func:`specsim.checks.check_int`)."""
    return check_int(seed, name="seed", minimum=0)


def keyed_rng(seed: int, key: str) -> np.random.Generator:
    """A generator seeded by ``seed`` (checked by :func:`check_seed`) and the CRC-32 of ``key``."""
    return np.random.default_rng([check_seed(seed), zlib.crc32(key.encode())])
