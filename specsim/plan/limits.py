"""Where an option stops paying, the rate a deployment can serve, and what would change the
answer (acceptance +-0.1, the next stack profile, the next card).

All of these are closed forms on the cards, evaluated by the tree optimizer
(:func:`specsim.policies.tree_optimizer.optimize_tree`, each call pricing every candidate
tree at one batch), so they cost milliseconds:

- **stops paying (batch)**: over batches 1, 2, 4, ..., :data:`BATCHES`, the batches at
  which some tree beats no speculation, and the first batch above the last of them (the
  pay-off need not be monotone: an MoE target's verification reads more experts per
  drafted token at a small batch);
- **stops paying (rate)**: the arrival rate whose mean running batch is that batch, by
  Little's law at plain decoding: ``rate = B / (t(B) * L_out)`` with ``t(B)`` the plain
  step at batch ``B`` and ``L_out`` the mean output length (prefill ignored, so an upper
  estimate; said so where it is printed);
- **serveable rate**: the rate at which a request's plain work at full batch
  (:func:`specsim.sim.results.stability.plain_work_s`, the engine's own ``offered_load``
  denominator) fills the accelerator: ``1 / work``; for an option, the decode part of
  that work divided by its tree's closed-form speedup at that batch (a rate above it is
  NOT STABLE for that row, however short the run);
- **what would change the answer**: the best option's speedup (tokens per second over no
  speculation, at the load's batch) with every acceptance shifted by +-0.1, under each other
  stack profile that the deployment accepts, and on the next hardware card up in memory
  bandwidth that holds the weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.cards import list_hardware, list_runtimes
from specsim.cost.deployment import Deployment
from specsim.cost.memory import footprint
from specsim.plan.evaluation import BUDGET, serving_config
from specsim.plan.options import Option, PlanRequest
from specsim.plan.served_limit import ServedLimit
from specsim.policies.tree_optimizer import (
    TreePlan,
    best_trees,
    chain_tree,
    evaluate_tree,
    tree_refusal,
    tree_tokens,
)
from specsim.proposers import DraftCost, Proposer, RankAcceptance
from specsim.sim.results.stability import plain_work_s

__all__ = [
    "BATCHES",
    "Shifted",
    "Limit",
    "serveable_rate",
    "speedup_at",
    "stops_paying",
    "what_changes",
]

BATCHES = tuple(2**i for i in range(10))
"""The batches the stop-paying search tries: 1 to 512."""


class Shifted:
    """A proposer whose acceptance table is shifted by ``delta`` (clipped to [0, 1]); its
    drafting cost is the original's (a what-if on acceptance alone)."""

    def __init__(self, inner: Proposer, delta: float) -> None:
        self.inner = inner
        acc = inner.acceptance
        rows = tuple(tuple(min(1.0, max(0.0, a + delta)) for a in row) for row in acc.accept)
        self._acceptance = dataclasses.replace(
            acc, accept=rows, source=f"{acc.source} shifted by {delta:+g}"
        )

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def acceptance(self) -> RankAcceptance:
        return self._acceptance

    @property
    def overlappable(self) -> bool:
        return self.inner.overlappable

    def check_target(self, target: Any) -> None:
        self.inner.check_target(target)

    def draft_costs(self, parents: Sequence[int], **kw: Any) -> DraftCost:
        return self.inner.draft_costs(parents, **kw)

    def draft_cost(self, parents: Sequence[int], **kw: Any) -> DraftCost:
        return self.inner.draft_cost(parents, **kw)

    def memory_bytes(self, deployment: Deployment) -> float:
        return self.inner.memory_bytes(deployment)


@dataclass(frozen=True)
class Limit:
    """Where an option pays, over the batches tried (:data:`BATCHES` whose KV cache fits, up
    to ``largest``): ``pays`` lists those at which its best tree beats no speculation;
    ``batch`` is the first batch tried above the last of them (None: it still pays at
    ``largest``, or never pays) and ``rate_per_s`` the rate, by Little's law, whose mean
    batch that is; ``served``: the served search backing it (``--precise`` with a rate,
    :func:`specsim.plan.served_limit.served_stop`), else None."""

    batch: int | None
    rate_per_s: float | None
    largest: int
    pays: tuple[int, ...]
    served: ServedLimit | None = None


