"""Stack profiles and device parts: what a software stack costs, apart from the device.

A :class:`StackProfile` (TOML files in ``models/stacks/``) holds what a serving or
generation stack does and costs whatever accelerator it runs on: host work per pass, per
scheduled sequence and per draft step; sampling and rejection sampling per token; how it
verifies drafted tokens (``multi-query``: one pass over every sequence's new positions,
with a causal or tree mask; ``batch-expansion``: each sequence scored as ``k + 1``
sequences of one new token, each reading the whole cached context again); how it drafts
(on the target's worker or a separate one, replaying CUDA graphs or eagerly); the CUDA
graph sizes it captures (a pass is padded up to the next one, so the verify cost is a
staircase, and runs eagerly, paying a launch cost per layer, above the largest; without
``graph_sizes`` nothing is padded and ``layer_overhead_s`` is the whole launch cost); the fixed
cost of having speculation configured; whether it verifies token trees; whether its
weight-only kernels are those the device part was measured with (``weight_kernels``).

A :class:`DevicePart` (``models/stacks/devices/``) holds what the kernels achieve on a
device: the fractions of peak compute and bandwidth, by rows and weight format, measured
on named cards or a documented default for a class of devices. Its numbers are those of
:class:`~specsim.cards.RuntimeProfile`, which :func:`specsim.cards.stack_files.compose`
builds from one of each for a hardware card: the roofline consumes only that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specsim.cards.checks import card_label, check_bool, check_float, check_sources, check_str
from specsim.cards.hardware import KINDS

__all__ = [
    "VERIFY_MODES",
    "GRAPH_UNITS",
    "DRAFT_WORKERS",
    "WEIGHT_KERNELS",
    "StackProfile",
    "DevicePart",
]

VERIFY_MODES = ("multi-query", "batch-expansion")
"""How a stack scores drafted tokens (see the module docstring)."""
GRAPH_UNITS = ("batch", "tokens")
"""What a stack's captured graph sizes count: sequences in the pass, or new tokens."""
DRAFT_WORKERS = ("same", "separate")
"""Where a stack runs its proposer: in the target's worker and step (``same``: a draft step
pays only the stack's draft-step host cost), or a worker of its own whose draft steps are
passes of that worker (``separate``: per-sequence host work, its own captured graphs)."""
WEIGHT_KERNELS = ("device", "own")
"""Whose weight-only kernels a stack runs: those the device part's format tables were
measured with (``device``), or kernels of its own that no device part describes (``own``:
the format tables of :mod:`specsim.cost.quant` apply, not the part's)."""
VENDORS = ("nvidia", "amd", "intel")
"""Accelerator vendors a device part may name and a stack may be limited to."""

_HOST = (
    "pass_overhead_s",
    "layer_overhead_s",
    "eager_layer_overhead_s",
    "sequence_overhead_s",
    "draft_step_overhead_s",
    "sampling_s_per_token",
    "rejection_s_per_token",
    "speculation_overhead_s",
)


@dataclass(frozen=True, kw_only=True)
class StackProfile:
    """A software stack's speculative path and host costs (seconds), device-independent."""

    slug: str
    name: str
    verify: str
    trees: bool
    draft_worker: str
    draft_graphs: bool
    pass_overhead_s: float
    sources: dict[str, str] | list[str] = field(hash=False)
    layer_overhead_s: float = 0.0
    eager_layer_overhead_s: float = 0.0
    sequence_overhead_s: float = 0.0
    draft_step_overhead_s: float = 0.0
    sampling_s_per_token: float = 0.0
    rejection_s_per_token: float = 0.0
    speculation_overhead_s: float = 0.0
    graph_sizes: list[int] | None = field(default=None, hash=False)
    graph_unit: str = "batch"
    graph_padding: bool = True
    weight_kernels: str = "device"
    kinds: list[str] = field(default_factory=lambda: ["gpu"], hash=False)
    vendors: list[str] | None = field(default=None, hash=False)
    assumptions: list[str] = field(default_factory=list, hash=False)
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "stack", self.slug)
        for name in ("slug", "name"):
            check_str(where, name, getattr(self, name))
        check_str(where, "verify", self.verify, VERIFY_MODES)
        check_str(where, "draft_worker", self.draft_worker, DRAFT_WORKERS)
        check_str(where, "graph_unit", self.graph_unit, GRAPH_UNITS)
        check_str(where, "weight_kernels", self.weight_kernels, WEIGHT_KERNELS)
        for name in ("trees", "draft_graphs", "graph_padding"):
            check_bool(where, name, getattr(self, name))
        for name in _HOST:
            check_float(where, name, getattr(self, name))
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.trees and self.verify == "batch-expansion":
            raise ValueError(
                f"{where}: field 'trees' is true, but a batch-expansion stack cannot verify a "
                "token tree (each expanded sequence is one branch of a chain)"
            )
        _graph_sizes(where, self.graph_sizes)
        _names(where, "kinds", self.kinds, KINDS, empty=False)
        if (
            self.vendors is None
        ):  # every stack says where it runs (issue 35: none on Gaudi by default)
            raise ValueError(
                f"{where}: missing field 'vendors': the accelerator vendors the stack runs on "
                f"(a list of {list(VENDORS)}, cited in [sources])"
            )
        _names(where, "vendors", self.vendors, VENDORS, empty=False)
        _names(where, "assumptions", self.assumptions, _HOST + ("graph_sizes",), empty=True)
        check_sources(where, self.sources)

    def draft_step_host_s(self, batch: float) -> float:
        """The host seconds of one draft step over ``batch`` sequences, whatever drafts (a
        draft model, heads, an MTP module, a parallel drafter's pass, the target's own
        layers): ``draft_step_overhead_s`` where the drafter runs inside the target's step
        (``draft_worker = "same"``), plus ``batch * sequence_overhead_s`` where it is a
        worker of its own that prepares each sequence's step (``"separate"``). Never the
        per-pass ``pass_overhead_s`` (:meth:`specsim.cards.RuntimeProfile.drafting`).

        >>> st = StackProfile(slug="s", name="s", verify="multi-query", trees=False,
        ...                   draft_worker="separate", draft_graphs=True, pass_overhead_s=1e-3,
        ...                   sequence_overhead_s=2e-5, draft_step_overhead_s=1e-4,
        ...                   vendors=["nvidia"], sources=["doctest"])
        >>> round(st.draft_step_host_s(4), 9)
        0.00018
        """
        seq = self.sequence_overhead_s if self.draft_worker == "separate" else 0.0
        return self.draft_step_overhead_s + batch * seq


