"""Behaviour tests for five cost bugs that once passed the whole suite (issue 22, section 7).

Each test is written against the public simulators and their tables, and derives what it
expects independently of the simulator's own bookkeeping: KV reservations from the
request table, prefill times from :func:`specsim.cost.pass_cost` on the draft and the
target, a tree's attention pairs by hand from ``parents``, the draft's context at each
step from the tokens emitted so far, and the tokens a fully accepted block emits under
overlapped drafting. ``tests/mutations.py`` re-introduces each bug and checks that a test
here fails.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from tree_cases import ACC, DRAFT, HW, TARGET

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_head, load_model
from specsim.cost import Deployment, PassShape, pass_aggregates_cost, pass_cost
from specsim.policies.lookahead import FixedGamma
from specsim.policies.tree_optimizer import kary_tree
from specsim.proposers import Heads, NGram, ParallelDraft
from specsim.sim import CardCost, ServingConfig, StreamConfig, simulate_serving, simulate_stream
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.serving.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    simulate_dynamic_tree_serving,
)
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.workload.arrivals import TraceWorkload

SMALL = kary_tree(2, 6)


def _static(workload: TraceWorkload, **kw: object) -> TreeServingConfig:
    base: dict[str, object] = dict(
        workload=workload,
        parents=SMALL,
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
    )
    base.update(plain_twin=False, **kw)
    return TreeServingConfig(**base)  # type: ignore[arg-type]


def _dynamic(workload: TraceWorkload, **kw: object) -> DynamicTreeServingConfig:
    base: dict[str, object] = dict(
        workload=workload,
        policy=ConfidenceTree(budget=6, max_depth=4),
        world=NodeConfidence(concentration=2.0),
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
    )
    base.update(plain_twin=False, **kw)
    return DynamicTreeServingConfig(**base)  # type: ignore[arg-type]


def _run(kind: str, workload: TraceWorkload, seed: int, **kw: object) -> tuple[pd.DataFrame, ...]:
    if kind == "static":
        res = simulate_tree_serving(_static(workload, **kw), np.random.default_rng(seed))
    else:
        res = simulate_dynamic_tree_serving(_dynamic(workload, **kw), np.random.default_rng(seed))
    return res.requests, res.iterations


def _lookahead(kind: str) -> int:
    """The positions one pass writes past the emitted tokens: the root and the largest tree."""
    return len(SMALL) + 1 if kind == "static" else 6 + 1


# 1. A one-token request finishes at its prefill; its KV reservation must be freed then.


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_a_one_token_request_frees_its_kv_reservation(kind: str) -> None:
    """Requests A (one token), B and C arrive together; the KV capacity holds exactly B's
    and C's reservations (prompt + output + one pass's lookahead each), so A and B are
    admitted first and C waits. A finishes at its prefill: C must be admitted at the next
    iteration, while B is still decoding, and then run beside it."""
    prompts, outputs = (8, 64, 64), (1, 40, 40)
    look = _lookahead(kind)
    reserve = [p + o + look for p, o in zip(prompts, outputs, strict=True)]
    capacity = reserve[1] + reserve[2]
    assert reserve[0] + reserve[1] + reserve[2] > capacity >= reserve[0] + reserve[2]
    w = TraceWorkload(arrival_s=(0.0, 0.0, 0.0), prompt_tokens=prompts, output_tokens=outputs)
    req, it = _run(kind, w, 3, kv_capacity_tokens=capacity)
    assert np.isfinite(req["finish_s"]).all()
    first = it.iloc[0]
    assert first["admitted"] == 2 and first["batch"] == 1  # A done at its prefill, B decodes
    second = it.iloc[1]
    assert second["admitted"] == 1  # C: the room A left
    assert req.loc[2, "first_token_s"] == second["start_s"] + second["prefill_s"]
    assert req.loc[2, "first_token_s"] < req.loc[1, "finish_s"]
    assert it["batch"].max() == 2


# 2. The draft model's prefill is priced beside the target's.


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_the_first_token_waits_for_the_target_and_the_draft_prefill(kind: str) -> None:
    prompt = 300
    w = TraceWorkload(arrival_s=(0.5,), prompt_tokens=(prompt,), output_tokens=(6,))
    shape = PassShape.prefill([prompt])
    target = pass_cost(TARGET, HW, shape)
    draft = pass_cost(DRAFT.card, HW, shape)
    req, it = _run(kind, w, 1)
    assert it.loc[0, "prefill_s"] == pytest.approx(target.time_s + draft.time_s, rel=1e-12)
    assert req.loc[0, "first_token_s"] == pytest.approx(
        0.5 + target.time_s + draft.time_s, rel=1e-12
    )
    # An n-gram proposer has no model to prefill: the target's pass alone.
    req, it = _run(kind, w, 1, proposer=NGram(acceptance=ACC))
    assert it.loc[0, "prefill_s"] == pytest.approx(target.time_s, rel=1e-12)


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_a_parallel_draft_and_eagle_heads_prefill_their_own_kv(kind: str) -> None:
    """Every proposer with a KV cache of its own prefills it beside the target's prompt pass:
    PARD's draft model (a full pass of the 1B draft), EAGLE's head (one layer's share of the
    target's pass); the proposer kind is never looked up, the proposer prices it."""
    prompt = 300
    w = TraceWorkload(arrival_s=(0.5,), prompt_tokens=(prompt,), output_tokens=(6,))
    shape = PassShape.prefill([prompt])
    llama = load_model("llama-3.1-8b")
    pard = ParallelDraft.from_card("pard-llama-3.2-1b-llama-3.1-8b")
    dep = Deployment(target=llama, hardware=HW)
    target = pass_cost(llama, HW, shape).time_s
    own = pass_cost(load_model("llama-3.2-1b"), HW, shape).time_s
    _, it = _run(kind, w, 1, proposer=pard, deployment=dep)
    assert it.loc[0, "prefill_s"] == pytest.approx(target + own, rel=1e-12)
    vicuna = load_model("vicuna-7b-v1.3")
    eagle = Heads(card=load_head("eagle-vicuna-7b-v1.3"))
    dep = Deployment(target=vicuna, hardware=HW)
    full = pass_cost(vicuna, HW, shape).time_s
    _, it = _run(kind, w, 1, proposer=eagle, deployment=dep)
    share = eagle.card.layer_fraction / vicuna.layers
    assert share > 0
    assert it.loc[0, "prefill_s"] == pytest.approx(full * (1.0 + share), rel=1e-12)


# 3 and 4. One request alone: each iteration's verification and drafting, by hand.


def _own_pairs(parents: tuple[int, ...]) -> int:
    """Attention pairs among the root and the nodes of one tree: the root attends to itself;
    a node to the root, its ancestors and itself (walked up ``parents`` by hand)."""
    pairs = 1
    for j in range(len(parents)):
        up, k = 1, j
        while k >= 0:
            up, k = up + 1, parents[k]
        pairs += up
    return pairs


def _frontier(parents: tuple[int, ...]) -> list[int]:
    """Per draft step d = 1, 2, ...: how many nodes of depth d - 1 have children (the root
    has depth 0)."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    widths = [0] * max(depth)
    for node in {p for p in parents}:
        widths[0 if node < 0 else depth[node]] += 1
    return widths


def _alone(parents: tuple[int, ...], prompt: int, outputs: int) -> tuple[pd.DataFrame, ...]:
    w = TraceWorkload(arrival_s=(0.0,), prompt_tokens=(prompt,), output_tokens=(outputs,))
    res = simulate_tree_serving(_static(w, parents=parents), np.random.default_rng(7))
    return res.requests, res.iterations


def _contexts(it: pd.DataFrame, prompt: int) -> np.ndarray:
    """The cached tokens before each decoding pass of one request: the prompt and every
    token emitted so far (the prefill's first one included) but the last, the tree's root."""
    emitted = 1 + np.concatenate(([0], np.cumsum(it["emitted"].to_numpy())[:-1]))
    return prompt + emitted - 1


def test_the_verification_pass_prices_the_trees_own_attention_pairs() -> None:
    """A wide tree (200 nodes) at a short context: the pass is compute-bound, so the pairs
    among the tree's own positions change both its time and its energy."""
    tree = kary_tree(2, 200)
    assert _own_pairs(tree) == 1 + sum(
        len(bin(j + 2)) - 2 for j in range(len(tree))
    )  # binary heap: node j sits at depth floor(log2(j + 2))
    prompt = 40
    _, it = _alone(tree, prompt, 30)
    ctx = _contexts(it, prompt)
    n1 = len(tree) + 1
    prefill = [pass_cost(m, HW, PassShape.prefill([prompt])) for m in (TARGET, DRAFT.card)]
    for i, (c, row) in enumerate(zip(ctx, it.itertuples(), strict=True)):
        ver = pass_aggregates_cost(
            TARGET, HW, batch=1, tokens=n1, context_tokens=c, pairs=n1 * c + _own_pairs(tree)
        )
        draft = DRAFT.draft_cost(
            tree, deployment=Deployment(target=TARGET, hardware=HW), batch=1, context=int(c)
        )
        verify_s = row.end_s - row.start_s - row.prefill_s - row.draft_s
        assert verify_s == pytest.approx(ver.time_s, rel=1e-9)
        energy = ver.energy_j + draft.energy_j
        if i == 0:  # the first iteration also prefills the prompt
            energy += sum(p.energy_j for p in prefill)
        assert row.energy_j == pytest.approx(energy, rel=1e-9)


def test_the_draft_is_priced_at_the_context_it_has_cached() -> None:
    """Draft step d of a pass runs the frontier of depth d - 1 after the sequence's cached
    tokens and the d - 1 drafted before it, on the draft model (one request: its context is
    the prompt plus the tokens emitted so far)."""
    prompt = 1500
    _, it = _alone(SMALL, prompt, 40)
    ctx = _contexts(it, prompt)
    assert ctx[-1] > ctx[0] + 20
    for c, draft_s in zip(ctx, it["draft_s"], strict=True):
        expected = 0.0
        for d, width in enumerate(_frontier(SMALL), start=1):
            shape = PassShape.tree(context=int(c) + d - 1, parents=[-1] * width)
            expected += pass_cost(DRAFT.card, HW, shape).time_s
        assert draft_s == pytest.approx(expected, rel=1e-9)


# 5. Overlapped drafting: a fully accepted block's bonus token gives way to the pre-draft.


def _overlapped() -> CardCost:
    hw = load_hardware("a100-80gb")
    return CardCost(
        deployment=Deployment(
            target=load_model("llama-2-7b"), hardware=hw, draft_placement="overlapped"
        ),
        draft=load_model("llama-68m"),
    )


@pytest.mark.parametrize("gamma", [1, 4])
def test_overlap_a_fully_accepted_block_emits_gamma_tokens(gamma: int) -> None:
    """PEARL's overlap: when block k is fully accepted, the block pre-drafted during its
    verification stands and the target's bonus position is dropped, so the block emits its
    ``gamma`` accepted drafts and no more; a rejected block emits its accepted drafts and the
    correction. With alpha = 1 every block emits exactly ``gamma``."""
    cost = _overlapped()
    for alpha in (1.0, 0.7):
        cfg = StreamConfig(
            tokens=400,
            acceptance=IIDAcceptance(alpha=alpha),
            policy=FixedGamma(gamma=gamma),
            cost=cost,
            max_gamma=8,
        )
        b = simulate_stream(cfg, np.random.default_rng(11)).blocks
        full = b.accepted == gamma
        expected = np.where(full, gamma, b.accepted + 1)
        np.testing.assert_array_equal(b.emitted, expected)
        np.testing.assert_array_equal(b.start[1:], np.cumsum(b.emitted)[:-1])
        if alpha == 1.0:
            assert full.all() and len(b.start) == math.ceil(400 / gamma)


# Two cost terms the mutation check found untested (tests/mutations.py).


@pytest.mark.parametrize(
    "shape",
    [PassShape.chain(context=512, gamma=3), PassShape.chain(context=256, new=512, batch=4)],
    ids=["decode", "prefill"],
)
def test_energy_is_idle_power_plus_the_busier_units_share_of_the_rest(shape: PassShape) -> None:
    """The utilisation power model (:func:`specsim.cost.roofline.time_energy`): power is
    ``idle + (max - idle) * u`` over the pass, ``u`` the busier unit's share of its raw peak
    (flops over peak compute, or bytes over bandwidth, per second of the pass); the card
    has no per-operation energies. A decoding pass (memory-bound) and a chunk of 4 x 512
    prompt tokens (compute-bound)."""
    assert HW.energy_per_flop_j is None
    cost = pass_cost(TARGET, HW, shape)
    u = max(cost.flops / HW.peak(cost.dtype), cost.bytes / HW.mem_bandwidth) / cost.time_s
    assert 0.05 < u < 1.0
    power = HW.idle_power_w + (HW.max_power_w - HW.idle_power_w) * u
    assert cost.energy_j == pytest.approx(power * cost.time_s, rel=1e-12)


@pytest.mark.parametrize("context", [0, 900])
def test_a_draft_models_step_d_runs_after_the_tokens_drafted_before_it(context: int) -> None:
    """Drafting a tree depth by depth: step d runs the draft on the frontier of depth d - 1
    (widths by hand) after the cached context and the d - 1 tokens drafted on the path
    before it, one batched pass per depth."""
    tree, batch = kary_tree(3, 12), 4
    expected = 0.0
    for d, width in enumerate(_frontier(tree), start=1):
        shape = PassShape.tree(context=context + d - 1, parents=[-1] * width, batch=batch)
        expected += pass_cost(DRAFT.card, HW, shape).time_s
    got = DRAFT.draft_cost(
        tree, deployment=Deployment(target=TARGET, hardware=HW), batch=batch, context=context
    )
    assert got.time_s == pytest.approx(expected, rel=1e-12)


def test_chain_serving_frees_a_finished_requests_kv_reservation() -> None:
    """The chain engine's twin of the first test: A and B fill the KV capacity with C
    waiting; when A finishes, its reservation (prompt + output + one pass of max_gamma + 1
    positions) is freed and C runs beside B."""
    prompts, outputs, look = (64, 64, 64), (6, 40, 20), 3 + 1
    reserve = [p + o + look for p, o in zip(prompts, outputs, strict=True)]
    capacity = reserve[1] + reserve[2]
    assert reserve[0] + reserve[1] + reserve[2] > capacity >= reserve[0] + reserve[1]
    cfg = ServingConfig(
        workload=TraceWorkload(
            arrival_s=(0.0, 0.0, 0.0), prompt_tokens=prompts, output_tokens=outputs
        ),
        cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=DRAFT.card),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_gamma=3,
        kv_capacity_tokens=capacity,
        plain_twin=False,
    )
    res = simulate_serving(cfg, np.random.default_rng(5))
    req, it = res.requests_spec, res.iterations_spec
    assert np.isfinite(req["finish_s"]).all()
    assert it.loc[0, "admitted"] == 2
    assert req.loc[2, "first_token_s"] < req.loc[1, "finish_s"]
    assert req.loc[2, "first_token_s"] > req.loc[0, "finish_s"]


def test_chain_serving_frees_one_token_reservations_while_it_drains() -> None:
    """Once every request has arrived and memory can no longer bind, chain serving drains
    without a clock (:mod:`specsim.sim.serving.drain`); its one-token requests finish at their
    prefill there too and must free their reservations. One sequence at a time and a cache
    that holds the largest reservation alone: the two one-token requests and C run one
    after the other, each prefilled as the one before it ends."""
    prompts, outputs, look = (64, 64, 64), (1, 1, 20), 3 + 1
    reserve = [p + o + look for p, o in zip(prompts, outputs, strict=True)]
    capacity = max(reserve)
    assert reserve[0] + reserve[1] > capacity
    cost = CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=DRAFT.card)
    cfg = ServingConfig(
        workload=TraceWorkload(
            arrival_s=(0.0, 0.0, 0.0), prompt_tokens=prompts, output_tokens=outputs
        ),
        cost=cost,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_gamma=3,
        max_batch=1,
        kv_capacity_tokens=capacity,
        plain_twin=False,
    )
    req = simulate_serving(cfg, np.random.default_rng(5)).requests_spec
    assert np.isfinite(req["finish_s"]).all()
    one = cost.prefill(np.array([64]), draft=True).time_s  # target and draft, one prompt
    assert req["first_token_s"].tolist()[:2] == pytest.approx([one, 2 * one], rel=1e-12)
    assert req.loc[0, "finish_s"] == req.loc[0, "first_token_s"]
    assert req.loc[2, "first_token_s"] == pytest.approx(3 * one, rel=1e-12)
