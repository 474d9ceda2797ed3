"""Slow references: the stream's and tree serving's timelines recomputed pass by pass.

On small workloads (a few requests, a few dozen iterations) each test replays a run from
the public cost model (:func:`specsim.cost.pass_cost` on the cards) and what the run
recorded (accepted counts, nodes and drafted tokens per iteration, admissions), and
compares every iteration's start and end, every request's first token and finish, to
1e-9 (:mod:`.reference`). The replay never reads the simulator's state: only its tables.
Chain serving's references are in :mod:`.test_reference_serving`.
"""

from __future__ import annotations

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment, PassShape, pass_aggregates_cost, pass_cost
from specsim.policies.lookahead import FixedGamma, HeuristicPlusTwoMinusOne
from specsim.policies.tree_optimizer import kary_tree
from specsim.sim import CardCost, StreamConfig, simulate_stream
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.serving.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    simulate_dynamic_tree_serving,
)
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.workload.arrivals import TraceWorkload

from .reference import DRAFT, HW, SMALL, SPACED, TARGET, TOGETHER, close, own_pairs, replay, step_s

pytestmark = pytest.mark.slow

TREE = kary_tree(2, 6)


# The single stream.


@pytest.mark.parametrize("overlap", [False, True], ids=["serialized", "overlapped"])
@pytest.mark.parametrize("policy", [FixedGamma(gamma=3), HeuristicPlusTwoMinusOne(initial=2)])
@pytest.mark.parametrize("method", ["fast", "events"])
def test_stream(overlap: bool, policy: object, method: str) -> None:
    """Block k starts at the tokens emitted so far; its gamma draft steps are priced at the
    block's starting context (the stream's model), its pass verifies gamma + 1 positions.
    Serialized, drafting starts when the previous pass ends; overlapped, right after the
    previous block's drafting when that block was fully accepted (which then emits gamma
    tokens, the bonus dropped), else when its pass ends; a pass starts when its block is
    drafted and the target is free."""
    prompt, tokens = 300, 160
    placement = "overlapped" if overlap else "shared"
    dep = Deployment(target=TARGET, hardware=HW, draft_placement=placement)
    cost = CardCost(deployment=dep, draft=SMALL)
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=IIDAcceptance(alpha=0.75),
        policy=policy,  # type: ignore[arg-type]
        cost=cost,
        prompt=prompt,
        max_gamma=8,
    )
    b = simulate_stream(cfg, np.random.default_rng(5), method=method).blocks  # type: ignore[arg-type]
    pos, prev_de, prev_ve, prev_full = 0, 0.0, 0.0, False
    for k in range(len(b.start)):
        assert b.start[k] == pos
        g, a, c = int(b.gamma[k]), int(b.accepted[k]), prompt + pos
        full = g > 0 and a == g
        assert b.emitted[k] == (g if overlap and full else a + 1)
        ds = prev_de if overlap and prev_full else prev_ve
        de = ds + g * step_s(SMALL, context=c)
        ve = max(prev_ve, de) + step_s(TARGET, context=c, new=g + 1)
        assert close(b.draft_start[k], ds) and close(b.draft_end[k], de)
        assert close(b.verify_end[k], ve)
        pos, prev_de, prev_ve, prev_full = pos + int(b.emitted[k]), de, ve, full
    assert pos >= tokens and pos - int(b.emitted[-1]) < tokens


# Tree serving.


def static_decode(parents: tuple[int, ...]) -> object:
    """A static tree's pass over b sequences whose contexts sum to ``ctx_sum``: the target
    verifies the root and the nodes of each (pairs: the context per position, and the
    tree's own); the draft model steps once per depth at the batch's mean context."""
    n1, own = len(parents) + 1, own_pairs(parents)

    def decode(row: object, b: int, ctx_sum: int) -> tuple[float, float]:
        assert row.nodes == len(parents)  # type: ignore[attr-defined]
        ver = pass_aggregates_cost(
            TARGET,
            HW,
            batch=b,
            tokens=b * n1,
            context_tokens=ctx_sum,
            pairs=n1 * ctx_sum + b * own,
        )
        c = int(round(ctx_sum / b))
        draft = 0.0
        depth: list[int] = []
        for p in parents:
            depth.append(1 if p < 0 else depth[p] + 1)
        widths = [0] * max(depth)
        for node in set(parents):
            widths[0 if node < 0 else depth[node]] += 1
        for d, w in enumerate(widths, start=1):
            shape = PassShape.tree(context=c + d - 1, parents=[-1] * w, batch=b)
            draft += pass_cost(SMALL, HW, shape).time_s
        return ver.time_s, draft

    return decode


@pytest.mark.parametrize(
    ("workload", "kv"),
    [(SPACED, None), (TOGETHER, None), (TOGETHER, (200 + 9 + 7) + (50 + 15 + 7))],
)
def test_static_tree_serving(workload: TraceWorkload, kv: int | None) -> None:
    cfg = TreeServingConfig(
        workload=workload,
        parents=TREE,
        proposer=DRAFT,
        max_batch=3,
        kv_capacity_tokens=kv,
        plain_twin=False,
        deployment=Deployment(target=TARGET, hardware=HW),
    )
    res = simulate_tree_serving(cfg, np.random.default_rng(2))
    look = None if kv is None else (kv, len(TREE) + 1)
    taken = replay(
        res.requests,
        res.iterations,
        cap=3,
        models=(TARGET, SMALL),
        kv=look,
        decode=static_decode(TREE),
    )
    assert taken == 0


def test_dynamic_tree_serving_at_batch_one() -> None:
    """Trees one level deep (``max_depth=1``): a tree of k nodes is the root's k children,
    so the recorded nodes fix its pairs (1 + 2k); the draft steps once at the context."""
    cfg = DynamicTreeServingConfig(
        workload=SPACED,
        policy=ConfidenceTree(budget=4, max_depth=1),
        world=NodeConfidence(concentration=2.0),
        proposer=DRAFT,
        plain_twin=False,
        deployment=Deployment(target=TARGET, hardware=HW),
    )
    res = simulate_dynamic_tree_serving(cfg, np.random.default_rng(4))

    def decode(row: object, b: int, ctx_sum: int) -> tuple[float, float]:
        k, c = int(row.draft_tokens), ctx_sum  # type: ignore[attr-defined]
        ver = pass_aggregates_cost(
            TARGET, HW, batch=1, tokens=k + 1, context_tokens=c, pairs=(k + 1) * c + 1 + 2 * k
        )
        drafted = int(row.draft_positions)  # type: ignore[attr-defined]
        return ver.time_s, step_s(SMALL, context=c) * drafted

    assert (res.iterations["draft_tokens"] > 1).any()
    taken = replay(
        res.requests, res.iterations, cap=64, models=(TARGET, SMALL), kv=None, decode=decode
    )
    assert taken == 0
