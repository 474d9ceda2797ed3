from pathlib import Path

import pytest

from specsim.sim import ServingConfig, StreamConfig
from specsim.sim.config import config_from_dict, load_config

CONFIGS = Path(__file__).resolve().parent.parent / "studies" / "configs"
BASE = {
    "tokens": 100,
    "acceptance": {"kind": "iid", "alpha": 0.5},
    "policy": {"kind": "fixed", "gamma": 3},
    "cost": {"kind": "plain", "c": 0.1},
}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.stem)
def test_example_configs_load(path: Path) -> None:
    spec = load_config(path)
    assert isinstance(spec.config, StreamConfig | ServingConfig)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"tokns": 5}, r"unknown key\(s\) \['tokns'\]"),
        ({"tokens": "many"}, r"config.tokens: expected int"),
        ({"acceptance": {"kind": "iid", "alpha": 1.5}}, r"config.acceptance \(iid\): alpha"),
        ({"acceptance": {"kind": "gauss"}}, "unknown kind 'gauss'"),
        ({"policy": {"kind": "fixed", "gamma": 3, "extra": 1}}, r"config.policy: unknown key"),
        ({"cost": {"kind": "cards", "target": "nope", "hardware": "h200"}}, "nope"),
        ({"mode": "batch"}, "config.mode"),
    ],
)
def test_bad_configs_name_the_field(patch, message) -> None:
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        config_from_dict({**BASE, **patch})


def test_serving_kv_limit_smaller_than_a_request_fails_before_running() -> None:
    data = {
        "mode": "serving",
        "acceptance": {"kind": "iid", "alpha": 0.5},
        "policy": {"kind": "fixed", "gamma": 3},
        "cost": {"kind": "plain", "c": 0.1},
        "workload": {"kind": "poisson", "rate_per_s": 1.0, "requests": 3, "prompt_tokens": 100,
                     "output_tokens": 100},
        "kv_capacity_tokens": 50,
    }  # fmt: skip
    spec = config_from_dict(data)
    import numpy as np

    from specsim.sim import simulate_serving

    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        simulate_serving(spec.config, np.random.default_rng(0))  # type: ignore[arg-type]
