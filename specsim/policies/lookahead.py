"""Lookahead policies: how many tokens the draft proposes before the target verifies.

A policy is an object with one method, ``choose(ctx) -> int``, that picks the
lookahead ``gamma`` of the next block from what it may know, given as a
:class:`PolicyContext`: the outcome of the previous block, the draft's
confidence signal (read token by token, as a real draft would), the batch the
pass will run at, and, for the oracle only, the future acceptances.
``gamma = 0`` means plain autoregressive decoding for that block.

A policy may also declare what its choice depends on, and the simulators take
their fast paths from that declaration alone (no ``isinstance`` checks, so a
user's own policy gets them too):

- ``fixed_gamma``: an int when the policy chooses that lookahead whatever it is
  told (then ``choose`` is not asked at all); absent or ``None`` otherwise;
- ``batch_wide``: ``True`` when, in serving, the policy chooses one lookahead
  for the whole batch from ``batch`` and ``pass_time`` alone (it reads neither
  a sequence's draw nor its history), so it is asked once per iteration;
- ``settled(low, high)``: for a batch-wide policy, the lookahead it would choose for
  every context sum between ``low`` and ``high`` at the current batch (pass times never
  fall as contexts grow, on sources that declare ``monotone_times``), or None when no
  one lookahead is proven; serving then skips asking in that range
  (:class:`specsim.sim.costs.source.BatchWide`). Only a method of that meaning may carry the name.

Read them through :func:`fixed_gamma` and :func:`batch_wide`, which check them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from specsim.acceptance.processes import AcceptanceDraw, leading_run
from specsim.checks import check_int
from specsim.theory import expected_tokens, optimal_gamma

__all__ = [
    "MAX_GAMMA",
    "PolicyContext",
    "LookaheadPolicy",
    "FixedGamma",
    "OptimalStatic",
    "ConfidenceThreshold",
    "HeuristicPlusTwoMinusOne",
    "LoadAdaptive",
    "Oracle",
    "batch_wide",
    "check_choice",
    "fixed_gamma",
    "deepest_gamma",
]


MAX_GAMMA = 64
"""The default longest block (``max_gamma``) of every policy, of a single stream
(:class:`specsim.sim.StreamConfig`) and of a serving run (:class:`specsim.sim.ServingConfig`),
which reserves KV cache for it; a run passes its own to the policies it builds
(:mod:`specsim.sim.config.config`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyContext:
    """What a policy may look at when it picks the next lookahead.

    ``draw`` and ``position`` locate the block in the acceptance stream; a
    non-oracle policy may read only ``draw.confidence`` there (the draft sees
    its own confidence as it drafts). ``pass_time(gamma)`` is the time of the
    coming iteration (draft steps plus verification) at the current batch.
    """

    position: int
    draw: AcceptanceDraw | None
    last_gamma: int | None
    last_accepted: int | None
    batch: int = 1
    pass_time: Callable[[int], float] | None = None


@runtime_checkable
class LookaheadPolicy(Protocol):
    """One method: the next block's lookahead.

    Optional declarations (``fixed_gamma``, ``batch_wide``) are described in
    the module docstring; a policy without them is asked block by block.
    """

    def choose(self, ctx: PolicyContext) -> int: ...


def _check_gamma(value: int, name: str) -> int:
    return check_int(value, name=name, minimum=0)


@dataclass(frozen=True, kw_only=True)
class FixedGamma:
    """The same lookahead for every block, as in the paper's analysis."""

    gamma: int

    def __post_init__(self) -> None:
        _check_gamma(self.gamma, "gamma")

    @property
    def fixed_gamma(self) -> int:
        return self.gamma

    def choose(self, ctx: PolicyContext) -> int:
        return self.gamma


@dataclass(frozen=True, kw_only=True)
class OptimalStatic:
    """The theory's best fixed lookahead for a mean acceptance and cost coefficient.

    ``argmax_gamma E(alpha, gamma) / (gamma c + v(gamma))`` from
    :func:`specsim.theory.optimal_gamma` (Leviathan et al. 2023, Section 3.5).
    """

    alpha: float
    c: float
    max_gamma: int = MAX_GAMMA

    def __post_init__(self) -> None:
        _check_gamma(self.max_gamma, "max_gamma")
        _ = self.gamma  # validates alpha and c through the theory module

    @cached_property
    def gamma(self) -> int:
        """Worked out once: the simulators ask for it every block."""
        return int(optimal_gamma(self.alpha, self.c, max_gamma=self.max_gamma))

    @property
    def fixed_gamma(self) -> int:
        return self.gamma

    def choose(self, ctx: PolicyContext) -> int:
        return self.gamma


@dataclass(frozen=True, kw_only=True)
class ConfidenceThreshold:
    """Adaptive per token: keep drafting while the draft's confidence stays high.

    The draft proposes tokens one by one and stops before the first whose
    confidence signal falls below ``threshold`` (at most ``max_gamma``). The
    signal is correlated with acceptance through the acceptance process (for
    example the draft's top probability), the rule that dynamic-lookahead
    methods such as SpecDec++ (Huang et al. 2024, arXiv:2405.19715) learn.
    """

    threshold: float
    max_gamma: int = MAX_GAMMA

    def __post_init__(self) -> None:
        if not (0.0 <= self.threshold <= 1.0):
            raise ValueError(f"threshold: expected a value in [0, 1], got {self.threshold!r}")
        _check_gamma(self.max_gamma, "max_gamma")

    def choose(self, ctx: PolicyContext) -> int:
        if ctx.draw is None:
            raise ValueError("ConfidenceThreshold needs the draft's confidence signal (a draw)")
        conf = ctx.draw.confidence[ctx.position : ctx.position + self.max_gamma]
        return leading_run(conf >= self.threshold)


@dataclass(frozen=True, kw_only=True)
class HeuristicPlusTwoMinusOne:
    """Hugging Face assisted generation's schedule: +2 after a fully accepted block, else -1.

    transformers' ``AssistedCandidateGenerator.update_candidate_strategy`` with
    ``num_assistant_tokens_schedule="heuristic"`` and the default
    ``num_assistant_tokens = 20``; never below 1.
    """

    initial: int = 20
    max_gamma: int = MAX_GAMMA

    def __post_init__(self) -> None:
        _check_gamma(self.initial, "initial")
        _check_gamma(self.max_gamma, "max_gamma")

    def choose(self, ctx: PolicyContext) -> int:
        if ctx.last_gamma is None or ctx.last_accepted is None:
            return min(self.initial, self.max_gamma)
        if ctx.last_accepted == ctx.last_gamma:
            return min(ctx.last_gamma + 2, self.max_gamma)
        return max(1, ctx.last_gamma - 1)


@dataclass(frozen=True, kw_only=True)
class LoadAdaptive:
    """For serving: the lookahead that maximizes expected emitted tokens per second now.

    ``argmax_gamma batch * E(alpha, gamma) / pass_time(gamma)`` over
    ``0..max_gamma``, where ``pass_time`` is the coming iteration's time at the
    current batch from the cost model: as passes turn compute-bound, the best
    lookahead shrinks towards 0. ``E`` is formed once; a ``pass_time`` with a
    ``table`` (the times for gammas 0..n, as the serving simulator passes it) is
    read at once instead of gamma by gamma (the same floats: a speed trick, the
    simulator asks every iteration).
    """

    alpha: float
    max_gamma: int = MAX_GAMMA
    batch_wide: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha: expected a probability in [0, 1], got {self.alpha!r}")
        _check_gamma(self.max_gamma, "max_gamma")

    @cached_property
    def _expected(self) -> np.ndarray:
        """``E(alpha, gamma)`` for gamma = 0..max_gamma."""
        return np.asarray(expected_tokens(self.alpha, np.arange(self.max_gamma + 1)))

    def choose(self, ctx: PolicyContext) -> int:
        if ctx.pass_time is None:
            raise ValueError(
                "LoadAdaptive needs the iteration time: run it in a serving simulation"
            )
        size = self.max_gamma + 1
        table = getattr(ctx.pass_time, "table", None)
        if isinstance(table, np.ndarray) and table.dtype == np.float64 and table.shape[0] >= size:
            times = table[:size]
        else:
            times = np.array([ctx.pass_time(g) for g in range(size)])
        return int(np.argmax(self._expected / times))

    def settled(self, low: np.ndarray, high: np.ndarray) -> int | None:
        """The gamma :meth:`choose` returns for every pass-time table ``t`` (gammas 0..n, ``n
        >= max_gamma``) with ``low <= t <= high`` element by element, or None when these
        bounds do not settle it. Settled when one gamma's smallest ratio ``E / high`` beats
        every other's largest, ``E / low``: rounding is monotone, so each ratio at ``t``
        lies between its two, and that gamma is the unique argmax there."""
        size = self.max_gamma + 1
        least, most = self._expected / high[:size], self._expected / low[:size]
        g = int(np.argmax(least))
        rest = np.delete(most, g)
        return g if rest.shape[0] == 0 or least[g] > rest.max() else None


@dataclass(frozen=True, kw_only=True)
class Oracle:
    """Knows the future: proposes exactly the run of tokens that will be accepted.

    Every block is then fully accepted and ends with the bonus token, the
    upper bound a per-token lookahead can approach (capped at ``max_gamma``).
    """

    max_gamma: int = MAX_GAMMA

    def __post_init__(self) -> None:
        _check_gamma(self.max_gamma, "max_gamma")

    def choose(self, ctx: PolicyContext) -> int:
        if ctx.draw is None:
            raise ValueError("Oracle needs the future acceptances (a draw)")
        return leading_run(ctx.draw.accepts(ctx.position, self.max_gamma))


def fixed_gamma(policy: LookaheadPolicy) -> int | None:
    """The lookahead ``policy`` declares it always chooses (its ``fixed_gamma``), else None.

    The simulators take their vectorized paths for such policies and never call
    their ``choose``. A declaration that is not ``None`` or a non-negative
    integer is a ValueError naming the policy.
    """
    value = getattr(policy, "fixed_gamma", None)
    if value is None:
        return None
    return check_int(
        value, name=f"policy {policy!r}: fixed_gamma", minimum=0, why="None or a gamma"
    )


def deepest_gamma(policy: LookaheadPolicy, max_gamma: int) -> int:
    """The longest lookahead ``policy`` can choose in a run of ``max_gamma``: its fixed gamma
    where it declares one, else its own ``max_gamma`` where it has one, at most the run's.
    What a run checks against the cards' positions before it starts."""
    fixed = fixed_gamma(policy)
    own = getattr(policy, "max_gamma", None)
    bound = fixed if fixed is not None else own if isinstance(own, int) else max_gamma
    return min(bound, max_gamma)


def batch_wide(policy: LookaheadPolicy) -> bool:
    """Whether ``policy`` declares one lookahead per serving iteration (its ``batch_wide``).

    Such a policy is asked once per iteration with the batch and ``pass_time``
    (and no draw or history); a declaration that is not a bool is a ValueError.
    """
    value = getattr(policy, "batch_wide", False)
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"policy {policy!r}: batch_wide must be True or False, got {value!r}")
    return bool(value)


def check_choice(policy: LookaheadPolicy, value: object, *, max_gamma: int | None = None) -> int:
    """``value``, the lookahead ``policy`` chose, as an int: a ValueError naming the policy
    unless it is a non-negative integer (at most ``max_gamma`` when that is given)."""
    why = None if max_gamma is None else "at most max_gamma"
    return check_int(
        value, name=f"policy {policy!r} chose gamma", minimum=0, maximum=max_gamma, why=why
    )
