"""What a pass costs: the records :mod:`specsim.cost.model` returns.

:class:`StepCost` is one pass (numbers, with its shape and ``bound``);
:class:`StepCostGrid` many homogeneous passes (arrays, with ``fits``);
:class:`PassTerms` the bare terms of passes given by their aggregates
(numbers or arrays). The simulator's :class:`specsim.sim.PassCost` is the
four totals of these it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["RESULT_FIELDS", "PassTerms", "StepCost", "StepCostGrid"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class PassTerms:
    """Every term of one pass or of many (numbers or arrays): what :class:`StepCost` reports.

    Returned by :func:`pass_aggregates_cost`; its fields can also be read by
    name, ``terms["time_s"]``, as from the dict that function used to return.
    """

    time_s: Any
    flops: Any
    bytes: Any
    energy_j: Any
    weight_bytes: Any
    kv_bytes: Any
    activation_bytes: Any
    compute_time_s: Any
    memory_time_s: Any
    roofline_time_s: Any
    overhead_time_s: Any
    allreduce_time_s: Any
    resident_bytes: Any
    dequant_time_s: Any
    stack_time_s: Any
    padded_tokens: Any

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


RESULT_FIELDS = tuple(f.name for f in fields(PassTerms))
"""The terms every result carries, in :class:`StepCost` order."""


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """Cost of one pass. Flops, bytes and energy are totals over all tensor-parallel devices.

    ``time_s = roofline_time_s + overhead_time_s + allreduce_time_s``;
    ``compute_time_s`` and ``memory_time_s`` are one device's whole-pass flops
    and bytes at effective peak (their max is a lower bound on the roofline
    time, which takes the max per kernel). ``bound`` names the larger of the
    two. ``resident_bytes`` is one device's weights plus KV cache. ``dequant_time_s`` is the
    part of ``roofline_time_s`` spent dequantizing weight-only formats
    (:mod:`specsim.cost.quant`); ``dtype`` is the compute dtype, ``weight_format`` and
    ``kv_format`` the formats of the weights and the KV cache. On a stack profile's runtime,
    ``stack_time_s`` is the part of ``overhead_time_s`` the stack's speculative path and
    scheduling add (per-sequence host work, eager launches off the graph path, rejection
    sampling, configured speculation: :mod:`specsim.cost.stack_terms`) and ``padded_tokens``
    the rows its weight GEMMs ran (the new tokens padded up to a captured graph size).
    """

    time_s: float
    flops: float
    bytes: float
    energy_j: float
    bound: str
    weight_bytes: float
    kv_bytes: float
    activation_bytes: float
    compute_time_s: float
    memory_time_s: float
    roofline_time_s: float
    overhead_time_s: float
    allreduce_time_s: float
    resident_bytes: float
    dequant_time_s: float
    stack_time_s: float
    padded_tokens: float
    batch: int
    tokens: int
    tensor_parallel: int
    dtype: str
    weight_format: str = ""
    kv_format: str = ""

    @property
    def time_per_token_s(self) -> float:
        """Seconds per new token of the pass."""
        return self.time_s / self.tokens

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON output)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, kw_only=True)
class StepCostGrid:
    """Costs of many homogeneous passes: each field is an array of the broadcast shape."""

    time_s: FloatArray
    flops: FloatArray
    bytes: FloatArray
    energy_j: FloatArray
    weight_bytes: FloatArray
    kv_bytes: FloatArray
    activation_bytes: FloatArray
    compute_time_s: FloatArray
    memory_time_s: FloatArray
    roofline_time_s: FloatArray
    overhead_time_s: FloatArray
    allreduce_time_s: FloatArray
    resident_bytes: FloatArray
    dequant_time_s: FloatArray
    stack_time_s: FloatArray
    padded_tokens: FloatArray
    fits: NDArray[np.bool_]
    dtype: str
    weight_format: str = ""
    kv_format: str = ""

    @property
    def compute_bound(self) -> NDArray[np.bool_]:
        """True where compute time exceeds memory time."""
        return self.compute_time_s > self.memory_time_s

    @property
    def bound(self) -> NDArray[np.str_]:
        """``"compute"`` or ``"memory"`` per element."""
        return np.where(self.compute_bound, "compute", "memory")
