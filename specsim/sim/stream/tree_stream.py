"""One request decoded pass by pass with a token tree: the single-stream tree simulator.

Each pass the proposer drafts the tree ``parents`` (one step per depth over the
frontier, or one head evaluation: the proposer's cost), the target verifies the
last emitted token and every node in one pass with a tree attention mask
(:func:`specsim.proposers.verify_shape`, priced on the run's
:class:`~specsim.cost.deployment.Deployment` at the pass's context), and the accepted
path plus one token is emitted. The acceptance walk is sampled, not averaged: at each
accepted node the children are tried in rank order, the rank-``r`` child at depth ``d``
accepted with the conditional probability ``accept[d - 1][r]`` given its earlier siblings were
rejected (Sequoia's positional model, Chen et al. 2024, Section 3.1; the walk is
SpecInfer's multi-step verification, Miao et al., ASPLOS 2024). Verified nodes off
the accepted path are discarded work, counted per pass as for chains.

The mean tokens per pass converges to :func:`specsim.theory.expected_tokens_tree`;
``tests/sim/stream/test_sim_trees.py`` checks it within 4.5 standard errors, and ``specsim
validate`` does too (:mod:`specsim.validate.tree_forms`).

:func:`simulate_dynamic_tree_stream` chooses the tree every pass from the draft's
confidence, as EAGLE-2 does (Li et al. 2024, arXiv:2406.16858, Section 4; the policy and
the world of per-node acceptances are in :mod:`specsim.sim.stream.tree_policies`), and
:func:`compare_dynamic_static` sets it beside a fixed tree of the same budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost.checks import check_positions
from specsim.cost.deployment import Deployment
from specsim.cost.shape import tree_pairs
from specsim.proposers import (
    Proposer,
    RankAcceptance,
    check_proposer,
    check_tree,
    frontier_widths,
    tree_depths,
    verify_shape,
)
from specsim.proposers.kinds import check_serialized
from specsim.sim.costs.source import check_whole
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence

__all__ = [
    "TreeStreamConfig",
    "TreeStreamResult",
    "DynamicTreeConfig",
    "sample_tree_accepts",
    "simulate_tree_stream",
    "simulate_dynamic_tree_stream",
    "compare_dynamic_static",
]


def sample_tree_accepts(
    parents: Sequence[int], acceptance: RankAcceptance, *, passes: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Accepted nodes (the depth reached along the accepted path) in each of ``passes``
    independent verifications of the tree ``parents``.

    One uniform per node and pass: a node *passes* when its uniform is below its
    conditional acceptance; it is *accepted* when it passes, no earlier sibling
    passed, and its parent was accepted (the walk tries children in rank order and
    takes the first that passes).
    """
    tree = check_tree(parents)
    check_whole(passes, "passes", minimum=0)
    n = len(tree)
    if n == 0:
        return np.zeros(passes, dtype=np.int64)
    depths, ranks = tree_depths(tree), acceptance.rank_of(tree)
    a = np.array([acceptance.conditional(d, r) for d, r in zip(depths, ranks, strict=True)])
    ok = rng.random((passes, n)) < a
    reached = np.zeros((passes, n), dtype=bool)
    taken: dict[int, NDArray[np.bool_]] = {}  # per parent: some earlier child passed
    root = np.ones(passes, dtype=bool)
    for i, p in enumerate(tree):
        before = taken.get(p, np.zeros(passes, dtype=bool))
        reached[:, i] = ok[:, i] & ~before & (root if p < 0 else reached[:, p])
        taken[p] = before | ok[:, i]
    return reached.sum(axis=1).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class _StreamFields:
    """The fields both single-stream tree configs share, and their checks: the proposer, the
    deployment it drafts for (target, hardware, stack, formats, parallelism), the tokens."""

    proposer: Proposer
    deployment: Deployment
    tokens: int
    prompt: int = 0
    requests: int = 1

    def _check(self, nodes: int) -> None:
        """Check the shared fields; a pass verifies at most ``nodes`` nodes."""
        check_whole(self.tokens, "tokens", minimum=1)
        check_whole(self.requests, "requests", minimum=1)
        check_whole(self.prompt, "prompt", minimum=0)
        check_proposer(self.proposer)
        if not isinstance(self.deployment, Deployment):
            raise TypeError(
                f"deployment: expected a Deployment, got {type(self.deployment).__name__}"
            )
        check_serialized(self.deployment, where="the single-stream tree simulator")
        self.proposer.check_target(self.deployment.target)
        check_positions(
            self.deployment.target,
            context=self.prompt,
            new_tokens=self.tokens + nodes + 1,
            name="tokens",
        )