@dataclass(frozen=True, kw_only=True)
class DevicePart:
    """What kernels achieve on a device: fractions of peak, by rows and weight format.

    ``cards``: the hardware cards (slugs) it was measured on or stands for; empty for the
    default of a kind of accelerator (``kind``), used where no part names a card.
    ``stacks``: the stacks (slugs) whose kernels it was measured with, used for those stacks
    only (:func:`specsim.cards.stack_files.device_part_for`); empty for any stack.
    ``allreduce_latency_s`` and ``allreduce_bandwidth``: the fixed cost of one all-reduce and
    the bus bandwidth (bytes/s) the stack's all-reduce kernel reaches on the device, in the
    ``per-allreduce`` form of :mod:`specsim.cost.collectives`; None: the hardware card's
    interconnect numbers and algorithm. ``moe_fixed_s`` and ``moe_memory_efficiency``
    (format of the routed experts -> value): the fixed cost of one MoE layer's expert kernel
    and the bandwidth fraction its expert reads reach (:mod:`specsim.calibrate.aic_moe`);
    None, or a format not named: no fixed cost and ``memory_efficiency``.
    """

    slug: str
    name: str
    kind: str
    compute_efficiency: float
    memory_efficiency: float
    sources: dict[str, str] | list[str] = field(hash=False)
    cards: list[str] = field(default_factory=list, hash=False)
    stacks: list[str] = field(default_factory=list, hash=False)
    vendor: str | None = None
    compute_efficiency_rows: dict[str, float] | None = field(default=None, hash=False)
    memory_efficiency_rows: dict[str, float] | None = field(default=None, hash=False)
    format_memory_factor: dict[str, float] | None = field(default=None, hash=False)
    format_compute_factor: dict[str, float] | None = field(default=None, hash=False)
    format_dequant_ops: dict[str, float] | None = field(default=None, hash=False)
    allreduce_latency_s: float | None = None
    allreduce_bandwidth: float | None = None
    moe_fixed_s: dict[str, float] | None = field(default=None, hash=False)
    moe_memory_efficiency: dict[str, float] | None = field(default=None, hash=False)
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "device part", self.slug)
        _names(where, "stacks", self.stacks, (), empty=True)
        for name in ("allreduce_latency_s", "allreduce_bandwidth"):
            if getattr(self, name) is not None:
                check_float(where, name, getattr(self, name), strict=True)
        if (self.allreduce_latency_s is None) != (self.allreduce_bandwidth is None):
            raise ValueError(
                f"{where}: fields 'allreduce_latency_s' and 'allreduce_bandwidth' come together "
                f"(got {self.allreduce_latency_s!r} and {self.allreduce_bandwidth!r})"
            )
        for name in ("slug", "name"):
            check_str(where, name, getattr(self, name))
        check_str(where, "kind", self.kind, KINDS)
        if self.vendor is not None:
            check_str(where, "vendor", self.vendor, VENDORS)
        _names(where, "cards", self.cards, (), empty=True)
        for name in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            check_float(where, name, value, strict=True)
            if value > 1:
                raise ValueError(f"{where}: field {name!r} must be in (0, 1], got {value}")
        # The row and format tables are checked by the RuntimeProfile compose() builds.
        check_sources(where, self.sources)


def _graph_sizes(where: str, sizes: object) -> None:
    """``None`` (never captured) or a strictly increasing list of sizes >= 1."""
    if sizes is None:
        return
    if not isinstance(sizes, list) or not sizes:
        raise TypeError(f"{where}: field 'graph_sizes' must be a non-empty list, got {sizes!r}")
    for i, s in enumerate(sizes):
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"{where}: graph_sizes[{i}] must be an integer >= 1, got {s!r}")
        if i and s <= sizes[i - 1]:
            raise ValueError(
                f"{where}: field 'graph_sizes' must be strictly increasing, got {sizes[i - 1]} "
                f"then {s} at index {i}"
            )


def _names(where: str, name: str, value: object, choices: tuple[str, ...], *, empty: bool) -> None:
    if not isinstance(value, list) or (not empty and not value):
        raise TypeError(f"{where}: field {name!r} must be a non-empty list, got {value!r}")
    for v in value:
        check_str(where, name, v, choices)
