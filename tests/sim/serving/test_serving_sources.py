"""Serving on a cost source that has only the required methods (no speed paths)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import FixedGamma, HeuristicPlusTwoMinusOne, LoadAdaptive
from specsim.sim import PlainCost, PoissonWorkload, ServingConfig, simulate_serving
from specsim.sim.costs.source import BatchedCostSource


@dataclasses.dataclass(frozen=True)
class _Minimal:
    """PlainCost's passes, without its speed paths: the simulator must compose iterations."""

    inner: PlainCost

    @property
    def overlapped(self) -> bool:
        return False

    def verify(self, new_tokens, context):  # type: ignore[no-untyped-def]
        return self.inner.verify(new_tokens, context)

    def draft_step(self, context):  # type: ignore[no-untyped-def]
        return self.inner.draft_step(context)

    def prefill(self, prompts, *, draft):  # type: ignore[no-untyped-def]
        return self.inner.prefill(prompts, draft=draft)


@pytest.mark.parametrize(
    "policy",
    [
        FixedGamma(gamma=3),
        LoadAdaptive(alpha=0.7, max_gamma=6),
        HeuristicPlusTwoMinusOne(initial=4, max_gamma=6),
    ],
    ids=["fixed", "load-adaptive", "heuristic"],
)
def test_a_minimal_source_serves_like_the_full_one(policy: object) -> None:
    plain = PlainCost(c=0.1, v=1.2, step_s=0.01)
    minimal = _Minimal(plain)
    assert not isinstance(minimal, BatchedCostSource)
    work = PoissonWorkload(
        rate_per_s=30.0, requests=40, prompt_tokens=(8, 64), output_tokens=(1, 60)
    )
    kw = dict(
        workload=work, acceptance=IIDAcceptance(alpha=0.7), policy=policy, max_batch=6, max_gamma=6
    )
    full = simulate_serving(ServingConfig(cost=plain, **kw), np.random.default_rng(9))
    got = simulate_serving(ServingConfig(cost=minimal, **kw), np.random.default_rng(9))
    # The same iterations; times composed pass by pass agree to rounding.
    pd.testing.assert_frame_equal(got.iterations_spec, full.iterations_spec, rtol=1e-12)
    pd.testing.assert_frame_equal(got.requests_plain, full.requests_plain, rtol=1e-12)
