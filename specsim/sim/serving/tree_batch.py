"""What serving with token trees shares: the config fields, the verification pass of a batch
of trees, the run on the one serving engine, the plain twin and the result.

:func:`serve_trees` serves a workload's table on :mod:`specsim.sim.serving`'s engine with a
tree plan (:class:`specsim.sim.serving.loop.TreePlan`: the static trees of
:mod:`specsim.sim.serving.tree_serving`, the trees chosen per pass of
:mod:`specsim.sim.serving.tree_serving_dynamic`): each iteration admits waiting requests first
come, first served (up to ``cap`` sequences and while their KV fits), prefills them in one
pass (their first token), then hands the running sequences to the plan's ``step`` (it
chooses, prices and walks the trees) and emits each sequence's accepted nodes plus one
token, cut at its request's end. The engine's memory, replicas and routers come with it:

**The KV limit.** Without ``kv_block_tokens`` a request reserves ``prompt + output +
lookahead`` KV tokens when it is admitted (``lookahead``: the most positions one pass
writes past the emitted tokens, the root and the largest tree) and frees them when it
finishes; admission waits, first come first served and none passing the head of the queue,
while the reservations would exceed ``kv_capacity_tokens`` (checked against the
accelerator's memory after the weights, :func:`check_serving_fields`). With
``kv_block_tokens`` the cache is paged and a sequence is preempted (``preemption``:
recompute or swap) when blocks run out (:mod:`specsim.sim.serving.paged`; a pass is sized by the
plan's largest tree).

**Chunked prefill** (``token_budget``, :mod:`specsim.sim.serving.prefill`): each iteration's trees
are chosen first, within the budget (a static tree cut to ``budget // B - 1`` nodes, trees
chosen per pass sharing ``budget - B`` nodes), and prompt chunks fill the positions they
leave. A chunk's share of the pass is priced beside chains of as many positions per
sequence as the trees verify (the tree's own attention pairs, a few fewer, are not
subtracted from the chunk's marginal cost).

**The target** is priced through :class:`specsim.sim.CardCost` (tensor parallelism, the
runtime profile, weight and KV formats: :meth:`~specsim.sim.TreeServingFields.card_cost`).

**The plain twin** (:func:`plain_twin`): the same requests (the same table of arrivals,
prompts and outputs) served by the same engine without speculation: each iteration
verifies every sequence's root only, nothing is drafted, the prefill is the target's
alone. The result's metrics then carry ``speedup`` and ``tpot_speedup`` exactly as chain
serving's (:meth:`specsim.sim.results.records.ServingResult.metrics`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from specsim.checks import check_int, check_size
from specsim.cost.deployment import Deployment
from specsim.cost.shape import tree_pairs
from specsim.cost.stack_terms import check_stack_tree
from specsim.proposers import Proposer, check_proposer, verify_shape
from specsim.sim.costs.card_deployment import OnDeployment
from specsim.sim.costs.costs import CardCost
from specsim.sim.costs.source import CostSource, check_positions_fit, check_whole
from specsim.sim.results.records import ServingResult
from specsim.sim.serving import paged
from specsim.sim.serving.batch import Requests
from specsim.sim.serving.loop import serve
from specsim.sim.serving.plans import TreePlan, TreeStep
from specsim.sim.serving.router import Router, check_router
from specsim.sim.serving.scheduler import FCFS, Scheduler, check_scheduler
from specsim.sim.workload.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TreeServingFields",
    "TreeServingResult",
    "TreeStep",
    "TreeVerify",
    "TreeEngine",
    "batch_cap",
    "tree_engine",
    "check_serving_fields",
    "plain_twin",
    "serve_trees",
]


@dataclass(frozen=True, kw_only=True)
class TreeServingFields(OnDeployment):
    """The fields every tree-serving config shares (documented on
    :class:`specsim.sim.serving.tree_serving.TreeServingConfig`), checked by
    :func:`check_serving_fields`. The engine's: ``kv_block_tokens`` and ``preemption``
    (paged KV), ``token_budget`` (chunked prefill), ``replicas`` behind ``router``,
    admission by ``scheduler`` (:mod:`specsim.sim.serving.scheduler`); where
    the target runs: one :class:`~specsim.cost.deployment.Deployment` (cards, stack,
    formats, tensor parallelism)."""

    workload: Workload
    proposer: Proposer
    deployment: Deployment
    max_batch: int = 64
    position_budget: int | None = None
    kv_capacity_tokens: int | None = None
    plain_twin: bool = True
    kv_block_tokens: int | None = None
    preemption: paged.Preemption = "recompute"
    token_budget: int | None = None
    replicas: int = 1
    router: Router = "round-robin"
    scheduler: Scheduler = FCFS

    def card_cost(self) -> CardCost:
        """The target priced on the deployment's cards, the proposer's own KV prefill beside
        its prompts (:meth:`CardCost.prefill <specsim.sim.costs.costs.CardCost.prefill>`)."""
        return CardCost(deployment=self.deployment, proposer=self.proposer)


@dataclass(frozen=True, kw_only=True)
class TreeEngine:
    """What the engine reads (:class:`specsim.sim.serving.loop.EngineConfig`) for a tree run:
    its cost, its batch (at most one root per position of the budget), the tree's lookahead
    as ``max_gamma``, its memory, replicas and router; built by :func:`tree_engine`."""

    cost: CostSource
    max_batch: int
    max_gamma: int
    kv_capacity_tokens: int | None
    kv_block_tokens: int | None
    preemption: paged.Preemption
    replicas: int
    router: Router
    token_budget: int | None = None
    scheduler: Scheduler = FCFS

    def kv_capacity(self) -> int | None:
        return self.kv_capacity_tokens


_E = TypeVar("_E", bound="TreeEngine")


def tree_engine(
    kind: type[_E],
    *,
    cost: CostSource,
    max_batch: int,
    position_budget: int | None,
    lookahead: int,
    kv_capacity_tokens: int | None,
    kv_block_tokens: int | None,
    preemption: paged.Preemption,
    replicas: int,
    router: Router,
    token_budget: int | None = None,
    scheduler: Scheduler = FCFS,
) -> _E:
    """A :class:`TreeEngine` (or ``kind``, a subclass) for trees of ``lookahead`` positions
    under ``position_budget``, its paging and preemption fields checked."""
    setup = kind(
        cost=cost,
        max_batch=batch_cap(max_batch, position_budget),
        max_gamma=lookahead - 1,
        kv_capacity_tokens=kv_capacity_tokens,
        kv_block_tokens=kv_block_tokens,
        preemption=preemption,
        token_budget=token_budget,
        replicas=replicas,
        router=router,
        scheduler=scheduler,
    )
    paged.check_engine(setup)
    return setup


def _setup(cfg: Any, lookahead: int) -> TreeEngine:
    return tree_engine(
        TreeEngine,
        cost=cfg.card_cost(),
        max_batch=cfg.max_batch,
        position_budget=cfg.position_budget,
        lookahead=lookahead,
        kv_capacity_tokens=cfg.kv_capacity_tokens,
        kv_block_tokens=cfg.kv_block_tokens,
        preemption=cfg.preemption,
        token_budget=cfg.token_budget,
        replicas=cfg.replicas,
        router=cfg.router,
        scheduler=cfg.scheduler,
    )


def check_tree_stack(deployment: Deployment, parents: tuple[int, ...], *, where: str) -> None:
    """A ValueError when the deployment's stack cannot verify the tree ``parents`` (batch
    expansion, or no tree attention mask: :func:`specsim.cost.stack_terms.check_stack_tree`),
    naming ``where`` the tree came from, the tree and the stack. The serving engine prices a
    batch's trees from their sums (:meth:`~specsim.sim.CardCost.aggregate_pass`), which
    cannot tell a tree from chains, so the refusal is made here, at setup. A chain (every
    node the child of the one before) is allowed on every stack."""
    try:
        check_stack_tree(deployment.runtime, parents=parents)
    except ValueError as err:
        raise ValueError(f"{where}: the token tree {parents} cannot be served: {err}") from err


def check_serving_fields(cfg: Any) -> None:
    """Check the fields tree-serving configs share: a ValueError naming the field and value
    (a TypeError for a ``proposer`` lacking part of the protocol). The KV capacity must fit
    in the accelerator's memory after the target's and a draft model's weights
    (:meth:`specsim.sim.costs.costs.CardCost.kv_capacity_tokens`; heads' weights, a fraction of a
    layer, are not counted)."""
    check_proposer(cfg.proposer)
    if not isinstance(cfg.deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(cfg.deployment).__name__}")
    if cfg.deployment.draft_placement != "shared":
        raise ValueError(
            "deployment draft_placement: tree serving drafts on the target's devices "
            f"('shared'), got {cfg.deployment.draft_placement!r}"
        )
    check_whole(cfg.max_batch, "max_batch", minimum=1)
    check_size(cfg.max_batch, name="max_batch", limit="batch")
    if cfg.position_budget is not None:
        check_int(
            cfg.position_budget,
            name="position_budget",
            minimum=2,
            why="verified positions per iteration: one sequence's root and one node",
        )
    check_router(cfg.router, cfg.replicas)
    check_scheduler(cfg.scheduler)
    if cfg.kv_capacity_tokens is not None:
        check_whole(cfg.kv_capacity_tokens, "kv_capacity_tokens", minimum=1)
        most = cfg.card_cost().kv_capacity_tokens()
        if cfg.kv_capacity_tokens > most:
            raise ValueError(
                f"kv_capacity_tokens: {cfg.kv_capacity_tokens} tokens do not fit; the "
                f"accelerator's memory holds {most} after the weights"
            )
    if not isinstance(cfg.plain_twin, bool):
        raise ValueError(f"plain_twin: expected true or false, got {cfg.plain_twin!r}")
    _setup(cfg, 1)  # the paging and preemption fields


def batch_cap(max_batch: int, position_budget: int | None) -> int:
    """Sequences at most: ``max_batch``, and one root each within the budget."""
    return max_batch if position_budget is None else min(max_batch, position_budget)


@dataclass(frozen=True)
class TreeServingResult:
    """The per-request table (``arrival_s``, ``prompt_tokens``, ``output_tokens``,
    ``first_token_s``, ``finish_s``) and the per-iteration table (module docstring), and
    the plain twin's two tables (None without a twin)."""

    requests: pd.DataFrame
    iterations: pd.DataFrame
    requests_plain: pd.DataFrame | None = None
    iterations_plain: pd.DataFrame | None = None

    def metrics(self) -> dict[str, Any]:
        """The serving metrics record (:meth:`specsim.sim.results.records.ServingResult.metrics`:
        ``ttft_p50_s``, ``tpot_p50_s``, ``throughput_tokens_per_s``, ..., the engines'
        acceptance metrics, the plain twin's ``plain_*``, ``speedup`` and ``tpot_speedup``,
        None without a twin), plus ``tokens_per_pass`` (the walk's tokens per sequence and
        pass, before the cut at requests' ends) with its standard error
        ``tokens_per_pass_se`` (ratio estimator over iterations), ``mean_nodes`` per
        sequence and pass, ``budget_bound_share`` of the decoding iterations and
        ``discarded_share`` of the verified positions."""
        rec = ServingResult(
            requests_spec=self.requests,
            iterations_spec=self.iterations,
            requests_plain=self.requests_plain,
            iterations_plain=self.iterations_plain,
        )
        out = rec.metrics()
        it = self.iterations[self.iterations["batch"] > 0]
        b = it["batch"].to_numpy(dtype=np.float64)
        tok = it["accepted"].to_numpy(dtype=np.float64) + b
        rate = float(tok.sum() / b.sum()) if b.size else math.nan
        se = math.inf
        if b.size > 1:
            se = float((tok - rate * b).std(ddof=1) / (math.sqrt(b.size) * b.mean()))
        positions = float(it["positions"].sum())
        out.update(
            tokens_per_pass=rate,
            tokens_per_pass_se=se,
            mean_nodes=float(it["draft_tokens"].sum() / b.sum()) if b.size else 0.0,
            budget_bound_share=float(it["budget_bound"].mean()) if b.size else 0.0,
            discarded_share=float(it["positions_wasted"].sum()) / positions if positions else 0.0,
        )
        return out


