"""Tree serving's plain twin (the same requests without speculation) and its KV limit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tree_cases import DRAFT, HW, TARGET

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.policies.tree_optimizer import kary_tree
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.results.records import PLAIN_KEYS
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.serving.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    simulate_dynamic_tree_serving,
)
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.workload.arrivals import PoissonWorkload

TREE = kary_tree(2, 7)


def _static(w: PoissonWorkload, **kw: object) -> TreeServingConfig:
    return TreeServingConfig(
        workload=w,
        parents=TREE,
        proposer=DRAFT,
        **kw,
        deployment=Deployment(target=TARGET, hardware=HW),
    )  # type: ignore[arg-type]


def _dynamic(w: PoissonWorkload, **kw: object) -> DynamicTreeServingConfig:
    return DynamicTreeServingConfig(
        workload=w,
        policy=ConfidenceTree(budget=8, max_depth=6),
        world=NodeConfidence(concentration=2.0),
        proposer=DRAFT,
        **kw,
        deployment=Deployment(target=TARGET, hardware=HW),
    )  # type: ignore[arg-type]


def _check_twin(req: pd.DataFrame, plain: pd.DataFrame, it: pd.DataFrame) -> None:
    for col in ("arrival_s", "prompt_tokens", "output_tokens"):  # the same requests
        assert (plain[col].to_numpy() == req[col].to_numpy()).all()
    assert np.isfinite(plain["finish_s"]).all()
    dec = it[it["batch"] > 0]
    assert (dec["positions"] == dec["batch"]).all() and (dec["emitted"] == dec["batch"]).all()
    assert (it["draft_s"] == 0).all() and (it["draft_tokens"] == 0).all()
    assert (it["positions_wasted"] == 0).all()
    assert it["emitted"].sum() + len(plain) == plain["output_tokens"].sum()


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_the_twin_serves_the_same_requests_without_speculation(kind: str) -> None:
    w = PoissonWorkload(rate_per_s=2.0, requests=30, prompt_tokens=(16, 256), output_tokens=(1, 80))
    if kind == "static":
        res = simulate_tree_serving(_static(w, max_batch=8), np.random.default_rng(1))
    else:
        res = simulate_dynamic_tree_serving(_dynamic(w, max_batch=8), np.random.default_rng(1))
    assert res.requests_plain is not None and res.iterations_plain is not None
    _check_twin(res.requests, res.requests_plain, res.iterations_plain)
    m = res.metrics()
    assert m["speedup"] == pytest.approx(
        m["throughput_tokens_per_s"] / m["plain_throughput_tokens_per_s"]
    )
    assert m["tpot_speedup"] == pytest.approx(m["plain_tpot_p50_s"] / m["tpot_p50_s"])
    # Light load, a good table: each request decodes faster with trees than without.
    assert m["tpot_speedup"] > 1.5


@pytest.mark.parametrize("rate", [0.5, 20.0])
def test_the_twin_is_chain_servings_plain_run(rate: float) -> None:
    # An independent route: specsim.sim.serving at gamma 0 on the same cards and arrivals.
    # Chain serving prices a pass at one more cached token per sequence (it counts the last
    # emitted token in the context and again as the new position): within 0.5%. Under load
    # that drift moves an arrival across an iteration's start now and then, so there the
    # summaries are compared, request by request only when requests rarely meet.
    w = PoissonWorkload(
        rate_per_s=rate, requests=40, prompt_tokens=(16, 256), output_tokens=(1, 80)
    )
    tree = simulate_tree_serving(_static(w, max_batch=8), np.random.default_rng(1))
    chain = simulate_serving(
        ServingConfig(
            workload=w,
            cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=None),
            acceptance=IIDAcceptance(alpha=0.5),
            policy=FixedGamma(gamma=0),
            max_batch=8,
            plain_twin=False,
        ),
        np.random.default_rng(1),
    )
    assert tree.requests_plain is not None
    a, b = tree.requests_plain, chain.requests_spec
    assert (a["arrival_s"].to_numpy() == b["arrival_s"].to_numpy()).all()
    if rate < 1.0:
        e2e_a = (a["finish_s"] - a["arrival_s"]).to_numpy()
        e2e_b = (b["finish_s"] - b["arrival_s"]).to_numpy()
        assert np.allclose(e2e_a, e2e_b, rtol=5e-3) and (e2e_a <= e2e_b).all()
    m, ref = tree.metrics(), chain.metrics()
    for key in ("tpot_p50_s", "throughput_tokens_per_s", "energy_j_per_token"):
        assert m[f"plain_{key}"] == pytest.approx(ref[key], rel=5e-3)


def test_without_the_twin_its_metrics_are_none() -> None:
    w = PoissonWorkload(rate_per_s=5.0, requests=10, prompt_tokens=64, output_tokens=(1, 30))
    alone = simulate_tree_serving(_static(w, plain_twin=False), np.random.default_rng(0))
    full = simulate_tree_serving(_static(w), np.random.default_rng(0))
    pd.testing.assert_frame_equal(alone.iterations, full.iterations)
    m, ref = alone.metrics(), full.metrics()
    assert m.keys() == ref.keys()
    for key in [f"plain_{k}" for k in PLAIN_KEYS] + ["speedup", "tpot_speedup"]:
        assert m[key] is None and ref[key] is not None


def _held_at_admission(req: pd.DataFrame, it: pd.DataFrame, reserve: np.ndarray) -> np.ndarray:
    """KV tokens reserved by the running requests just after each iteration's admission."""
    ends = (it["start_s"] + it["prefill_s"]).to_numpy()
    starts = it["start_s"].to_numpy()
    first = req["first_token_s"].to_numpy()
    admitted_at = np.array([starts[np.flatnonzero(ends == f)[0]] for f in first])
    finish = req["finish_s"].to_numpy()
    held = (admitted_at[None, :] <= starts[:, None]) & (finish[None, :] > starts[:, None])
    return (held * reserve[None, :]).sum(axis=1)


