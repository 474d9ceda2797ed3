"""The engines' lookahead rules choose what their engines would, refuse bad parameters, and
serve (``specsim.policies.engine_rules``).

The expected choices are worked by hand from the cited engine code: vLLM v0's
``running_queue_size >= disable_by_batch_size``, vLLM v1's
``build_dynamic_sd_schedule_lookup`` (gaps take the entry before, k capped at
``num_speculative_tokens``), SGLang's ``AdaptiveStepSlot._recompute_params`` walk on the mean
accepted drafts ``alpha + alpha^2 + ... + alpha^s`` and ``AdaptiveStepRouter`` (pad to a graph
size, then ``bisect_right - 1`` over the slot bounds).
"""

from __future__ import annotations

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.engine_rules import (
    BatchSizeSchedule,
    DisableByBatchSize,
    GoodputAdaptive,
    SglangAdaptiveSteps,
)
from specsim.policies.lookahead import LoadAdaptive, PolicyContext
from specsim.sim import ServingConfig, simulate_serving
from specsim.sim.config.config import config_from_dict
from specsim.sim.costs.plain import PlainCost
from specsim.sim.workload.arrivals import PoissonWorkload


def ctx(batch: int, times: list[float] | None = None) -> PolicyContext:
    pass_time = None if times is None else (lambda g: times[g])
    return PolicyContext(
        position=0, draw=None, last_gamma=None, last_accepted=None, batch=batch, pass_time=pass_time
    )


def test_vllm_v0_disables_at_the_threshold_itself() -> None:
    rule = DisableByBatchSize(gamma=3, disable_by_batch_size=8)
    assert [rule.choose(ctx(b)) for b in (1, 7, 8, 9, 256)] == [3, 3, 0, 0, 0]


def test_vllm_v1_schedule_fills_gaps_and_caps_k() -> None:
    # (1-2 -> 7, capped at 4), gap 3..3 takes 4, (4-16 -> 2), beyond 16 the last entry's 0.
    rule = BatchSizeSchedule(
        num_speculative_tokens=4, schedule=((4, 16, 2), (1, 2, 7), (17, 17, 0))
    )
    picks = {b: rule.choose(ctx(b)) for b in (1, 2, 3, 4, 16, 17, 18, 1000)}
    assert picks == {1: 4, 2: 4, 3: 4, 4: 2, 16: 2, 17: 0, 18: 0, 1000: 0}


def test_sglang_walk_by_hand() -> None:
    # alpha 0.9: mean accepted drafts a(1) = .9, a(3) = 2.439, a(5) = 4.095, a(7) = 5.217.
    # Slot 1 (steps 1,3,5,7; up 0, down -0.25) from step 3: 2.439 is not > 2.5, stays at 3.
    # Slot 8 (0,1,3) from 3: 2.439 > 0.5 keeps it. Slot 32 (0,1): 3 is no candidate, starts at
    # the middle one, 1: .9 > .5 keeps it. Slot 64 (0): always 0.
    rule = SglangAdaptiveSteps(alpha=0.9, initial_steps=3)
    assert [rule.gamma_at(b) for b in (1, 7, 8, 31, 32, 63, 64, 500)] == [3, 3, 3, 3, 1, 1, 0, 0]
    # From step 7 at alpha 0.9: the drop to 5 needs a(7) <= 4.25; 5.217 is not, so 7 stays.
    assert SglangAdaptiveSteps(alpha=0.9, initial_steps=7).gamma_at(1) == 7
    # At alpha 0.5, a(7) = 0.992 <= 4.25 drops to 5, and <= 2.25 to 3 (the walk keeps the
    # average); then at 3, a(3) = .875 > .25 stops there.
    assert SglangAdaptiveSteps(alpha=0.5, initial_steps=7).gamma_at(1) == 3
    # A zero start probes the next step; with a(1) = 0.4 <= 0.5 it drops back to 0; with
    # a(1) = 0.6 > 0.5 it rises to 3, where a(3) = 1.176 > 0.5 keeps it.
    slots = ((1, (0, 1, 3), 0.0, 0.0),)
    assert SglangAdaptiveSteps(alpha=0.4, initial_steps=0, slots=slots).gamma_at(1) == 0
    assert SglangAdaptiveSteps(alpha=0.6, initial_steps=0, slots=slots).gamma_at(1) == 3


def test_sglang_pads_to_graph_sizes_before_routing() -> None:
    sizes = tuple(range(1, 9)) + tuple(range(10, 33, 2)) + tuple(range(40, 161, 16))
    rule = SglangAdaptiveSteps(alpha=0.9, initial_steps=3, graph_sizes=sizes)
    # 29 pads to 30 (slot 8: step 3), 31 to 32 and 33 to 40 (slot 32: step 1), 57 to 72
    # (slot 64: off); 161 is past every graph and routes as itself.
    assert [rule.gamma_at(b) for b in (7, 29, 31, 33, 56, 57, 161)] == [3, 3, 1, 1, 1, 0, 0]
    assert rule.slot_at(57) == 64


