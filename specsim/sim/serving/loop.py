"""The serving loop: one iteration (schedule, plan, draft, verify, emit) per replica.

:class:`Engine` holds what one serve of a workload shares (the clock, the requests, the
cost source's speed paths, the replicas, the acceptance counters) and runs, per replica,
a simpy process of iterations: :meth:`Engine.iteration` (whole-prompt prefill, reserved
or paged KV) or :func:`specsim.sim.serving.chunked.chunked_iteration` (a token budget,
chunked prefill). Each asks :meth:`Engine.choose` for the plan (a lookahead policy's
gammas, or a :class:`~specsim.sim.serving.plans.TreePlan`'s pass size) and
:meth:`Engine.decode` to draft, verify and emit (a tree plan: :meth:`Engine.decode_trees`).
Who starts: the config's scheduler (:mod:`specsim.sim.serving.scheduler`, via ``Admission``);
which replica serves an arrival: its router (:func:`specsim.sim.serving.router.routing_rule`).
Once every request has arrived, a fixed-gamma run on the vectorized path is drained in
bulk (:mod:`specsim.sim.serving.drain`, :mod:`specsim.sim.serving.chunk_drain`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from numpy.typing import NDArray

from specsim.policies.lookahead import LookaheadPolicy, batch_wide, fixed_gamma
from specsim.sim.costs.source import BatchedCostSource, BatchWide, IterationCost, iteration_cost
from specsim.sim.results.records import with_columns
from specsim.sim.serving import paged, prefill
from specsim.sim.serving.batch import (
    Admission,
    Batch,
    Requests,
    TimesOf,
    composed_times,
    sequence_gammas,
)
from specsim.sim.serving.chunk_drain import drain_chunked, draining
from specsim.sim.serving.chunked import chunked_iteration
from specsim.sim.serving.drafting import ProposerDrafts
from specsim.sim.serving.drain import Drain, drain
from specsim.sim.serving.plans import Decoded, EngineConfig, Plan, TreePlan, TreeStep
from specsim.sim.serving.router import Replica, routing_rule, static_routes, tables
from specsim.sim.serving.tally import Tally

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Engine", "serve"]

Ints = NDArray[np.int64]


def serve(
    config: EngineConfig,
    req: Requests,
    policy: LookaheadPolicy | None,
    *,
    tree: TreePlan | None = None,
    rng: np.random.Generator | None = None,
    drafts: ProposerDrafts | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Serve ``req`` under ``policy`` (chains) or ``tree`` (token trees, drawing from
    ``rng``) on ``config``'s replicas: the requests table and the iteration table
    (:func:`specsim.sim.serving.router.tables`; a tree plan adds ``accepted``, ``budget_bound`` and
    its ``columns``). ``drafts``: a proposer's chain iterations, which replace the cost
    source's draft steps (:class:`specsim.sim.serving.drafting.ProposerDrafts`)."""
    return Engine(config, req, policy, tree=tree, rng=rng, drafts=drafts).run()


