import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import LoadAdaptive, OptimalStatic
from specsim.sim import ServingConfig, StreamConfig, simulate_serving
from specsim.sim.config.config import TwoStateMarkov, config_from_dict, load_config, with_value
from specsim.sim.disagg.from_toml import load_disaggregated
from specsim.sim.serving.tree_serving import TreeServingConfig
from specsim.sim.serving.tree_serving_dynamic import DynamicTreeServingConfig

CONFIGS = Path(__file__).resolve().parents[3] / "studies" / "configs"
BASE = {
    "tokens": 100,
    "acceptance": {"kind": "iid", "alpha": 0.5},
    "policy": {"kind": "fixed", "gamma": 3},
    "cost": {"kind": "plain", "c": 0.1},
}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.stem)
def test_example_configs_load(path: Path) -> None:
    if "[disaggregation]" in path.read_text(encoding="utf-8"):  # two pools: specsim.sim.disagg
        assert load_disaggregated(path).config.decode_replicas >= 1
        return
    spec = load_config(path)
    trees = TreeServingConfig | DynamicTreeServingConfig
    assert isinstance(spec.config, StreamConfig | ServingConfig | trees)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"tokns": 5}, r"unknown key\(s\) \['tokns'\]"),
        ({"tokens": "many"}, r"config.tokens: expected int, got 'many'"),
        ({"tokens": 2.5}, r"config.tokens: expected int, got 2.5"),
        ({"acceptance": {"kind": "iid", "alpha": "high"}}, r"acceptance \(iid\).alpha: .*'high'"),
        ({"policy": {"kind": "fixed", "gamma": True}}, r"policy \(fixed\).gamma: .*True"),
        ({"acceptance": {"kind": "markov", "mean": 0.5}}, r"acceptance \(markov\): missing"),
        ({"acceptance": {"kind": "iid", "alpha": 1.5}}, r"config.acceptance \(iid\): alpha"),
        ({"acceptance": {"kind": "gauss"}}, "unknown kind 'gauss'"),
        ({"policy": {"kind": "fixed", "gamma": 3, "extra": 1}}, r"config.policy: unknown key"),
        ({"deployment": {"target": "nope", "hardware": "h200"}, "cost": {"kind": "cards"}}, "nope"),
        ({"cost": {"kind": "cards", "target": "llama-2-7b"}}, r"write \[deployment\] target"),
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
        "workload": {
            "kind": "poisson",
            "rate_per_s": 1.0,
            "requests": 3,
            "prompt_tokens": 100,
            "output_tokens": 100,
        },
        "kv_capacity_tokens": 50,
    }
    spec = config_from_dict(data)
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        simulate_serving(spec.config, np.random.default_rng(0))  # type: ignore[arg-type]


def test_unknown_keys_name_the_file_and_table(tmp_path: Path) -> None:
    bad = tmp_path / "typo.toml"
    bad.write_text(
        'tokens = 10\n[acceptance]\nkind = "iid"\nalpah = 0.5\n[policy]\nkind = "fixed"\n'
        'gamma = 1\n[cost]\nkind = "plain"\nc = 0.1\n'
    )
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}.acceptance: unknown key.*alpah"):
        load_config(bad)


def test_the_policy_reads_alpha_c_and_max_gamma_from_the_run() -> None:
    """serving.toml states alpha once, in [acceptance]; the policy takes it from there."""
    spec = load_config(CONFIGS / "serving.toml")
    policy = spec.config.policy
    assert isinstance(policy, LoadAdaptive)
    assert policy.alpha == spec.config.acceptance.alpha == 0.7  # type: ignore[attr-defined]
    assert policy.max_gamma == spec.config.max_gamma == 8
    assert spec.derived == {"alpha", "max_gamma"}
    optimal = config_from_dict({**BASE, "max_gamma": 12, "policy": {"kind": "optimal"}})
    assert optimal.config.policy == OptimalStatic(alpha=0.5, c=0.1, max_gamma=12)
    # A sweep that changes the acceptance or the cost changes what the policy reads.
    moved = with_value(optimal, "acceptance.alpha", 0.9, where="test")
    moved = with_value(moved, "cost.c", 0.02, where="test")
    assert moved.config.policy == OptimalStatic(alpha=0.9, c=0.02, max_gamma=12)
    # Stated in the policy table (or set by path), a value is the policy's own.
    own = config_from_dict({**BASE, "policy": {"kind": "optimal", "alpha": 0.6}})
    assert own.config.policy.alpha == 0.6 and own.derived == {"c", "max_gamma"}  # type: ignore[attr-defined]
    pinned = with_value(optimal, "policy.alpha", 0.3, where="test")
    pinned = with_value(pinned, "acceptance.alpha", 0.8, where="test")
    assert pinned.config.policy.alpha == 0.3  # type: ignore[attr-defined]


