"""Accelerator cards: peak rates, memory, interconnect, power and cost-model parameters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specsim.cards.checks import DTYPE_BYTES, card_label, check_float, check_sources, check_str

__all__ = [
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_MEMORY_EFFICIENCY",
    "DEFAULT_LAYER_OVERHEAD_S",
    "DEFAULT_PASS_OVERHEAD_S",
    "KINDS",
    "COLLECTIVE_ALGORITHMS",
    "HardwareCard",
]

# Defaults for accelerator cards that do not set these (documented in models/README.md).
# They are the values of the A100-80GB card (models/hardware/a100-80gb.toml, which says how
# each was chosen): compute efficiency from Narayanan et al. (SC'21, Megatron-LM: 502 PFLOP/s
# on 3072 A100s, 52% of peak); memory efficiency 1700/2039 from the gpt-fast README; layer
# overhead fitted to gpt-fast's Llama-2-7B decode rate; pass overhead tuned (see that card).
# Cards relying on them are *not* calibrated.
DEFAULT_COMPUTE_EFFICIENCY = 0.52
DEFAULT_MEMORY_EFFICIENCY = 0.834
DEFAULT_LAYER_OVERHEAD_S = 44.5e-6
DEFAULT_PASS_OVERHEAD_S = 3.0e-4

KINDS = ("gpu", "tpu", "cpu")
"""The kinds of accelerator a card may be."""

COLLECTIVE_ALGORITHMS = ("ring", "tree", "per-allreduce")
"""The all-reduce algorithms a card may name (:mod:`specsim.cost.collectives`)."""


@dataclass(frozen=True, kw_only=True)
class HardwareCard:
    """An accelerator: peak rates, memory, interconnect, power, and cost-model parameters.

    Units: ``peak_flops`` FLOP/s (dense, per dtype); ``mem_bandwidth`` and
    ``interconnect_bandwidth`` bytes/s (the latter per direction);
    ``mem_capacity`` bytes; times in seconds; powers in watts; energies in joules.
    ``compute_efficiency`` and ``memory_efficiency`` are the fractions of peak a
    pass attains; ``layer_overhead_s`` is a fixed cost per layer (kernel launches,
    small-kernel floors), ``pass_overhead_s`` a fixed cost per pass (host loop,
    sampling). ``calibration`` keeps a calibrated card's metadata table.
    ``collective_algorithm`` is how tensor-parallel all-reduces run over the interconnect
    (``ring``, ``tree``, or ``per-allreduce``: one ``interconnect_latency_s`` per all-reduce,
    the form the shipped cards were fitted with); ``collective_overhead_s`` a fixed cost per
    pass and per device beyond the first (:mod:`specsim.cost.collectives`).
    ``generation`` (optional) is the chip architecture generation whose kernels the card runs
    (``"ampere"``, ``"hopper"``, ``"blackwell"``, ``"rtx-blackwell"``, ``"cdna3"``, ...; not
    named ``architecture``, which is a model card's): a card without a measured weight-format
    table of its own borrows the nearest measured card's of the same generation
    (:func:`specsim.cards.stack_files.format_source`).

    The four software-stack numbers (``compute_efficiency`` to ``pass_overhead_s``) belong
    to a runtime profile (:mod:`specsim.cards.runtime`): a card file names its default
    profile in ``runtime`` and :func:`specsim.cards.load_hardware` fills the four fields
    from it. A card that sets them itself (a calibrated card, or an old one) is the
    deprecated path: its numbers act as its profile (:func:`specsim.cards.profile_of_card`).
    """

    slug: str
    name: str
    kind: str
    peak_flops: dict[str, float] = field(hash=False)
    mem_bandwidth: float
    mem_capacity: float
    interconnect_bandwidth: float
    interconnect_latency_s: float
    idle_power_w: float
    max_power_w: float
    sources: dict[str, str] | list[str] = field(hash=False)
    energy_per_flop_j: float | None = None
    energy_per_byte_j: float | None = None
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    memory_efficiency: float = DEFAULT_MEMORY_EFFICIENCY
    layer_overhead_s: float = DEFAULT_LAYER_OVERHEAD_S
    pass_overhead_s: float = DEFAULT_PASS_OVERHEAD_S
    collective_algorithm: str = "per-allreduce"
    collective_overhead_s: float = 0.0
    runtime: str | None = None
    generation: str | None = None
    calibration: dict[str, Any] | None = field(default=None, hash=False)
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "hardware", self.slug)
        check_str(where, "slug", self.slug)
        check_str(where, "name", self.name)
        check_str(where, "kind", self.kind, KINDS)
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise TypeError(
                f"{where}: field 'peak_flops' must be a non-empty table dtype -> FLOP/s, "
                f"got {self.peak_flops!r}"
            )
        for dt, rate in self.peak_flops.items():
            if dt not in DTYPE_BYTES:
                raise ValueError(
                    f"{where}: field 'peak_flops' names unknown dtype {dt!r}; "
                    f"known: {sorted(DTYPE_BYTES)}"
                )
            check_float(where, f"peak_flops.{dt}", rate, strict=True)
        positive = ("mem_bandwidth", "mem_capacity", "interconnect_bandwidth", "max_power_w")
        nonneg = (
            "interconnect_latency_s",
            "idle_power_w",
            "layer_overhead_s",
            "pass_overhead_s",
            "collective_overhead_s",
        )
        check_str(where, "collective_algorithm", self.collective_algorithm, COLLECTIVE_ALGORITHMS)
        optional = ("energy_per_flop_j", "energy_per_byte_j")
        for name in positive + nonneg + optional:
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            check_float(where, name, value, strict=name in positive)
            object.__setattr__(self, name, float(value))  # TOML integers become floats
        object.__setattr__(self, "peak_flops", {k: float(v) for k, v in self.peak_flops.items()})
        if (self.energy_per_flop_j is None) != (self.energy_per_byte_j is None):
            raise ValueError(
                f"{where}: fields 'energy_per_flop_j' and 'energy_per_byte_j' go together; "
                f"got {self.energy_per_flop_j!r} and {self.energy_per_byte_j!r}"
            )
        if self.idle_power_w > self.max_power_w:
            raise ValueError(
                f"{where}: field 'idle_power_w' ({self.idle_power_w}) exceeds "
                f"'max_power_w' ({self.max_power_w})"
            )
        for name in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            check_float(where, name, value, strict=True)
            if value > 1:
                raise ValueError(f"{where}: field {name!r} must be in (0, 1], got {value}")
        if self.runtime is not None:
            check_str(where, "runtime", self.runtime)
        if self.generation is not None:
            check_str(where, "generation", self.generation)
        check_sources(where, self.sources)
        if self.calibration is not None and not isinstance(self.calibration, Mapping):
            raise TypeError(
                f"{where}: field 'calibration' must be a table, got {self.calibration!r}"
            )

    def peak(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype``, or a ValueError naming the card's dtypes."""
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
        if dtype not in self.peak_flops:
            raise ValueError(
                f"dtype: hardware card {self.slug!r} gives no peak FLOP/s for {dtype!r}; "
                f"it has {sorted(self.peak_flops)}"
            )
        return float(self.peak_flops[dtype])

    def ridge_intensity(self, dtype: str) -> float:
        """FLOP per byte at which a pass turns compute-bound, at the card's efficiencies."""
        return (self.peak(dtype) * self.compute_efficiency) / (
            self.mem_bandwidth * self.memory_efficiency
        )
