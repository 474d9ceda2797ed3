"""A serving run on cards is refused before it starts when a request's last block would take
the target or the draft past its card's ``max_position``: the lookahead counts, as in a
single stream (the target verifies ``gamma`` past a request's last token, the draft reaches
one less)."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.cards import load_model
from specsim.sim.config.config import config_from_dict
from specsim.sim.serving.simulate import simulate_serving

GAMMA = 4
DRAFT = load_model("llama-68m")  # 2,048 positions: the pair's shorter card


def _config(prompt: int, output: int) -> dict[str, object]:
    return {
        "mode": "serving",
        "seed": 1,
        "max_gamma": GAMMA,
        "max_batch": 2,
        "workload": {
            "kind": "poisson",
            "rate_per_s": 4.0,
            "requests": 2,
            "prompt_tokens": [prompt, prompt],
            "output_tokens": [output, output],
        },
        "acceptance": {"kind": "iid", "alpha": 0.7},
        "policy": {"kind": "fixed", "gamma": GAMMA},
        "cost": {"kind": "cards", "draft": "llama-68m"},
        "deployment": {"target": "llama-2-7b", "hardware": "a100-80gb"},
    }


def _run(prompt: int, output: int) -> None:
    spec = config_from_dict(_config(prompt, output))
    simulate_serving(spec.config, np.random.default_rng(0))


def test_the_draft_may_reach_its_last_position_and_not_one_past() -> None:
    assert DRAFT.max_position == 2048
    output = 100
    prompt = DRAFT.max_position - output - (GAMMA - 1)  # the draft ends on its last position
    _run(prompt, output)
    with pytest.raises(ValueError, match=r"workload.*max_position"):
        _run(prompt + 1, output)  # prompt plus output fits; its last drafts do not


def _tree_config(prompt: int, output: int) -> dict[str, object]:
    """Vicuna-7B (2,048 positions) with its Medusa heads verifying a binary tree of depth 3
    (14 nodes): its KV reservation is 15 positions, its positions 3 past a request's last
    token."""
    data = _config(prompt, output)
    for key in ("acceptance", "policy", "cost", "max_gamma"):
        data.pop(key)
    data["deployment"] = {"target": "vicuna-7b-v1.3", "hardware": "a100-80gb"}
    data["proposer"] = {"kind": "heads", "card": "medusa-vicuna-7b-v1.3"}
    data["tree"] = {"kind": "static", "shape": "k-ary", "k": 2, "depth": 3}
    return data


def test_a_tree_counts_its_depth_not_its_nodes_against_max_position() -> None:
    """The target is checked at the tree's depth: a request ending three positions short of
    its last runs (counted by the tree's 14 nodes it was refused), one more is refused."""
    from specsim.sim.config.config_compose import simulate_run  # start-up: the tree engine

    target = load_model("vicuna-7b-v1.3")
    output = 100
    prompt = target.max_position - output - 3
    simulate_run(config_from_dict(_tree_config(prompt, output)).config, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"workload.*max_position"):
        simulate_run(config_from_dict(_tree_config(prompt + 1, output)).config,
                     np.random.default_rng(0))  # fmt: skip


def test_the_decode_pool_counts_the_chains_lookahead() -> None:
    """Disaggregated serving checks the decode pool's last drafts as a serving run does."""
    from specsim.sim.disagg.from_toml import disagg_from_dict  # start-up: the disaggregated engine
    from specsim.sim.disagg.simulate import simulate_disaggregated  # start-up: as above

    output = 100
    prompt = DRAFT.max_position - output - (GAMMA - 1)
    for p, ok in ((prompt, True), (prompt + 1, False)):
        data = _config(p, output) | {
            "disaggregation": {"prefill_replicas": 1, "decode_replicas": 1}
        }
        config = disagg_from_dict(data).config
        if ok:
            simulate_disaggregated(config, np.random.default_rng(0))
        else:
            with pytest.raises(ValueError, match=r"workload.*max_position"):
                simulate_disaggregated(config, np.random.default_rng(0))