@dataclass(frozen=True, kw_only=True)
class TreeStreamConfig(_StreamFields):
    """A single-stream tree run: ``requests`` requests one after another, each decoding at
    least ``tokens`` tokens after a ``prompt``, verifying ``parents`` every pass (at most
    ``budget`` nodes, when given). Several requests give long runs within the target's
    ``max_position``."""

    parents: tuple[int, ...]
    budget: int | None = None

    def __post_init__(self) -> None:
        tree = check_tree(self.parents)
        object.__setattr__(self, "parents", tree)
        if self.budget is not None:
            check_whole(self.budget, "budget", minimum=0)
            if len(tree) > self.budget:
                raise ValueError(
                    f"budget: {self.budget} verified nodes per pass is smaller than the tree's "
                    f"{len(tree)} nodes"
                )
        self._check(len(tree))


@dataclass(frozen=True, kw_only=True)
class TreeStreamResult:
    """Per pass: nodes accepted, tokens emitted, the context it ran at, its time (verify,
    draft) and energy; and the stream's summaries. ``nodes``: the tree's nodes (a dynamic
    tree's budget); a dynamic tree also gives each pass's ``pass_nodes`` and
    ``expected_tokens``, the tokens the pass emits on average given its nodes' acceptances."""

    nodes: int
    accepted: NDArray[np.int64]
    context: NDArray[np.int64]
    verify_s: NDArray[np.float64]
    draft_s: NDArray[np.float64]
    energy_j: NDArray[np.float64]
    pass_nodes: NDArray[np.int64] | None = None
    expected_tokens: NDArray[np.float64] | None = None

    @property
    def passes(self) -> int:
        return int(self.accepted.shape[0])

    @property
    def emitted(self) -> NDArray[np.int64]:
        return self.accepted + 1

    def metrics(self) -> dict[str, float]:
        """Tokens per pass (mean and standard error), tokens per second, energy per token,
        the discarded share of verified positions and the draft's share of the time."""
        e = self.emitted.astype(np.float64)
        tokens = float(e.sum())
        time = float(self.verify_s.sum() + self.draft_s.sum())
        se = float(e.std(ddof=1) / math.sqrt(e.size)) if e.size > 1 else math.inf
        nodes = self.nodes if self.pass_nodes is None else self.pass_nodes
        verified = float(np.sum(np.broadcast_to(nodes, e.shape) + 1.0))
        return {
            "passes": float(self.passes),
            "tokens": tokens,
            "tokens_per_pass": float(e.mean()),
            "tokens_per_pass_se": se,
            "time_s": time,
            "tokens_per_s": tokens / time,
            "energy_per_token_j": float(self.energy_j.sum()) / tokens,
            "discarded_share": float(np.sum(nodes - self.accepted)) / verified,
            "draft_share": float(self.draft_s.sum()) / time,
        }


