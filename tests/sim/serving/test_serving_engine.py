"""The one serving engine: trees get the engine's memory and replicas, any proposer is priced
through the protocol, and every result carries the engines' acceptance metrics."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pytest
from serving_cases import card_cost, serving_config
from tree_cases import DRAFT, HW, TARGET, Z

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_head, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma, HeuristicPlusTwoMinusOne
from specsim.policies.tree_optimizer import kary_tree
from specsim.proposers import Heads
from specsim.sim import PlainCost, StreamConfig, simulate_serving, simulate_stream
from specsim.sim.results.engine_metrics import engine_acceptance
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.serving.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    batch_draft_cost,
    simulate_dynamic_tree_serving,
)
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.workload.arrivals import PoissonWorkload

CARD = card_cost()
chains = partial(serving_config, CARD, rate_per_s=30.0, requests=50)


def _static(**kw: Any) -> TreeServingConfig:
    w = PoissonWorkload(
        rate_per_s=40.0, requests=50, prompt_tokens=(16, 256), output_tokens=(1, 80)
    )
    base: dict[str, Any] = dict(
        workload=w,
        parents=kary_tree(2, 7),
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
    )
    base.update(kw)
    return TreeServingConfig(**base)


def _counts_match_the_iterations(req: Any, it: Any, metrics: dict[str, Any]) -> None:
    """The per-request counters against the iteration table they were counted beside."""
    dec = it[it["batch"] > 0]
    assert req["verify_steps"].sum() == dec["batch"].sum()
    assert metrics["num_draft_tokens"] == dec["draft_tokens"].sum() == req["drafted_tokens"].sum()
    # Each verification step emits its accepted tokens and one more.
    assert metrics["num_accepted_tokens"] == (dec["emitted"] - dec["batch"]).sum()
    assert (req["accepted_tokens"] + req["verify_steps"] == req["output_tokens"] - 1).all()
    at = req[[c for c in req.columns if c.startswith("accepted_at_")]].to_numpy()
    assert (at.sum(axis=1) == req["accepted_tokens"]).all()
    assert (np.diff(at, axis=1) <= 0).all()  # accepting position j + 1 needs position j
    n_d = metrics["num_drafts"]
    assert metrics["mean_acceptance_length"] == pytest.approx(
        1 + metrics["num_accepted_tokens"] / n_d
    )
    assert metrics["acceptance_rate_per_position"] == pytest.approx(list(at.sum(axis=0) / n_d))
    # Per request: each request's accepted count at a position over its own drafts, averaged.
    has = req["drafts"].to_numpy() > 0
    per = at[has] / req["drafts"].to_numpy()[has][:, None]
    assert metrics["acceptance_rate_per_position_per_request"] == pytest.approx(
        list(per.mean(axis=0))
    )


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"kv_block_tokens": 16, "kv_capacity_tokens": 2500},
        {"token_budget": 96},
        {"policy": HeuristicPlusTwoMinusOne(initial=3, max_gamma=8), "replicas": 2},
    ],
    ids=["fixed", "paged, preempting", "chunked", "adaptive, 2 replicas"],
)
def test_chain_serving_counts_what_the_engines_count(kw: dict[str, Any]) -> None:
    res = simulate_serving(chains(**kw), np.random.default_rng(5))
    _counts_match_the_iterations(res.requests_spec, res.iterations_spec, res.metrics())
    plain = res.requests_plain
    assert plain is not None and plain["drafts"].sum() == 0  # the twin drafts nothing


def test_tree_serving_counts_what_the_engines_count() -> None:
    res = simulate_tree_serving(_static(plain_twin=False), np.random.default_rng(2))
    _counts_match_the_iterations(res.requests, res.iterations, res.metrics())


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_known_answers(alpha: float) -> None:
    """alpha 0: nothing accepted, one token a step; alpha 1: every draft accepted."""
    m = simulate_serving(
        chains(acceptance=IIDAcceptance(alpha=alpha), plain_twin=False), np.random.default_rng(1)
    ).metrics()
    if alpha == 0.0:
        assert m["num_accepted_tokens"] == 0 and m["mean_acceptance_length"] == 1.0
        assert m["draft_acceptance_rate"] == 0.0 == max(m["acceptance_rate_per_position"])
    else:
        assert m["draft_acceptance_rate"] == 1.0 == m["draft_acceptance_rate_per_request"]
        assert m["acceptance_rate_per_position"][0] == 1.0  # every draft has a first token


def test_the_streams_per_position_rates_are_the_powers_of_alpha() -> None:
    """IID acceptance: position j is accepted with probability alpha^j, each block
    independently (a binomial standard error)."""
    alpha, gamma = 0.7, 4
    cfg = StreamConfig(
        tokens=20_000,
        cost=PlainCost(c=0.05),
        acceptance=IIDAcceptance(alpha=alpha),
        policy=FixedGamma(gamma=gamma),
    )
    m = simulate_stream(cfg, np.random.default_rng(8)).metrics()
    n = m["num_drafts"]
    for j, rate in enumerate(m["acceptance_rate_per_position"], start=1):
        p = alpha**j
        assert abs(rate - p) <= Z * math.sqrt(p * (1 - p) / n)
    assert m["mean_acceptance_length"] == pytest.approx(m["tokens_per_target_pass"], rel=0.01)
    assert m["mean_acceptance_length_per_request"] == m["mean_acceptance_length"]


def test_trees_get_the_engines_paging_preemption_and_replicas() -> None:
    """A static tree on a paged cache too small for the load, on two replicas: every
    request finishes, some are preempted, tokens are conserved, and the plain twin is
    served on the same engine."""
    cfg = _static(
        kv_block_tokens=16, kv_capacity_tokens=800, replicas=2, router="least-outstanding"
    )
    res = simulate_tree_serving(cfg, np.random.default_rng(4))
    req, it = res.requests, res.iterations
    assert np.isfinite(req["finish_s"]).all() and req["preemptions"].sum() > 0
    assert set(req["replica"]) == {0, 1} and it["preempted"].sum() > 0
    assert it["emitted"].sum() + len(req) == req["output_tokens"].sum()
    m = res.metrics()
    assert m["speedup"] is not None and m["preemptions"] > 0


def test_tree_serving_on_tensor_parallel_devices_is_faster() -> None:
    one = simulate_tree_serving(_static(plain_twin=False), np.random.default_rng(3)).metrics()
    two = simulate_tree_serving(
        _static(
            plain_twin=False,
            deployment=Deployment(target=TARGET, hardware=HW, tensor_parallel=2),
        ),
        np.random.default_rng(3),
    ).metrics()
    assert two["tpot_p50_s"] < one["tpot_p50_s"]


class Wrapped:
    """A proposer known only by the protocol (the deployment signature), pricing like the
    heads it wraps."""

    def __init__(self, inner: Heads) -> None:
        self.inner = inner
        self.name, self.acceptance = "wrapped", inner.acceptance
        self.overlappable = inner.overlappable

    def check_target(self, target: Any) -> None:
        self.inner.check_target(target)

    def draft_costs(self, parents: Any, *, deployment: Any, batch: int, context: Any) -> Any:
        return self.inner.draft_costs(parents, deployment=deployment, batch=batch, context=context)

    def draft_cost(self, parents: Any, *, deployment: Any, batch: int, context: int) -> Any:
        return self.inner.draft_cost(parents, deployment=deployment, batch=batch, context=context)

    def memory_bytes(self, deployment: Any) -> float:
        return self.inner.memory_bytes(deployment)

    def prefill_cost(self, *, deployment: Any, tokens: Any, context: Any) -> Any:
        return self.inner.prefill_cost(deployment=deployment, tokens=tokens, context=context)


def test_a_protocol_proposer_is_priced_by_its_draft_costs() -> None:
    """The same static-tree run, bit for bit, with a head card and with the same heads
    behind the protocol's deployment signature."""
    heads = Heads(card=load_head("eagle-vicuna-7b-v1.3"))
    vicuna = load_model("vicuna-7b-v1.3")
    cfg = _static(
        proposer=heads,
        deployment=Deployment(target=vicuna, hardware=HW),
        parents=kary_tree(2, 4),
        plain_twin=False,
    )
    a = simulate_tree_serving(cfg, np.random.default_rng(6)).iterations
    b = simulate_tree_serving(replace(cfg, proposer=Wrapped(heads)), np.random.default_rng(6))
    assert a["draft_s"].sum() > 0
    assert a.equals(b.iterations)


