"""One request decoded block by block: the single-stream timeline.

A block: the draft proposes ``gamma`` tokens (``gamma`` draft steps), the
target verifies ``gamma + 1`` positions in one pass, the accepted tokens plus
one (the correction or the bonus token) are emitted, the KV caches grow by
what was emitted and the rejected entries are rolled back (so the next block
starts at the new context).

Draft placement:

- serialized: the draft shares the target's accelerator; a block takes
  ``gamma`` draft steps then one verification pass.
- overlapped (the cost source's ``overlapped``): the draft has its own
  accelerator. While the target verifies block ``k`` the draft already drafts
  block ``k + 1`` assuming block ``k`` is fully accepted. If it is, the
  pre-drafted block stands and the target's last position (the bonus) is
  dropped in its favour, as in PEARL (Liu et al. 2024, arXiv:2408.11850);
  otherwise the pre-drafted work is discarded and drafting restarts after
  the verification.

Two methods give the same timeline (the ``method`` keyword; "engine" is the serving
engine's name only): ``"events"`` runs simpy processes on accelerator resources, one
event per draft phase and per pass (the reference); ``"fast"`` computes the same
timeline with numpy (a speed path for the long runs that validate the closed forms; a
test checks the two agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import simpy
from numpy.typing import NDArray

from specsim.acceptance.processes import AcceptanceDraw, AcceptanceProcess, accepted_in_block
from specsim.checks import check_int, check_size
from specsim.cost import verification_positions
from specsim.policies.lookahead import (
    MAX_GAMMA,
    LookaheadPolicy,
    PolicyContext,
    check_choice,
    deepest_gamma,
    fixed_gamma,
)
from specsim.sim.costs.source import CostSource, block_costs, check_positions_fit, check_whole
from specsim.sim.results.records import Blocks, StreamResult, stream_record
from specsim.sim.results.stream_result import add_accepted_at
from specsim.stats import grouped_ratio_se

__all__ = [
    "CHUNK_TOKENS",
    "StreamConfig",
    "plan_blocks",
    "simulate_stream",
    "simulate_stream_metrics",
]

CHUNK_TOKENS = 1 << 20
"""Tokens per chunk of :func:`simulate_stream_metrics`: its memory is bounded by this, not by
the stream's length."""

Method = Literal["fast", "events"]
"""How :func:`simulate_stream` computes the timeline: numpy (``"fast"``) or simpy (``"events"``)."""


@dataclass(frozen=True, kw_only=True)
class StreamConfig:
    """A single-stream run: decode at least ``tokens`` tokens after a ``prompt``."""

    tokens: int
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    cost: CostSource
    prompt: int = 0
    max_gamma: int = MAX_GAMMA

    def __post_init__(self) -> None:
        check_whole(self.tokens, "tokens", minimum=1)
        check_size(self.tokens, name="tokens", limit="tokens")
        check_whole(self.prompt, "prompt", minimum=0)
        check_whole(self.max_gamma, "max_gamma", minimum=0)
        if not hasattr(self.acceptance, "sample"):
            raise TypeError(f"acceptance: expected an acceptance process, got {self.acceptance!r}")
        if not hasattr(self.policy, "choose"):
            raise TypeError(f"policy: expected a lookahead policy, got {self.policy!r}")
        # The last block starts at most at prompt + tokens - 1 and verifies gamma + 1
        # positions (the draft reaches gamma of them): count them now, so that a run is
        # refused before it starts rather than when its last block reaches past the card.
        # A policy's own max_gamma, where it declares one, bounds its choices.
        reach = deepest_gamma(self.policy, self.max_gamma)
        check_positions_fit(
            self.cost,
            context=self.prompt,
            new_tokens=self.tokens + reach,
            draft_new_tokens=self.tokens + max(reach - 1, 0),
            name="prompt",
        )


