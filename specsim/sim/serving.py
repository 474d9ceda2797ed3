"""Serving many requests: arrivals, continuous batching, a KV-memory limit, replicas.

One accelerator (or tensor-parallel group: one simpy resource, held while
there is work) serves a stream of requests; ``replicas`` of it sit behind a
router (:mod:`specsim.sim.router`). Paged KV with preemption and chunked
prefill are options (:mod:`specsim.sim.paged`); without them, an iteration:

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

The same workload is then served without speculation (``gamma = 0``), for the
speedup: the *plain twin*, skipped when the policy declares ``gamma = 0`` (the
run is its own twin) or ``plain_twin = False``. The draft shares the target's
accelerator (serialized). Once every request has arrived (and, paged or under
a budget, memory can no longer bind), a fixed-gamma run on the vectorized path
finishes without simpy, costed in bulk (:mod:`specsim.sim.drain`,
:mod:`specsim.sim.engine`; the same rows, bit for bit). Requests, admission
and the batch: :mod:`specsim.sim.batch`; the result: :mod:`specsim.sim.records`.
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
from specsim.checks import check_size
from specsim.cost import verification_positions
from specsim.policies import (
    MAX_GAMMA,
    FixedGamma,
    LookaheadPolicy,
    batch_wide,
    fixed_gamma,
)
from specsim.sim import paged
from specsim.sim.batch import (
    Admission,
    Batch,
    Requests,
    TimesOf,
    composed_times,
    draw_requests,
    sequence_gammas,
)
from specsim.sim.drain import Drain, drain
from specsim.sim.engine import chunk_cost, drain_chunked, draining
from specsim.sim.records import ServingResult
from specsim.sim.router import Replica, Router, check_router, route, tables
from specsim.sim.source import (
    BatchedCostSource,
    BatchWide,
    CostSource,
    IterationCost,
    check_positions_fit,
    check_whole,
    iteration_cost,
)
from specsim.sim.stability import plain_work_s
from specsim.sim.workload import Workload

__all__ = ["ServingConfig", "simulate_serving"]


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
    ``kv_block_tokens``: None reserves each request's whole KV footprint at
    admission; an integer pages the cache in blocks of that many tokens
    (vLLM's default is 16), and ``preemption`` ("recompute" or "swap") says
    what happens to a sequence evicted when blocks run out
    (:mod:`specsim.sim.paged`). ``token_budget``: None prefills whole prompts;
    an integer caps the tokens of an iteration (chunked prefill, Sarathi-Serve).
    ``replicas`` identical replicas (each with this cost source and KV budget)
    behind ``router`` (:mod:`specsim.sim.router`).
    """

    workload: Workload
    cost: CostSource
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    max_batch: int = 64
    kv_capacity_tokens: int | None = None
    max_gamma: int = MAX_GAMMA
    plain_twin: bool = True
    kv_block_tokens: int | None = None
    preemption: paged.Preemption = "recompute"
    token_budget: int | None = None
    replicas: int = 1
    router: Router = "round-robin"

    def __post_init__(self) -> None:
        check_whole(self.max_batch, "max_batch", minimum=1)
        check_size(self.max_batch, name="max_batch", limit="batch")
        check_whole(self.max_gamma, "max_gamma", minimum=0)
        paged.check_engine(self)
        check_router(self.router, self.replicas)
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