def _request(cfg: TreeStreamConfig, rng: np.random.Generator) -> NDArray[np.int64]:
    """Accepted nodes of each pass of one request: passes until ``tokens`` are emitted."""
    accepted: list[NDArray[np.int64]] = []
    done = 0
    while done < cfg.tokens:  # at least one token a pass; draw about what is still needed
        chunk = sample_tree_accepts(
            cfg.parents, cfg.proposer.acceptance, passes=max(64, (cfg.tokens - done) // 2), rng=rng
        )
        emitted = np.cumsum(chunk + 1)
        keep = int(np.searchsorted(emitted, cfg.tokens - done)) + 1
        accepted.append(chunk[:keep])
        done += int(emitted[min(keep, chunk.size) - 1])
    return np.concatenate(accepted)


def simulate_tree_stream(config: TreeStreamConfig, rng: np.random.Generator) -> TreeStreamResult:
    """Run the requests (see the module docstring); each pass is priced at its own context."""
    cfg = config
    tree = cfg.parents
    parts = [_request(cfg, rng) for _ in range(cfg.requests)]
    a = np.concatenate(parts)
    context = np.concatenate(
        [cfg.prompt + np.concatenate([[0], np.cumsum(p + 1)[:-1]]) for p in parts]
    ).astype(np.int64)
    shape = verify_shape(tree, context=0, batch=1)
    own, n1 = float(shape.pairs()[0]), float(shape.tokens)  # pairs among the new positions
    ctx = context.astype(np.float64)
    dep = cfg.deployment
    pairs = tree_pairs(ctx, n1, own)
    ver = dep.aggregates_cost(batch=1, tokens=n1, context_tokens=ctx, pairs=pairs)
    if tree:
        draft = cfg.proposer.draft_costs(tree, deployment=dep, batch=1, context=context)
        d_time, d_energy = np.asarray(draft.time_s), np.asarray(draft.energy_j)
    else:
        d_time = d_energy = np.zeros(a.shape)
    return TreeStreamResult(
        nodes=len(tree),
        accepted=a,
        context=context,
        verify_s=np.asarray(ver.time_s, dtype=np.float64) + 0.0 * ctx,
        draft_s=d_time,
        energy_j=np.asarray(ver.energy_j) + d_energy,
    )


@dataclass(frozen=True, kw_only=True)
class DynamicTreeConfig(_StreamFields):
    """A single-stream run whose tree is chosen every pass by ``policy`` from the draft's
    confidence in a ``world`` of per-node acceptances around the proposer's rank table
    (:mod:`specsim.sim.stream.tree_policies`, EAGLE-2); the other fields as
    :class:`TreeStreamConfig`."""

    policy: ConfidenceTree
    world: NodeConfidence

    def __post_init__(self) -> None:
        self._check(self.policy.budget)


def simulate_dynamic_tree_stream(
    config: DynamicTreeConfig, rng: np.random.Generator
) -> TreeStreamResult:
    """Run the requests pass by pass: each pass the policy builds its tree, the walk is
    sampled on it, the target verifies the chosen nodes (tree attention) and the draft
    runs depth by depth over every node whose children it looked at."""
    cfg = config
    acc = cfg.proposer.acceptance
    accepted, context, nodes, expected, trees, examined = [], [], [], [], [], []
    for _ in range(cfg.requests):
        done = 0
        while done < cfg.tokens:
            step = cfg.policy.build(acc, cfg.world, rng)
            a = step.walk(rng)
            context.append(cfg.prompt + done)
            accepted.append(a)
            nodes.append(len(step.parents))
            expected.append(1.0 + step.reach())
            trees.append(step.parents)
            examined.append(step.examined)
            done += a + 1
    ctx = np.asarray(context, dtype=np.float64)
    own: dict[tuple[int, ...], float] = {}
    for t in trees:
        if t not in own:
            own[t] = float(verify_shape(t, context=0, batch=1).pairs()[0])
    n1 = np.asarray(nodes, dtype=np.float64) + 1.0
    own_pairs = np.asarray([own[t] for t in trees])
    ver = cfg.deployment.aggregates_cost(
        batch=1, tokens=n1, context_tokens=ctx, pairs=tree_pairs(ctx, n1, own_pairs)
    )
    d_time, d_energy = np.zeros(ctx.shape), np.zeros(ctx.shape)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(examined):  # passes whose draft ran the same steps: one call
        groups.setdefault(frontier_widths(t), []).append(i)
    ctx_int = np.asarray(context, dtype=np.int64)
    for idx in groups.values():
        sel = np.asarray(idx)
        draft = cfg.proposer.draft_costs(
            examined[idx[0]], deployment=cfg.deployment, batch=1, context=ctx_int[sel]
        )
        d_time[sel], d_energy[sel] = np.asarray(draft.time_s), np.asarray(draft.energy_j)
    return TreeStreamResult(
        nodes=cfg.policy.budget,
        accepted=np.asarray(accepted, dtype=np.int64),
        context=ctx_int,
        verify_s=np.asarray(ver.time_s, dtype=np.float64) + 0.0 * ctx,
        draft_s=d_time,
        energy_j=np.asarray(ver.energy_j) + d_energy,
        pass_nodes=np.asarray(nodes, dtype=np.int64),
        expected_tokens=np.asarray(expected, dtype=np.float64),
    )


def _rate_se(tokens: NDArray[np.float64], seconds: NDArray[np.float64]) -> float:
    """Standard error of ``sum(tokens) / sum(seconds)`` over independent passes (the ratio
    estimator's delta method: ``sd(tokens - R seconds) / (sqrt(n) mean(seconds))``)."""
    rate = float(tokens.sum() / seconds.sum())
    resid = tokens - rate * seconds
    return float(resid.std(ddof=1) / (math.sqrt(tokens.size) * seconds.mean()))


def compare_dynamic_static(
    *,
    static: Sequence[int],
    policy: ConfidenceTree,
    worlds: Sequence[NodeConfidence],
    proposer: Proposer,
    deployment: Deployment,
    tokens: int,
    requests: int,
    rng: np.random.Generator,
    prompt: int = 0,
) -> list[dict[str, Any]]:
    """Rows: the fixed tree ``static`` (its tokens per pass do not depend on the world: each
    node's draw averages to the table, :mod:`specsim.sim.stream.tree_policies`), then ``policy`` in
    each world; tokens per pass and tokens/s with their standard errors, and the dynamic
    tree's gain in tokens/s over the fixed one with the standard error of the gain."""
    common: dict[str, Any] = dict(
        proposer=proposer,
        deployment=deployment,
        tokens=tokens,
        requests=requests,
        prompt=prompt,
    )

    def row(kind: str, world: NodeConfidence | None, res: TreeStreamResult) -> dict[str, Any]:
        m = res.metrics()
        seconds = res.verify_s + res.draft_s
        return {
            "tree": kind,
            "concentration": math.nan if world is None else world.concentration,
            "noise": math.nan if world is None else world.noise,
            "passes": res.passes,
            "nodes": float(np.mean(res.pass_nodes if res.pass_nodes is not None else res.nodes)),
            "tokens_per_pass": m["tokens_per_pass"],
            "tokens_per_pass_se": m["tokens_per_pass_se"],
            "tokens_per_s": m["tokens_per_s"],
            "tokens_per_s_se": _rate_se(res.emitted.astype(np.float64), seconds),
            "discarded_share": m["discarded_share"],
        }

    base = row(
        "static",
        None,
        simulate_tree_stream(
            TreeStreamConfig(parents=tuple(static), budget=policy.budget, **common), rng
        ),
    )
    base.update(gain=0.0, gain_se=0.0)
    rows = [base]
    for world in worlds:
        dyn = simulate_dynamic_tree_stream(
            DynamicTreeConfig(policy=policy, world=world, **common), rng
        )
        r = row("dynamic", world, dyn)
        ratio = r["tokens_per_s"] / base["tokens_per_s"]
        r["gain"] = ratio - 1.0
        rel = (
            r["tokens_per_s_se"] / r["tokens_per_s"],
            base["tokens_per_s_se"] / base["tokens_per_s"],
        )
        r["gain_se"] = ratio * math.hypot(*rel)
        rows.append(r)
    return rows
