"""Serving workloads: when requests arrive and how long their prompts and outputs are.

A workload is a small frozen config with one method, ``sample(rng)``, that returns a table
with one row per request: ``arrival_s``, ``prompt_tokens`` and ``output_tokens``.
:class:`PoissonWorkload` and :class:`TraceWorkload` (a recorded trace,
:func:`read_request_trace`) live with the arrival processes in :mod:`specsim.sim.workload.arrivals`;
:class:`SyntheticWorkload` pairs any arrival process with two length distributions;
:func:`preset_workload` (:class:`PresetWorkload` as a config) takes a published production
trace's lengths and burstiness (:data:`PRESETS`). Length distributions are on whole tokens
>= 1 and carry their exact ``mean`` and ``second_moment`` as Ciw's distributions do, so
queueing formulas can be evaluated on the object the simulator samples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from specsim.cards.files import packaged_root
from specsim.checks import check_size
from specsim.sim.workload.arrivals import (
    Arrivals,
    GammaArrivals,
    PoissonWorkload,
    TraceWorkload,
    check_rate,
    read_request_trace,
)
from specsim.sim.workload.lengths import (
    Empirical,
    Fixed,
    Geometric,
    Lengths,
    LogNormal,
    Uniform,
    Zipf,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PRESETS",
    "Empirical",
    "Fixed",
    "Geometric",
    "Lengths",
    "LogNormal",
    "PoissonWorkload",
    "Preset",
    "PresetWorkload",
    "SyntheticWorkload",
    "TraceWorkload",
    "Uniform",
    "Workload",
    "Zipf",
    "preset_workload",
    "read_request_trace",
]

Ints = NDArray[np.int64]


def _requests(value: object) -> None:
    check_size(value, name="requests", limit="requests")


# Workloads ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SyntheticWorkload:
    """``requests`` requests from an arrival process, prompt and output lengths drawn
    independently from their distributions (arrivals first, then prompts, then outputs)."""

    requests: int
    arrivals: Arrivals
    prompt: Lengths
    output: Lengths

    def __post_init__(self) -> None:
        _requests(self.requests)
        for name in ("prompt", "output"):
            dist = getattr(self, name)
            if not (hasattr(dist, "sample") and hasattr(dist, "mean")):
                raise TypeError(f"{name}: expected a length distribution, got {dist!r}")
        if not hasattr(self.arrivals, "times"):
            raise TypeError(f"arrivals: expected an arrival process, got {self.arrivals!r}")

    @property
    def mean_prompt_tokens(self) -> float:
        return float(self.prompt.mean)

    def with_rate(self, rate_per_s: float) -> SyntheticWorkload:
        """The same workload at another long-run arrival rate (what a capacity search varies)."""
        return dataclasses.replace(self, arrivals=self.arrivals.with_rate(rate_per_s))

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        import pandas as pd  # start-up: pandas costs ~0.3 s; only a drawn request table needs it

        n = int(self.requests)
        return pd.DataFrame(
            {
                "arrival_s": self.arrivals.times(rng, n),
                "prompt_tokens": self.prompt.sample(rng, n),
                "output_tokens": self.output.sample(rng, n),
            }
        )


# Presets from published traces ----------------------------------------------------------------


def workload_dir() -> Path:
    """Where the presets' histograms are: ``workloads/`` beside the shipped cards."""
    root = packaged_root()
    if root is None:  # pragma: no cover - a broken install
        raise FileNotFoundError("the packaged models folder (with workloads/) is missing")
    return root / "workloads"


@dataclass(frozen=True)
class Preset:
    """A production trace's length histograms (files under ``models/workloads``) and the
    coefficient of variation of its inter-arrival times, with where they come from."""

    prompt_file: str
    output_file: str
    interarrival_cv: float
    rate_per_s: float  # the trace's own mean rate (requests over its span)
    source: str


_AZURE = (
    "Azure LLM inference trace 2023 (github.com/Azure/AzurePublicDataset, "
    "data/AzureLLMInferenceTrace_{}.csv at commit b469a11), released with Patel et al., "
    "'Splitwise: Efficient generative LLM inference using phase splitting', ISCA 2024; "
    "histograms and the inter-arrival cv computed from the file"
)

# fmt: off
PRESETS: dict[str, Preset] = {
    "azure-code-2023": Preset("azure-code-2023-prompt.csv", "azure-code-2023-output.csv",
                              interarrival_cv=13.15, rate_per_s=2.567,
                              source=_AZURE.format("code")),
    "azure-conversation-2023": Preset("azure-conv-2023-prompt.csv", "azure-conv-2023-output.csv",
                                      interarrival_cv=1.094, rate_per_s=5.530,
                                      source=_AZURE.format("conv")),
}
# fmt: on
"""Named workloads from published production traces: 8,819 coding and 19,366 conversation
requests of one hour each (prompt median 1,469 and 1,020 tokens, output median 13 and 129;
means 2,048 / 27.9 and 1,155 / 211.1). Prompt and output lengths are drawn independently
from the trace's histograms (their correlation is not kept)."""


def preset_workload(
    name: str, *, requests: int, rate_per_s: float | None = None, bursty: bool = True
) -> SyntheticWorkload:
    """The preset ``name``'s lengths, with Gamma inter-arrival times of the trace's
    coefficient of variation (``bursty``; False: Poisson) at ``rate_per_s`` (default: the
    trace's own rate)."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown workload {name!r}; known: {sorted(PRESETS)}")
    p = PRESETS[name]
    rate = p.rate_per_s if rate_per_s is None else rate_per_s
    return SyntheticWorkload(
        requests=requests,
        arrivals=GammaArrivals(rate_per_s=rate, cv=p.interarrival_cv if bursty else 1.0),
        prompt=Empirical.from_csv(workload_dir() / p.prompt_file),
        output=Empirical.from_csv(workload_dir() / p.output_file),
    )


@dataclass(frozen=True, kw_only=True)
class PresetWorkload:
    """:func:`preset_workload` as a config (``kind = "preset"`` in a TOML file): the
    histograms are read when the workload is sampled, not when it is built."""

    name: str
    requests: int
    rate_per_s: float | None = None
    bursty: bool = True

    def __post_init__(self) -> None:
        if self.name not in PRESETS:
            raise ValueError(f"name: unknown workload {self.name!r}; known: {sorted(PRESETS)}")
        _requests(self.requests)
        if self.rate_per_s is not None:
            check_rate(self.rate_per_s, "rate_per_s")

    def workload(self) -> SyntheticWorkload:
        return preset_workload(
            self.name, requests=self.requests, rate_per_s=self.rate_per_s, bursty=self.bursty
        )

    @property
    def mean_prompt_tokens(self) -> float:
        return self.workload().mean_prompt_tokens

    def with_rate(self, rate_per_s: float) -> PresetWorkload:
        return dataclasses.replace(self, rate_per_s=rate_per_s)

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        return self.workload().sample(rng)


Workload = PoissonWorkload | TraceWorkload | SyntheticWorkload | PresetWorkload