def largest_batch(deployment: Deployment, proposer: Proposer, *, context: int) -> int:
    """The most sequences of ``context`` tokens (plus a full tree each) whose KV cache fits
    on a device beside the weights and the proposer's (0: not one)."""
    fp = footprint(
        deployment.target, tensor_parallel=deployment.tensor_parallel, formats=deployment.formats()
    )
    free = deployment.hardware.mem_capacity - fp.weights_bytes - proposer.memory_bytes(deployment)
    return max(0, int(free / (fp.kv_bytes_per_token * (context + BUDGET + 1))))


def candidates(acceptance: RankAcceptance) -> list[tuple[int, ...]]:
    """The trees the what-ifs and the stop-paying search price: for each node count up to
    :data:`~specsim.plan.evaluation.BUDGET`, the best tree of the optimizer's program
    (:func:`specsim.policies.tree_optimizer.best_trees`, the most expected tokens per pass of
    that size), and the chains. A speed trick: the full optimizer also prices the best tree
    of every depth bound and the k-ary trees, about six times more; at the load's batch it
    runs in full (:func:`specsim.plan.evaluation.best_plan`)."""
    depth = 12 if acceptance.max_depth is None else min(12, acceptance.max_depth)
    best: dict[int, tuple[float, tuple[int, ...]]] = {}
    for t in best_trees(acceptance, budget=BUDGET, max_depth=depth):
        e = tree_tokens(t, acceptance)
        if len(t) not in best or e > best[len(t)][0]:
            best[len(t)] = (e, t)
    chains = [chain_tree(n) for n in range(1, depth + 1)]
    return list(dict.fromkeys([*(t for _, t in best.values()), *chains]))


def _best(
    proposer: Proposer,
    deployment: Deployment,
    pool: Sequence[tuple[int, ...]],
    *,
    batch: int,
    context: int,
) -> tuple[TreePlan, TreePlan]:
    """The fastest tree of ``pool`` (the empty tree competing) and no speculation, at
    ``batch`` sequences of ``context`` tokens."""

    def price(tree: tuple[int, ...]) -> TreePlan:
        return evaluate_tree(
            tree, proposer=proposer, deployment=deployment, batch=batch, context=context
        )

    none = price(())
    plans = [price(t) for t in pool if t]
    best = max([none, *plans], key=lambda p: (p.tokens_per_s, -p.nodes))
    return best, none


def speedup_at(
    proposer: Proposer,
    deployment: Deployment,
    *,
    batch: int,
    context: int,
    fixed: tuple[int, ...] | None = None,
) -> tuple[float, tuple[int, ...]]:
    """The best tree's tokens per second over no speculation at ``batch`` (of
    :func:`candidates`), and the tree; with ``fixed``, that tree's, whether or not it pays."""
    if fixed is not None:
        tree, none = (
            evaluate_tree(t, proposer=proposer, deployment=deployment, batch=batch, context=context)
            for t in (fixed, ())
        )
        return tree.tokens_per_s / none.tokens_per_s, fixed
    best, none = _best(
        proposer, deployment, candidates(proposer.acceptance), batch=batch, context=context
    )
    return best.tokens_per_s / none.tokens_per_s, best.parents


def stops_paying(
    option: Option, deployment: Deployment, *, context: int, mean_output: float
) -> Limit:
    """The option's :class:`Limit` (module docstring)."""
    if option.proposer is None:
        raise ValueError("no speculation has no limit")
    pool = candidates(option.proposer.acceptance) if option.fixed is None else [option.fixed]
    most = largest_batch(deployment, option.proposer, context=context)
    tried = [b for b in BATCHES if b <= most] or [1]
    pays, steps = [], {}
    for b in tried:
        best, none = _best(option.proposer, deployment, pool, batch=b, context=context)
        steps[b] = none.time_s  # one plain pass over b sequences emits b tokens
        if best.parents:
            pays.append(b)
    after = [b for b in tried if pays and b > pays[-1]]
    if not after:
        return Limit(batch=None, rate_per_s=None, largest=tried[-1], pays=tuple(pays))
    b = after[0]
    rate = b / (steps[b] * mean_output)
    return Limit(batch=b, rate_per_s=rate, largest=tried[-1], pays=tuple(pays))


