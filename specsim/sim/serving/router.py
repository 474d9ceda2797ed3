"""Replicas behind a router: which replica serves an arriving request.

``replicas`` identical replicas (each one accelerator or tensor-parallel group
with its own KV cache and batch) sit behind one router, a one-method object:
``route(request, loads) -> replica index`` (:class:`RoutingRule`), asked at each
arrival with every replica simulated up to that instant (the replicas share one
simpy clock; between arrivals they do not interact). The rules shipped, one class
each, named by the strings a config takes (:data:`ROUTERS`):

- :class:`RoundRobin` (``"round-robin"``): request ``i`` (in arrival order) goes to
  replica ``i mod replicas``. It reads no state (``static = True``), so the engine
  routes every request before the run starts and each replica runs on its own
  between arrivals (a speed path: a replica's tail after its own last arrival is
  drained in bulk);
- :class:`LeastOutstanding` (``"least-outstanding"``): the replica with the fewest
  outstanding requests (routed there and not yet finished: waiting, prefilling or
  decoding), as load balancers' least-outstanding-requests rule does;
- :class:`JoinShortestQueue` (``"join-shortest-queue"``): the replica with the fewest
  requests waiting for admission (not yet in its batch), ties broken by fewest
  outstanding. For a replica serving one request at a time this is the classical JSQ
  queue (Winston, "Optimality of the shortest line discipline", J. Appl. Prob. 1977).

Ties go to the lowest-numbered replica. A new rule is one class with ``route`` (and,
when it reads no replica state, ``static = True``), passed as the config's ``router``;
:func:`routing_rule` resolves a name or such an object once, before the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import simpy
from numpy.typing import NDArray

from specsim.checks import check_int
from specsim.sim.costs.source import CostSource, PassCost
from specsim.sim.results.records import ServingResult, iteration_table
from specsim.sim.serving.batch import Admission, Batch, Requests
from specsim.sim.serving.chunk_drain import ChunkDrain
from specsim.sim.serving.drain import Drain
from specsim.sim.serving.paged import EXTRA_COLUMNS, Paging
from specsim.sim.serving.prefill import Prefills

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ROUTERS",
    "JoinShortestQueue",
    "LeastOutstanding",
    "Replica",
    "ReplicaLoad",
    "RoundRobin",
    "Router",
    "RouterName",
    "RoutingRule",
    "check_router",
    "replica_metrics",
    "routing_rule",
    "static_routes",
    "tables",
]

_NO_PASS = PassCost(time_s=0.0, flops=0.0, bytes=0.0, energy_j=0.0)  # swapped in, no prefill
Row = tuple[float, ...] | NDArray[np.float64]  # one iteration, or the drain's block of them


class ReplicaLoad(Protocol):
    """What a router reads of a replica: requests routed there and not finished, and those
    still waiting for admission."""

    @property
    def outstanding(self) -> int: ...

    @property
    def queued(self) -> int: ...


class RoutingRule(Protocol):
    """Which replica serves request ``request`` (its index in arrival order), given what
    each replica's :class:`ReplicaLoad` reads now; a rule may declare ``static = True``
    (it reads no load: every request is routed before the run)."""

    def route(self, request: int, loads: Sequence[ReplicaLoad]) -> int: ...


class RoundRobin:
    """Request ``i`` to replica ``i mod replicas`` (the module docstring)."""

    static = True

    def route(self, request: int, loads: Sequence[ReplicaLoad]) -> int:
        return request % len(loads)


class LeastOutstanding:
    """The replica with the fewest outstanding requests (the module docstring)."""

    def route(self, request: int, loads: Sequence[ReplicaLoad]) -> int:
        keys = [r.outstanding for r in loads]
        return keys.index(min(keys))


class JoinShortestQueue:
    """The replica with the fewest waiting requests, then fewest outstanding (the module
    docstring)."""

    def route(self, request: int, loads: Sequence[ReplicaLoad]) -> int:
        keys = [r.queued * (1 << 32) + r.outstanding for r in loads]
        return keys.index(min(keys))


RouterName = Literal["round-robin", "least-outstanding", "join-shortest-queue"]
Router = RouterName | RoutingRule  # what a config's ``router`` field takes
ROUTERS: dict[str, type[RoutingRule]] = {
    "round-robin": RoundRobin,
    "least-outstanding": LeastOutstanding,
    "join-shortest-queue": JoinShortestQueue,
}


def routing_rule(router: Router) -> RoutingRule:
    """The rule ``router`` names (:data:`ROUTERS`), or ``router`` itself when it has a
    ``route`` method; else a ValueError naming it."""
    if isinstance(router, str):
        if router not in ROUTERS:
            raise ValueError(f"router: expected one of {list(ROUTERS)}, got {router!r}")
        return ROUTERS[router]()
    if not callable(getattr(router, "route", None)):
        raise ValueError(
            f"router: expected one of {list(ROUTERS)} or an object with route(request, "
            f"loads), got {router!r}"
        )
    return router


def static_routes(rule: RoutingRule, requests: int, replicas: int) -> NDArray[np.int64] | None:
    """Every request's replica before the run when ``rule`` is static (reads no load);
    else None."""
    if not getattr(rule, "static", False):
        return None
    idle = [_IDLE] * replicas
    return np.array([rule.route(i, idle) for i in range(requests)], dtype=np.int64)


class _Idle:
    """The load a static rule is shown before the run (it reads none)."""

    outstanding = 0
    queued = 0


_IDLE = _Idle()


@dataclass(eq=False)
class Replica:
    """One replica in a run: its queue and KV budget, its batch, its paged cache and prompts
    in chunked prefill (when configured), its rows, and what a router reads."""

    admission: Admission
    batch: Batch
    paging: Paging | None
    prefills: Prefills | None
    total: int | None  # the requests routed to it, when known before the run (round-robin)
    accel: simpy.Resource
    wake: list[simpy.Event]
    req: Requests
    first_tok: NDArray[np.float64]  # the run's, shared by its replicas
    finish: NDArray[np.float64]
    draining: Drain | ChunkDrain | None = None
    rows: list[Row] = field(default_factory=list)
    extras: list[tuple[float, ...]] = field(default_factory=list)  # EXTRA_COLUMNS, a row each
    plan_rows: list[tuple[float, ...]] = field(default_factory=list)  # a tree plan's columns
    extra_block: NDArray[np.float64] | None = None  # a chunked drain's, after the rows above
    routed: int = 0
    done: int = 0
    prefilled: int = 0  # prompt tokens prefilled so far (recomputed ones included)

    @property
    def outstanding(self) -> int:
        return self.routed - self.done

    @property
    def queued(self) -> int:
        return len(self.admission.waiting)

    def prefill(
        self, adm: NDArray[np.int64], start: float, *, cost: CostSource, draft: bool
    ) -> tuple[float, float, int]:
        """Prefill the admitted prompts in one pass, which emits each one's first token; the
        others join the batch (preempted ones rejoin: their caches are rebuilt in the same
        pass, or swapped in). Returns the time and energy and how many were done; the tokens
        prefilled are added to ``prefilled``."""
        req, states, swap_s = self.req, None, 0.0
        tokens = req.prompt[adm]
        resumed = None
        if self.paging is not None and self.paging.resume:
            adm, back, states, rebuild, swap_s = self.paging.split_resumed(adm, req)
            tokens = np.concatenate([req.prompt[adm], rebuild])
            # A source whose admission pass is not a prefill (a disaggregated decode pool's
            # first step, specsim.sim.disagg.first_step) prices the rebuilds apart.
            resumed = getattr(cost, "prefill_resumed", None) if rebuild.shape[0] else None
        if resumed is not None:
            pc = resumed(req.prompt[adm], rebuild, draft=draft)
        else:
            pc = cost.prefill(tokens, draft=draft) if tokens.shape[0] else _NO_PASS
        self.first_tok[adm] = start + pc.time_s
        one = req.out_len[adm] == 1  # one-token requests are done
        if one.any():
            self.finish[adm[one]] = start + pc.time_s
            self.admission.release(adm[one])
        if not one.all():
            self.batch.add(adm[~one], req)
        if states is not None and states.shape[0]:
            self.batch.add(back, req, resume=states)
        self.prefilled += int(tokens.sum())
        return pc.time_s + swap_s, pc.energy_j or 0.0, int(one.sum())

    def retire(self, gam: int, now: float) -> None:
        """Finished sequences leave the batch at ``now``; the batch's bound on tokens left
        is made exact when a sequence may be within ``gam`` of its end."""
        batch = self.batch
        if batch.low <= 0 and batch.refresh_low() <= 0:
            finished = batch.retire()
            self.finish[finished] = now
            self.admission.release(finished)
            self.done += finished.shape[0]
        elif batch.low <= gam:
            batch.refresh_low()


def tables(
    requests: pd.DataFrame, reps: Sequence[Replica], where: NDArray[np.int64], *, extra: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's request and iteration tables from its replicas: with ``extra`` (paging or
    chunked prefill) the iteration table gains :data:`~specsim.sim.serving.paged.EXTRA_COLUMNS`
    and, paged, the request table ``preemptions`` and ``recomputed_tokens``; with more than
    one replica both gain ``replica`` (iterations: replica by replica, each in time order)."""
    frames = []
    for k, rep in enumerate(reps):
        it = iteration_table(rep.rows)
        if extra:
            cols = np.array(rep.extras, dtype=np.float64).reshape(-1, len(EXTRA_COLUMNS))
            if rep.extra_block is not None:
                cols = np.concatenate([cols, rep.extra_block])
            for j, name in enumerate(EXTRA_COLUMNS):
                it[name] = cols[:, j] if name == "swap_s" else cols[:, j].astype(np.int64)
        if len(reps) > 1:
            it["replica"] = k
        frames.append(it)
    import pandas as pd  # start-up: pandas loads where a table is built, not with the engine

    its = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    paged = [rep.paging for rep in reps if rep.paging is not None]
    if paged:
        requests["preemptions"] = sum(p.preemptions for p in paged)
        requests["recomputed_tokens"] = sum(p.recomputed for p in paged)
    if len(reps) > 1:
        requests["replica"] = where
    return requests, its


