"""How precisely a capacity search answers: :class:`Search`.

Its own module so that :mod:`specsim.capacity.planner` (the searches) and
:mod:`specsim.capacity.pool` (the runs they serve on a process pool) both read it
without importing each other; :mod:`specsim.capacity.planner` re-exports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specsim.checks import check_int

__all__ = ["Search"]


@dataclass(frozen=True, kw_only=True)
class Search:
    """How precisely a capacity search answers: rates from ``rate_min`` to ``rate_max``
    (requests/s per replica) bisected to ``precision`` (relative); ``requests`` per
    run, doubled while undecided, up to ``max_requests``; intervals at ``confidence``,
    widened for the correlation between requests by ``batches`` batch means (None:
    the independent binomial interval; :func:`specsim.stats.quantile_interval`).
    ``warmup``: the share of each run's requests, the first to arrive, left out of its
    p99s and goodput (a run starts empty: :func:`specsim.capacity.judge.judge`).
    The crossover is bisected to ``crossover_precision`` (coarser by default: near it
    the modes' p99 TPOTs differ little, its probes take the most requests, and at 2%
    it served about a third of a search's requests)."""

    rate_min: float = 0.5
    rate_max: float = 32.0
    precision: float = 0.02
    requests: int = 800
    max_requests: int = 3200
    confidence: float = 0.95
    batches: int | None = 20
    crossover_precision: float = 0.05
    warmup: float = 0.05

    def __post_init__(self) -> None:
        for name in ("rate_min", "rate_max", "precision", "crossover_precision"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, float | int) or not 0 < v < math.inf:
                raise ValueError(f"{name}: expected a finite number > 0, got {v!r}")
        if self.rate_min >= self.rate_max:
            raise ValueError(f"rate_min: {self.rate_min} must be below rate_max {self.rate_max}")
        for name in ("requests", "max_requests"):
            v = getattr(self, name)
            check_int(v, name=name, minimum=1)
        if self.max_requests < self.requests:
            raise ValueError(f"max_requests: {self.max_requests} is below {self.requests}")
        if not (isinstance(self.confidence, float) and 0 < self.confidence < 1):
            raise ValueError(f"confidence: expected a number in (0, 1), got {self.confidence!r}")
        w = self.warmup
        if isinstance(w, bool) or not isinstance(w, float | int) or not 0 <= w <= 0.5:
            raise ValueError(f"warmup: expected a share of the requests in [0, 0.5], got {w!r}")
        b = self.batches
        if b is not None:
            check_int(
                b, name="batches", minimum=2, maximum=self.requests, why="None or up to requests"
            )

    @property
    def sizes(self) -> tuple[int, ...]:
        """The request counts a run may take: ``requests``, doubled, up to ``max_requests``."""
        out = [self.requests]
        while out[-1] < self.max_requests:
            out.append(min(2 * out[-1], self.max_requests))
        return tuple(out)

    @property
    def bisections(self) -> int:
        """An upper bound on the probes of one bisection (both ends and the midpoints)."""
        span = math.log(self.rate_max / self.rate_min) / math.log1p(self.precision)
        return 2 + max(0, math.ceil(math.log2(span)))