def _serve(
    config: ServingConfig, req: Requests, policy: LookaheadPolicy
) -> tuple[pd.DataFrame, pd.DataFrame]:
    env = simpy.Environment()
    cost, max_gamma, max_batch, n = config.cost, config.max_gamma, config.max_batch, len(req)
    first_tok, finish = np.full(n, np.nan), np.full(n, np.nan)
    fixed = fixed_gamma(policy)
    # The source's speed paths, looked up once (a Protocol isinstance check is slow).
    uniform: Callable[..., IterationCost] | None = None
    mixed: Callable[[NDArray[np.int64], NDArray[np.int64]], IterationCost]
    times_of: TimesOf
    if isinstance(cost, BatchedCostSource):
        uniform, mixed = cost.uniform_iteration, cost.iteration
        times_of = cost.uniform_iteration_times
    else:
        mixed, times_of = partial(iteration_cost, cost), partial(composed_times, cost)
    table_size = int(getattr(policy, "max_gamma", max_gamma))
    wide = (
        BatchWide(policy, cost=cost, size=table_size, max_gamma=max_gamma, times_of=times_of)
        if batch_wide(policy)
        else None
    )
    # The vectorized path needs one gamma for the batch and run lengths that hold for any
    # gamma (acceptance independent of the position in a block); gamma 0 needs neither.
    vector_ok = fixed == 0 or (fixed is not None or wide is not None) and req.plain_weights
    one = np.ones(1, dtype=np.int64)
    with_energy = cost.verify(one, one).energy_j is not None  # PlainCost has no power model
    run1 = req.run1
    step = None  # where a block drafting the fixed gamma from each flat position leaves it
    if vector_ok and fixed is not None and fixed > 0 and uniform is not None:
        step = np.minimum(run1, verification_positions(fixed))
        step += np.arange(step.shape[0], dtype=np.int64)
    # The bulk paths, where the source has them (specsim.sim.engine.draining).
    block, budget = config.kv_block_tokens, config.token_budget
    can_drain = vector_ok and fixed is not None and uniform is not None
    # Round-robin reads no state: every request is routed before the run.
    where = np.arange(n, dtype=np.int64) % config.replicas
    fixed_route = config.router == "round-robin"
    swap = paged.host_link(cost) if config.preemption == "swap" else None
    reps: list[Replica] = []
    for k in range(config.replicas):
        paging = (
            None
            if block is None
            else paged.Paging.build(
                req, block=block, capacity=config.kv_capacity(), max_gamma=max_gamma, swap=swap
            )
        )
        admission = Admission(
            req,
            capacity=config.kv_capacity() if paging is None else paging.capacity,
            max_batch=max_batch,
            max_gamma=max_gamma,
            reserve=None if paging is None else paging.need,
        )
        batch = Batch(max_batch)
        rep = Replica(
            admission=admission,
            batch=batch,
            paging=paging,
            prefills=None if budget is None else paged.Prefills(),
            total=int((where == k).sum()) if fixed_route else None,
            accel=simpy.Resource(env, capacity=1),
            wake=[env.event()],
            req=req,
            first_tok=first_tok,
            finish=finish,
        )
        if can_drain and fixed is not None:
            rep.draining = draining(
                rep, cost=cost, gamma=fixed, budget=budget, step=step, with_energy=with_energy
            )
        reps.append(rep)
    arrived = [0]

    def arrivals() -> simpy.events.ProcessGenerator:
        for i in range(n):
            yield env.timeout(max(0.0, req.arrival[i] - env.now))
            k = int(where[i]) if fixed_route else route(config.router, i, reps)
            where[i], rep = k, reps[k]
            rep.admission.arrive(i)
            rep.routed += 1
            arrived[0] += 1
            if not rep.wake[0].triggered:
                rep.wake[0].succeed()

    def choose(batch: Batch) -> tuple[int, NDArray[np.int64] | None, NDArray[np.int64] | None]:
        """The lookahead: one gamma for all (declared fixed or batch-wide) or one each; the
        gammas chosen and, cut at each request's end, drafted (None, None: every sequence
        drafts ``gam``, none within ``gam`` of its end, the fast path)."""
        if fixed is not None:
            gam = fixed
        elif wide is not None:
            gam = wide(batch.size, batch.ctx_sum, batch.contexts)
        else:
            gam = -1
        if vector_ok and 0 <= gam < batch.low and uniform is not None:
            return gam, None, None
        chosen = np.full(batch.size, gam) if gam >= 0 else sequence_gammas(policy, batch, req)
        np.minimum(chosen, max_gamma, out=chosen)
        return gam, chosen, np.minimum(chosen, batch.end - batch.ptr - 1)

    def decode(batch: Batch, gam: int, chosen: Any, g: Any) -> tuple[float, float, float, int, int]:
        """Draft and verify: the time, energy, draft time, tokens emitted and drafted."""
        if g is None:  # every sequence drafts gam: the fast path
            assert uniform is not None
            t_iter, e_iter, d_time = uniform(batch=batch.size, context_sum=batch.ctx_sum, gamma=gam)
            return t_iter, e_iter, d_time, batch.advance_uniform(gam, run1), gam * batch.size
        acc = req.emitted(batch, g)
        t_iter, e_iter, d_time = mixed(g, batch.contexts())
        emitted = batch.advance(acc)
        batch.last_gamma, batch.last_accepted = chosen, acc - 1
        return t_iter, e_iter, d_time, emitted, int(g.sum())

    def iteration(rep: Replica, start: float) -> simpy.events.ProcessGenerator:
        """One iteration with whole-prompt prefill (today's engine, paged or not)."""
        admission, batch, paging = rep.admission, rep.batch, rep.paging
        running = batch.size
        admitted = []
        if admission.waiting and running < max_batch:
            if paging is not None:  # the blocks held now, for the admission test
                admission.used = paging.held(batch)
            admitted = admission.admit(running)
        prefill_s, energy, before, one_token = 0.0, 0.0, rep.prefilled, 0
        if admitted:
            adm = np.asarray(admitted, dtype=np.int64)
            prefill_s, energy, one_token = rep.prefill(adm, start, cost=cost, draft=fixed != 0)
        b = batch.size
        if b == 0:  # only one-token requests were admitted: a prefill-only iteration
            yield env.timeout(prefill_s)
            rep.done += one_token  # one-token requests end with the pass, not at its start
            rep.rows.append(
                (
                    start,
                    env.now,
                    prefill_s,
                    0.0,
                    0,
                    len(admitted),
                    0,
                    0,
                    0,
                    0,
                    0,
                    energy if with_energy else np.nan,
                )
            )
            if paging is not None:
                rep.extras.append((paging.held(batch), 0, 0, 0.0, rep.prefilled - before))
            return
        gam, chosen, g = choose(batch)
        pre = (0, 0, 0.0, 0)
        if paging is not None:
            chosen, g, pre = paging.fit(batch, gam, chosen, g, rep.prefills, rep.admission)
            prefill_s += pre[2]
            b = batch.size
        t_iter, e_iter, d_time, emitted, drafted = decode(batch, gam, chosen, g)
        yield env.timeout(prefill_s + t_iter)
        rep.done += one_token
        wasted = drafted + b - emitted
        rep.rows.append(
            (
                start,
                env.now,
                prefill_s,
                d_time,
                b,
                len(admitted),
                drafted,
                drafted + b,
                wasted,
                wasted,
                emitted,
                energy + e_iter if with_energy else np.nan,
            )
        )
        if paging is not None:
            rep.extras.append((pre[3], pre[0], pre[1], pre[2], rep.prefilled - before))
        rep.retire(gam, env.now)

    def engine(rep: Replica) -> simpy.events.ProcessGenerator:
        hold: Any = None  # the accelerator, held while there is work
        admission, batch, prefills = rep.admission, rep.batch, rep.prefills
        while rep.total is None or rep.done < rep.total:
            if not admission.waiting and batch.size == 0 and not prefills:
                if hold is not None:
                    rep.accel.release(hold)
                    hold = None
                rep.wake[0] = env.event()
                yield rep.wake[0]
            if hold is None:
                hold = rep.accel.request()
                yield hold
            start = env.now
            if rep.draining is not None and (
                admission.arrived == rep.total if fixed_route else arrived[0] == n
            ):
                # Every request has arrived: the clock no longer steers anything, so the rest
                # runs without simpy and is costed in bulk (specsim.sim.drain, .engine).
                if rep.draining.ready(rep.done):
                    table, rep.extra_block = (
                        drain(rep.draining, start=start, done=rep.done, total=admission.arrived)
                        if isinstance(rep.draining, Drain)
                        else drain_chunked(rep.draining, start=start)
                    )
                    rep.rows.append(table)
                    break
            if prefills is None:
                yield from iteration(rep, start)
            else:
                yield from chunked_iteration(rep, start)

    def chunked_iteration(rep: Replica, start: float) -> simpy.events.ProcessGenerator:
        """One iteration under a token budget (chunked prefill, :mod:`specsim.sim.paged`)."""
        assert budget is not None and rep.prefills is not None
        admission, batch, paging, prefills = rep.admission, rep.batch, rep.paging, rep.prefills
        gam, chosen, g = choose(batch) if batch.size else (0, None, None)
        if batch.size:
            gam, chosen, g = paged.shrink_to_budget(batch, gam, chosen, g, budget)
        pre = (0, 0, 0.0, 0)
        if paging is not None and admission.waiting:
            admission.used = paging.held(batch) + sum(prefills.holds)
        room = budget - (batch.size + (gam * batch.size if g is None else int(g.sum())))
        started = paged.start_prefills(prefills, admission, batch, paging, req, room)
        if paging is not None and batch.size:
            chosen, g, pre = paging.fit(batch, gam, chosen, g, prefills, admission)
        b = batch.size
        room = budget - (b + (gam * b if g is None else int(g.sum())))
        rows_, sizes, offsets = prefills.plan(room)
        chunk_s, chunk_e = chunk_cost(cost, gam, g, batch, sizes, offsets, draft=fixed != 0)
        t_iter = e_iter = d_time = 0.0
        emitted = drafted = 0
        if b:
            t_iter, e_iter, d_time, emitted, drafted = decode(batch, gam, chosen, g)
        prefill_s = chunk_s + pre[2]
        yield env.timeout(prefill_s + t_iter)
        now = env.now
        wasted = drafted + b - emitted
        rep.rows.append(
            (
                start,
                now,
                prefill_s,
                d_time,
                b,
                started,
                drafted,
                drafted + b,
                wasted,
                wasted,
                emitted,
                chunk_e + e_iter if with_energy else np.nan,
            )
        )
        rep.extras.append(
            (
                pre[3]
                if paging is not None and b
                else (0 if paging is None else paging.held(batch) + sum(prefills.holds)),
                pre[0],
                pre[1],
                pre[2],
                sum(sizes),
            )
        )
        if b:
            rep.retire(gam, now)
        rep.done += paged.join_prefilled(
            prefills.advance(rows_, sizes),
            batch=batch,
            admission=admission,
            paging=paging,
            req=req,
            now=now,
            first_tok=first_tok,
            finish=finish,
        )

    env.process(arrivals())
    for rep in reps:
        env.process(engine(rep))
    env.run()
    out = req.table.copy()
    out["first_token_s"] = first_tok
    out["finish_s"] = finish
    return tables(out, reps, where, extra=block is not None or budget is not None)