class Engine:
    """One serve of a workload (module docstring)."""

    def __init__(
        self,
        config: EngineConfig,
        req: Requests,
        policy: LookaheadPolicy | None,
        *,
        tree: TreePlan | None = None,
        rng: np.random.Generator | None = None,
        drafts: ProposerDrafts | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.config, self.req, self.policy = config, req, policy
        self.tree, self.rng, self.drafts = tree, rng, drafts
        if (policy is None) == (tree is None) or (tree is not None and rng is None):
            raise TypeError("Engine: expected a lookahead policy, or a tree plan and an rng")
        self.cost = config.cost if drafts is None else drafts.cost  # prefills its KV too
        self.max_gamma = config.max_gamma
        n = len(req)
        self.first_tok, self.finish = np.full(n, np.nan), np.full(n, np.nan)
        self.fixed = None if policy is None else fixed_gamma(policy)
        self._speed_paths()
        # The vectorized path needs one gamma for the batch and run lengths that hold for
        # any gamma (acceptance independent of the position in a block); gamma 0 needs
        # neither. A tree plan samples its walks per pass: the stepped path.
        fixed = self.fixed
        self.vector_ok = tree is None and (
            fixed == 0 or (fixed is not None or self.wide is not None) and req.plain_weights
        )
        self.draft_prefill = self.fixed != 0 if tree is None else tree.draft_prefill
        one = np.ones(1, dtype=np.int64)
        self.with_energy = self.cost.verify(one, one).energy_j is not None  # PlainCost: none
        self.budget = config.token_budget
        self.router = routing_rule(config.router)
        # A static rule (round-robin) reads no state: every request is routed before the run.
        static = static_routes(self.router, n, config.replicas)
        self.fixed_route = static is not None
        self.where = np.zeros(n, dtype=np.int64) if static is None else static
        self.arrived = 0
        # The drains' walks at a fixed gamma > 0 read the run lengths (Requests.run1).
        ok = self.vector_ok and fixed is not None and fixed > 0 and self.uniform is not None
        self.run1 = req.run1 if ok else None
        self.reps = [self._replica(k) for k in range(config.replicas)]
        self.tally = Tally(n, self.max_gamma)  # the engines' acceptance counters

    def _speed_paths(self) -> None:
        """The source's speed paths, looked up once (a Protocol isinstance check is slow). A
        proposer's drafts price every iteration sequence by sequence (no uniform path)."""
        cost, policy = self.cost, self.policy
        self.uniform: Callable[..., IterationCost] | None = None
        self.mixed: Callable[[Ints, Ints], IterationCost]
        times_of: TimesOf
        if self.drafts is not None:
            self.mixed, times_of = self.drafts, self.drafts.times
        elif isinstance(cost, BatchedCostSource):
            self.uniform, self.mixed = cost.uniform_iteration, cost.iteration
            times_of = cost.uniform_iteration_times
        else:
            self.mixed, times_of = partial(iteration_cost, cost), partial(composed_times, cost)
        size = int(getattr(policy, "max_gamma", self.max_gamma))
        self.wide = (
            BatchWide(policy, cost=cost, size=size, max_gamma=self.max_gamma, times_of=times_of)
            if policy is not None and batch_wide(policy)
            else None
        )

    def _replica(self, k: int) -> Replica:
        """Replica ``k``: its admission (FCFS under the KV budget), batch, paged cache and
        prefill queue, and, where the run may drain, its bulk path."""
        config, req, env = self.config, self.req, self.env
        block, fixed = config.kv_block_tokens, self.fixed
        paging = None
        if block is not None:
            swap = paged.host_link(self.cost) if config.preemption == "swap" else None
            paging = paged.Paging.build(
                req, block=block, capacity=config.kv_capacity(), max_gamma=self.max_gamma, swap=swap
            )
        admission = Admission(
            req,
            capacity=config.kv_capacity() if paging is None else paging.capacity,
            max_batch=config.max_batch,
            max_gamma=self.max_gamma,
            reserve=None if paging is None else paging.need,
            unit="tokens" if paging is None else "blocks",
            scheduler=config.scheduler,
        )
        rep = Replica(
            admission=admission,
            batch=Batch(config.max_batch),
            paging=paging,
            prefills=None if self.budget is None else prefill.Prefills(),
            total=int((self.where == k).sum()) if self.fixed_route else None,
            accel=simpy.Resource(env, capacity=1),
            wake=[env.event()],
            req=req,
            first_tok=self.first_tok,
            finish=self.finish,
        )
        if self.vector_ok and fixed is not None and self.uniform is not None:
            rep.draining = draining(
                rep,
                cost=self.cost,
                gamma=fixed,
                budget=self.budget,
                run1=self.run1,
                with_energy=self.with_energy,
            )
        return rep

    def run(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        env = self.env
        env.process(self.arrivals())
        for rep in self.reps:
            env.process(self.replica_loop(rep))
        env.run()
        out = with_columns(
            self.req.table,
            {"first_token_s": self.first_tok, "finish_s": self.finish, **self.tally.columns()},
        )
        extra = self.config.kv_block_tokens is not None or self.budget is not None
        requests, its = tables(out, self.reps, self.where, extra=extra)
        if self.tree is not None:
            names = ("accepted", "budget_bound", *self.tree.columns)
            cols = np.array([r for rep in self.reps for r in rep.plan_rows], dtype=np.float64)
            cols = cols.reshape(-1, len(names))
            its["accepted"] = cols[:, 0].astype(np.int64)
            its["budget_bound"] = cols[:, 1].astype(bool)
            for j, name in enumerate(names[2:], start=2):
                its[name] = cols[:, j]
        return requests, its

    def arrivals(self) -> simpy.events.ProcessGenerator:
        env, reps, where = self.env, self.reps, self.where.tolist()
        for i, at in enumerate(self.req.arrival.tolist()):  # on Python floats: the same delays
            yield env.timeout(max(0.0, at - env.now))
            k = where[i] if self.fixed_route else self.router.route(i, reps)
            self.where[i], rep = k, reps[k]
            rep.admission.arrive(i)
            rep.routed += 1
            self.arrived += 1
            if not rep.wake[0].triggered:
                rep.wake[0].succeed()

    def choose(self, batch: Batch) -> Plan:
        """The lookahead: one gamma for all (declared fixed or batch-wide) or one each; the
        gammas chosen and, cut at each request's end, drafted (None, None: every sequence
        drafts ``gam``, none within ``gam`` of its end, the fast path). A tree plan's pass
        is sized by its lookahead (what the paged cache must hold)."""
        if self.tree is not None:
            return self.tree.lookahead - 1, None, None
        if self.fixed is not None:
            gam = self.fixed
        elif self.wide is not None:
            gam = self.wide(batch.size, batch.ctx_sum - batch.size, batch.cached)
        else:
            gam = -1
        if self.vector_ok and 0 <= gam < batch.low and self.uniform is not None:
            return gam, None, None
        if gam >= 0:
            chosen = np.full(batch.size, gam)
        else:
            assert self.policy is not None  # a tree plan has returned above
            chosen = sequence_gammas(self.policy, batch, self.req)
        np.minimum(chosen, self.max_gamma, out=chosen)
        return gam, chosen, np.minimum(chosen, batch.end - batch.ptr - 1)

    def decode(self, rep: Replica, gam: int, chosen: Any, g: Any) -> Decoded:
        """Draft and verify: the time, energy, draft time, tokens emitted and drafted."""
        batch = rep.batch
        if self.tree is not None:
            return self.decode_trees(rep)
        if g is None:  # every sequence drafts gam: the fast path
            assert self.uniform is not None
            t_iter, e_iter, d_time = self.uniform(
                batch=batch.size, context_sum=batch.ctx_sum - batch.size, gamma=gam
            )
            emitted = batch.advance_uniform(gam, self.req.run1)
            self.tally.add(batch.rid, gam, batch.last_run - 1)
            return t_iter, e_iter, d_time, emitted, gam * batch.size
        acc = self.req.emitted(batch, g)
        self.tally.add(batch.rid, g, acc - 1)
        t_iter, e_iter, d_time = self.mixed(g, batch.cached())
        emitted = batch.advance(acc)
        batch.last_gamma, batch.last_accepted = chosen, acc - 1
        return t_iter, e_iter, d_time, emitted, int(g.sum())

    def tree_step(self, rep: Replica, positions: int | None = None) -> TreeStep:
        """The tree plan's pass over the batch (nothing emitted yet), at most ``positions``."""
        assert self.tree is not None and self.rng is not None
        return self.tree.step(rep.batch.cached(), self.rng, positions)

    def decode_trees(self, rep: Replica, s: TreeStep | None = None) -> Decoded:
        """The tree plan's pass (``s``, or a new one); each sequence emits its accepted nodes
        plus one, cut at its request's last token. Drafted: the nodes verified."""
        batch = rep.batch
        s = self.tree_step(rep) if s is None else s
        emit = np.minimum(s.accepted + 1, batch.end - batch.ptr)
        self.tally.add(batch.rid, s.nodes, emit - 1)
        emitted = batch.advance(emit)
        rep.plan_rows.append((float(s.accepted.sum()), float(s.budget_bound), *s.extra))
        return s.verify_s + s.draft_s, s.energy_j, s.draft_s, emitted, int(s.nodes.sum())

    def row(
        self,
        start: float,
        *,
        prefill_s: float,
        decoded: Decoded,
        b: int,
        admitted: int,
        energy: float,
    ) -> tuple[float, ...]:
        """One iteration's row (:data:`specsim.sim.results.records.ITERATION_COLUMNS`)."""
        t_iter, e_iter, d_time, emitted, drafted = decoded
        wasted = drafted + b - emitted
        e = energy + e_iter if self.with_energy else np.nan
        head = (start, self.env.now, prefill_s, d_time, b, admitted, drafted, drafted + b)
        return (*head, wasted, wasted, emitted, e)

    def replica_loop(self, rep: Replica) -> simpy.events.ProcessGenerator:
        """Replica ``rep``'s iterations while it has work, holding its accelerator; once every
        request has arrived, the rest drained in bulk where the run allows."""
        env = self.env
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
            if rep.draining is not None and self._all_arrived(rep) and self._drain(rep, start):
                break
            if prefills is None:
                yield from self.iteration(rep, start)
            else:
                yield from chunked_iteration(self, rep, start)

    def _all_arrived(self, rep: Replica) -> bool:
        if self.fixed_route:
            return rep.admission.arrived == rep.total
        return self.arrived == len(self.req)

    def _drain(self, rep: Replica, start: float) -> bool:
        """Every request has arrived: the clock no longer steers anything, so the rest runs
        without simpy and is costed in bulk (specsim.sim.serving.drain, .chunk_drain), when it
        may."""
        assert rep.draining is not None
        if not rep.draining.ready(rep.done):
            return False
        table, rep.extra_block = (
            drain(
                rep.draining,
                start=start,
                done=rep.done,
                total=rep.admission.arrived,
                tally=self.tally,
            )
            if isinstance(rep.draining, Drain)
            else drain_chunked(rep.draining, start=start, tally=self.tally)
        )
        rep.rows.append(table)
        return True

    def iteration(self, rep: Replica, start: float) -> simpy.events.ProcessGenerator:
        """One iteration with whole-prompt prefill (paged or not)."""
        admission, batch, paging = rep.admission, rep.batch, rep.paging
        admitted: list[int] = []
        if admission.waiting and batch.size < self.config.max_batch:
            if paging is not None:  # the blocks held now, for the admission test
                admission.used = paging.held(batch)
            admitted = admission.admit(batch.size)
        if not admitted:
            admission.check_progress(batch.size)
        prefill_s, energy, before, one_token = 0.0, 0.0, rep.prefilled, 0
        if admitted:
            adm = np.asarray(admitted, dtype=np.int64)
            prefill_s, energy, one_token = rep.prefill(
                adm, start, cost=self.cost, draft=self.draft_prefill
            )
        if batch.size == 0:  # only one-token requests were admitted: a prefill-only iteration
            yield self.env.timeout(prefill_s)
            rep.done += one_token  # one-token requests end with the pass, not at its start
            idle = (0.0, 0.0, 0.0, 0, 0)
            if self.tree is not None:
                rep.plan_rows.append((0.0,) * (2 + len(self.tree.columns)))
            rep.rows.append(
                self.row(
                    start,
                    prefill_s=prefill_s,
                    decoded=idle,
                    b=0,
                    admitted=len(admitted),
                    energy=energy,
                )
            )
            if paging is not None:
                rep.extras.append((paging.held(batch), 0, 0, 0.0, rep.prefilled - before))
            return
        gam, chosen, g = self.choose(batch)
        pre = (0, 0, 0.0, 0)
        if paging is not None:
            chosen, g, pre = paging.fit(batch, gam, chosen, g, rep.prefills, rep.admission)
            prefill_s += pre[2]
        b = batch.size
        decoded = self.decode(rep, gam, chosen, g)
        yield self.env.timeout(prefill_s + decoded[0])
        rep.done += one_token
        rep.rows.append(
            self.row(
                start,
                prefill_s=prefill_s,
                decoded=decoded,
                b=b,
                admitted=len(admitted),
                energy=energy,
            )
        )
        if paging is not None:
            rep.extras.append((pre[3], pre[0], pre[1], pre[2], rep.prefilled - before))
        rep.retire(gam, self.env.now)
