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

Two engines give the same timeline: ``"events"`` runs simpy processes on
accelerator resources, one event per draft phase and per pass (the reference);
``"fast"`` computes the same timeline with numpy (a speed path for the long
runs that validate the closed forms; a test checks the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import simpy
from numpy.typing import NDArray

from specsim.acceptance import AcceptanceDraw, AcceptanceProcess, accepted_in_block
from specsim.policies import LookaheadPolicy, PolicyContext, fixed_gamma
from specsim.sim.costs import CostSource
from specsim.sim.records import Blocks, StreamResult

__all__ = ["StreamConfig", "simulate_stream", "plan_blocks"]

Engine = Literal["fast", "events"]


@dataclass(frozen=True, kw_only=True)
class StreamConfig:
    """A single-stream run: decode at least ``tokens`` tokens after a ``prompt``."""

    tokens: int
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    cost: CostSource
    prompt: int = 0
    max_gamma: int = 64

    def __post_init__(self) -> None:
        for name in ("tokens", "prompt", "max_gamma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
        if self.tokens < 1:
            raise ValueError(f"tokens: expected at least 1 token to decode, got {self.tokens}")
        if not hasattr(self.acceptance, "sample"):
            raise TypeError(f"acceptance: expected an acceptance process, got {self.acceptance!r}")
        if not hasattr(self.policy, "choose"):
            raise TypeError(f"policy: expected a lookahead policy, got {self.policy!r}")


def _run_lengths(ok: NDArray[np.bool_]) -> NDArray[np.int64]:
    """For each position, how many consecutive accepted positions start there."""
    n = ok.shape[0]
    idx = np.arange(n)
    # Position of the next rejection at or after each index (n if none).
    nxt = np.where(~ok, idx, n)
    nxt = np.minimum.accumulate(nxt[::-1])[::-1]
    return (nxt - idx).astype(np.int64)


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
    g = fixed_gamma(policy)
    if g is not None and g > max_gamma:
        raise ValueError(f"policy {policy!r} chose gamma {g}, outside 0..max_gamma={max_gamma}")
    if g is not None and plain_weights and not overlapped:
        # Speed path: with one gamma and position-free acceptance the block
        # outcome at a position is min(run length, gamma), known in advance.
        run = np.minimum(_run_lengths(draw.u < draw.prob), g).tolist()
        starts: list[int] = []
        t = 0
        while t < tokens:
            starts.append(t)
            t += run[t] + 1
        start = np.asarray(starts, dtype=np.int64)
        acc = np.asarray(run, dtype=np.int64)[start]
        gam = np.full(start.shape[0], g, dtype=np.int64)
        return start, gam, acc, acc + 1
    starts, gammas, accs, emits = [], [], [], []
    t, last_g, last_a = 0, None, None
    while t < tokens:
        g = policy.choose(
            PolicyContext(position=t, draw=draw, last_gamma=last_g, last_accepted=last_a)
        )
        if isinstance(g, bool) or not isinstance(g, int | np.integer) or not 0 <= g <= max_gamma:
            raise ValueError(
                f"policy {policy!r} chose gamma {g!r}, outside 0..max_gamma={max_gamma}"
            )
        a = accepted_in_block(draw, t, int(g))
        e = a if (overlapped and g > 0 and a == g) else a + 1
        starts.append(t)
        gammas.append(int(g))
        accs.append(a)
        emits.append(e)
        t += e
        last_g, last_a = int(g), a
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
        draft_end = verify_end - verify_t
        return draft_end - dphase, draft_end, verify_end, np.zeros(n)
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
    config: StreamConfig, rng: np.random.Generator, *, engine: Engine = "fast"
) -> StreamResult:
    """Simulate one request and, in the same run, plain decoding of the same tokens.

    Returns a :class:`~specsim.sim.records.StreamResult`: its ``metrics()``
    record, ``events()`` table and ``chrome_trace()``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    if engine not in ("fast", "events"):
        raise ValueError(f"engine: expected 'fast' or 'events', got {engine!r}")
    overlapped = bool(config.cost.overlapped)
    draw = config.acceptance.sample(rng, config.tokens + config.max_gamma + 1)
    start, gamma, acc, emit = plan_blocks(
        draw,
        config.policy,
        tokens=config.tokens,
        max_gamma=config.max_gamma,
        overlapped=overlapped,
    )
    context = config.prompt + start
    costs = config.cost.blocks(gamma, context)
    full = (gamma > 0) & (acc == gamma)
    timeline = _timeline_fast if engine == "fast" else _timeline_events
    d_start, d_end, v_end, wasted = timeline(
        gamma, full, costs.draft_time, costs.verify_time, overlapped
    )
    # The baseline: one target step per token at its context, same cost source.
    total = int(emit.sum())
    base = config.cost.blocks(np.zeros(total, dtype=np.int64), config.prompt + np.arange(total))
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
    )