def test_an_unknown_proposer_is_a_type_error_naming_what_it_lacks() -> None:
    with pytest.raises(TypeError, match="lacks .*draft_costs"):
        _static(proposer=object())
    world = NodeConfidence(concentration=2.0)
    with pytest.raises(TypeError, match="proposer: .*lacks"):
        DynamicTreeServingConfig(
            workload=_static().workload,
            policy=ConfidenceTree(budget=6, max_depth=4),
            world=world,
            proposer=object(),  # type: ignore[arg-type]
            deployment=Deployment(target=TARGET, hardware=HW),
        )
    # A proposer known only by its protocol drafts dynamic trees too: its share of a pass.
    dep = Deployment(target=TARGET, hardware=HW)
    got = batch_draft_cost(Wrapped(DRAFT), [(-1, 0)], np.array([10]), deployment=dep)
    want = DRAFT.draft_cost((-1, 0), deployment=dep, batch=1, context=10)
    assert got == (float(want.time_s), float(want.energy_j))


def test_dynamic_trees_with_a_protocol_proposer_run_on_a_paged_cache() -> None:
    heads = Heads(card=load_head("eagle-vicuna-7b-v1.3"))
    cfg = DynamicTreeServingConfig(
        workload=_static().workload,
        policy=ConfidenceTree(budget=8, max_depth=4),
        world=NodeConfidence(concentration=2.0),
        proposer=Wrapped(heads),  # type: ignore[arg-type]
        deployment=Deployment(target=load_model("vicuna-7b-v1.3"), hardware=HW),
        kv_block_tokens=16,
        plain_twin=False,
    )
    res = simulate_dynamic_tree_serving(cfg, np.random.default_rng(7))
    assert np.isfinite(res.requests["finish_s"]).all()
    assert res.iterations["draft_s"].sum() > 0
    _counts_match_the_iterations(res.requests, res.iterations, res.metrics())


