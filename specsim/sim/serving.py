"""Serving many requests: arrivals, continuous batching, a KV-memory limit.

One accelerator (or tensor-parallel group, as one simpy resource, which the
engine process holds while it has work) serves a stream of requests. Each
batch iteration:

1. admits waiting requests first-come first-served while the batch has room
   (``max_batch``) and their KV cache fits (prompt + output + lookahead
   reserved up front, so an admitted request never has to be evicted); the
   admitted prompts are prefilled in one pass of the target (and the draft),
   which also yields each request's first token (TTFT); a one-token request
   is then done and never joins the decoding batch;
2. asks the lookahead policy for each running sequence's ``gamma_i``, handing
   it the sequence's own history (its previous block's gamma and accepted
   count), so that a per-sequence policy walks each request exactly as it
   walks a single stream; a policy that declares a fixed gamma is not asked,
   and one that declares itself batch-wide is asked once per iteration
   (:mod:`specsim.policies`). Gamma is capped at ``max_gamma`` (the KV
   reservation covers that much lookahead) and cut so that no block drafts
   past its request's last token; the history keeps the policy's gamma before
   that cut, as a single stream, which has no end, would see it;
3. runs the draft steps, step ``j`` batching every sequence with ``gamma_i > j``;
4. runs one verification pass over every sequence's ``gamma_i + 1`` positions
   (its cost from the cost model at that batch and those contexts);
5. emits each sequence's accepted tokens plus one and retires finished ones.

The same workload is then served without speculation (``gamma = 0``) in the
same run, for the speedup: the *plain twin*. It is skipped when the policy
declares ``gamma = 0`` (the run is its own twin) and when the config says
``plain_twin = False`` (then the result has no plain metrics). The draft
shares the target's accelerator (serialized); overlapped drafting is modelled
for single streams only. Once every request has arrived, the clock steers
nothing, and a fixed-gamma run on the vectorized path finishes in
:mod:`specsim.sim.drain` without simpy, its costs evaluated in bulk (the same
rows, bit for bit). Requests, admission and the running batch are in
:mod:`specsim.sim.batch`; workloads in :mod:`specsim.sim.workload`; the
result, its metrics record and Chrome trace in :mod:`specsim.sim.records`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import simpy
from numpy.typing import NDArray

from specsim.acceptance import AcceptanceProcess
from specsim.cost import verification_positions
from specsim.policies import (
    MAX_GAMMA,
    FixedGamma,
    LookaheadPolicy,
    PolicyContext,
    batch_wide,
    check_choice,
    fixed_gamma,
)
from specsim.sim.batch import NO_HISTORY, Admission, Batch, Requests, draw_requests
from specsim.sim.drain import Drain, drain
from specsim.sim.records import ServingResult, iteration_table
from specsim.sim.source import (
    BatchedCostSource,
    CostSource,
    IterationCost,
    check_positions_fit,
    check_whole,
    iteration_cost,
)
from specsim.sim.workload import Workload

__all__ = ["ServingConfig", "simulate_serving"]

TimesOf = Callable[[NDArray[np.int64], int], NDArray[np.float64]]
Row = tuple[float, ...] | NDArray[np.float64]  # one iteration, or the drain's block of them


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    """A serving run.

    ``max_gamma``: the longest block (default :data:`specsim.policies.MAX_GAMMA`); every
    request's KV reservation covers a pass of that many drafts.
    ``kv_capacity_tokens``: KV-cache budget in tokens (None: the cost source's
    own ``kv_capacity_tokens()``, the accelerator's memory left after the
    weights for a CardCost; unlimited for a source without one).
    ``plain_twin``: also serve the workload without speculation, for the
    speedup and the ``plain_*`` metrics (False: skip it, and those metrics are
    None).
    """

    workload: Workload
    cost: CostSource
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    max_batch: int = 64
    kv_capacity_tokens: int | None = None
    max_gamma: int = MAX_GAMMA
    plain_twin: bool = True

    def __post_init__(self) -> None:
        check_whole(self.max_batch, "max_batch", minimum=1)
        check_whole(self.max_gamma, "max_gamma", minimum=0)
        if self.kv_capacity_tokens is not None:
            check_whole(self.kv_capacity_tokens, "kv_capacity_tokens", minimum=1)
            most = self._memory_budget()
            if most is not None and self.kv_capacity_tokens > most:
                raise ValueError(
                    f"kv_capacity_tokens: {self.kv_capacity_tokens} tokens do not fit; the "
                    f"accelerator's memory holds {most} after the weights"
                )
        if not isinstance(self.plain_twin, bool):
            raise ValueError(f"plain_twin: expected true or false, got {self.plain_twin!r}")
        if self.cost.overlapped:
            raise ValueError(
                "cost: overlapped drafting (a draft accelerator) is modelled for single streams "
                "only; serve with the draft on the target's accelerator"
            )
        fixed = fixed_gamma(self.policy)
        if fixed is not None and fixed > self.max_gamma:
            raise ValueError(f"policy: gamma {fixed} exceeds max_gamma {self.max_gamma}")

    def _memory_budget(self) -> int | None:
        """KV tokens the accelerator holds after the weights, where the cost source knows."""
        capacity: Callable[[], int] | None = getattr(self.cost, "kv_capacity_tokens", None)
        return None if capacity is None else int(capacity())

    def kv_capacity(self) -> int | None:
        if self.kv_capacity_tokens is not None:
            return int(self.kv_capacity_tokens)
        return self._memory_budget()


class _PassTimes:
    """``pass_time(gamma)`` for a batch-wide policy: the iteration's time if every sequence
    drafts gamma, from ``times_of(contexts, n)``, a table for gammas 0..n at once."""

    def __init__(self, times_of: TimesOf, contexts: NDArray[np.int64], size: int) -> None:
        self.times_of, self.contexts = times_of, contexts
        self.table = times_of(contexts, size)

    def __call__(self, gamma: int) -> float:
        if gamma >= self.table.shape[0]:
            self.table = self.times_of(self.contexts, gamma)
        return float(self.table[gamma])


def _composed_times(cost: CostSource, contexts: NDArray[np.int64],
                    size: int) -> NDArray[np.float64]:  # fmt: skip
    """Iteration times for gammas 0..size from a source's passes (no speed path)."""
    ones = np.ones(contexts.shape[0], dtype=np.int64)
    return np.array([iteration_cost(cost, g * ones, contexts).time_s for g in range(size + 1)])


