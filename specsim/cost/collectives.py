"""Tensor-parallel collectives: the time of an all-reduce over ``p`` devices.

An all-reduce of ``n`` bytes runs in algorithm steps, each paying the link's
latency ``alpha`` and sending a share of the message over the link's bandwidth
``beta`` (bytes/s, one direction), the alpha-beta model of Thakur, Rabenseifner &
Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 19(1), 2005, Section 4:

* ``ring``: a reduce-scatter then an all-gather around a ring, ``2 (p - 1)`` steps of
  ``n / p`` bytes each (Patarasuk & Yuan, JPDC 2009, bandwidth-optimal):
  ``t = 2 (p - 1) alpha + 2 (p - 1) / p * n / beta``;
* ``tree``: a binomial-tree reduce then a broadcast of the whole message,
  ``2 ceil(log2 p)`` steps of ``n`` bytes (Thakur et al. 2005, Section 4.4's
  short-message algorithms): ``t = 2 ceil(log2 p) (alpha + n / beta)``;
* ``per-allreduce``: one latency per all-reduce plus the ring's bandwidth term,
  ``t = alpha + 2 (p - 1) / p * n / beta``: the form the shipped cards were fitted
  with (``alpha`` then stands for the whole all-reduce's fixed cost, e.g. the
  A100-80GB card's value fitted to gpt-fast's tensor-parallel table; that run uses
  PyTorch's one-shot intra-node all-reduce, a single step).

The bandwidth a card gives is what nccl-tests calls the *bus bandwidth*: for an
all-reduce ``busbw = algbw * 2 (p - 1) / p`` with ``algbw = n / t``
(NVIDIA nccl-tests, doc/PERFORMANCE.md), so a large-message ring all-reduce takes
``2 (p - 1) / p * n / busbw``, the bandwidth term above with ``beta = busbw``.

An **all-to-all** (expert parallelism's dispatch and combine, :mod:`specsim.cost.moe`) in
which each of ``p`` devices holds ``n`` bytes, a ``1/p`` share for every device, runs as
(Thakur et al. 2005, the all-to-all algorithms of MPICH):

* ``ring`` (and ``per-allreduce``'s bandwidth term): pairwise exchange, ``p - 1`` steps of
  ``n / p`` bytes, ``t = (p - 1) alpha + (p - 1) / p * n / beta`` (``per-allreduce``: one
  latency, the fitted whole-collective cost, as for its all-reduces);
* ``tree``: Bruck's algorithm for short messages, ``ceil(log2 p)`` steps of ``n / 2``
  bytes, ``t = ceil(log2 p) (alpha + n / (2 beta))``.

A card may also set a fixed overhead per pass and per device beyond the first
(synchronisation skew, launch of the collective kernels): ``overhead_s * (p - 1)``.

>>> round(allreduce_time(1e9, 8, bandwidth=1e11, latency_s=1e-5) * 1e3, 3)  # ring
17.64
>>> allreduce_time(1e9, 1, bandwidth=1e11, latency_s=1e-5)
0.0
"""

from __future__ import annotations

import math

from specsim.cards.hardware import COLLECTIVE_ALGORITHMS

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "allreduce_steps",
    "allreduce_bandwidth_factor",
    "allreduce_time",
    "alltoall_steps",
    "alltoall_bandwidth_factor",
    "alltoall_time",
    "check_algorithm",
]

ALGORITHMS = COLLECTIVE_ALGORITHMS
"""The all-reduce algorithms a hardware card may name (``collective_algorithm``)."""

DEFAULT_ALGORITHM = "per-allreduce"
"""The algorithm of a card that names none: the form every shipped card was fitted with."""


def check_algorithm(algorithm: object, where: str = "collective_algorithm") -> str:
    """``algorithm`` if it is one of :data:`ALGORITHMS`, else a ValueError naming it."""
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"{where}: unknown all-reduce algorithm {algorithm!r}; known: {list(ALGORITHMS)}"
        )
    return str(algorithm)


def allreduce_steps(devices: float, algorithm: str) -> float:
    """Latency-paying steps of one all-reduce over ``devices`` (0 on one device)."""
    p = float(devices)
    if p <= 1:
        return 0.0
    if algorithm == "ring":
        return 2.0 * (p - 1.0)
    if algorithm == "tree":
        return 2.0 * math.ceil(math.log2(p))
    check_algorithm(algorithm, "algorithm")
    return 1.0


def allreduce_bandwidth_factor(devices: float, algorithm: str) -> float:
    """Bytes each device sends over its link per byte of message (0 on one device)."""
    p = float(devices)
    if p <= 1:
        return 0.0
    if algorithm == "tree":
        return 2.0 * math.ceil(math.log2(p))
    check_algorithm(algorithm, "algorithm")
    return 2.0 * (p - 1.0) / p


def allreduce_time(
    nbytes: float,
    devices: float,
    *,
    bandwidth: float,
    latency_s: float,
    algorithm: str = "ring",
    overhead_s: float = 0.0,
) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``devices``: steps x latency, plus the
    bytes each device sends over ``bandwidth``, plus ``overhead_s * (devices - 1)``."""
    if bandwidth <= 0 or latency_s < 0 or nbytes < 0 or overhead_s < 0:
        raise ValueError(
            f"allreduce_time: need bandwidth > 0 and non-negative bytes, latency and "
            f"overhead, got bandwidth={bandwidth!r}, nbytes={nbytes!r}, "
            f"latency_s={latency_s!r}, overhead_s={overhead_s!r}"
        )
    if devices <= 1:
        return 0.0
    return (
        allreduce_steps(devices, algorithm) * latency_s
        + allreduce_bandwidth_factor(devices, algorithm) * nbytes / bandwidth
        + overhead_s * (devices - 1.0)
    )


def alltoall_steps(devices: float, algorithm: str) -> float:
    """Latency-paying steps of one all-to-all over ``devices`` (0 on one device)."""
    p = float(devices)
    if p <= 1:
        return 0.0
    if algorithm == "ring":
        return p - 1.0
    if algorithm == "tree":
        return float(math.ceil(math.log2(p)))
    check_algorithm(algorithm, "algorithm")
    return 1.0


def alltoall_bandwidth_factor(devices: float, algorithm: str) -> float:
    """Bytes each device sends over its link per byte it holds (0 on one device)."""
    p = float(devices)
    if p <= 1:
        return 0.0
    if algorithm == "tree":
        return math.ceil(math.log2(p)) / 2.0
    check_algorithm(algorithm, "algorithm")
    return (p - 1.0) / p


def alltoall_time(
    nbytes: float,
    devices: float,
    *,
    bandwidth: float,
    latency_s: float,
    algorithm: str = "ring",
) -> float:
    """Seconds of one all-to-all in which each of ``devices`` holds ``nbytes`` (a share for
    every device, its own included): steps x latency plus the bytes sent over ``bandwidth``.

    >>> round(alltoall_time(1e9, 8, bandwidth=1e11, latency_s=1e-5) * 1e3, 3)
    8.82
    """
    if bandwidth <= 0 or latency_s < 0 or nbytes < 0:
        raise ValueError(
            f"alltoall_time: need bandwidth > 0 and non-negative bytes and latency, got "
            f"bandwidth={bandwidth!r}, nbytes={nbytes!r}, latency_s={latency_s!r}"
        )
    if devices <= 1:
        return 0.0
    return (
        alltoall_steps(devices, algorithm) * latency_s
        + alltoall_bandwidth_factor(devices, algorithm) * nbytes / bandwidth
    )
