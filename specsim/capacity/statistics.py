"""The statistics of a capacity search: a three-way verdict on intervals, bisection.

A capacity search asks of each probed rate whether a latency target holds, and
the answer comes from a finite sample of requests. The pieces, none of them
tied to the simulator (so that they can be checked on predicates with known
answers):

1. the intervals, from :mod:`specsim.stats`: :func:`~specsim.stats.quantile_interval`
   (distribution-free, from two order statistics, for an effective sample size
   under correlation) and :func:`~specsim.stats.proportion_interval` (Clopper-Pearson);
2. :func:`verdict`: "holds", "fails" or "undecided" for a target on a quantile or
   on a proportion, from those intervals (undecided when the interval straddles
   the target);
3. :func:`bisect_rate`: the largest rate at which a monotone three-way
   predicate holds, by bisection on the log scale to a stated relative
   precision, and :func:`smallest_count`: the smallest count (of replicas) at
   which a predicate that only gets easier with the count holds.

The verdict on one serving run (:class:`SLO`, :func:`judge`) is in
:mod:`specsim.capacity.judge`.

An undecided probe is never counted as a pass: the bisection treats it as "not
shown to hold" (the answer stays conservative) and the result says so
(:attr:`Bracket.status`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from specsim.checks import check_int

__all__ = [
    "Outcome",
    "HOLDS",
    "FAILS",
    "UNDECIDED",
    "verdict",
    "combine",
    "Bracket",
    "bisect_rate",
    "smallest_count",
]

Outcome = Literal["holds", "fails", "undecided"]
HOLDS: Outcome = "holds"
FAILS: Outcome = "fails"
UNDECIDED: Outcome = "undecided"


def verdict(interval: tuple[float, float], target: float, *, at_most: bool = True) -> Outcome:
    """``holds`` when the whole interval meets the target (``<= target`` when ``at_most``,
    else ``>= target``), ``fails`` when none of it does, ``undecided`` when it straddles."""
    low, high = interval
    if at_most:
        return HOLDS if high <= target else FAILS if low > target else UNDECIDED
    return HOLDS if low >= target else FAILS if high < target else UNDECIDED


def combine(outcomes: list[Outcome]) -> Outcome:
    """Every target at once: fails if one fails, holds if all hold, else undecided."""
    if FAILS in outcomes:
        return FAILS
    return HOLDS if all(o == HOLDS for o in outcomes) else UNDECIDED


@dataclass(frozen=True)
class Bracket:
    """Where a bisection on the rate ended.

    ``low``: the largest probed rate shown to hold (0 when not even ``rate_min``
    was); ``high``: the smallest probed rate above it not shown to hold (inf when
    ``rate_max`` holds); ``first_fail``: the smallest probed rate shown to fail
    (inf if none). ``status``:

    - ``"decided"``: ``high`` was shown to fail and ``high / low <= 1 + precision``;
    - ``"undecided"``: ``high`` is undecided: the limit lies in ``[low,
      first_fail)``, which may be wider than the precision;
    - ``"above rate_max"``: the predicate holds at ``rate_max``;
    - ``"fails at rate_min"`` / ``"undecided at rate_min"``: nothing was shown to
      hold (``low = 0``).
    """

    low: float
    high: float
    first_fail: float
    status: str
    probes: int

    @property
    def precision(self) -> float:
        """``high / low - 1``: the relative width of the answer (inf when unbounded)."""
        if self.low <= 0 or math.isinf(self.high):
            return math.inf
        return self.high / self.low - 1.0


def _check_range(rate_min: float, rate_max: float, precision: float) -> None:
    for name, v in (("rate_min", rate_min), ("rate_max", rate_max), ("precision", precision)):
        if (
            isinstance(v, bool)
            or not isinstance(v, float | int)
            or not (math.isfinite(v) and v > 0)
        ):
            raise ValueError(f"{name}: expected a finite number > 0, got {v!r}")
    if rate_min >= rate_max:
        raise ValueError(
            f"rate_min, rate_max: expected rate_min < rate_max, got {rate_min} >= {rate_max}"
        )


def bisect_rate(
    probe: Callable[[float], Outcome], *, rate_min: float, rate_max: float, precision: float = 0.02
) -> Bracket:
    """The largest rate in ``[rate_min, rate_max]`` at which ``probe(rate)`` holds.

    Probes ``rate_min`` and ``rate_max``, then the geometric midpoint of the
    bracket until ``high / low <= 1 + precision`` (about ``log2(log(rate_max /
    rate_min) / log(1 + precision))`` probes; 8 for a 64-fold range at 2%).
    Assumes the predicate holds below a limit and not above it (monotone); an
    undecided probe counts as not shown to hold. Deterministic: the probes are a
    function of the outcomes alone.
    """
    _check_range(rate_min, rate_max, precision)
    count = 0

    def ask(rate: float) -> Outcome:
        nonlocal count
        count += 1
        out = probe(rate)
        if out not in (HOLDS, FAILS, UNDECIDED):
            raise ValueError(
                f"probe({rate:g}): expected 'holds', 'fails' or 'undecided', got {out!r}"
            )
        return out

    first = ask(rate_min)
    if first != HOLDS:
        fail = rate_min if first == FAILS else math.inf
        return Bracket(
            0.0, rate_min, fail, f"{first if first == UNDECIDED else 'fails'} at rate_min", count
        )
    last = ask(rate_max)
    if last == HOLDS:
        return Bracket(rate_max, math.inf, math.inf, "above rate_max", count)
    low, high = rate_min, rate_max
    first_fail = rate_max if last == FAILS else math.inf
    high_decided = last == FAILS
    while high / low > 1.0 + precision:
        mid = math.sqrt(low * high)
        out = ask(mid)
        if out == HOLDS:
            low = mid
        else:
            high, high_decided = mid, out == FAILS
            if out == FAILS:
                first_fail = min(first_fail, mid)
    return Bracket(low, high, first_fail, "decided" if high_decided else "undecided", count)


def smallest_count(holds: Callable[[int], Outcome], *, start: int, limit: int) -> tuple[int, int]:
    """The smallest ``n`` in ``[1, limit]`` at which ``holds(n)`` holds, searched from
    ``start``.

    Assumes more is never worse (monotone in ``n``). When ``start`` holds, bisects
    on ``[1, start]``; else doubles up to ``limit`` until one holds and bisects
    below it (an undecided count counts as not shown to hold); then walks down
    from the answer while counts are undecided. Returns ``(n, low)``: ``n`` the
    smallest count shown to hold, ``low <= n`` the smallest not shown to fail (the
    answer lies in ``[low, n]``; decided when they are equal). Raises ValueError
    when nothing up to ``limit`` holds.
    """
    for name, v in (("start", start), ("limit", limit)):
        check_int(v, name=name, minimum=1)
    if start > limit:
        raise ValueError(f"start: {start} exceeds limit {limit}")
    seen: dict[int, Outcome] = {}

    def ask(k: int) -> Outcome:
        if k not in seen:
            seen[k] = holds(k)
        return seen[k]

    below, n = 0, start  # below: the largest count known not to hold (0: none tried)
    while ask(n) != HOLDS:
        if n >= limit:
            raise ValueError(f"no count up to {limit} meets the target (the last {seen[n]})")
        below, n = n, min(2 * n, limit)
    while n - below > 1:
        mid = (below + n) // 2
        if ask(mid) == HOLDS:
            n = mid
        else:
            below = mid
    low = n
    while low > 1 and ask(low - 1) == UNDECIDED:
        low -= 1
    return n, low
