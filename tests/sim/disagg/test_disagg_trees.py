"""Token trees on the decode pool: the tree's closed form, a request decoding alone against
a colocated tree-serving run, dynamic trees, trees with a paged cache, TOML and errors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from tree_cases import ACC, DRAFT, HW, TARGET, Z

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import read_toml
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.policies.tree_optimizer import kary_tree, tree_tokens
from specsim.sim import CardCost
from specsim.sim.disagg import DisaggConfig, KVLink, card_link, simulate_disaggregated
from specsim.sim.disagg.from_toml import disagg_from_dict
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.serving.tree_serving_dynamic import DynamicTreeServingConfig
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.workload.arrivals import PoissonWorkload, TraceWorkload

TREE = kary_tree(2, 7)
DEP = Deployment(target=TARGET, hardware=HW)
IDEAL = KVLink(bandwidth=math.inf, latency_s=0.0)
WORKLOAD = PoissonWorkload(
    rate_per_s=8.0, requests=120, prompt_tokens=(16, 256), output_tokens=(20, 80)
)


def static(**kw: object) -> TreeServingConfig:
    base: dict[str, object] = dict(
        workload=WORKLOAD, parents=TREE, proposer=DRAFT, deployment=DEP, plain_twin=False
    )
    base.update(kw)
    return TreeServingConfig(**base)  # type: ignore[arg-type]


def pools(tree: object, **kw: object) -> DisaggConfig:
    base: dict[str, object] = dict(
        workload=WORKLOAD,
        prefill_cost=CardCost(deployment=DEP),
        decode_cost=tree.card_cost(),  # type: ignore[attr-defined]
        tree=tree,
        link=card_link(HW, "interconnect"),
        max_batch=16,
        plain_twin=False,
    )
    base.update(kw)
    return DisaggConfig(**base)  # type: ignore[arg-type]


def tpot(req: pd.DataFrame) -> np.ndarray:
    sub = req[req["output_tokens"] > 1]
    return ((sub["finish_s"] - sub["first_token_s"]) / (sub["output_tokens"] - 1)).to_numpy()


def test_tokens_per_pass_on_the_decode_pool_is_the_tree_closed_form() -> None:
    """Sequences batched on two decode replicas verify the whole tree every pass (no
    position budget): the walk's tokens per pass is ``1 + sum of reaches`` within Z
    standard errors."""
    res = simulate_disaggregated(pools(static(), decode_replicas=2), np.random.default_rng(7))
    m = res.metrics()
    assert res.decode.iterations_spec["batch"].max() > 1  # batched, not one at a time
    want = tree_tokens(TREE, ACC)
    assert 0 < m["tokens_per_pass_se"] < 0.05
    assert abs(m["tokens_per_pass"] - want) <= Z * m["tokens_per_pass_se"]
    assert m["mean_nodes"] == len(TREE) and m["budget_bound_share"] == 0.0


def test_a_request_decoding_alone_has_the_colocated_tree_runs_tpot() -> None:
    """Requests far apart, an ideal link: each decodes alone with the same walks (the same
    rng stream after the workload), so its TPOT is the colocated tree engine's; its TTFT
    is the prefill plus the first step, later than the colocated prefill's."""
    spaced = TraceWorkload(
        arrival_s=(0.0, 5.0, 10.0), prompt_tokens=(200, 64, 150), output_tokens=(40, 9, 77)
    )
    tree = static(workload=spaced)
    dis = simulate_disaggregated(
        pools(tree, workload=spaced, link=IDEAL), np.random.default_rng(4)
    ).requests()
    col = simulate_tree_serving(tree, np.random.default_rng(4)).requests
    np.testing.assert_allclose(tpot(dis), tpot(col), rtol=1e-12)
    assert (dis["first_token_s"] > col["first_token_s"]).all()


def test_the_plain_twin_decodes_the_same_requests_plainly() -> None:
    res = simulate_disaggregated(pools(static(), plain_twin=True), np.random.default_rng(7))
    m = res.metrics()
    assert res.requests_plain is not None
    plain = res.decode.iterations_plain
    assert plain is not None and int(plain["draft_tokens"].sum()) == 0
    assert m["tpot_speedup"] > 1.0  # a 68M draft for a 7B target pays at these batches
    np.testing.assert_array_equal(
        res.requests()["prefill_end_s"], res.requests_plain["prefill_end_s"]
    )


