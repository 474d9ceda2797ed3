"""Serving with token trees: the closed form at batch 1, conservation, the position budget."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from tree_cases import ACC, DRAFT, HW, TARGET, Z

from specsim.cost import Deployment
from specsim.policies.tree_optimizer import chain_tree, kary_tree, tree_tokens
from specsim.proposers import NGram, RankAcceptance, check_tree
from specsim.sim.serving.tree_serving import (
    TreeServingConfig,
    prune_tree,
    simulate_tree_serving,
)
from specsim.sim.workload.arrivals import PoissonWorkload
from specsim.theory.token_trees import tree_reach

TREE = kary_tree(2, 7)


def _config(rate: float, requests: int, **kw: object) -> TreeServingConfig:
    w = PoissonWorkload(
        rate_per_s=rate, requests=requests, prompt_tokens=(16, 256), output_tokens=(1, 80)
    )
    base: dict[str, object] = dict(
        workload=w,
        parents=TREE,
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
        plain_twin=False,
    )
    base.update(kw)
    return TreeServingConfig(**base)  # type: ignore[arg-type]


def _z(values: np.ndarray, theory: float) -> float:
    se = values.std(ddof=1) / math.sqrt(values.size)
    return abs(values.mean() - theory) / se


def test_batch_one_without_queueing_matches_the_tree_closed_form() -> None:
    res = simulate_tree_serving(_config(0.01, 80), np.random.default_rng(16))
    it = res.iterations[res.iterations["batch"] > 0]
    assert (it["batch"] == 1).all() and (it["nodes"] == len(TREE)).all()
    assert _z(it["accepted"].to_numpy() + 1.0, tree_tokens(TREE, ACC)) <= Z
    m = res.metrics()
    assert abs(m["tokens_per_pass"] - tree_tokens(TREE, ACC)) <= Z * m["tokens_per_pass_se"]
    # No queueing: each request's first token comes one prefill after its arrival.
    assert m["ttft_p99_s"] < 0.1


@pytest.mark.parametrize("a, g", [(0.6, 3), (0.85, 5)])
def test_a_chain_tree_is_a_chain(a: float, g: int) -> None:
    acc = RankAcceptance(accept=((a,),))
    cfg = _config(0.01, 60, parents=chain_tree(g), proposer=NGram(acceptance=acc))
    it = simulate_tree_serving(cfg, np.random.default_rng(g)).iterations
    it = it[it["batch"] > 0]
    assert _z(it["accepted"].to_numpy() + 1.0, (1 - a ** (g + 1)) / (1 - a)) <= Z


def test_every_request_finishes_and_tokens_are_conserved() -> None:
    res = simulate_tree_serving(_config(40.0, 120, max_batch=8), np.random.default_rng(2))
    req, it = res.requests, res.iterations
    assert np.isfinite(req["finish_s"]).all()
    assert (req["arrival_s"] <= req["first_token_s"]).all()
    assert (req["first_token_s"] <= req["finish_s"]).all()
    # The prefill gives each request's first token, the passes the rest.
    assert it["admitted"].sum() == len(req)
    assert it["emitted"].sum() + len(req) == req["output_tokens"].sum()
    assert (it["batch"] <= 8).all() and it["batch"].max() == 8
    assert (it["positions"] == it["batch"] * (it["nodes"] + 1)).all()
    assert (it["emitted"] <= it["accepted"] + it["batch"]).all()
    assert (it["positions_wasted"] == it["positions"] - it["emitted"]).all()
    assert (np.diff(it["start_s"]) > 0).all() and (it["end_s"] > it["start_s"]).all()
    m = res.metrics()
    assert m["tokens"] == req["output_tokens"].sum() and m["mean_batch"] > 4
    assert m["ttft_p50_s"] > 0 and m["tpot_p50_s"] > 0 and m["throughput_tokens_per_s"] > 0


def test_the_budget_is_never_exceeded_and_pruning_follows_the_pruned_closed_form() -> None:
    budget = 16  # four sequences of the root and three nodes
    cfg = _config(
        200.0,
        200,
        max_batch=4,
        position_budget=budget,
        workload=PoissonWorkload(
            rate_per_s=200.0, requests=200, prompt_tokens=64, output_tokens=(60, 120)
        ),
    )
    res = simulate_tree_serving(cfg, np.random.default_rng(5))
    it = res.iterations
    assert (it["positions"] <= budget).all()
    full = it[(it["batch"] == 4)]
    assert (full["nodes"] == 3).all() and full["budget_bound"].all()
    pruned = prune_tree(TREE, ACC, 3)
    assert pruned == (-1, 0, 1)  # reach .75, .525, .341: a chain beats the second rank
    theory = tree_tokens(pruned, ACC)
    assert theory < tree_tokens(TREE, ACC) - 0.2
    assert _z((full["accepted"].to_numpy() + 4.0) / 4.0, theory) <= Z
    # Unbound, the same load verifies the whole tree and emits more per pass.
    free = simulate_tree_serving(replace(cfg, position_budget=None), np.random.default_rng(5))
    assert free.metrics()["tokens_per_pass"] > res.metrics()["tokens_per_pass"]
    assert (free.iterations["nodes"] == len(TREE)).all()


def test_pruning_keeps_a_tree_of_the_highest_reach() -> None:
    tree = (-1, -1, -1, 0, 0, 1, 3, 3, 6)
    reach = tree_reach(list(tree), ACC.node_table(tree))
    for k in range(len(tree) + 1):
        cut = prune_tree(tree, ACC, k)
        assert len(cut) == k and check_tree(cut) == cut
        assert tree_tokens(cut, ACC) <= tree_tokens(tree, ACC) + 1e-12
        # The rank table falls with rank here, so the cut is the k nodes of highest reach.
        assert math.isclose(tree_tokens(cut, ACC) - 1.0, float(np.sort(reach)[::-1][:k].sum()))
    assert prune_tree(tree, ACC, 99) == tree
    # A later sibling with more reach waits for its earlier sibling: ranks are kept.
    inverted = RankAcceptance(accept=((0.1, 0.9),))
    assert prune_tree((-1, -1), inverted, 1) == (-1,)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="position_budget"):
        _config(1.0, 5, position_budget=1)
    with pytest.raises(ValueError, match="max_batch"):
        _config(1.0, 5, max_batch=0)
    with pytest.raises(ValueError, match="parents"):
        _config(1.0, 5, parents=(-1, 2, 1))
    with pytest.raises(TypeError, match="rng"):
        simulate_tree_serving(_config(1.0, 5), 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k"):
        prune_tree(TREE, ACC, -1)


def test_tables_have_the_serving_columns() -> None:
    res = simulate_tree_serving(_config(5.0, 10), np.random.default_rng(0))
    assert isinstance(res.requests, pd.DataFrame)
    for col in ("arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s"):
        assert col in res.requests.columns
    for col in ("batch", "positions", "positions_wasted", "emitted", "nodes", "energy_j"):
        assert col in res.iterations.columns