def test_goodput_turns_down_then_off_with_the_threshold() -> None:
    # alpha 0.8: E = 1, 1.8, 2.44, 2.952. Times per gamma at three loads.
    light, heavy = [1.0, 1.05, 1.1, 1.15], [1.0, 1.7, 2.4, 3.1]
    plain = LoadAdaptive(alpha=0.8, max_gamma=3)
    rule = GoodputAdaptive(alpha=0.8, max_gamma=3, min_gain=0.1)
    assert plain.choose(ctx(1, light)) == rule.choose(ctx(1, light)) == 3
    # Heavy: best is gamma 1 at 1.8/1.7 = 1.059 tokens per unit time, under 1.1 x plain's 1.
    assert plain.choose(ctx(64, heavy)) == 1
    assert rule.choose(ctx(64, heavy)) == 0
    assert GoodputAdaptive(alpha=0.8, max_gamma=3, min_gain=0.05).choose(ctx(64, heavy)) == 1


def test_goodput_settled_agrees_with_choose() -> None:
    rule = GoodputAdaptive(alpha=0.8, max_gamma=3, min_gain=0.1)
    low = np.array([1.0, 1.7, 2.4, 3.1])
    for high in (low * 1.0001, low * 1.2):
        proven = rule.settled(low, high)
        if proven is not None:
            for t in (low, high, (low + high) / 2):
                assert rule.choose(ctx(8, list(t))) == proven
    assert rule.settled(low, low * 1.0001) == 0


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: DisableByBatchSize(gamma=0, disable_by_batch_size=4), "gamma"),
        (lambda: DisableByBatchSize(gamma=2, disable_by_batch_size=0), "disable_by_batch_size"),
        (lambda: BatchSizeSchedule(num_speculative_tokens=3, schedule=()), "at least one"),
        (
            lambda: BatchSizeSchedule(num_speculative_tokens=3, schedule=((2, 8, 1),)),
            "start at 1",
        ),
        (
            lambda: BatchSizeSchedule(num_speculative_tokens=3, schedule=((1, 8, 1), (8, 9, 0))),
            "overlap",
        ),
        (
            lambda: BatchSizeSchedule(num_speculative_tokens=3, schedule=((1, 8, -1),)),
            r"schedule\[0\] k",
        ),
        (lambda: BatchSizeSchedule(num_speculative_tokens=3, schedule=((5, 1, 1),)), "exceeds"),
        (lambda: SglangAdaptiveSteps(alpha=1.5, initial_steps=3), "alpha"),
        (
            lambda: SglangAdaptiveSteps(alpha=0.5, initial_steps=3, slots=((1, (1, 3), 0.0, 0.5),)),
            "down_hysteresis",
        ),
        (
            lambda: SglangAdaptiveSteps(alpha=0.5, initial_steps=3, graph_sizes=(1, 4, 2)),
            "increasing",
        ),
        (lambda: SglangAdaptiveSteps(alpha=0.5, initial_steps=3, slots=()), "at least one"),
        (lambda: GoodputAdaptive(alpha=0.5, min_gain=-0.1), "min_gain"),
    ],
)
def test_bad_parameters_are_errors(make, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        make()


TABLES = {
    "goodput": {"kind": "goodput", "min_gain": 0.05},
    "vllm-disable-by-batch": {
        "kind": "vllm-disable-by-batch",
        "gamma": 3,
        "disable_by_batch_size": 4,
    },
    "vllm-batch-schedule": {
        "kind": "vllm-batch-schedule",
        "num_speculative_tokens": 4,
        "schedule": [[1, 2, 4], [3, 64, 1]],
    },
    "sglang-adaptive": {"kind": "sglang-adaptive", "initial_steps": 3},
}


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_each_rule_serves_from_toml(kind: str) -> None:
    spec = config_from_dict(
        {
            "mode": "serving",
            "seed": 4,
            "max_gamma": 6,
            "max_batch": 16,
            "workload": {
                "kind": "poisson",
                "rate_per_s": 40.0,
                "requests": 40,
                "prompt_tokens": [64, 128],
                "output_tokens": [16, 48],
            },
            "acceptance": {"kind": "iid", "alpha": 0.7},
            "policy": TABLES[kind],
            "deployment": {"target": "llama-3.1-8b", "hardware": "h100-sxm"},
            "cost": {"kind": "cards", "draft": "llama-3.2-1b"},
        }
    )
    assert isinstance(spec.config, ServingConfig)
    m = simulate_serving(spec.config, np.random.default_rng(spec.seed)).metrics()
    assert m["requests"] == 40
    assert m["speedup"] is not None and m["speedup"] > 0


def test_the_v0_rule_turns_speculation_off_in_a_run() -> None:
    """At or above the threshold every iteration runs plain: with the threshold at 1, no
    iteration drafts; with it above the batch cap, every iteration drafts gamma."""
    wl = PoissonWorkload(
        rate_per_s=50.0, requests=20, prompt_tokens=(16, 32), output_tokens=(8, 16)
    )

    def drafted(threshold: int) -> np.ndarray:
        cfg = ServingConfig(
            workload=wl,
            cost=PlainCost(c=0.05, v=1.1),
            acceptance=IIDAcceptance(alpha=0.9),
            policy=DisableByBatchSize(gamma=3, disable_by_batch_size=threshold),
            max_gamma=3,
            max_batch=8,
        )
        it = simulate_serving(cfg, np.random.default_rng(2)).iterations_spec
        it = it[it["batch"] > 0]
        return (it["draft_tokens"] / it["batch"]).to_numpy()

    assert np.all(drafted(1) == 0)
    assert np.all(drafted(9) > 0) and drafted(9).max() == 3  # cut only at requests' ends
