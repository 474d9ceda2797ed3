"""What serving with token trees shares: the scheduler loop, the verification pass of a
batch of trees, the prefill, the plain twin and the result.

:func:`serve_tree_table` is the continuous-batching loop of
:mod:`specsim.sim.tree_serving` (static trees) and :mod:`specsim.sim.tree_serving_dynamic`
(trees chosen per pass, EAGLE-2): each iteration admits waiting requests first come,
first served (up to ``cap`` sequences and, given a KV capacity, while their reservations
fit), prefills them in one pass (their first token), then hands the running sequences to
a ``step`` (the simulator's own: it chooses, prices and walks the trees) and emits each
sequence's accepted nodes plus one token, cut at its request's end.

**The KV limit.** A request reserves ``prompt + output + lookahead`` KV tokens when it
is admitted (``lookahead``: the most positions one pass writes past the emitted tokens,
the root and the largest tree), and frees them when it finishes; admission waits, first
come first served and none passing the head of the queue, while the reservations would
exceed ``kv_capacity_tokens`` (checked against the accelerator's memory after the
weights, :func:`check_serving_fields`). Nothing is preempted, because nothing can run out: this
is the reserve-up-front admission of :mod:`specsim.sim.serving` without paging.

**The plain twin** (:func:`plain_twin`): the same requests (the same table of arrivals,
prompts and outputs) served by the same loop without speculation: each iteration
verifies every sequence's root only, nothing is drafted, the prefill is the target's
alone. The result's metrics then carry ``speedup`` and ``tpot_speedup`` exactly as chain
serving's (:meth:`specsim.sim.records.ServingResult.metrics`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim.cards import HardwareCard, ModelCard
from specsim.checks import check_size
from specsim.cost import PassShape, pass_aggregates_cost, pass_cost
from specsim.cost.checks import check_positions
from specsim.proposers import DraftModel, Proposer, verify_shape
from specsim.sim.costs import CardCost
from specsim.sim.records import ServingResult, iteration_table
from specsim.sim.source import check_whole
from specsim.sim.workload import Workload

__all__ = [
    "Step",
    "TreeServingFields",
    "TreeServingResult",
    "TreeStep",
    "TreeVerify",
    "batch_cap",
    "check_serving_fields",
    "plain_twin",
    "prefill_cost",
    "serve_tree_table",
]


@dataclass(frozen=True, kw_only=True)
class TreeServingFields:
    """The fields every tree-serving config shares (documented on
    :class:`specsim.sim.tree_serving.TreeServingConfig`), checked by
    :func:`check_serving_fields`."""

    workload: Workload
    proposer: Proposer
    target: ModelCard
    hardware: HardwareCard
    max_batch: int = 64
    position_budget: int | None = None
    dtype: str | None = None
    kv_capacity_tokens: int | None = None
    plain_twin: bool = True


def check_serving_fields(cfg: Any) -> None:
    """Check the fields tree-serving configs share (``max_batch``, ``position_budget``,
    ``kv_capacity_tokens``, ``plain_twin``): a ValueError naming the field and value. The KV
    capacity must fit in the accelerator's memory after the target's and a draft model's
    weights (:meth:`specsim.sim.costs.CardCost.kv_capacity_tokens`; heads' weights, a
    fraction of a layer, are not counted)."""
    check_whole(cfg.max_batch, "max_batch", minimum=1)
    check_size(cfg.max_batch, name="max_batch", limit="batch")
    if cfg.position_budget is not None:
        b = cfg.position_budget
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 2:
            raise ValueError(
                f"position_budget: expected an integer >= 2 verified positions per "
                f"iteration (one sequence's root and one node), got {b!r}"
            )
    if cfg.kv_capacity_tokens is not None:
        check_whole(cfg.kv_capacity_tokens, "kv_capacity_tokens", minimum=1)
        draft = cfg.proposer.card if isinstance(cfg.proposer, DraftModel) else None
        most = CardCost(
            target=cfg.target, draft=draft, hardware=cfg.hardware, dtype=cfg.dtype
        ).kv_capacity_tokens()
        if cfg.kv_capacity_tokens > most:
            raise ValueError(
                f"kv_capacity_tokens: {cfg.kv_capacity_tokens} tokens do not fit; the "
                f"accelerator's memory holds {most} after the weights"
            )
    if not isinstance(cfg.plain_twin, bool):
        raise ValueError(f"plain_twin: expected true or false, got {cfg.plain_twin!r}")


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
        """The serving metrics record (:meth:`specsim.sim.records.ServingResult.metrics`:
        ``ttft_p50_s``, ``tpot_p50_s``, ``throughput_tokens_per_s``, ..., the plain twin's
        ``plain_*``, ``speedup`` and ``tpot_speedup``, None without a twin), plus
        ``tokens_per_pass`` (the walk's tokens per sequence and pass, before the cut at
        requests' ends) with its standard error ``tokens_per_pass_se`` (ratio estimator over
        iterations), ``mean_nodes`` per sequence and pass, ``budget_bound_share`` of the
        decoding iterations and ``discarded_share`` of the verified positions."""
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


def prefill_cost(
    prompts: NDArray[np.int64],
    *,
    target: ModelCard,
    hardware: HardwareCard,
    dtype: str | None,
    proposer: Proposer | None,
) -> tuple[float, float]:
    """Seconds and joules of prefilling ``prompts`` in one pass of the target, and of the
    draft model when ``proposer`` is a :class:`~specsim.proposers.DraftModel`."""
    shape = PassShape.prefill(prompts)
    cost = pass_cost(target, hardware, shape, dtype=dtype)
    t, e = cost.time_s, cost.energy_j
    if isinstance(proposer, DraftModel):
        d = pass_cost(proposer.card, hardware, shape, dtype=proposer.dtype)
        t, e = t + d.time_s, e + d.energy_j
    return float(t), float(e)


class TreeVerify:
    """The target's verification pass of a batch of trees, each sequence at its own context
    (tree attention: :func:`specsim.proposers.verify_shape`; its own pairs cached per tree)."""

    def __init__(self, target: ModelCard, hardware: HardwareCard, dtype: str | None) -> None:
        self.target, self.hardware, self.dtype = target, hardware, dtype
        self.own: dict[tuple[int, ...], float] = {}

    def pairs(self, tree: tuple[int, ...]) -> float:
        """Attention pairs among the root and the nodes of ``tree`` (one sequence)."""
        if tree not in self.own:
            self.own[tree] = float(verify_shape(tree, context=0, batch=1).pairs()[0])
        return self.own[tree]

    def cost(self, trees: Sequence[tuple[int, ...]], ctx: NDArray[np.int64]) -> tuple[float, float]:
        """Seconds and joules of verifying ``trees[i]`` after ``ctx[i]`` cached tokens."""
        n1 = np.asarray([len(t) + 1.0 for t in trees])
        own = sum(self.pairs(t) for t in trees)
        c = ctx.astype(np.float64)
        ver = pass_aggregates_cost(
            self.target,
            self.hardware,
            batch=len(trees),
            tokens=float(n1.sum()),
            context_tokens=float(c.sum()),
            pairs=float(n1 @ c) + own,
            dtype=self.dtype,
        )
        return float(ver.time_s), float(ver.energy_j)


@dataclass(frozen=True)
class TreeStep:
    """One decoding iteration of the running batch: per sequence the nodes ``accepted``
    (before the cut at its request's end) and ``nodes`` verified; the pass's ``verify_s``,
    ``draft_s`` and ``energy_j``; whether the position budget cut a tree
    (``budget_bound``) and the caller's ``extra`` columns."""

    accepted: NDArray[np.int64]
    nodes: NDArray[np.int64]
    verify_s: float
    draft_s: float
    energy_j: float
    budget_bound: bool
    extra: tuple[float, ...] = ()


Step = Callable[[NDArray[np.int64], NDArray[np.int64], np.random.Generator], TreeStep]
"""``step(requests, contexts, rng)``: one iteration of the running ``requests`` (indices
into the workload's table), each after ``contexts[i]`` cached tokens."""


def serve_tree_table(
    table: pd.DataFrame,
    *,
    step: Step,
    target: ModelCard,
    hardware: HardwareCard,
    dtype: str | None,
    proposer: Proposer | None,
    cap: int,
    lookahead: int,
    kv_capacity_tokens: int | None,
    extra_columns: Sequence[str],
    rng: np.random.Generator,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Serve the requests of ``table`` (module docstring): the requests table and the
    iteration table (:data:`~specsim.sim.records.ITERATION_COLUMNS`, ``accepted``,
    ``budget_bound``, then ``extra_columns``). At most ``cap`` sequences run; with
    ``kv_capacity_tokens``, a request is admitted (first come, first served, none passing
    the head of the queue) when its prompt, output and ``lookahead`` positions fit beside
    the running requests' reservations, released when it finishes. Prefill as
    :func:`prefill_cost` with ``proposer``; decoding as ``step``."""
    table = table.reset_index(drop=True)
    arrival = table["arrival_s"].to_numpy(dtype=np.float64)
    prompt = table["prompt_tokens"].to_numpy().astype(np.int64)
    out_tok = table["output_tokens"].to_numpy().astype(np.int64)
    n = len(table)
    check_positions(target, context=prompt, new_tokens=out_tok + lookahead, name="workload")
    reserve = prompt + out_tok + lookahead
    kv = kv_capacity_tokens
    if kv is not None and n and int(reserve.max()) > kv:
        i = int(np.argmax(reserve))
        raise ValueError(
            f"kv_capacity_tokens: {kv} tokens cannot hold request {i} (prompt {prompt[i]} + "
            f"output {out_tok[i]} + one pass's {lookahead} positions)"
        )
    order = np.argsort(arrival, kind="stable")
    first_tok, finish = np.full(n, np.nan), np.full(n, np.nan)
    left = out_tok.copy()  # tokens still to emit
    rows: list[tuple[float, ...]] = []
    extra: list[tuple[float, ...]] = []
    blank = (0.0, 0.0) + (0.0,) * len(extra_columns)
    waiting: deque[int] = deque()
    running: list[int] = []
    t, nxt, done, used = 0.0, 0, 0, 0
    while done < n:
        if not running and not waiting and nxt < n:
            t = max(t, float(arrival[order[nxt]]))
        while nxt < n and arrival[order[nxt]] <= t:
            waiting.append(int(order[nxt]))
            nxt += 1
        start = t
        admitted: list[int] = []
        while waiting and len(running) + len(admitted) < cap:
            if kv is not None and used + int(reserve[waiting[0]]) > kv:
                break
            used += int(reserve[waiting[0]])
            admitted.append(waiting.popleft())
        prefill_s = energy = 0.0
        if admitted:
            prefill_s, energy = prefill_cost(
                prompt[admitted], target=target, hardware=hardware, dtype=dtype, proposer=proposer
            )
            t += prefill_s
            for i in admitted:
                first_tok[i] = t
                left[i] -= 1
                if left[i] == 0:
                    finish[i] = t
                    done += 1
                    used -= int(reserve[i])
                else:
                    running.append(i)
        b = len(running)
        if b == 0:
            rows.append((start, t, prefill_s, 0.0, 0, len(admitted), 0, 0, 0, 0, 0, energy))
            extra.append(blank)
            continue
        seqs = np.asarray(running, dtype=np.int64)
        ctx = prompt[seqs] + (out_tok[seqs] - left[seqs]) - 1  # cached: all but the root
        s = step(seqs, ctx, rng)
        t += s.verify_s + s.draft_s
        emit = np.minimum(s.accepted + 1, left[seqs])
        left[seqs] -= emit
        nodes = int(s.nodes.sum())
        wasted = nodes + b - int(emit.sum())
        rows.append(
            (
                start,
                t,
                prefill_s,
                s.draft_s,
                b,
                len(admitted),
                nodes,
                nodes + b,
                wasted,
                wasted,
                int(emit.sum()),
                energy + s.energy_j,
            )
        )
        extra.append((float(s.accepted.sum()), float(s.budget_bound), *s.extra))
        fin = [int(i) for i in seqs[left[seqs] == 0]]
        for i in fin:
            finish[i] = t
            used -= int(reserve[i])
        done += len(fin)
        running = [int(i) for i in seqs[left[seqs] > 0]]
    req = table.copy()
    req["first_token_s"] = first_tok
    req["finish_s"] = finish
    it = iteration_table(rows)
    ex = np.asarray(extra, dtype=np.float64).reshape(-1, 2 + len(extra_columns))
    it["accepted"] = ex[:, 0].astype(np.int64)
    it["budget_bound"] = ex[:, 1].astype(bool)
    for j, name in enumerate(extra_columns):
        it[name] = ex[:, 2 + j]
    return req, it


def plain_twin(
    table: pd.DataFrame,
    *,
    target: ModelCard,
    hardware: HardwareCard,
    dtype: str | None,
    cap: int,
    kv_capacity_tokens: int | None,
    rng: np.random.Generator,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same requests served without speculation by the same scheduler: every iteration
    verifies each sequence's root only, nothing is drafted, the prefill is the target's
    alone (:func:`serve_tree_table`; the run's ``cap`` and KV capacity, one position of
    lookahead). Draws nothing from ``rng``."""
    verify = TreeVerify(target, hardware, dtype)

    def step(seqs: NDArray[np.int64], ctx: NDArray[np.int64], rng: np.random.Generator) -> TreeStep:
        ver_s, ver_e = verify.cost([()] * len(seqs), ctx)
        zero = np.zeros(len(seqs), dtype=np.int64)
        return TreeStep(zero, zero, ver_s, 0.0, ver_e, False)

    return serve_tree_table(
        table,
        step=step,
        target=target,
        hardware=hardware,
        dtype=dtype,
        proposer=None,
        cap=cap,
        lookahead=1,
        kv_capacity_tokens=kv_capacity_tokens,
        extra_columns=(),
        rng=rng,
    )
