"""Serving engines' own lookahead rules, as named policies to compare against, and a load-aware
goodput rule with an off threshold.

Each rule is a batch-wide policy (:func:`specsim.policies.lookahead.batch_wide`): one lookahead
for the whole batch of a serving iteration, chosen from the batch size (and, for
:class:`GoodputAdaptive`, the cost model's iteration times at that batch). Each cites the engine
code it follows; what the engine does that the rule leaves out is said where it matters.

- :class:`DisableByBatchSize`: vLLM v0's dynamic speculative decoding. With
  ``speculative_disable_by_batch_size = N`` a step speculates ``num_speculative_tokens`` unless
  ``running_queue_size >= N``, when the whole step runs without speculation
  (``SpecDecodeWorker._should_disable_all_speculation``, ``vllm/spec_decode/spec_decode_worker.py``,
  vLLM 0.4.2 to 0.10, introduced by vllm-project/vllm#4592). vLLM v1 does not read that key; it
  has instead a per-batch-size table, :class:`BatchSizeSchedule`.
- :class:`BatchSizeSchedule`: vLLM v1's ``num_speculative_tokens_per_batch_size``
  (``vllm/config/speculative.py``; expanded by ``build_dynamic_sd_schedule_lookup`` in
  ``vllm/v1/spec_decode/dynamic/utils.py``, vllm-project/vllm at 14b450ca): entries
  ``(batch_lo, batch_hi, k)`` over inclusive batch ranges, the first starting at 1, sorted and
  non-overlapping; a batch in a gap takes the entry before it, one beyond the last entry takes
  the last; every ``k`` is capped at ``num_speculative_tokens``. (The 5-item form, by context
  too, is not modelled.)
- :class:`SglangAdaptiveSteps`: SGLang's adaptive ``speculative_num_steps`` (``--speculative-
  adaptive``; ``python/sglang/srt/speculative/adaptive_spec_params.py`` and
  ``adaptive_step_router.py``, sgl-project/sglang at 015c8726, PRs #21599 and #24055): the batch
  size, padded up to a captured CUDA-graph size, picks a slot by its lower bound
  (``bisect_right - 1``); each slot walks its candidate steps on an exponential moving average
  of the accepted drafts per request, down while the average is at most ``prev - 0.5 +
  down_hysteresis`` (``0.5 + down_hysteresis`` towards a zero step), else up while it exceeds
  ``current - 0.5 + up_hysteresis``. The rule here is that walk at its steady state: the
  average equals the mean accepted drafts at the current step, ``E(alpha, s) - 1`` for an
  i.i.d. acceptance ``alpha`` (SGLang adapts EAGLE chains, ``topk = 1``). Left out: the
  average's transients (``ema_alpha`` 0.2, 10 warm-up batches, a decision every 5), and the
  probe of the lowest positive step that SGLang makes every ``update_interval`` batches after
  dropping to zero (a batch-wide policy chooses from the batch alone, so it cannot alternate).
- :class:`GoodputAdaptive`: the load-aware rule. :class:`~specsim.policies.lookahead.LoadAdaptive`
  already picks ``argmax_gamma E(alpha, gamma) / pass_time(gamma)`` at the current batch, the
  lookahead with the most predicted tokens per second per sequence (goodput, not acceptance,
  drives it: as the batch grows and passes turn compute-bound it shrinks the lookahead and then
  turns speculation off). This rule adds an off threshold: it speculates only where the best
  lookahead's predicted tokens per second beat plain decoding's by ``min_gain`` (a dead band
  against switching on for a predicted gain smaller than the model's error). A hysteresis
  with memory across iterations is not offered: a batch-wide choice is remembered by batch and
  context sum (:class:`specsim.sim.costs.source.BatchWide`), so it cannot depend on the previous
  one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from specsim.policies.lookahead import MAX_GAMMA, LoadAdaptive, PolicyContext
from specsim.theory import expected_tokens

__all__ = [
    "SGLANG_DEFAULT_SLOTS",
    "BatchSizeSchedule",
    "DisableByBatchSize",
    "GoodputAdaptive",
    "SglangAdaptiveSteps",
]


def _check_gamma(value: int, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_positive(value: int, name: str) -> int:
    return _check_gamma(value, name, minimum=1)


@dataclass(frozen=True, kw_only=True)
class DisableByBatchSize:
    """vLLM v0's dynamic speculation (module docstring): ``gamma`` drafts a step, none once the
    batch reaches ``disable_by_batch_size`` running sequences.

    >>> rule = DisableByBatchSize(gamma=4, disable_by_batch_size=16)
    >>> [rule.gamma_at(b) for b in (1, 15, 16, 64)]
    [4, 4, 0, 0]
    """

    gamma: int
    disable_by_batch_size: int
    batch_wide: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_positive(self.gamma, "gamma")
        _check_positive(self.disable_by_batch_size, "disable_by_batch_size")

    def gamma_at(self, batch: int) -> int:
        """The lookahead at ``batch`` running sequences."""
        return 0 if batch >= self.disable_by_batch_size else self.gamma

    def choose(self, ctx: PolicyContext) -> int:
        return self.gamma_at(ctx.batch)


@dataclass(frozen=True, kw_only=True)
class BatchSizeSchedule:
    """vLLM v1's ``num_speculative_tokens_per_batch_size`` (module docstring): ``schedule`` of
    ``(batch_lo, batch_hi, k)`` entries, checked as vLLM checks them.

    >>> rule = BatchSizeSchedule(num_speculative_tokens=5, schedule=((1, 4, 5), (8, 31, 2)))
    >>> [rule.gamma_at(b) for b in (1, 4, 5, 8, 31, 32, 500)]
    [5, 5, 5, 2, 2, 2, 2]
    """

    num_speculative_tokens: int
    schedule: tuple[tuple[int, int, int], ...]
    batch_wide: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_positive(self.num_speculative_tokens, "num_speculative_tokens")
        entries = tuple(tuple(e) for e in self.schedule)
        if not entries:
            raise ValueError("schedule: expected at least one (batch_lo, batch_hi, k) entry")
        for i, e in enumerate(entries):
            if len(e) != 3:
                raise ValueError(f"schedule[{i}]: expected (batch_lo, batch_hi, k), got {e!r}")
            lo = _check_positive(e[0], f"schedule[{i}] batch_lo")
            hi = _check_positive(e[1], f"schedule[{i}] batch_hi")
            _check_gamma(e[2], f"schedule[{i}] k")
            if lo > hi:
                raise ValueError(f"schedule[{i}]: batch_lo {lo} exceeds batch_hi {hi}")
        ordered = sorted(entries)
        if ordered[0][0] != 1:
            raise ValueError(
                f"schedule: the first batch range must start at 1 (vLLM requires it), "
                f"got {ordered[0]!r}"
            )
        for before, after in zip(ordered, ordered[1:], strict=False):
            if after[0] <= before[1]:
                raise ValueError(f"schedule: batch ranges {before!r} and {after!r} overlap")
        object.__setattr__(self, "schedule", tuple(ordered))

    def gamma_at(self, batch: int) -> int:
        """The lookahead at ``batch``: the entry holding it, else the entry before it."""
        los = [e[0] for e in self.schedule]
        entry = self.schedule[max(bisect.bisect_right(los, batch) - 1, 0)]
        return min(self.num_speculative_tokens, entry[2])

    def choose(self, ctx: PolicyContext) -> int:
        return self.gamma_at(ctx.batch)


SGLANG_DEFAULT_SLOTS: tuple[tuple[int, tuple[int, ...], float, float], ...] = (
    (1, (1, 3, 5, 7), 0.0, -0.25),
    (8, (0, 1, 3), 0.0, 0.0),
    (32, (0, 1), 0.0, 0.0),
    (64, (0,), 0.0, 0.0),
)
"""SGLang's ``DEFAULT_ADAPTIVE_CONFIG`` (``adaptive_spec_params.py`` at 015c8726): per slot, the
batch lower bound, the candidate steps, ``up_hysteresis`` and ``down_hysteresis``."""


@dataclass(frozen=True, kw_only=True)
class SglangAdaptiveSteps:
    """SGLang's adaptive speculative steps at the steady state of its moving average (module
    docstring). ``initial_steps``: the server's ``--speculative-num-steps`` (a slot starts there,
    or at its middle candidate when that is not one of its candidates); ``alpha``: the mean
    acceptance (a run's, when its table leaves it out); ``slots``: ``(batch lower bound,
    candidate steps, up_hysteresis, down_hysteresis)``; ``graph_sizes``: the captured CUDA-graph
    batch sizes a batch is padded up to before it picks a slot (empty: no padding).

    >>> [SglangAdaptiveSteps(alpha=a, initial_steps=3).gamma_at(1) for a in (0.8, 0.95)]
    [3, 5]
    >>> rule = SglangAdaptiveSteps(alpha=0.3, initial_steps=3)
    >>> [rule.gamma_at(b) for b in (1, 7, 8, 31, 32, 64)]
    [3, 3, 0, 0, 0, 0]
    """

    alpha: float
    initial_steps: int
    slots: tuple[tuple[int, tuple[int, ...], float, float], ...] = SGLANG_DEFAULT_SLOTS
    graph_sizes: tuple[int, ...] = ()
    max_gamma: int = MAX_GAMMA
    batch_wide: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha: expected a probability in [0, 1], got {self.alpha!r}")
        _check_gamma(self.initial_steps, "initial_steps")
        _check_gamma(self.max_gamma, "max_gamma")
        if not self.slots:
            raise ValueError("slots: expected at least one (batch, steps, up, down) slot")
        seen: set[int] = set()
        for i, slot in enumerate(self.slots):
            if len(slot) != 4:
                raise ValueError(f"slots[{i}]: expected (batch, steps, up, down), got {slot!r}")
            bound, steps, up, down = slot
            if _check_positive(bound, f"slots[{i}] batch") in seen:
                raise ValueError(f"slots[{i}]: batch lower bound {bound} appears twice")
            seen.add(bound)
            if not steps:
                raise ValueError(f"slots[{i}]: expected at least one candidate step")
            for s in steps:
                _check_gamma(s, f"slots[{i}] candidate step")
            if down > up:  # else the walk can cycle between two steps
                raise ValueError(
                    f"slots[{i}]: down_hysteresis {down!r} exceeds up_hysteresis {up!r}"
                )
        sizes = [_check_positive(g, "graph_sizes") for g in self.graph_sizes]
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ValueError(f"graph_sizes: expected increasing sizes, got {self.graph_sizes!r}")

    @cached_property
    def _by_bound(self) -> dict[int, tuple[tuple[int, ...], float, float]]:
        return {int(b): (tuple(sorted(set(s))), float(u), float(d)) for b, s, u, d in self.slots}

    def _accepted_drafts(self, steps: int) -> float:
        """Mean accepted drafts per request at ``steps``: ``E(alpha, steps) - 1``."""
        return float(expected_tokens(self.alpha, steps)) - 1.0

    def _walk(self, steps: tuple[int, ...], idx: int, up: float, down: float) -> int:
        """One decision of SGLang's threshold walk from ``steps[idx]`` at that step's mean."""
        ema, start = self._accepted_drafts(steps[idx]), idx
        while idx > 0:
            prev = steps[idx - 1]
            if ema <= (0.5 if prev == 0 else prev - 0.5) + down:
                idx -= 1
            else:
                break
        if idx == start:
            while idx < len(steps) - 1 and ema > steps[idx] - 0.5 + up:
                idx += 1
        return idx

    def slot_at(self, batch: int) -> int:
        """The lower bound of the slot ``batch`` is routed to (after CUDA-graph padding)."""
        padded = batch
        at = bisect.bisect_left(self.graph_sizes, batch)
        if at < len(self.graph_sizes):
            padded = self.graph_sizes[at]
        bounds = sorted(self._by_bound)
        return bounds[max(bisect.bisect_right(bounds, padded) - 1, 0)]

    def gamma_at(self, batch: int) -> int:
        """The slot's steady step: walked from its start until no decision moves it (the walk
        is monotone when down <= up, so this ends); a zero start first probes the next step."""
        steps, up, down = self._by_bound[self.slot_at(batch)]
        idx = steps.index(self.initial_steps) if self.initial_steps in steps else len(steps) // 2
        if steps[idx] == 0 and idx < len(steps) - 1:
            idx += 1  # SGLang probes the smallest positive step after a zero-step interval
        while steps[idx] != 0:
            nxt = self._walk(steps, idx, up, down)
            if nxt == idx:
                break
            idx = nxt
        return min(steps[idx], self.max_gamma)

    def choose(self, ctx: PolicyContext) -> int:
        return self.gamma_at(ctx.batch)


@dataclass(frozen=True, kw_only=True)
class GoodputAdaptive(LoadAdaptive):
    """:class:`~specsim.policies.lookahead.LoadAdaptive` with an off threshold (module
    docstring): the lookahead of most predicted tokens per second per sequence at the current
    batch, or 0 unless that beats plain decoding's prediction by the fraction ``min_gain``."""

    min_gain: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (np.isfinite(self.min_gain) and self.min_gain >= 0.0):
            raise ValueError(f"min_gain: expected a number >= 0, got {self.min_gain!r}")

    def choose(self, ctx: PolicyContext) -> int:
        g = super().choose(ctx)
        if g == 0:
            return 0
        size = self.max_gamma + 1
        table = getattr(ctx.pass_time, "table", None)
        if isinstance(table, np.ndarray) and table.shape[0] >= size:
            t0, tg = float(table[0]), float(table[g])
        else:
            assert ctx.pass_time is not None  # LoadAdaptive.choose refused None already
            t0, tg = ctx.pass_time(0), ctx.pass_time(g)
        e = self._expected
        return g if e[g] / tg >= (1.0 + self.min_gain) * (e[0] / t0) else 0

    def settled(self, low: np.ndarray, high: np.ndarray) -> int | None:
        """As :meth:`LoadAdaptive.settled`, and the on/off decision proven by the same bounds."""
        g = super().settled(low, high)
        if g is None or g == 0:
            return g
        e, bar = self._expected, 1.0 + self.min_gain
        if e[g] / high[g] >= bar * (e[0] / low[0]):
            return g
        if e[g] / low[g] < bar * (e[0] / high[0]):
            return 0
        return None