def _sequence_gammas(policy: LookaheadPolicy, batch: Batch, req: Requests) -> NDArray[np.int64]:
    """Ask a per-sequence policy for every running sequence's gamma, with its own history."""
    b = batch.size
    pos = batch.positions(req).tolist()
    rid = batch.rid.tolist()
    last_g, last_a = batch.last_gamma.tolist(), batch.last_accepted.tolist()
    draws = req.draws
    out = np.empty(b, dtype=np.int64)
    for k in range(b):
        had = last_g[k] != NO_HISTORY
        ctx = PolicyContext(position=pos[k], draw=draws[rid[k]],
                            last_gamma=last_g[k] if had else None,
                            last_accepted=last_a[k] if had else None, batch=b)  # fmt: skip
        out[k] = check_choice(policy, policy.choose(ctx))
    return out


def _serve(config: ServingConfig, req: Requests,
           policy: LookaheadPolicy) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    env = simpy.Environment()
    accel = simpy.Resource(env, capacity=1)
    cost, max_gamma, max_batch, n = config.cost, config.max_gamma, config.max_batch, len(req)
    first_tok, finish = np.full(n, np.nan), np.full(n, np.nan)
    admission = Admission(req, capacity=config.kv_capacity(), max_batch=max_batch,
                          max_gamma=max_gamma)  # fmt: skip
    batch = Batch(max_batch)
    fixed, wide = fixed_gamma(policy), batch_wide(policy)
    # The source's speed paths, looked up once (a Protocol isinstance check is slow).
    uniform: Callable[..., IterationCost] | None = None
    mixed: Callable[[NDArray[np.int64], NDArray[np.int64]], IterationCost]
    times_of: TimesOf
    if isinstance(cost, BatchedCostSource):
        uniform, mixed = cost.uniform_iteration, cost.iteration
        times_of = cost.uniform_iteration_times
    else:
        mixed, times_of = partial(iteration_cost, cost), partial(_composed_times, cost)
    table_size = int(getattr(policy, "max_gamma", max_gamma))
    # The vectorized path needs one gamma for the batch and run lengths that hold for any
    # gamma (acceptance independent of the position in a block); gamma 0 needs neither.
    vector_ok = fixed == 0 or (fixed is not None or wide) and req.plain_weights
    one = np.ones(1, dtype=np.int64)
    with_energy = cost.verify(one, one).energy_j is not None  # PlainCost has no power model
    run1 = req.run1
    step = None  # where a block drafting the fixed gamma from each flat position leaves it
    if vector_ok and fixed is not None and fixed > 0 and uniform is not None:
        step = np.minimum(run1, verification_positions(fixed))
        step += np.arange(step.shape[0], dtype=np.int64)
    rows: list[Row] = []
    draining = None
    # The optional bulk paths (CostSource's docstring); without them, no drain.
    uniform_many = getattr(cost, "uniform_iterations", None)
    mixed_many = getattr(cost, "iterations", None)
    if (vector_ok and fixed is not None and uniform is not None and uniform_many is not None
            and (fixed == 0 or mixed_many is not None)):  # fmt: skip
        draining = Drain(cost=cost, uniform=uniform_many, req=req, admission=admission,
                         mixed_many=mixed_many,
                         batch=batch, step=step, gamma=fixed, max_batch=max_batch,
                         with_energy=with_energy, first_tok=first_tok, finish=finish)  # fmt: skip
    wake = [env.event()]

    def arrivals() -> simpy.events.ProcessGenerator:
        for i in range(n):
            yield env.timeout(max(0.0, req.arrival[i] - env.now))
            admission.arrive(i)
            if not wake[0].triggered:
                wake[0].succeed()

    def prefill(adm: NDArray[np.int64], start: float) -> tuple[float, float, int]:
        """Prefill the admitted prompts in one pass, which emits each one's first token; the
        others join the batch. Returns the pass's time and energy and how many were done."""
        pc = cost.prefill(req.prompt[adm], draft=fixed != 0)
        first_tok[adm] = start + pc.time_s
        one = req.out_len[adm] == 1  # one-token requests are done
        if one.any():
            finish[adm[one]] = start + pc.time_s
            admission.release(adm[one])
        if not one.all():
            batch.add(adm[~one], req)
        return pc.time_s, pc.energy_j or 0.0, int(one.sum())

    def engine() -> simpy.events.ProcessGenerator:
        done = 0
        hold: Any = None  # the accelerator, held while there is work
        while done < n:
            if not admission.waiting and batch.size == 0:
                if hold is not None:
                    accel.release(hold)
                    hold = None
                wake[0] = env.event()
                yield wake[0]
            if hold is None:
                hold = accel.request()
                yield hold
            start = env.now
            if draining is not None and admission.arrived == n:
                # Every request has arrived: the clock no longer steers anything, so the rest
                # runs without simpy and is costed in bulk (specsim.sim.drain).
                rows.append(drain(draining, start=start, done=done))
                break
            running = batch.size
            admitted = admission.admit(running) if admission.waiting and running < max_batch else []
            prefill_s = energy = 0.0
            if admitted:
                prefill_s, energy, one_token = prefill(np.asarray(admitted, dtype=np.int64), start)
                done += one_token
            b = batch.size
            if b == 0:  # only one-token requests were admitted: a prefill-only iteration
                yield env.timeout(prefill_s)
                rows.append((start, env.now, prefill_s, 0.0, 0, len(admitted), 0, 0, 0, 0, 0,
                             energy if with_energy else np.nan))  # fmt: skip
                continue
            # The lookahead: one gamma for all (declared fixed or batch-wide) or one each.
            if fixed is not None:
                gam = fixed
            elif wide:
                times = _PassTimes(times_of, batch.contexts(), table_size)
                ctx = PolicyContext(position=0, draw=None, last_gamma=None, last_accepted=None,
                                    batch=b, pass_time=times)  # fmt: skip
                gam = min(check_choice(policy, policy.choose(ctx)), max_gamma)
            else:
                gam = -1
            if vector_ok and 0 <= gam < batch.low and uniform is not None:
                # Every sequence drafts gam (none is within gam of its end): the fast path.
                t_iter, e_iter, d_time = uniform(batch=b, context_sum=batch.ctx_sum,
                                                 gamma=gam)  # fmt: skip
                emitted = batch.advance_uniform(gam, run1)
                drafted = gam * b
            else:
                chosen = np.full(b, gam) if gam >= 0 else _sequence_gammas(policy, batch, req)
                np.minimum(chosen, max_gamma, out=chosen)
                g = np.minimum(chosen, batch.end - batch.ptr - 1)  # not past the request's end
                acc = req.emitted(batch, g)
                drafted = int(g.sum())
                t_iter, e_iter, d_time = mixed(g, batch.contexts())
                emitted = batch.advance(acc)
                batch.last_gamma, batch.last_accepted = chosen, acc - 1
            yield env.timeout(prefill_s + t_iter)
            wasted = drafted + b - emitted
            rows.append(
                (start, env.now, prefill_s, d_time, b, len(admitted), drafted, drafted + b,
                 wasted, wasted, emitted, energy + e_iter if with_energy else np.nan)
            )  # fmt: skip
            now = env.now
            if batch.low <= 0 and batch.refresh_low() <= 0:
                finished = batch.retire()  # finished sequences leave the batch
                finish[finished] = now
                admission.release(finished)
                done += finished.shape[0]
            elif batch.low <= gam:  # a sequence may be within gam of its end: make it exact
                batch.refresh_low()

    env.process(arrivals())
    env.process(engine())
    env.run()
    out = req.table.copy()
    out["first_token_s"] = first_tok
    out["finish_s"] = finish
    return out, iteration_table(rows)


def simulate_serving(config: ServingConfig, rng: np.random.Generator) -> ServingResult:
    """Serve the workload with speculation and, in the same run, without it (the plain twin,
    unless the policy's gamma is a declared 0 or ``config.plain_twin`` is False)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    table = config.workload.sample(rng)
    check_positions_fit(config.cost, context=table["prompt_tokens"].to_numpy(),
                        new_tokens=table["output_tokens"].to_numpy(), name="workload")  # fmt: skip
    draws = draw_requests(config.acceptance, table["output_tokens"].to_numpy(),
                          max_gamma=config.max_gamma, rng=rng)  # fmt: skip
    req = Requests.build(table, draws, max_gamma=config.max_gamma)
    spec = _serve(config, req, config.policy)
    if not config.plain_twin:
        plain = None
    elif fixed_gamma(config.policy) == 0:  # the run is plain decoding: it is its own twin
        plain = (spec[0].copy(), spec[1].copy())
    else:
        plain = _serve(config, req, FixedGamma(gamma=0))
    return ServingResult(
        requests_spec=spec[0], iterations_spec=spec[1],
        requests_plain=None if plain is None else plain[0],
        iterations_plain=None if plain is None else plain[1],
    )  # fmt: skip
