"""Discrete-event simulation of speculative-decoding timelines (simpy).

:func:`simulate_stream` decodes one request block by block;
:func:`simulate_serving` serves many requests with continuous batching. Both
take a cost source (:class:`PlainCost` or :class:`CardCost`), an acceptance
process (:mod:`specsim.acceptance`) and a lookahead policy
(:mod:`specsim.policies`), and a ``numpy.random.Generator``.
"""

from specsim.sim.costs import CardCost, PlainCost
from specsim.sim.records import Blocks, ServingResult, StreamResult, chrome_trace
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.source import (
    BatchedCostSource,
    BlockCosts,
    CostSource,
    IterationCost,
    PassCost,
    block_costs,
    iteration_cost,
)
from specsim.sim.stream import StreamConfig, plan_blocks, simulate_stream
from specsim.sim.workload import PoissonWorkload, TraceWorkload

__all__ = [
    "BatchedCostSource",
    "IterationCost",
    "block_costs",
    "iteration_cost",
    "BlockCosts",
    "Blocks",
    "CardCost",
    "CostSource",
    "PassCost",
    "PlainCost",
    "PoissonWorkload",
    "ServingConfig",
    "ServingResult",
    "TraceWorkload",
    "simulate_serving",
    "StreamConfig",
    "StreamResult",
    "chrome_trace",
    "plan_blocks",
    "simulate_stream",
]