def run_lengths(
    ok: NDArray[np.bool_], lengths: NDArray[np.int64] | None = None, cap: int | None = None
) -> NDArray[np.int64]:
    """For each position, how many consecutive accepted positions start there.

    ``lengths``: the positions of consecutive requests (serving draws all requests'
    positions as one array), so that no run crosses the end of its request; None: one.
    ``cap``: runs longer than this count as ``cap`` (None: no cap).
    Each position's next rejection (and its request's end) spread by ``np.repeat``: a
    few passes over the positions (a speed trick: serving runs have about a million);
    a small cap instead adds ``cap`` shifted products of the outcomes.
    """
    n = ok.shape[0]
    if cap is not None and 1 <= cap <= 8:
        going = ok.copy()  # position p + k is accepted and in p's request
        if lengths is not None:
            going[np.cumsum(lengths)[lengths > 0] - 1] = False
        short = ok.astype(np.int8)  # at most cap <= 8: summed in bytes, widened once
        acc = ok.copy()
        for k in range(1, min(cap, n)):
            acc[n - k :] = False
            acc[: n - k] &= going[k - 1 : n - 1] & ok[k:]
            short += acc
        return short.astype(np.int64)
    rejections = np.append(np.flatnonzero(~ok), n)
    nxt = np.repeat(rejections, np.diff(rejections, prepend=-1))[:n]
    if lengths is not None:
        np.minimum(nxt, np.repeat(np.cumsum(lengths), lengths), out=nxt)
    run = nxt - np.arange(n, dtype=np.int64)
    return run if cap is None else np.minimum(run, cap, out=run)


