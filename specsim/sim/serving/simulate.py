"""The public entry point: :func:`simulate_serving` (the run, then its plain twin)."""

from __future__ import annotations

import numpy as np

from specsim.policies.lookahead import FixedGamma, deepest_gamma, fixed_gamma
from specsim.sim.costs.source import check_positions_fit
from specsim.sim.results.records import ServingResult
from specsim.sim.results.stability import plain_work_s
from specsim.sim.serving.batch import Requests, draw_requests
from specsim.sim.serving.config import ServingConfig
from specsim.sim.serving.drafting import ProposerDrafts, target_deployment
from specsim.sim.serving.loop import serve

__all__ = ["simulate_serving"]


def simulate_serving(config: ServingConfig, rng: np.random.Generator) -> ServingResult:
    """Serve the workload with speculation and, in the same run, without it (the plain twin,
    unless the policy's gamma is a declared 0 or ``config.plain_twin`` is False)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    table = config.workload.sample(rng)
    # The target verifies up to the deepest lookahead past a request's last token, and the
    # draft reaches one less (as the stream engine counts): checked before the run starts.
    reach = deepest_gamma(config.policy, config.max_gamma)
    out = table["output_tokens"].to_numpy()
    check_positions_fit(
        config.cost,
        context=table["prompt_tokens"].to_numpy(),
        new_tokens=out + reach,
        draft_new_tokens=out + max(reach - 1, 0),
        name="workload",
    )
    draws = draw_requests(
        config.acceptance, table["output_tokens"].to_numpy(), max_gamma=config.max_gamma, rng=rng
    )
    req = Requests.build(table, draws, max_gamma=config.max_gamma)
    drafts = None
    if config.proposer is not None:
        drafts = ProposerDrafts(config.cost, config.proposer, target_deployment(config.cost))
    spec = serve(config, req, config.policy, drafts=drafts)
    if not config.plain_twin:
        plain = None
    elif fixed_gamma(config.policy) == 0:  # the run is plain decoding: it is its own twin
        plain = (spec[0].copy(), spec[1].copy())
    else:
        plain = serve(config, req, FixedGamma(gamma=0))
    return ServingResult(
        requests_spec=spec[0],
        iterations_spec=spec[1],
        requests_plain=None if plain is None else plain[0],
        iterations_plain=None if plain is None else plain[1],
        work_s=plain_work_s(
            config.cost,
            prompt_tokens=table["prompt_tokens"].to_numpy(),
            output_tokens=table["output_tokens"].to_numpy(),
            max_batch=config.max_batch,
            kv_capacity_tokens=config.kv_capacity(),
            max_gamma=config.max_gamma,
        ),
    )