class TreeVerify:
    """The target's verification pass of a batch of trees, each sequence at its own context
    (tree attention: :func:`specsim.proposers.verify_shape`; its own pairs cached per tree),
    priced on ``cost`` from the pass's sums (:meth:`specsim.sim.CardCost.aggregate_pass`)."""

    def __init__(self, cost: CardCost) -> None:
        self.cost = cost
        self.own: dict[tuple[int, ...], float] = {}

    def pairs(self, tree: tuple[int, ...]) -> float:
        """Attention pairs among the root and the nodes of ``tree`` (one sequence)."""
        if tree not in self.own:
            self.own[tree] = float(verify_shape(tree, context=0, batch=1).pairs()[0])
        return self.own[tree]

    def __call__(
        self, trees: Sequence[tuple[int, ...]], ctx: NDArray[np.int64]
    ) -> tuple[float, float]:
        """Seconds and joules of verifying ``trees[i]`` after ``ctx[i]`` cached tokens."""
        n1 = np.asarray([len(t) + 1.0 for t in trees])
        own = sum(self.pairs(t) for t in trees)
        c = ctx.astype(np.float64)
        ver = self.cost.aggregate_pass(
            batch=len(trees),
            tokens=float(n1.sum()),
            context_tokens=float(c.sum()),
            pairs=tree_pairs(float(n1 @ c), 1.0, own),  # n1 @ c: the contexts' weighted sum
        )
        return ver.time_s, float(ver.energy_j or 0.0)