def test_the_kv_limit_makes_admission_wait() -> None:
    w = PoissonWorkload(rate_per_s=100.0, requests=40, prompt_tokens=64, output_tokens=50)
    # A tree request reserves 64 + 50 + 8 = 122 tokens, a plain one 64 + 50 + 1 = 115:
    # 350 tokens hold two tree requests and three plain ones.
    res = simulate_tree_serving(_static(w, kv_capacity_tokens=350), np.random.default_rng(4))
    assert res.iterations["batch"].max() == 2
    assert res.iterations_plain is not None and res.iterations_plain["batch"].max() == 3
    free = simulate_tree_serving(_static(w), np.random.default_rng(4)).metrics()
    m = res.metrics()
    assert m["ttft_p50_s"] > free["ttft_p50_s"] and m["tokens"] == free["tokens"]
    # Mixed lengths: the running requests' reservations never exceed the capacity.
    w = PoissonWorkload(
        rate_per_s=100.0, requests=60, prompt_tokens=(16, 400), output_tokens=(1, 120)
    )
    cap = 1500
    res2 = simulate_dynamic_tree_serving(
        _dynamic(w, kv_capacity_tokens=cap, plain_twin=False), np.random.default_rng(5)
    )
    req = res2.requests
    reserve = (req["prompt_tokens"] + req["output_tokens"] + 9).to_numpy()
    held = _held_at_admission(req, res2.iterations, reserve)
    assert held.max() <= cap and held.max() > cap - reserve.max()
    assert np.isfinite(req["finish_s"]).all()


def test_a_request_that_cannot_fit_is_named() -> None:
    w = PoissonWorkload(rate_per_s=1.0, requests=5, prompt_tokens=64, output_tokens=50)
    with pytest.raises(ValueError, match=r"kv_capacity_tokens: 100 tokens cannot hold request"):
        simulate_tree_serving(_static(w, kv_capacity_tokens=100), np.random.default_rng(0))
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        _static(w, kv_capacity_tokens=0)
    with pytest.raises(ValueError, match="kv_capacity_tokens: 10000000 tokens do not fit"):
        _static(w, kv_capacity_tokens=10_000_000)  # the A100 holds about 123,000 after the weights
    with pytest.raises(ValueError, match="plain_twin"):
        _static(w, plain_twin=1)