def plan_blocks(
    draw: AcceptanceDraw,
    policy: LookaheadPolicy,
    *,
    tokens: int,
    max_gamma: int,
    overlapped: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Walk the stream: per block its start position, gamma, accepted and emitted counts."""
    plain_weights = bool(np.all(draw.position_weights == 1.0))
    fixed = fixed_gamma(policy)
    if fixed is not None:
        check_choice(policy, fixed, max_gamma=max_gamma)
    if fixed is not None and plain_weights and not overlapped:
        # Speed path: with one gamma and position-free acceptance the block
        # outcome at a position is min(run length, gamma), known in advance.
        run = np.minimum(run_lengths(draw.u < draw.prob), fixed).tolist()
        starts: list[int] = []
        t = 0
        while t < tokens:
            starts.append(t)
            t += run[t] + 1
        start = np.asarray(starts, dtype=np.int64)
        acc = np.asarray(run, dtype=np.int64)[start]
        gam = np.full(start.shape[0], fixed, dtype=np.int64)
        return start, gam, acc, acc + 1
    starts, gammas, accs, emits = [], [], [], []
    t, last_g, last_a = 0, None, None
    while t < tokens:
        if fixed is None:
            ctx = PolicyContext(position=t, draw=draw, last_gamma=last_g, last_accepted=last_a)
            g = check_choice(policy, policy.choose(ctx), max_gamma=max_gamma)
        else:
            g = fixed
        a = accepted_in_block(draw, t, g)
        e = a if (overlapped and g > 0 and a == g) else a + 1
        starts.append(t)
        gammas.append(g)
        accs.append(a)
        emits.append(e)
        t += e
        last_g, last_a = g, a
    return (
        np.asarray(starts, dtype=np.int64),
        np.asarray(gammas, dtype=np.int64),
        np.asarray(accs, dtype=np.int64),
        np.asarray(emits, dtype=np.int64),
    )


def _timeline_fast(
    gamma: NDArray[np.int64],
    full: NDArray[np.bool_],
    draft_t: NDArray[np.float64],
    verify_t: NDArray[np.float64],
    overlapped: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Draft start, draft end, verify end and discarded overlap draft time per block."""
    dphase = gamma * draft_t
    n = gamma.shape[0]
    if not overlapped:
        verify_end = np.cumsum(dphase + verify_t)
        # A block drafts from the previous pass's end (exactly 0 for the first: a
        # difference of sums would leave rounding, e.g. -5.55e-11, in the trace).
        draft_start = np.concatenate(([0.0], verify_end[:-1]))
        return draft_start, draft_start + dphase, verify_end, np.zeros(n)
    d_start, d_end, v_end, wasted = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    prev_v, prev_d, prev_full = 0.0, 0.0, False
    dp, vt, fl = dphase.tolist(), verify_t.tolist(), full.tolist()
    for i in range(n):
        ds = prev_d if prev_full else prev_v
        de = ds + dp[i]
        ve = max(prev_v, de) + vt[i]
        d_start[i], d_end[i], v_end[i] = ds, de, ve
        if not fl[i] and i + 1 < n:
            # The draft pre-drafted the next block from de until the pass ended: thrown away.
            wasted[i] = min(ve - de, dp[i + 1])
        prev_v, prev_d, prev_full = ve, de, fl[i]
    return d_start, d_end, v_end, wasted


def _timeline_events(
    gamma: NDArray[np.int64],
    full: NDArray[np.bool_],
    draft_t: NDArray[np.float64],
    verify_t: NDArray[np.float64],
    overlapped: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The same timeline from simpy processes on accelerator resources."""
    env = simpy.Environment()
    n = gamma.shape[0]
    d_start, d_end, v_end, wasted = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    target = simpy.Resource(env, capacity=1)
    draft_acc = simpy.Resource(env, capacity=1) if overlapped else target
    drafted = [env.event() for _ in range(n)]
    verified = [env.event() for _ in range(n)]

    def drafter() -> simpy.events.ProcessGenerator:
        for i in range(n):
            if i > 0 and not (overlapped and full[i - 1]):
                yield verified[i - 1]  # restart after a rejection (or always, serialized)
            with draft_acc.request() as req:
                yield req
                d_start[i] = env.now
                yield env.timeout(float(gamma[i] * draft_t[i]))
                d_end[i] = env.now
            drafted[i].succeed()
            if overlapped and not full[i] and i + 1 < n:
                # Speculate on block i + 1 until the verification says no.
                spec = env.timeout(float(gamma[i + 1] * draft_t[i + 1]))
                start = env.now
                yield spec | verified[i]
                wasted[i] = env.now - start

    def verifier() -> simpy.events.ProcessGenerator:
        for i in range(n):
            yield drafted[i]
            with target.request() as req:
                yield req
                yield env.timeout(float(verify_t[i]))
                v_end[i] = env.now
            verified[i].succeed()

    env.process(drafter())
    env.process(verifier())
    env.run()
    return d_start, d_end, v_end, wasted


def simulate_stream(
    config: StreamConfig, rng: np.random.Generator, *, method: Method = "fast"
) -> StreamResult:
    """Simulate one request and, in the same run, plain decoding of the same tokens.

    Returns a :class:`~specsim.sim.results.records.StreamResult`: its ``metrics()``
    record, ``events()`` table and ``chrome_trace()``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    if method not in ("fast", "events"):
        raise ValueError(f"method: expected 'fast' or 'events', got {method!r}")
    overlapped = bool(config.cost.overlapped)
    draw = config.acceptance.sample(rng, config.tokens + verification_positions(config.max_gamma))
    start, gamma, acc, emit = plan_blocks(
        draw,
        config.policy,
        tokens=config.tokens,
        max_gamma=config.max_gamma,
        overlapped=overlapped,
    )
    context = config.prompt + start
    costs = block_costs(config.cost, gamma, context)
    full = (gamma > 0) & (acc == gamma)
    timeline = _timeline_fast if method == "fast" else _timeline_events
    d_start, d_end, v_end, wasted = timeline(
        gamma, full, costs.draft_time, costs.verify_time, overlapped
    )
    # The baseline: one target step per token at its context, same cost source.
    total = int(emit.sum())
    zeros = np.zeros(total, dtype=np.int64)
    base = block_costs(config.cost, zeros, config.prompt + np.arange(total))
    blocks = Blocks(
        start=start,
        gamma=gamma,
        accepted=acc,
        emitted=emit,
        draft_start=d_start,
        draft_end=d_end,
        verify_end=v_end,
        overlap_wasted_s=wasted,
        costs=costs,
        overlapped=overlapped,
    )
    return StreamResult(
        blocks=blocks,
        baseline_time_s=float(base.verify_time.sum()),
        baseline_flops=float(base.verify_flops.sum()),
        baseline_energy_j=None if base.verify_energy is None else float(base.verify_energy.sum()),
        tokens_requested=config.tokens,
    )


_SUB_BATCHES = 30  # per chunk, merged into the 30 batches of batch_means_se at the end


def _add_sums(totals: dict[str, Any], sums: dict[str, Any]) -> dict[str, Any]:
    """A chunk's totals (:meth:`StreamResult.sums`) added to the run's so far, in place."""
    for key, value in sums.items():
        if key in ("tokens_requested", "overlapped"):
            continue
        if key == "accepted_at":
            totals[key] = add_accepted_at(totals[key], value)
        elif value is None or totals[key] is None:
            totals[key] = None
        else:
            totals[key] += value
    return totals


def simulate_stream_metrics(
    config: StreamConfig,
    rng: np.random.Generator,
    *,
    method: Method = "fast",
    chunk_tokens: int = CHUNK_TOKENS,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The metrics record of :func:`simulate_stream`, in memory bounded by ``chunk_tokens``.

    A stream that fits in one chunk (``config.tokens <= chunk_tokens``) is exactly
    ``simulate_stream(config, rng, method=method).metrics()``. A longer one runs chunk by
    chunk, each continuing at the context the previous one reached, and adds up the totals;
    its standard errors come from batch means over consecutive stretches of blocks, as in
    one run. Each chunk draws its own acceptances and starts the acceptance process, the
    policy's history and the overlapped draft afresh (effects at most every
    ``chunk_tokens`` tokens). Only the last chunk overshoots: ``tokens`` exceeds
    ``tokens_requested`` by at most the last block's gamma. ``progress(done, total)``, if
    given, is called after each chunk with the tokens emitted so far.
    """
    check_int(chunk_tokens, name="chunk_tokens", minimum=1)
    if config.tokens <= chunk_tokens:
        metrics = simulate_stream(config, rng, method=method).metrics()
        if progress is not None:
            progress(metrics["tokens"], config.tokens)
        return metrics
    totals: dict[str, Any] | None = None
    batches: list[NDArray[np.float64]] = []  # rows: tokens, blocks, time, operations
    done = 0
    while done < config.tokens:
        part = replace(
            config, tokens=min(chunk_tokens, config.tokens - done), prompt=config.prompt + done
        )
        result = simulate_stream(part, rng, method=method)
        sums = result.sums()
        emitted, block_time, ops = result.batch_series()
        for idx in np.array_split(np.arange(emitted.shape[0]), _SUB_BATCHES):
            if idx.shape[0]:
                row = [emitted[idx].sum(), idx.shape[0], block_time[idx].sum(), ops[idx].sum()]
                batches.append(np.array(row, dtype=np.float64))
        totals = sums if totals is None else _add_sums(totals, sums)
        done += sums["tokens"]
        if progress is not None:
            progress(done, config.tokens)
    assert totals is not None  # the loop ran at least once: config.tokens >= 1
    totals["tokens_requested"] = config.tokens
    se: list[float | None] = [None, None, None]
    arr = np.array(batches)
    if arr.shape[0] >= _SUB_BATCHES and arr[:, 1].sum() >= 2 * _SUB_BATCHES:
        groups = np.array([g.sum(axis=0) for g in np.array_split(arr, _SUB_BATCHES)])
        for i, (num, den) in enumerate(((0, 1), (0, 2), (3, 0))):
            se[i] = grouped_ratio_se(groups[:, num], groups[:, den])
    return stream_record(
        totals, tokens_per_pass_se=se[0], tokens_per_time_se=se[1], ops_per_token_se=se[2]
    )