def test_one_request_reports_what_its_single_stream_reports() -> None:
    """A request served alone walks its draw as a single stream does
    (``test_serving_policies``); its acceptance metrics are then the stream's own, computed
    from the blocks the single stream's planner draws on the same draw."""
    from specsim.acceptance.processes import AcceptanceDraw
    from specsim.sim import TraceWorkload, plan_blocks
    from specsim.sim.results.engine_metrics import stream_acceptance
    from specsim.sim.results.stream_result import add_accepted_at
    from specsim.sim.serving.batch import draw_requests

    policy, acceptance, n_out = (
        HeuristicPlusTwoMinusOne(initial=3, max_gamma=8),
        IIDAcceptance(alpha=0.75),
        400,
    )
    cfg = serving_config(
        PlainCost(c=0.05, step_s=0.01),
        rate_per_s=1.0,
        workload=TraceWorkload(arrival_s=(0.0,), prompt_tokens=(32,), output_tokens=(n_out,)),
        acceptance=acceptance,
        policy=policy,
        plain_twin=False,
    )
    m = simulate_serving(cfg, np.random.default_rng(9)).metrics()
    (d,) = draw_requests(acceptance, np.array([n_out]), max_gamma=8, rng=np.random.default_rng(9))
    tail = AcceptanceDraw(
        u=d.u[1:], prob=d.prob[1:], confidence=d.confidence[1:], position_weights=d.position_weights
    )
    _, gamma, _, emitted = plan_blocks(
        tail, policy, tokens=n_out - 1, max_gamma=8, overlapped=False
    )
    left = n_out - 1 - np.concatenate([[0], np.cumsum(emitted)[:-1]])
    gamma = np.minimum(gamma, left - 1)  # serving cuts a block at the request's end
    accepted = np.minimum(emitted, left) - 1
    at = add_accepted_at(
        np.zeros(0, dtype=np.int64), np.bincount(accepted)[::-1].cumsum()[::-1][1:]
    )
    want = stream_acceptance(
        drafts=int((gamma > 0).sum()),
        drafted=int(gamma.sum()),
        accepted=int(accepted.sum()),
        accepted_at=at,
    )
    for key, value in want.items():
        got = m[key]
        assert got == pytest.approx(value, rel=1e-12) if key.endswith("position") else got == value


@pytest.mark.parametrize("dynamic", [False, True])
def test_trees_under_a_token_budget_prefill_in_chunks(dynamic: bool) -> None:
    """Chunked prefill with trees: no iteration carries more than the budget (verified
    positions and prompt chunks together), every prompt is prefilled once (nothing is
    preempted), every request finishes, and the counters still match the table."""
    budget = 32
    if dynamic:
        cfg: Any = DynamicTreeServingConfig(
            workload=_static().workload,
            policy=ConfidenceTree(budget=10, max_depth=6),
            world=NodeConfidence(concentration=2.0),
            proposer=DRAFT,
            max_batch=16,
            token_budget=budget,
            deployment=Deployment(target=TARGET, hardware=HW),
        )
        res = simulate_dynamic_tree_serving(cfg, np.random.default_rng(11))
    else:
        cfg = _static(max_batch=16, token_budget=budget)
        res = simulate_tree_serving(cfg, np.random.default_rng(11))
    req, it = res.requests, res.iterations
    assert (it["positions"] + it["prefill_tokens"] <= budget).all()
    assert it["prefill_tokens"].sum() == req["prompt_tokens"].sum()
    assert np.isfinite(req["finish_s"]).all()
    assert (it["positions"] + it["prefill_tokens"] == budget).any()  # the budget binds
    _counts_match_the_iterations(req, it, res.metrics())
    assert res.metrics()["speedup"] is not None


def test_the_per_request_rates_by_hand() -> None:
    """Two requests: 2 drafts of 4 tokens accepting 2 and 1 at positions 1 and 2, and 4
    drafts of 4 tokens accepting 3 and 1: per request, position 1 is (2/2 + 3/4) / 2."""
    m = engine_acceptance(
        drafts=np.array([2, 4]),
        drafted=np.array([8, 16]),
        accepted=np.array([3, 4]),
        at=np.array([[2, 1], [3, 1]]),
    )
    assert m["acceptance_rate_per_position_per_request"] == pytest.approx([0.875, 0.375])
    assert m["acceptance_rate_per_position"] == pytest.approx([5 / 6, 2 / 6])
    assert m["draft_acceptance_rate_per_request"] == pytest.approx((3 / 8 + 4 / 16) / 2)
