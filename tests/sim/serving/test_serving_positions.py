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