def serve_trees(
    cfg: Any, plan: TreePlan, table: pd.DataFrame, rng: np.random.Generator
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Serve the requests of ``table`` under ``plan`` on the engine (module docstring): the
    requests table and the iteration table (:data:`~specsim.sim.results.records.ITERATION_COLUMNS`,
    the engine's paging and replica columns where configured, ``accepted``,
    ``budget_bound``, then the plan's ``columns``)."""
    table = table.reset_index(drop=True)
    lookahead = plan.lookahead
    prompt = table["prompt_tokens"].to_numpy().astype(np.int64)
    out_tok = table["output_tokens"].to_numpy().astype(np.int64)
    # Positions: the deepest node verified past a request's last token (the KV reservation,
    # ``lookahead``, also holds the tree's siblings, which share positions).
    check_positions_fit(
        cfg.card_cost(),
        context=prompt,
        new_tokens=out_tok + plan.reach,
        draft_new_tokens=out_tok + max(plan.reach - 1, 0),
        name="workload",
    )
    req = Requests.undrawn(table, lookahead=lookahead)
    return serve(_setup(cfg, lookahead), req, None, tree=plan, rng=rng)


@dataclass(frozen=True, eq=False)
class _Roots:
    """The plain twin's plan: every sequence verifies its root alone."""

    verify: TreeVerify
    lookahead: int = 1
    reach: int = 0
    draft_prefill: bool = False
    columns: tuple[str, ...] = ()

    def step(
        self, contexts: NDArray[np.int64], rng: np.random.Generator, positions: int | None = None
    ) -> TreeStep:
        ver_s, ver_e = self.verify([()] * len(contexts), contexts)
        zero = np.zeros(len(contexts), dtype=np.int64)
        return TreeStep(zero, zero, ver_s, 0.0, ver_e, False)


def plain_twin(
    cfg: Any, table: pd.DataFrame, rng: np.random.Generator
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same requests served without speculation by the same engine: every iteration
    verifies each sequence's root only, nothing is drafted, the prefill is the target's
    alone (:func:`serve_trees`; the run's cap, memory and replicas, one position of
    lookahead). Draws nothing from ``rng``."""
    return serve_trees(cfg, _Roots(TreeVerify(cfg.card_cost())), table, rng)
