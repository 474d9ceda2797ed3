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
    from specsim.sim.chrome import chrome_trace
    from specsim.sim.costs import CardCost, PlainCost
    from specsim.sim.records import Blocks, ServingResult, StreamResult, goodput
    from specsim.sim.router import replica_metrics
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
    from specsim.sim.stream import (
        StreamConfig,
        plan_blocks,
        simulate_stream,
        simulate_stream_metrics,
    )
    from specsim.sim.workload import (
        PoissonWorkload,
        PresetWorkload,
        SyntheticWorkload,
        TraceWorkload,
        preset_workload,
    )

# Where each public name is defined.
_HOME: dict[str, str] = {
    "chrome_trace": "chrome",
    "CardCost": "costs",
    "PlainCost": "costs",
    "Blocks": "records",
    "ServingResult": "records",
    "StreamResult": "records",
    "goodput": "records",
    "replica_metrics": "router",
    "ServingConfig": "serving",
    "simulate_serving": "serving",
    "BatchedCostSource": "source",
    "BlockCosts": "source",
    "CostSource": "source",
    "IterationCost": "source",
    "PassCost": "source",
    "block_costs": "source",
    "iteration_cost": "source",
    "StreamConfig": "stream",
    "plan_blocks": "stream",
    "simulate_stream": "stream",
    "simulate_stream_metrics": "stream",
    "PoissonWorkload": "workload",
    "PresetWorkload": "workload",
    "SyntheticWorkload": "workload",
    "TraceWorkload": "workload",
    "preset_workload": "workload",
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