def check_router(router: object, replicas: object) -> None:
    """ValueErrors naming ``router`` or ``replicas``: a known rule or an object with
    ``route``, over at least one replica."""
    check_int(replicas, name="replicas", minimum=1, why="a router needs a replica to route to")
    routing_rule(router)  # type: ignore[arg-type]  # user input: checked here


def replica_metrics(result: ServingResult) -> pd.DataFrame:
    """One metrics record per replica (a row each, ``replica`` first), from a result whose
    tables carry a ``replica`` column (a run with ``replicas > 1``); the overall record is
    ``result.metrics()``."""
    import pandas as pd  # start-up: as in tables

    req, it = result.requests_spec, result.iterations_spec
    if "replica" not in req.columns:
        raise ValueError("result: a single-replica run has no replica column; use metrics()")
    rows = []
    for k in sorted(set(req["replica"].tolist())):
        sub = ServingResult(
            requests_spec=req[req["replica"] == k],
            iterations_spec=it[it["replica"] == k],
            requests_plain=None
            if result.requests_plain is None
            else result.requests_plain[result.requests_plain["replica"] == k],
            iterations_plain=None
            if result.iterations_plain is None
            else result.iterations_plain[result.iterations_plain["replica"] == k],
            work_s=result.work_s,
        )
        rows.append({"replica": k, **sub.metrics()})
    return pd.DataFrame(rows)
