"""Exponential service on the serving engine: the JSQ rows' cost source and runs.

The join-the-shortest-queue rows of :func:`specsim.validate.queueing.queueing_checks`
need exponential service, which passes of a fixed length cannot give (the
module docstring there says why). :class:`ExponentialService` is a cost source
(the engine's documented extension point) whose prefill pass of request ``i``
takes ``service_s[i]`` and whose other passes take no time; :func:`serve_exponential`
serves given arrivals and service times on it, :func:`jsq_waits` draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import FixedGamma
from specsim.sim.costs.source import BlockCosts, IterationCost, PassCost
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.serving.router import Router
from specsim.sim.workload.arrivals import TraceWorkload

__all__ = ["ExponentialService", "jsq_waits", "serve_exponential"]


@dataclass(frozen=True, eq=False)
class ExponentialService:
    """A cost source for the JSQ rows: request ``i``, given prompt length ``i + 1`` as its
    name, is served by one prefill pass of ``service_s[i]`` seconds; every other pass takes
    no time. With ``service_s`` drawn i.i.d. exponential that is the exponential service
    the JSQ chain assumes, exactly: a request of two output tokens is prefilled (first
    token) and decoded (second) in one iteration of that length, and stays outstanding on
    its replica until it ends. A batched source (its speed paths are the same zeros) so that
    the engine's iterations take its fast path."""

    service_s: NDArray[np.float64]
    overlapped: bool = False

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        return PassCost(
            time_s=float(self.service_s[prompts - 1].sum()), flops=0.0, bytes=0.0, energy_j=None
        )

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        return _FREE

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        return _FREE

    def blocks(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> BlockCosts:
        zero = np.zeros(gamma.shape[0])
        return BlockCosts(
            verify_time=zero,
            verify_flops=zero,
            verify_energy=None,
            draft_time=zero,
            draft_flops=zero,
            draft_energy=None,
        )

    def iteration(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> IterationCost:
        return _NO_ITERATION

    def uniform_iteration(self, *, batch: int, context_sum: float, gamma: int) -> IterationCost:
        return _NO_ITERATION

    def uniform_iteration_times(
        self, context: NDArray[np.int64], max_gamma: int
    ) -> NDArray[np.float64]:
        return np.zeros((context.shape[0], max_gamma + 1))


_FREE = PassCost(time_s=0.0, flops=0.0, bytes=0.0, energy_j=None)
_NO_ITERATION = IterationCost(time_s=0.0, energy_j=0.0, draft_s=0.0)


def jsq_waits(
    *,
    arrival_rate: float,
    servers: int,
    requests: int,
    rng: np.random.Generator,
    router: Router = "join-shortest-queue",
    mean_service: float = 1.0,
    served_mean: float | None = None,
) -> NDArray[np.float64]:
    """Each request's wait for service (arrival order) when ``requests`` Poisson arrivals at
    ``arrival_rate`` are routed by ``router`` over ``servers`` replicas with i.i.d.
    exponential service of mean ``mean_service`` (:func:`serve_exponential`).
    ``served_mean`` (default ``mean_service``) lets a test serve slower than a formula
    assumes."""
    arrival = np.cumsum(rng.exponential(1.0 / arrival_rate, size=requests))
    service = rng.exponential(mean_service if served_mean is None else served_mean, size=requests)
    return serve_exponential(arrival, service, servers=servers, router=router, rng=rng)


def serve_exponential(
    arrival_s: NDArray[np.float64],
    service_s: NDArray[np.float64],
    *,
    servers: int,
    router: Router,
    rng: np.random.Generator,
    output_tokens: int = 2,
) -> NDArray[np.float64]:
    """Serve request ``i`` (arriving at ``arrival_s[i]``, sorted) for ``service_s[i]`` seconds
    on one of ``servers`` replicas chosen by ``router``, one request at a time each (an
    :class:`ExponentialService` cost source); returns each request's wait,
    ``first_token_s - arrival_s - service_s``. ``output_tokens = 1`` makes every request a
    one-token, prefill-only one."""
    n = arrival_s.shape[0]
    work = TraceWorkload(
        arrival_s=tuple(arrival_s.tolist()),
        prompt_tokens=tuple(range(1, n + 1)),
        output_tokens=(output_tokens,) * n,
    )
    config = ServingConfig(
        workload=work,
        cost=ExponentialService(service_s=service_s),
        acceptance=IIDAcceptance(alpha=0.0),
        policy=FixedGamma(gamma=0),
        max_batch=1,
        max_gamma=0,
        plain_twin=False,
        replicas=servers,
        router=router,
    )
    table = simulate_serving(config, rng).requests_spec.sort_values("arrival_s", kind="stable")
    prompt = table["prompt_tokens"].to_numpy()
    wait = (table["first_token_s"] - table["arrival_s"]).to_numpy() - service_s[prompt - 1]
    if not np.all(np.isfinite(wait)):
        raise ValueError("requests: a request has no first token (the run did not finish it)")
    # A wait is >= 0; float rounding of the clock leaves at most a few ulps below.
    return np.maximum(wait, 0.0)