def serveable_rate(request: PlanRequest, proposer: Proposer, tree: tuple[int, ...] = ()) -> float:
    """Requests per second the deployment serves at full batch (module docstring), for the
    request's workload: without speculation (``tree`` empty), or verifying ``tree`` every
    pass, its decode work divided by the tree's closed-form speedup at that batch (its
    tokens per second over no speculation's, drafting included: below 1 where the tree
    does not pay at full batch)."""
    cfg = serving_config(request, proposer, ())
    table = cfg.workload.sample(np.random.default_rng(request.seed))
    prompt = table["prompt_tokens"].to_numpy(dtype=np.int64)
    output = table["output_tokens"].to_numpy(dtype=np.int64)

    def work(out: np.ndarray) -> float:
        return plain_work_s(
            cfg.card_cost(),
            prompt_tokens=prompt,
            output_tokens=out,
            max_batch=cfg.max_batch,
            kv_capacity_tokens=cfg.kv_capacity_tokens,
            max_gamma=0,
        )

    whole = work(output)
    if not tree:
        return 1.0 / whole
    pre = work(np.ones_like(output))  # one output token: the prefill's share alone
    p, o = float(prompt.mean()), float(output.mean())
    b = cfg.max_batch
    if cfg.kv_capacity_tokens is not None:  # as plain_work_s sizes the full batch
        b = min(b, max(1, int(cfg.kv_capacity_tokens // (p + o))))
    dep, ctx = request.deployment, max(1, round(p + o / 2))
    spec, none = (
        evaluate_tree(t, proposer=proposer, deployment=dep, batch=b, context=ctx)
        for t in (tree, ())
    )
    return 1.0 / (pre + (whole - pre) * none.tokens_per_s / spec.tokens_per_s)


def _next_card(
    deployment: Deployment,
    proposer: Proposer,
    *,
    batch: int,
    context: int,
    fixed: tuple[int, ...] | None,
) -> dict[str, Any] | None:
    """The what-if row on the next hardware card up in memory bandwidth that takes the
    deployment (its formats, with the card's own stack numbers) and holds the weights and
    the proposer beside a KV cache."""
    bw = deployment.hardware.mem_bandwidth
    for hw in sorted(list_hardware(), key=lambda h: h.mem_bandwidth):
        if hw.mem_bandwidth <= bw:
            continue
        try:
            dep = dataclasses.replace(deployment, hardware=hw, runtime=None)
            if largest_batch(dep, proposer, context=context) < batch:
                continue  # the load's batch does not fit there
            s, t = speedup_at(proposer, dep, batch=batch, context=context, fixed=fixed)
        except ValueError:
            continue  # this card cannot take the deployment (a format, a split)
        return {"what": f"next card {hw.slug}", "speedup": s, "tree": list(t)}
    return None


def _stacks(deployment: Deployment, *, branching: tuple[int, ...] | None) -> list[Deployment]:
    """The deployment under every other stack profile it accepts (that verifies the fixed
    tree ``branching``, when it branches)."""
    rt = deployment.runtime
    current = deployment.hardware.runtime if rt is None else rt.slug  # the card's default
    out = []
    for rt in list_runtimes():
        if rt.slug == current:
            continue
        try:
            dep = dataclasses.replace(deployment, runtime=rt)
        except ValueError:
            continue  # fitted on another device: the deployment refuses it
        if branching and branching != chain_tree(len(branching)) and tree_refusal(dep):
            continue  # chains only there: the fixed tree is not an option under it
        out.append(dep)
    return out


def what_changes(
    option: Option, deployment: Deployment, *, batch: int, context: int
) -> list[dict[str, Any]]:
    """The best option's speedup under each what-if (module docstring), one row each:
    ``what``, ``speedup`` (tokens per second over no speculation), ``tree``."""
    if option.proposer is None:
        raise ValueError("no speculation has no what-if")
    p = option.proposer
    at: dict[str, Any] = {"batch": batch, "context": context, "fixed": option.fixed}
    rows: list[dict[str, Any]] = []
    base, tree = speedup_at(p, deployment, **at)
    rows.append({"what": "as planned", "speedup": base, "tree": list(tree)})
    for delta in (-0.1, 0.1):
        s, t = speedup_at(Shifted(p, delta), deployment, **at)
        rows.append({"what": f"acceptance {delta:+.1f}", "speedup": s, "tree": list(t)})
    for dep in _stacks(deployment, branching=option.fixed):
        s, t = speedup_at(p, dep, **at)
        slug = dep.runtime.slug if dep.runtime is not None else "card numbers"
        rows.append({"what": f"stack profile {slug}", "speedup": s, "tree": list(t)})
    nxt = _next_card(deployment, p, **at)
    if nxt is not None:
        rows.append(nxt)
    return rows
