"""The serving tests' shared set-up: one card-priced cost source and a config builder.

A test module binds its own defaults with :func:`functools.partial`, so each keeps
the load it is about (a light load for latencies, a heavy one for preemption).
"""

from __future__ import annotations

from typing import Any

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, PoissonWorkload, ServingConfig


def card_cost() -> CardCost:
    """llama-2-7b verified on an A100-80GB with a llama-68m draft."""
    return CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )


def serving_config(
    cost: Any,
    *,
    rate_per_s: float,
    requests: int = 60,
    prompt_tokens: tuple[int, int] = (64, 256),
    gamma: int = 3,
    **kw: Any,
) -> ServingConfig:
    """A Poisson workload (outputs of 16 to 64 tokens), alpha 0.7, fixed ``gamma``, batches
    of at most 16; ``kw`` overrides any other field."""
    base: dict[str, Any] = dict(
        workload=PoissonWorkload(
            rate_per_s=rate_per_s,
            requests=requests,
            prompt_tokens=prompt_tokens,
            output_tokens=(16, 64),
        ),
        cost=cost,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=gamma),
        max_batch=16,
        max_gamma=8,
    )
    base.update(kw)
    return ServingConfig(**base)