def test_dynamic_trees_on_the_decode_pool() -> None:
    dyn = DynamicTreeServingConfig(
        workload=WORKLOAD,
        policy=ConfidenceTree(budget=10, max_depth=6),
        world=NodeConfidence(concentration=2.0),
        proposer=DRAFT,
        deployment=DEP,
        position_budget=64,
        plain_twin=False,
    )
    res = simulate_disaggregated(pools(dyn), np.random.default_rng(9))
    it = res.decode.iterations_spec
    assert {"expected_tokens", "draft_positions", "accepted"} <= set(it.columns)
    assert (it["positions"] <= 64).all()
    m = res.metrics()
    assert 1.0 < m["tokens_per_pass"] < 1 + 6 and res.requests()["finish_s"].notna().all()


def test_trees_with_a_paged_cache_preempt_and_recompute_on_the_decode_pool() -> None:
    busy = dataclasses.replace(WORKLOAD, rate_per_s=60.0, requests=60)
    res = simulate_disaggregated(
        pools(static(), workload=busy, kv_block_tokens=16, kv_capacity_tokens=1200),
        np.random.default_rng(7),
    )
    req = res.requests()
    assert int(req["preemptions"].sum()) > 0 and int(req["recomputed_tokens"].sum()) > 0
    assert req["finish_s"].notna().all()
    # Every output token emitted once: the first by the admission pass, the rest by the
    # trees (a recompute emits nothing).
    emitted = int(res.decode.iterations_spec["emitted"].sum())
    assert emitted == int(req["output_tokens"].sum()) - len(req)


def test_a_tree_plan_refuses_the_chains_fields_and_another_deployment() -> None:
    with pytest.raises(ValueError, match=r"\['policy', 'acceptance'\] are the chains'"):
        pools(static(), policy=FixedGamma(gamma=3), acceptance=IIDAcceptance(alpha=0.7))
    with pytest.raises(ValueError, match="decode_cost: a tree plan verifies on its own"):
        pools(static(), decode_cost=CardCost(deployment=DEP))
    with pytest.raises(ValueError, match="needs a lookahead policy and an acceptance"):
        dataclasses.replace(pools(static()), tree=None)
    with pytest.raises(TypeError, match="disaggregation tree: expected"):
        dataclasses.replace(pools(static()), tree=object())  # type: ignore[arg-type]


def test_toml_with_a_tree_serves_trees_on_the_decode_pool() -> None:
    data = read_toml("studies/configs/deepseek-v3-mtp.toml")
    data["workload"] = {**data["workload"], "requests": 30}
    data["disaggregation"] = {"prefill_replicas": 1, "decode_replicas": 1}
    cfg = disagg_from_dict(data).config
    assert isinstance(cfg.tree, TreeServingConfig) and cfg.policy is None
    assert cfg.prefill_cost.draft is None  # type: ignore[attr-defined]
    m = simulate_disaggregated(cfg, np.random.default_rng(3)).metrics()
    # The MTP card's closed form: 1 + 0.875 (1 + 0.6156 + 0.6156^2) = 2.745 a pass.
    assert abs(m["tokens_per_pass"] - 2.745) <= Z * m["tokens_per_pass_se"]


def test_toml_with_a_proposer_and_no_tree_drafts_the_decode_pools_chains() -> None:
    """A ``[proposer]`` without a ``[tree]``: the decode pool's chains are drafted by the MTP
    head (its pass priced per iteration), not by a draft model; the prefill pool has none."""
    data = read_toml("studies/configs/deepseek-v3-mtp.toml")
    data = {k: v for k, v in data.items() if k != "tree"}
    data["workload"] = {**data["workload"], "requests": 20}
    data["policy"], data["max_gamma"] = {"kind": "fixed", "gamma": 3}, 3
    data["acceptance"] = {"kind": "iid", "alpha": 0.7}
    data["disaggregation"] = {"prefill_replicas": 1, "decode_replicas": 1}
    cfg = disagg_from_dict(data).config
    assert cfg.tree is None and cfg.proposer is not None
    assert cfg.decode_cost.draft is None  # type: ignore[attr-defined]
    res = simulate_disaggregated(cfg, np.random.default_rng(3))
    it = res.decode.iterations_spec
    assert (it.loc[it["batch"] > 0, "draft_s"] > 0).mean() > 0.9  # all but the last passes
    assert res.metrics()["tpot_speedup"] > 1.0
