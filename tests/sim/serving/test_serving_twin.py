"""The plain twin of a serving run: run when it adds something, skipped when it would not."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import FixedGamma, PolicyContext
from specsim.sim import PlainCost, PoissonWorkload, ServingConfig, simulate_serving
from specsim.sim.results.records import PLAIN_KEYS


def config(**kw):  # type: ignore[no-untyped-def]
    base = dict(
        workload=PoissonWorkload(
            rate_per_s=30.0, requests=50, prompt_tokens=(16, 200), output_tokens=(1, 80)
        ),
        cost=PlainCost(c=0.1, v=1.1, step_s=0.01),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_batch=8,
        max_gamma=6,
    )
    base.update(kw)
    return ServingConfig(**base)


@dataclasses.dataclass(frozen=True)
class _PlainUndeclared:
    """Gamma 0 without saying so: the simulator cannot know the twin would repeat the run."""

    def choose(self, ctx: PolicyContext) -> int:
        return 0


def test_a_declared_gamma_zero_run_is_its_own_twin() -> None:
    declared = simulate_serving(config(policy=FixedGamma(gamma=0)), np.random.default_rng(2))
    ran = simulate_serving(config(policy=_PlainUndeclared()), np.random.default_rng(2))
    assert declared.iterations_plain is not None and ran.iterations_plain is not None
    # The twin that was really run equals the one taken from the run itself.
    pd.testing.assert_frame_equal(declared.iterations_plain, ran.iterations_plain)
    pd.testing.assert_frame_equal(declared.requests_plain, ran.requests_plain)
    pd.testing.assert_frame_equal(declared.iterations_plain, declared.iterations_spec)
    m = declared.metrics()
    assert m["speedup"] == 1.0 and m["tpot_speedup"] == 1.0


def test_opting_out_of_the_twin_leaves_the_run_alone_and_says_so() -> None:
    full = simulate_serving(config(), np.random.default_rng(7))
    alone = simulate_serving(config(plain_twin=False), np.random.default_rng(7))
    pd.testing.assert_frame_equal(full.iterations_spec, alone.iterations_spec)
    pd.testing.assert_frame_equal(full.requests_spec, alone.requests_spec)
    assert alone.requests_plain is None and alone.iterations_plain is None
    m, ref = alone.metrics(), full.metrics()
    # The same keys either way; without a twin its metrics and the comparisons are None.
    assert m.keys() == ref.keys()
    for key in [f"plain_{k}" for k in PLAIN_KEYS] + ["speedup", "tpot_speedup"]:
        assert m[key] is None
    assert ref["speedup"] > 1.0 and ref["plain_tpot_p50_s"] > 0
    assert {k: v for k, v in m.items() if v is not None} == {
        k: v for k, v in ref.items() if m[k] is not None
    }


def test_plain_twin_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="plain_twin"):
        config(plain_twin="no")