def test_paths_apply_to_the_dataclasses() -> None:
    spec = config_from_dict(
        {**BASE, "acceptance": {"kind": "markov", "mean": 0.7, "spread": 0.2, "persistence": 0.9}}
    )
    assert spec.config.acceptance == TwoStateMarkov(mean=0.7, spread=0.2, persistence=0.9)
    wider = with_value(spec, "acceptance.spread", 0.25, where="test")
    assert wider.config.acceptance.spread == 0.25  # type: ignore[attr-defined]
    assert spec.config.acceptance.spread == 0.2  # type: ignore[attr-defined]  # unchanged
    with pytest.raises(ValueError, match=r"test \[cost\]: kind = 'cards' takes .*\[deployment\]"):
        with_value(spec, "cost", {"kind": "cards", "draft": "llama-68m"}, where="test")
    dep = {"target": "llama-2-7b", "hardware": "a100-80gb"}
    cards = config_from_dict(
        {**BASE, "deployment": dep, "cost": {"kind": "cards", "draft": "llama-68m"}}
    )
    swapped = with_value(cards, "deployment.hardware", "h200", where="test")
    assert swapped.config.cost.hardware.slug == "h200"  # type: ignore[attr-defined]
    back = dataclasses.replace(
        swapped.config.cost.deployment,  # type: ignore[attr-defined]
        hardware=cards.config.cost.hardware,  # type: ignore[attr-defined]
    )
    assert dataclasses.replace(swapped.config.cost, deployment=back) == cards.config.cost  # type: ignore[type-var]
    with pytest.raises(ValueError, match=r"'acceptance.alhpa': .*no field 'alhpa'"):
        with_value(spec, "acceptance.alhpa", 0.5, where="test")
    with pytest.raises(ValueError, match=r"test: acceptance.spread: spread"):
        with_value(spec, "acceptance.spread", 0.5, where="test")


def test_two_state_markov_samples_as_the_library_process() -> None:
    from specsim.acceptance.processes import MarkovAcceptance

    ours = TwoStateMarkov(mean=0.6, spread=0.3, persistence=0.8)
    lib = MarkovAcceptance.two_state(mean=0.6, spread=0.3, persistence=0.8)
    a, b = ours.sample(np.random.default_rng(1), 50), lib.sample(np.random.default_rng(1), 50)
    assert np.array_equal(a.prob, b.prob) and np.array_equal(a.u, b.u)


def test_a_simulated_serving_run_is_unchanged_by_the_derived_alpha() -> None:
    spec = load_config(CONFIGS / "serving.toml")
    stated = dataclasses.replace(
        spec.config,
        workload=dataclasses.replace(spec.config.workload, requests=20),  # type: ignore[union-attr]
        policy=LoadAdaptive(alpha=0.7, max_gamma=8),
    )
    derived = dataclasses.replace(stated, policy=spec.config.policy)
    assert isinstance(stated.acceptance, IIDAcceptance)
    one = simulate_serving(stated, np.random.default_rng(3)).metrics()  # type: ignore[arg-type]
    two = simulate_serving(derived, np.random.default_rng(3)).metrics()  # type: ignore[arg-type]
    assert one == two


@pytest.mark.parametrize(
    ("seed", "message"), [(-1, "expected an integer >= 0, got -1"), (1.5, "expected int, got 1.5")]
)
def test_the_seed_is_an_integer_at_least_zero_and_named(
    tmp_path: Path, seed: object, message: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        f'seed = {seed}\ntokens = 100\nacceptance = {{kind = "iid", alpha = 0.5}}\n'
        'policy = {kind = "fixed", gamma = 3}\ncost = {kind = "plain", c = 0.1}\n'
    )
    with pytest.raises(ValueError, match=rf"config\.toml\.seed: {re.escape(message)}"):
        load_config(path)
    spec = config_from_dict(BASE)
    with pytest.raises(ValueError, match="--seed: seed: expected an integer >= 0"):
        with_value(spec, "seed", -3, where="--seed")


def _engine_examples() -> list[str]:
    """The commented TOML examples of docs/simulate-config.md's engine section."""
    text = (CONFIGS.parent.parent / "docs" / "simulate-config.md").read_text()
    section = text.split("## Serving as engines do it")[1].split("\n## ")[0]
    return re.findall(r"```toml\n(.*?)```", section, flags=re.S)


def test_the_engine_examples_in_the_docs_load_and_run() -> None:
    import tomllib

    examples = _engine_examples()
    assert len(examples) == 3
    keys = ("kv_block_tokens", "token_budget", "replicas")
    for text, key in zip(examples, keys, strict=True):
        spec = config_from_dict(tomllib.loads(text), where="docs")
        assert getattr(spec.config, key) == tomllib.loads(text)[key]
        small = with_value(spec, "workload.requests", 24, where="test")
        r = simulate_serving(small.config, np.random.default_rng(0))  # type: ignore[arg-type]
        assert r.requests_spec["finish_s"].notna().all()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"router": "random"}, r"config.{1,2}router: expected one of \['round-robin'"),
        ({"replicas": 0}, r"replicas: expected an integer >= 1, got 0 \(a router needs a replica"),
        ({"kv_block_tokens": 0}, r"kv_block_tokens: expected an integer >= 1, got 0"),
        ({"token_budget": 4}, r"token_budget: 4 tokens are fewer than one sequence's"),
        ({"preemption": "swap"}, r"preemption: 'swap' .* no host_link_bandwidth"),
    ],
)
def test_bad_engine_keys_name_the_field(patch, message) -> None:
    serving = {
        "mode": "serving",
        "max_gamma": 8,
        "max_batch": 8,
        "workload": {
            "kind": "poisson",
            "rate_per_s": 4.0,
            "requests": 10,
            "prompt_tokens": 64,
            "output_tokens": 16,
        },
        **{k: v for k, v in BASE.items() if k != "tokens"},
    }
    config_from_dict(serving)  # the base is good
    with pytest.raises(ValueError, match=message):
        config_from_dict({**serving, **patch})
