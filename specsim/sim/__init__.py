"""Discrete-event simulation of speculative-decoding timelines (simpy).

:func:`simulate_stream` decodes one request block by block;
:func:`simulate_serving` serves many requests with continuous batching. Both
take a cost source (:class:`PlainCost` or :class:`CardCost`), an acceptance
process (:mod:`specsim.acceptance.processes`) and a lookahead policy
(:mod:`specsim.policies.lookahead`), and a ``numpy.random.Generator``.

The names below load with the submodule that defines them, on first use (a
start-up saving: ``specsim simulate`` on plain parameters runs a stream and
never needs serving's pandas tables).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specsim.sim.costs.costs import CardCost, PlainCost
    from specsim.sim.costs.source import (
        BatchedCostSource,
        BlockCosts,
        CostSource,
        IterationCost,
        PassCost,
        block_costs,
        iteration_cost,
    )
    from specsim.sim.results.chrome import chrome_trace
    from specsim.sim.results.records import Blocks, ServingResult, StreamResult, goodput
    from specsim.sim.serving import ServingConfig, simulate_serving
    from specsim.sim.serving.router import replica_metrics
    from specsim.sim.stream.stream import (
        StreamConfig,
        plan_blocks,
        simulate_stream,
        simulate_stream_metrics,
    )
    from specsim.sim.workload.workload import (
        PoissonWorkload,
        PresetWorkload,
        SyntheticWorkload,
        TraceWorkload,
        preset_workload,
    )

# Where each public name is defined.
_HOME: dict[str, str] = {
    "chrome_trace": "results.chrome",
    "CardCost": "costs.costs",
    "PlainCost": "costs.costs",
    "Blocks": "results.records",
    "ServingResult": "results.records",
    "StreamResult": "results.records",
    "goodput": "results.records",
    "replica_metrics": "serving.router",
    "ServingConfig": "serving",
    "simulate_serving": "serving",
    "BatchedCostSource": "costs.source",
    "BlockCosts": "costs.source",
    "CostSource": "costs.source",
    "IterationCost": "costs.source",
    "PassCost": "costs.source",
    "block_costs": "costs.source",
    "iteration_cost": "costs.source",
    "StreamConfig": "stream.stream",
    "plan_blocks": "stream.stream",
    "simulate_stream": "stream.stream",
    "simulate_stream_metrics": "stream.stream",
    "PoissonWorkload": "workload.workload",
    "PresetWorkload": "workload.workload",
    "SyntheticWorkload": "workload.workload",
    "TraceWorkload": "workload.workload",
    "preset_workload": "workload.workload",
}

__all__ = [
    "BatchedCostSource",
    "BlockCosts",
    "Blocks",
    "CardCost",
    "CostSource",
    "IterationCost",
    "PassCost",
    "PlainCost",
    "PoissonWorkload",
    "PresetWorkload",
    "ServingConfig",
    "ServingResult",
    "StreamConfig",
    "StreamResult",
    "SyntheticWorkload",
    "TraceWorkload",
    "block_costs",
    "chrome_trace",
    "goodput",
    "iteration_cost",
    "plan_blocks",
    "preset_workload",
    "replica_metrics",
    "simulate_serving",
    "simulate_stream",
    "simulate_stream_metrics",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'specsim.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"specsim.sim.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
