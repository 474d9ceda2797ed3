"""Acceptance in the forms serving engines report, as acceptance by depth (one rank a depth).

Two forms, each converted with its assumption stated in the table's ``source``:

- **Per-position acceptance rates** (vLLM's ``acceptance_rate_per_position``): ``r_i``, the
  fraction of verification steps whose position-``i`` draft was accepted, ``i = 1..k``. A
  position is accepted only when every earlier one was, so the rates never increase, and
  the conditional acceptance at depth ``i`` is ``r_i / r_(i-1)`` (``r_0 = 1``): *measured
  per depth*, to depth ``k`` (the table's ``max_depth``: deeper was not measured).
  A chain of ``k`` then emits ``1 + sum(r_i)`` tokens a step, the engine's own mean.
- **A mean accepted length at a lookahead** (SGLang's ``accept_length``, TensorRT-LLM's
  acceptance length): ``L`` tokens per verification step, the bonus token included, with
  ``k`` drafts a step, so ``L = 1 + sum(r_i)`` lies in ``[1, k + 1]``. One number cannot
  give a shape by depth, so it becomes the i.i.d. per-token acceptance ``a`` solving
  ``(1 - a^(k+1)) / (1 - a) = L``: *i.i.d. assumed from one mean accepted length at k*.

>>> acc = per_position_acceptance([0.8, 0.6, 0.3], given="given on the command line")
>>> [round(acc.conditional(d, 0), 3) for d in (1, 2, 3)], acc.max_depth
([0.8, 0.75, 0.5], 3)
>>> round(alpha_from_accept_length(2.9, 3), 4)
0.7884
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specsim.proposers.tables import RankAcceptance

__all__ = [
    "accept_length_acceptance",
    "alpha_from_accept_length",
    "parse_accept_length",
    "parse_per_position",
    "per_position_acceptance",
]

PER_POSITION = "measured per depth"
"""The per-position form's assumption, as its source states it."""

ACCEPT_LENGTH = "i.i.d. assumed from one mean accepted length at k"
"""The mean accepted length's assumption, as its source states it."""


def _check_rates(rates: Sequence[float], name: str) -> tuple[float, ...]:
    """``rates`` as floats in [0, 1] that never increase, else a ValueError naming ``name``."""
    if isinstance(rates, str | bytes):
        raise ValueError(f"{name}: expected a list of rates, got {rates!r}")
    try:
        r = tuple(float(x) for x in rates)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name}: expected rates in [0, 1], one per position, got {rates!r}"
        ) from None
    if not r:
        raise ValueError(f"{name}: expected at least one rate (position 1's)")
    for i, x in enumerate(r, start=1):
        if not (math.isfinite(x) and 0.0 <= x <= 1.0):
            raise ValueError(f"{name}: position {i}: expected a rate in [0, 1], got {x!r}")
        if i > 1 and x > r[i - 2]:
            raise ValueError(
                f"{name}: position {i}'s rate {x:g} is above position {i - 1}'s {r[i - 2]:g}; "
                "a position is accepted only when the ones before it are, so the rates never "
                "increase"
            )
    return r


def per_position_acceptance(
    rates: Sequence[float], *, given: str, name: str = "acceptance_per_position"
) -> RankAcceptance:
    """The per-depth acceptance of per-position rates (module docstring): depth ``i``'s
    conditional ``r_i / r_(i-1)`` (0 past a rate of 0), to depth ``k = len(rates)``;
    ``given`` says where the rates came from."""
    r = _check_rates(rates, name)
    rows, before = [], 1.0
    for x in r:
        rows.append((0.0 if before <= 0.0 else min(1.0, x / before),))
        before = x
    shown = ", ".join(f"{x:g}" for x in r)
    source = (
        f"per-position acceptance rates {shown} ({given}), {PER_POSITION} to depth {len(r)} "
        "(depth i: r_i / r_(i-1))"
    )
    return RankAcceptance(accept=tuple(rows), source=source, name=name, max_depth=len(r))


def _check_length(length: float, k: int, name: str) -> tuple[float, int]:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{name}: expected a lookahead k, an integer >= 1, got {k!r}")
    real = isinstance(length, int | float) and not isinstance(length, bool)
    if not real or not math.isfinite(length) or not 1.0 <= length <= k + 1:
        raise ValueError(
            f"{name}: expected a mean accepted length in [1, k + 1] = [1, {k + 1}] tokens per "
            f"step (the bonus token included) at k = {k}, got {length!r}"
        )
    return float(length), k


def alpha_from_accept_length(length: float, k: int, *, name: str = "accept_length") -> float:
    """The i.i.d. acceptance ``a`` with ``1 + a + ... + a^k = length`` (module docstring),
    by bisection (the sum rises with ``a`` from 1 at 0 to ``k + 1`` at 1)."""
    length, k = _check_length(length, k, name)
    if length in (1.0, k + 1.0):  # the ends exactly: none accepted, or every one
        return 0.0 if length == 1.0 else 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.fsum(mid**j for j in range(k + 1)) < length:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15:
            break
    return (lo + hi) / 2


def accept_length_acceptance(
    length: float, k: int, *, given: str, name: str = "accept_length"
) -> RankAcceptance:
    """The i.i.d. acceptance of a mean accepted ``length`` at lookahead ``k`` as a one-row
    table (module docstring); ``given`` says where the length came from."""
    a = alpha_from_accept_length(length, k, name=name)
    source = (
        f"alpha = {a:.4g} from mean accepted length {length:g} at k = {k} ({given}), "
        f"{ACCEPT_LENGTH}"
    )
    return RankAcceptance(accept=((a,),), source=source, name=name)


def parse_per_position(text: str, *, flag: str) -> tuple[float, ...]:
    """``R1,R2,...`` as rates (checked as :func:`per_position_acceptance` checks them)."""
    try:
        rates = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"{flag}: expected rates separated by commas (0.8,0.6,0.4), got {text!r}"
        ) from None
    return _check_rates(rates, flag)


def parse_accept_length(text: str, *, flag: str) -> tuple[float, int]:
    """``L@K`` (``2.9@3``) as the mean accepted length and its lookahead, checked."""
    length, sep, k = text.partition("@")
    try:
        pair = float(length), int(k)
    except ValueError:
        pair = None
    if not sep or pair is None:
        raise ValueError(
            f"{flag}: expected L@K, the mean accepted length (bonus token included) at "
            f"lookahead K, as 2.9@3; got {text!r}"
        )
    return _check_length(pair[0], pair[1], flag)
