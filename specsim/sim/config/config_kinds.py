"""The kinds each table of a ``specsim simulate`` config may name (:data:`KINDS`): the
acceptance processes, lookahead policies, cost sources, workloads, arrival processes and
length distributions, by the ``kind`` key a TOML table gives (read by
:mod:`specsim.sim.config.config`); and :class:`TwoStateMarkov`, the two-state form of
``kind = "markov"``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specsim.acceptance import processes as acc
from specsim.config import Kinds
from specsim.policies import engine_rules as rules
from specsim.policies import lookahead as pol
from specsim.sim.costs.costs import CardCost, PlainCost
from specsim.sim.costs.source import CostSource
from specsim.sim.workload.arrivals import Arrivals, GammaArrivals, OnOffArrivals, PoissonArrivals
from specsim.sim.workload.workload import (
    Empirical,
    Fixed,
    Geometric,
    Lengths,
    LogNormal,
    PoissonWorkload,
    PresetWorkload,
    SyntheticWorkload,
    TraceWorkload,
    Uniform,
    Workload,
    Zipf,
)

__all__ = ["KINDS", "TwoStateMarkov"]


@dataclass(frozen=True, kw_only=True)
class TwoStateMarkov:
    """The two-state form of ``kind = "markov"``: easy (``mean + spread``) and hard
    (``mean - spread``) stretches, equally likely, kept with probability ``persistence``.

    An acceptance process in its own right (it samples as
    :meth:`specsim.acceptance.processes.MarkovAcceptance.two_state`), so that sweeps can vary
    ``mean`` and ``spread`` as fields.
    """

    mean: float
    spread: float
    persistence: float
    confidence_noise: float = 0.1
    process: acc.MarkovAcceptance = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        process = acc.MarkovAcceptance.two_state(
            mean=self.mean,
            spread=self.spread,
            persistence=self.persistence,
            confidence_noise=self.confidence_noise,
        )
        object.__setattr__(self, "process", process)

    def sample(self, rng: np.random.Generator, n: int) -> acc.AcceptanceDraw:
        return self.process.sample(rng, n)


KINDS: Kinds = {
    acc.AcceptanceProcess: {
        "iid": acc.IIDAcceptance,
        "positional": acc.PositionalAcceptance,
        "markov": (acc.MarkovAcceptance, TwoStateMarkov),
        "trace": acc.TraceAcceptance,
    },
    pol.LookaheadPolicy: {
        "fixed": pol.FixedGamma,
        "optimal": pol.OptimalStatic,
        "confidence": pol.ConfidenceThreshold,
        "heuristic": pol.HeuristicPlusTwoMinusOne,
        "load-adaptive": pol.LoadAdaptive,
        "oracle": pol.Oracle,
        "goodput": rules.GoodputAdaptive,
        "vllm-disable-by-batch": rules.DisableByBatchSize,
        "vllm-batch-schedule": rules.BatchSizeSchedule,
        "sglang-adaptive": rules.SglangAdaptiveSteps,
    },
    CostSource: {"plain": PlainCost, "cards": CardCost},
    Workload: {
        "poisson": PoissonWorkload,
        "trace": TraceWorkload,
        "synthetic": SyntheticWorkload,
        "preset": PresetWorkload,
    },
    Arrivals: {"poisson": PoissonArrivals, "gamma": GammaArrivals, "on-off": OnOffArrivals},
    Lengths: {
        "fixed": Fixed,
        "uniform": Uniform,
        "geometric": Geometric,
        "lognormal": LogNormal,
        "zipf": Zipf,
        "empirical": Empirical,
    },
}
"""Each extension point's kinds and the class (or alternative forms) each names."""
