"""Serving many requests with token trees: continuous batching under a verified-position budget.

One accelerator serves a workload (``workload.sample(rng)``: arrival, prompt and output
length per request). Every iteration, as in :mod:`specsim.sim.serving`:

1. waiting requests are admitted first-come first-served while the batch has room
   (``max_batch``, and at most ``position_budget`` sequences: each needs its root); the
   admitted prompts are prefilled in one target pass (and one draft-model pass for a
   :class:`~specsim.proposers.DraftModel`), which gives each its first token (TTFT); a
   one-token request is then done;
2. every running sequence verifies the token tree ``parents`` (acceptance by depth and
   rank, :class:`~specsim.proposers.RankAcceptance`), all of them in **one** target pass
   with a tree attention mask, priced by :func:`specsim.cost.pass_aggregates_cost` on the
   sums of :func:`specsim.proposers.verify_shape` over the batch (each sequence at its own
   context), after the proposer drafts the batch's trees (its ``draft_cost`` at the batch,
   at the batch's mean context rounded: drafting's context term is the small one);
3. each sequence's acceptance walk is sampled (:func:`specsim.sim.trees.sample_tree_accepts`:
   children tried in rank order, SpecInfer's multi-step verification, Miao et al.,
   ASPLOS 2024) and its accepted path plus one token is emitted, cut at the request's last
   token; finished requests leave.

**The position budget.** A pass of ``B`` sequences verifying ``n`` nodes each computes
``B (n + 1)`` positions. With ``position_budget = P`` and ``B (n + 1) > P``, every
sequence's tree is cut to the same ``k = P // B - 1`` nodes (:func:`prune_tree`): nodes
are taken greedily in order of decreasing reach, the probability that the node is on the
accepted path (:func:`specsim.theory.trees.tree_reach`, Sequoia's positional model, Chen
et al. 2024, Section 3), among the nodes whose parent and earlier sibling are already
taken. A node's reach never exceeds its parent's, so for tables whose acceptance falls
with rank this is simply the ``k`` nodes of highest reach; the closure keeps every
node's depth and rank, so the pruned tree's tokens per pass are its own closed form.

**What is counted** per iteration (:data:`specsim.sim.records.ITERATION_COLUMNS`, plus
``nodes`` per sequence, ``accepted`` nodes over the batch before the cut at requests'
ends, and ``budget_bound``): ``positions`` verified, ``positions_wasted`` (off the
accepted paths, or past a request's end), ``emitted``. Not modelled: a KV-memory limit
(admission is bounded by ``max_batch`` and the budget only), paging, chunked prefill.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim.cards import HardwareCard, ModelCard
from specsim.cost import PassShape, pass_aggregates_cost, pass_cost
from specsim.cost.checks import check_positions
from specsim.proposers import DraftModel, Proposer, RankAcceptance, check_tree, verify_shape
from specsim.sim.records import ServingResult, iteration_table
from specsim.sim.source import check_whole
from specsim.sim.trees import sample_tree_accepts
from specsim.sim.workload import Workload
from specsim.theory.trees import tree_reach

__all__ = ["TreeServingConfig", "TreeServingResult", "prune_tree", "simulate_tree_serving"]


def prune_tree(parents: Sequence[int], acceptance: RankAcceptance, k: int) -> tuple[int, ...]:
    """``parents`` cut to ``k`` nodes: greedily the node of highest reach among those whose
    parent and earlier sibling are kept (ties: the earlier node), renumbered in the original
    order (so topological, siblings in rank order). ``k >= len(parents)``: the tree itself.

    >>> acc = RankAcceptance(accept=((0.8, 0.5), (0.6, 0.3)))
    >>> prune_tree((-1, -1, 0, 0, 1), acc, 3)  # reach .8, .1, .48, .096, .06
    (-1, -1, 0)
    """
    tree = check_tree(parents)
    check_whole(k, "k", minimum=0)
    if k >= len(tree):
        return tree
    reach = tree_reach(list(tree), acceptance.node_table(tree))
    first: dict[int, int] = {}  # each node's first child
    after: dict[int, int] = {}  # each node's next sibling
    last: dict[int, int] = {}
    for i, p in enumerate(tree):
        if p in last:
            after[last[p]] = i
        else:
            first[p] = i
        last[p] = i
    keep: list[int] = []
    heap = [(-float(reach[first[-1]]), first[-1])] if tree else []
    while heap and len(keep) < k:
        _, i = heapq.heappop(heap)
        keep.append(i)
        for j in (first.get(i), after.get(i)):
            if j is not None:
                heapq.heappush(heap, (-float(reach[j]), j))
    keep.sort()
    index = {old: new for new, old in enumerate(keep)}
    return tuple(-1 if tree[i] < 0 else index[tree[i]] for i in keep)


@dataclass(frozen=True, kw_only=True)
class TreeServingConfig:
    """A tree-serving run (module docstring): the ``workload``, the tree ``parents`` each
    sequence verifies, the ``proposer`` (its acceptance and drafting cost), the ``target``
    and ``hardware`` cards, ``max_batch`` sequences at most and ``position_budget``
    verified positions per iteration at most (None: no limit; at least 2, the root and one
    node of one sequence)."""

    workload: Workload
    parents: tuple[int, ...]
    proposer: Proposer
    target: ModelCard
    hardware: HardwareCard
    max_batch: int = 64
    position_budget: int | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", check_tree(self.parents))
        check_whole(self.max_batch, "max_batch", minimum=1)
        if self.position_budget is not None:
            b = self.position_budget
            if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 2:
                raise ValueError(
                    f"position_budget: expected an integer >= 2 verified positions per "
                    f"iteration (one sequence's root and one node), got {b!r}"
                )
        self.proposer.check_target(self.target)

    def nodes(self, batch: int) -> int:
        """Nodes per sequence in a pass of ``batch`` sequences (the budget's cut)."""
        n = len(self.parents)
        if self.position_budget is None:
            return n
        return min(n, self.position_budget // batch - 1)

    @property
    def batch_cap(self) -> int:
        """Sequences at most: ``max_batch``, and one root each within the budget."""
        cap = self.max_batch
        return cap if self.position_budget is None else min(cap, self.position_budget)


@dataclass(frozen=True)
class TreeServingResult:
    """The per-request table (``arrival_s``, ``prompt_tokens``, ``output_tokens``,
    ``first_token_s``, ``finish_s``) and the per-iteration table (module docstring)."""

    requests: pd.DataFrame
    iterations: pd.DataFrame

    def metrics(self) -> dict[str, Any]:
        """The serving metrics record (:meth:`specsim.sim.records.ServingResult.metrics`:
        ``ttft_p50_s``, ``tpot_p50_s``, ``throughput_tokens_per_s``, ...; no plain twin),
        plus ``tokens_per_pass`` (the walk's tokens per sequence and pass, before the cut at
        requests' ends) with its standard error ``tokens_per_pass_se`` (ratio estimator over
        iterations), ``mean_nodes`` per sequence and pass, ``budget_bound_share`` of the
        decoding iterations and ``discarded_share`` of the verified positions."""
        rec = ServingResult(requests_spec=self.requests, iterations_spec=self.iterations)
        out = {k: v for k, v in rec.metrics().items()
               if not k.startswith("plain_") and k not in ("speedup", "tpot_speedup")}  # fmt: skip
        it = self.iterations[self.iterations["batch"] > 0]
        b = it["batch"].to_numpy(dtype=np.float64)
        tok = it["accepted"].to_numpy(dtype=np.float64) + b
        rate = float(tok.sum() / b.sum()) if b.size else math.nan
        se = math.inf
        if b.size > 1:
            se = float((tok - rate * b).std(ddof=1) / (math.sqrt(b.size) * b.mean()))
        positions = float(it["positions"].sum())
        out.update(
            tokens_per_pass=rate, tokens_per_pass_se=se,
            mean_nodes=float((it["nodes"] * it["batch"]).sum() / b.sum()) if b.size else 0.0,
            budget_bound_share=float(it["budget_bound"].mean()) if b.size else 0.0,
            discarded_share=float(it["positions_wasted"].sum()) / positions if positions else 0.0,
        )  # fmt: skip
        return out


def _prefill(cfg: TreeServingConfig, prompts: NDArray[np.int64]) -> tuple[float, float]:
    """Seconds and joules of prefilling ``prompts`` in one pass (target, and a draft model)."""
    shape = PassShape.prefill(prompts)
    cost = pass_cost(cfg.target, cfg.hardware, shape, dtype=cfg.dtype)
    t, e = cost.time_s, cost.energy_j
    if isinstance(cfg.proposer, DraftModel):
        d = pass_cost(cfg.proposer.card, cfg.hardware, shape, dtype=cfg.proposer.dtype)
        t, e = t + d.time_s, e + d.energy_j
    return float(t), float(e)


class _Pass:
    """The pruned tree, its own attention pairs and its closed-form key, per node count."""

    def __init__(self, cfg: TreeServingConfig) -> None:
        self.cfg = cfg
        self.trees: dict[int, tuple[tuple[int, ...], float]] = {}

    def tree(self, k: int) -> tuple[tuple[int, ...], float]:
        if k not in self.trees:
            t = prune_tree(self.cfg.parents, self.cfg.proposer.acceptance, k)
            own = float(verify_shape(t, context=0, batch=1).pairs()[0])
            self.trees[k] = (t, own)
        return self.trees[k]

    def cost(self, tree: tuple[int, ...], own: float,
             ctx: NDArray[np.int64]) -> tuple[float, float, float]:  # fmt: skip
        """Verification and drafting of the batch: (verify seconds, draft seconds, joules)."""
        cfg, b = self.cfg, int(ctx.shape[0])
        n1, total = float(len(tree) + 1), float(ctx.sum())
        ver = pass_aggregates_cost(cfg.target, cfg.hardware, batch=b, tokens=b * n1,
                                   context_tokens=total, pairs=n1 * total + b * own,
                                   dtype=cfg.dtype)  # fmt: skip
        d_t = d_e = 0.0
        if tree:
            d = cfg.proposer.draft_cost(tree, target=cfg.target, hardware=cfg.hardware, batch=b,
                                        context=int(round(total / b)))  # fmt: skip
            d_t, d_e = float(d.time_s), float(d.energy_j)
        return float(ver.time_s), d_t, float(ver.energy_j) + d_e


def simulate_tree_serving(config: TreeServingConfig,
                          rng: np.random.Generator) -> TreeServingResult:  # fmt: skip
    """Serve the workload (module docstring); every draw comes from ``rng``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    cfg = config
    table = cfg.workload.sample(rng).reset_index(drop=True)
    arrival = table["arrival_s"].to_numpy(dtype=np.float64)
    prompt = table["prompt_tokens"].to_numpy().astype(np.int64)
    out_tok = table["output_tokens"].to_numpy().astype(np.int64)
    n = len(table)
    check_positions(cfg.target, context=prompt, new_tokens=out_tok + len(cfg.parents) + 1,
                    name="workload")  # fmt: skip
    order = np.argsort(arrival, kind="stable")
    first_tok, finish = np.full(n, np.nan), np.full(n, np.nan)
    left = out_tok.copy()  # tokens still to emit
    passes = _Pass(cfg)
    acc = cfg.proposer.acceptance
    cap = cfg.batch_cap
    rows: list[tuple[float, ...]] = []
    extra: list[tuple[int, int, bool]] = []
    waiting: deque[int] = deque()
    running: list[int] = []
    t, nxt, done = 0.0, 0, 0
    while done < n:
        if not running and not waiting and nxt < n:
            t = max(t, float(arrival[order[nxt]]))
        while nxt < n and arrival[order[nxt]] <= t:
            waiting.append(int(order[nxt]))
            nxt += 1
        start = t
        admitted: list[int] = []
        while waiting and len(running) + len(admitted) < cap:
            admitted.append(waiting.popleft())
        prefill_s = energy = 0.0
        if admitted:
            prefill_s, energy = _prefill(cfg, prompt[admitted])
            t += prefill_s
            for i in admitted:
                first_tok[i] = t
                left[i] -= 1
                if left[i] == 0:
                    finish[i] = t
                    done += 1
                else:
                    running.append(i)
        b = len(running)
        if b == 0:
            rows.append((start, t, prefill_s, 0.0, 0, len(admitted), 0, 0, 0, 0, 0, energy))
            extra.append((0, 0, False))
            continue
        k = cfg.nodes(b)
        tree, own = passes.tree(k)
        seqs = np.asarray(running, dtype=np.int64)
        ctx = prompt[seqs] + (out_tok[seqs] - left[seqs]) - 1  # cached: all but the root
        ver_s, draft_s, e_pass = passes.cost(tree, own, ctx)
        t += ver_s + draft_s
        a = sample_tree_accepts(tree, acc, passes=b, rng=rng)
        emit = np.minimum(a + 1, left[seqs])
        left[seqs] -= emit
        positions = b * (k + 1)
        wasted = positions - int(emit.sum())
        rows.append((start, t, prefill_s, draft_s, b, len(admitted), b * k, positions, wasted,
                     wasted, int(emit.sum()), energy + e_pass))  # fmt: skip
        extra.append((k, int(a.sum()), k < len(cfg.parents)))
        fin = [int(i) for i in seqs[left[seqs] == 0]]
        for i in fin:
            finish[i] = t
        done += len(fin)
        running = [int(i) for i in seqs[left[seqs] > 0]]
    req = table.copy()
    req["first_token_s"] = first_tok
    req["finish_s"] = finish
    it = iteration_table(rows)
    ex = np.asarray(extra, dtype=np.int64).reshape(-1, 3)
    it["nodes"], it["accepted"] = ex[:, 0], ex[:, 1]
    it["budget_bound"] = ex[:, 2].astype(bool)
    return TreeServingResult(requests=req, iterations=it)
