"""Serving with EAGLE-2-like trees chosen per pass: the single stream at batch 1, the shared
budget, conservation, discarded work, the batch's drafting cost."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tree_cases import ACC, DRAFT, HW, TARGET, Z

from specsim.cards import load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.proposers import Heads, frontier_widths
from specsim.sim.serving.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    batch_draft_cost,
    share_budget,
    simulate_dynamic_tree_serving,
)
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.stream.tree_stream import DynamicTreeConfig, simulate_dynamic_tree_stream
from specsim.sim.workload.arrivals import PoissonWorkload
from specsim.theory import expected_tokens_tree

POLICY = ConfidenceTree(budget=10, max_depth=6)
VARIED = NodeConfidence(concentration=2.0)
FIXED = NodeConfidence(concentration=math.inf, noise=0.0)  # the same tree every pass


def _config(rate: float, requests: int, **kw: object) -> DynamicTreeServingConfig:
    base: dict[str, object] = dict(
        workload=PoissonWorkload(
            rate_per_s=rate, requests=requests, prompt_tokens=(16, 256), output_tokens=(1, 80)
        ),
        policy=POLICY,
        world=VARIED,
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
        plain_twin=False,
    )
    base.update(kw)
    return DynamicTreeServingConfig(**base)  # type: ignore[arg-type]


def test_at_batch_one_it_is_the_single_stream_dynamic_simulator() -> None:
    res = simulate_dynamic_tree_serving(
        _config(
            0.01,
            40,
            workload=PoissonWorkload(
                rate_per_s=0.01, requests=40, prompt_tokens=64, output_tokens=(60, 100)
            ),
        ),
        np.random.default_rng(16),
    )
    it = res.iterations[res.iterations["batch"] > 0]
    assert (it["batch"] == 1).all() and not it["budget_bound"].any()
    m = res.metrics()
    stream = simulate_dynamic_tree_stream(
        DynamicTreeConfig(
            policy=POLICY,
            world=VARIED,
            proposer=DRAFT,
            deployment=Deployment(target=TARGET, hardware=HW),
            tokens=3000,
            prompt=64,
        ),
        np.random.default_rng(17),
    ).metrics()
    diff = m["tokens_per_pass"] - stream["tokens_per_pass"]
    assert abs(diff) <= Z * math.hypot(m["tokens_per_pass_se"], stream["tokens_per_pass_se"])
    # Each pass emits, on average, what its own tree's drawn acceptances say.
    d = (it["accepted"] + it["batch"] - it["expected_tokens"]).to_numpy()
    assert abs(d.mean()) <= Z * d.std(ddof=1) / math.sqrt(d.size)
    assert m["mean_nodes"] == POLICY.budget  # unbound: every tree has the policy's budget
    assert m["ttft_p99_s"] < 0.1  # no queueing


def test_without_variation_every_pass_verifies_the_policys_tree() -> None:
    alone = POLICY.build(ACC, FIXED, np.random.default_rng(0))
    theory = expected_tokens_tree(list(alone.parents), ACC.node_table(alone.parents))
    res = simulate_dynamic_tree_serving(_config(0.01, 40, world=FIXED), np.random.default_rng(8))
    it = res.iterations[res.iterations["batch"] > 0]
    assert np.allclose(it["expected_tokens"] / it["batch"], theory)
    m = res.metrics()
    assert abs(m["tokens_per_pass"] - theory) <= Z * m["tokens_per_pass_se"]
    # Under a binding budget the batch shares it: the iteration's expected tokens are the
    # batch plus the top of the union of the sequences' predicted reaches.
    busy = simulate_dynamic_tree_serving(
        _config(300.0, 60, world=FIXED, max_batch=8, position_budget=30), np.random.default_rng(8)
    ).iterations
    order = sorted(alone.predicted, reverse=True)
    for r in busy[busy["batch"] > 0].itertuples():
        room = min(30 - r.batch, r.batch * POLICY.budget)
        union = sorted(order * r.batch, reverse=True)[:room]
        assert r.expected_tokens == pytest.approx(r.batch + sum(union))


def test_the_budget_is_never_exceeded_and_is_spent_when_binding() -> None:
    budget = 40
    cfg = _config(300.0, 120, max_batch=16, position_budget=budget)
    res = simulate_dynamic_tree_serving(cfg, np.random.default_rng(3))
    it = res.iterations[res.iterations["batch"] > 0]
    assert (it["positions"] <= budget).all()
    assert (it["draft_tokens"] <= it["batch"] * POLICY.budget).all()
    bound = it[it["budget_bound"]]
    assert len(bound) > 0.5 * len(it) and (bound["positions"] == budget).all()
    # Unbound iterations verify every tree in full.
    free = it[~it["budget_bound"]]
    assert (free["draft_tokens"] == free["batch"] * POLICY.budget).all()
    d = (it["accepted"] + it["batch"] - it["expected_tokens"]).to_numpy()
    assert abs(d.mean()) <= Z * d.std(ddof=1) / math.sqrt(d.size)
    # The budget that binds costs tokens per pass, and saves positions per token.
    unbound = simulate_dynamic_tree_serving(
        _config(300.0, 120, max_batch=16), np.random.default_rng(3)
    ).metrics()
    m = res.metrics()
    assert m["tokens_per_pass"] < unbound["tokens_per_pass"] - Z * m["tokens_per_pass_se"]
    assert m["discarded_share"] < unbound["discarded_share"]


def test_tokens_are_conserved_and_discarded_work_is_counted() -> None:
    res = simulate_dynamic_tree_serving(
        _config(40.0, 80, max_batch=8, position_budget=48), np.random.default_rng(2)
    )
    req, it = res.requests, res.iterations
    assert np.isfinite(req["finish_s"]).all()
    assert (req["arrival_s"] <= req["first_token_s"]).all()
    assert (req["first_token_s"] <= req["finish_s"]).all()
    assert it["admitted"].sum() == len(req)
    assert it["emitted"].sum() + len(req) == req["output_tokens"].sum()
    assert (it["positions"] == it["draft_tokens"] + it["batch"]).all()
    assert (it["emitted"] <= it["accepted"] + it["batch"]).all()
    assert (it["positions_wasted"] == it["positions"] - it["emitted"]).all()
    assert (it["batch"] <= 8).all() and (np.diff(it["start_s"]) > 0).all()
    dec = it[it["batch"] > 0]
    assert (dec["draft_s"] > 0).all() and (dec["draft_positions"] >= dec["batch"]).all()
    m = res.metrics()
    assert m["tokens"] == req["output_tokens"].sum()
    share = it["positions_wasted"].sum() / it["positions"].sum()
    assert m["discarded_share"] == pytest.approx(share) and 0 < share < 1


def test_best_first_sharing_takes_the_batchs_highest_predicted_reach() -> None:
    # No variation, no noise: every sequence grows the same tree; the batch's nodes are the
    # top of the union, so each tree is a prefix of the policy's own and sizes differ by one.
    rng = np.random.default_rng(0)
    alone = POLICY.build(ACC, FIXED, rng)
    order = sorted(alone.predicted, reverse=True)
    for b, room in ((3, 7), (4, 4), (2, 25), (5, 0)):
        growths = [POLICY.grow(ACC, FIXED, rng) for _ in range(b)]
        bound = share_budget(growths, room)
        passes = [g.result() for g in growths]
        sizes = sorted(len(p.parents) for p in passes)
        assert sum(sizes) == min(room, b * POLICY.budget) and sizes[-1] - sizes[0] <= 1
        assert bound == (room < b * POLICY.budget)
        for p in passes:
            assert p.parents == alone.parents[: len(p.parents)]
        taken = sum(sum(p.predicted) for p in passes)
        union = sorted([v for _ in range(b) for v in order], reverse=True)
        assert taken == pytest.approx(sum(union[:room]))
    # With varied confidences the sequences' shares differ, and still sum to the room.
    growths = [POLICY.grow(ACC, VARIED, rng) for _ in range(6)]
    assert share_budget(growths, 20) is True
    assert sum(len(g.result().parents) for g in growths) == 20
    assert share_budget([POLICY.grow(ACC, VARIED, rng)], None) is False


def test_each_shared_tree_is_the_start_of_the_policys_own() -> None:
    # One generator per sequence: a sequence's draws then do not depend on the others, and
    # its shared tree is the first nodes, in order, of the tree the policy builds alone.
    world = NodeConfidence(concentration=0.5, noise=0.3)
    for b, room in ((3, 5), (5, 17), (4, 40), (6, 1)):
        growths = [POLICY.grow(ACC, world, np.random.default_rng(100 + i)) for i in range(b)]
        share_budget(growths, room)
        sizes = []
        for i, g in enumerate(growths):
            solo = POLICY.build(ACC, world, np.random.default_rng(100 + i))
            got = g.result()
            assert got.parents == solo.parents[: len(got.parents)]
            assert got.accept == solo.accept[: len(got.parents)]
            assert frontier_widths(got.examined) == got.widths
            sizes.append(len(got.parents))
        assert sum(sizes) == min(room, b * POLICY.budget)


def test_the_policys_widths_are_the_frontier_widths() -> None:
    rng = np.random.default_rng(4)
    for world in (VARIED, FIXED, NodeConfidence(concentration=0.5, noise=0.3)):
        for _ in range(30):
            p = ConfidenceTree(budget=int(rng.integers(1, 14)), max_depth=5).build(ACC, world, rng)
            assert p.widths == frontier_widths(p.examined)


@pytest.mark.parametrize(
    "proposer",
    [
        DRAFT,
        Heads(card=load_head("eagle-vicuna-7b-v1.3")),
        Heads(card=load_head("medusa-vicuna-7b-v1.3")),
    ],
)
def test_the_batch_draft_cost_is_the_proposers_own_on_equal_trees(proposer: object) -> None:
    target = load_model("vicuna-7b-v1.3") if isinstance(proposer, Heads) else TARGET
    dep = Deployment(target=target, hardware=HW)
    tree = (-1, -1, 0, 0, 1, 2, 4)
    for b, c in ((1, 100), (8, 700)):
        own = proposer.draft_cost(tree, deployment=dep, batch=b, context=c)  # type: ignore[attr-defined]
        ctx = np.full(b, c, dtype=np.int64)
        t, e = batch_draft_cost(proposer, [tree] * b, ctx, deployment=dep)  # type: ignore[arg-type]
        assert t == pytest.approx(float(own.time_s), rel=1e-12)
        assert e == pytest.approx(float(own.energy_j), rel=1e-12)
    # Sequences at different contexts and widths: more than the lightest alone, less than
    # each priced apart (one batched step per depth shares the weights' reads).
    if True:  # one batched step per depth shares the weights' reads
        w = [tree, (-1,), (-1, -1, 0, 1)]  # frontier widths (2, 2, 2), (1,), (1, 2)
        ctx = np.asarray([50, 400, 900], dtype=np.int64)
        together = batch_draft_cost(proposer, w, ctx, deployment=dep)[0]  # type: ignore[arg-type]
        apart = [
            batch_draft_cost(proposer, [x], ctx[i : i + 1], deployment=dep)[0]  # type: ignore[arg-type]
            for i, x in enumerate(w)
        ]
        assert max(apart) <= together < sum(apart)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="position_budget"):
        _config(1.0, 5, position_budget=1)
    with pytest.raises(ValueError, match="max_batch"):
        _config(1.0, 5, max_batch=0)
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        _config(1.0, 5, kv_capacity_tokens=0)
    with pytest.raises(ValueError, match="plain_twin"):
        _config(1.0, 5, plain_twin="yes")
    with pytest.raises(TypeError, match="policy"):
        _config(1.0, 5, policy=10)
    with pytest.raises(TypeError, match="world"):
        _config(1.0, 5, world=None)
    with pytest.raises(ValueError, match="policy.max_depth"):
        _config(
            1.0,
            5,
            proposer=Heads(card=load_head("medusa-vicuna-7b-v1.3")),
            deployment=Deployment(target=load_model("vicuna-7b-v1.3"), hardware=HW),
            policy=ConfidenceTree(budget=4, max_depth=9),
        )
    with pytest.raises(TypeError, match="rng"):
        simulate_dynamic_tree_serving(_config(1.0, 5), 3)  # type: ignore[arg-type]