def simulate_serving(config: ServingConfig, rng: np.random.Generator) -> ServingResult:
    """Serve the workload with speculation and, in the same run, without it (the plain twin,
    unless the policy's gamma is a declared 0 or ``config.plain_twin`` is False)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    table = config.workload.sample(rng)
    check_positions_fit(
        config.cost,
        context=table["prompt_tokens"].to_numpy(),
        new_tokens=table["output_tokens"].to_numpy(),
        name="workload",
    )
    draws = draw_requests(
        config.acceptance, table["output_tokens"].to_numpy(), max_gamma=config.max_gamma, rng=rng
    )
    req = Requests.build(table, draws, max_gamma=config.max_gamma)
    spec = _serve(config, req, config.policy)
    if not config.plain_twin:
        plain = None
    elif fixed_gamma(config.policy) == 0:  # the run is plain decoding: it is its own twin
        plain = (spec[0].copy(), spec[1].copy())
    else:
        plain = _serve(config, req, FixedGamma(gamma=0))
    return ServingResult(
        requests_spec=spec[0],
        iterations_spec=spec[1],
        requests_plain=None if plain is None else plain[0],
        iterations_plain=None if plain is None else plain[1],
        work_s=plain_work_s(
            config.cost,
            prompt_tokens=table["prompt_tokens"].to_numpy(),
            output_tokens=table["output_tokens"].to_numpy(),
            max_batch=config.max_batch,
            kv_capacity_tokens=config.kv_capacity(),
            max_gamma=config.max_gamma,
        ),
    )
