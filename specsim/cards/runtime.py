"""Runtime profiles: what a software stack achieves on an accelerator.

A :class:`RuntimeProfile` holds the numbers of a serving or generation stack
(compiled PyTorch decoding, llama.cpp, ...), kept apart from the silicon's
(:class:`~specsim.cards.HardwareCard`): the host's fixed cost per pass, a launch
cost per layer, a sampling cost per new token, and the fractions of the card's
peak compute and bandwidth its kernels reach. Those fractions may depend on the rows
a weight GEMM processes (``compute_efficiency_rows``, ``memory_efficiency_rows``:
rows -> fraction, interpolated linearly in log2(rows), flat beyond the table; one row
of a batch-1 decode and 64 rows of a verification pass do not run at the same fraction
of peak) and on the weight format: ``format_memory_factor`` (format -> factor on the
bandwidth fraction of the weight reads), ``format_compute_factor`` (format -> factor on
the compute fraction, for a format whose GEMMs run in another arithmetic than the compute
dtype's, e.g. torch's dynamic int8 quantization, which multiplies int8 activations by int8
weights) and ``format_dequant_ops`` (format -> dequantization operations per weight and
row in this stack, replacing :mod:`specsim.cost.quant`'s default for that format, e.g. 0
for a format that is never dequantized, or a slow kernel's much larger cost);
:meth:`RuntimeProfile.efficiencies` and :meth:`RuntimeProfile.dequant_ops` evaluate them.
All three are optional: a profile without them prices every format as before.
``allreduce_latency_s`` and ``allreduce_bandwidth`` (optional, together) are what the stack's
all-reduce kernel reaches on the device (its device part's), in place of the hardware
card's interconnect numbers for a tensor-parallel pass's all-reduces. ``moe_fixed_s`` and
``moe_memory_efficiency`` (optional; format of the routed experts -> value) are its MoE
expert kernel's fixed cost per MoE layer and pass, and the bandwidth fraction of its expert
reads, in place of none and ``memory_efficiency``.

A profile made from a stack profile and a device part
(:func:`specsim.cards.stack_files.compose`) carries the stack in ``stack_profile``: its
speculative path's costs (:mod:`specsim.cost.stack_terms`) and
:meth:`RuntimeProfile.drafting`, the profile its draft steps run under.

A profile fitted on one device names it in ``fitted_on`` (a hardware card's slug);
:func:`check_runtime_device` refuses to use it on another. A hardware card without a
profile keeps its own four legacy numbers (``compute_efficiency``,
``memory_efficiency``, ``layer_overhead_s``, ``pass_overhead_s``), read as the profile
:func:`profile_of_card` builds: the deprecated path that keeps old cards and the
calibration engine working.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from specsim.cards.checks import card_label, check_float, check_sources, check_str
from specsim.cards.hardware import KINDS, HardwareCard
from specsim.cards.stack import StackProfile

__all__ = ["RuntimeProfile", "profile_of_card", "check_runtime_device"]


@dataclass(frozen=True, kw_only=True)
class RuntimeProfile:
    """A software stack's achieved rates and fixed costs (units: seconds, fractions)."""

    slug: str
    name: str
    stack: str
    compute_efficiency: float
    memory_efficiency: float
    layer_overhead_s: float
    pass_overhead_s: float
    sources: dict[str, str] | list[str] = field(hash=False)
    sampling_s_per_token: float = 0.0
    compute_efficiency_rows: dict[str, float] | None = field(default=None, hash=False)
    memory_efficiency_rows: dict[str, float] | None = field(default=None, hash=False)
    format_memory_factor: dict[str, float] | None = field(default=None, hash=False)
    format_compute_factor: dict[str, float] | None = field(default=None, hash=False)
    format_dequant_ops: dict[str, float] | None = field(default=None, hash=False)
    allreduce_latency_s: float | None = None
    allreduce_bandwidth: float | None = None
    moe_fixed_s: dict[str, float] | None = field(default=None, hash=False)
    moe_memory_efficiency: dict[str, float] | None = field(default=None, hash=False)
    fitted_on: str | None = None
    kinds: list[str] | None = field(default=None, hash=False)
    notes: str = ""
    stack_profile: StackProfile | None = None
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "runtime", self.slug)
        if self.stack_profile is not None and not isinstance(self.stack_profile, StackProfile):
            raise TypeError(
                f"{where}: field 'stack_profile' is built by specsim.cards.stack_files.compose "
                f"(name a stack by its slug as the runtime), got {self.stack_profile!r}"
            )
        for name in ("slug", "name", "stack"):
            check_str(where, name, getattr(self, name))
        for name in ("layer_overhead_s", "pass_overhead_s", "sampling_s_per_token"):
            check_float(where, name, getattr(self, name))
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("allreduce_latency_s", "allreduce_bandwidth"):
            if getattr(self, name) is not None:
                check_float(where, name, getattr(self, name), strict=True)
        for name in ("compute_efficiency", "memory_efficiency"):
            _fraction(where, name, getattr(self, name))
            object.__setattr__(self, name, float(getattr(self, name)))
        for table in ("compute_efficiency_rows", "memory_efficiency_rows"):
            rows = getattr(self, table)
            if rows is None:
                continue
            _table(where, table, rows)
            for key, value in rows.items():
                if not (isinstance(key, str) and key.isdigit() and int(key) >= 1):
                    raise ValueError(f"{where}: {table} key {key!r} must be a row count >= 1")
                _fraction(where, f"{table}.{key}", value)
        for table, strict in (
            ("format_memory_factor", True),
            ("format_compute_factor", True),
            ("format_dequant_ops", False),
        ):
            values = getattr(self, table)
            if values is None:
                continue
            _table(where, table, values)
            for key, value in values.items():
                if not (isinstance(key, str) and key):
                    raise TypeError(f"{where}: {table} key {key!r} must be a format name")
                check_float(where, f"{table}.{key}", value, strict=strict)
        _check_moe(where, self.moe_fixed_s, self.moe_memory_efficiency)
        if self.fitted_on is not None:
            check_str(where, "fitted_on", self.fitted_on)
        if self.kinds is not None:
            if not isinstance(self.kinds, list) or not self.kinds:
                raise TypeError(
                    f"{where}: field 'kinds' must be a non-empty list, got {self.kinds!r}"
                )
            for kind in self.kinds:
                check_str(where, "kinds", kind, KINDS)
        check_sources(where, self.sources)

    def efficiencies(self, weight_format: str) -> tuple[tuple[float, ...], ...]:
        """``(log2 rows, compute scale, memory scale)`` of the row tables, each scale the time
        factor ``efficiency / efficiency(rows)`` (1 where a table is absent), the memory one
        divided by ``format_memory_factor[weight_format]`` (the efficiency capped at 1), the
        compute one by ``format_compute_factor[weight_format]`` (not capped: the format's own
        arithmetic may outrun the compute dtype's peak); empty tuples when the profile has
        no row table and no factor for the format."""
        factor = (self.format_memory_factor or {}).get(weight_format, 1.0)
        cfactor = (self.format_compute_factor or {}).get(weight_format, 1.0)
        tables = (self.compute_efficiency_rows, self.memory_efficiency_rows)
        if tables == (None, None) and factor == 1.0 and cfactor == 1.0:
            return (), (), ()
        points = sorted({int(k) for t in tables if t for k in t} or {1})
        x = tuple(math.log2(r) for r in points)

        def scale(
            table: dict[str, float] | None, base: float, f: float, after: float
        ) -> tuple[float, ...]:
            if not table:
                return tuple(1.0 / (f * after) for _ in points)
            keys = sorted(int(k) for k in table)
            lx = [math.log2(k) for k in keys]
            ys = [float(table[str(k)]) for k in keys]
            return tuple(base / (min(_interp(v, lx, ys) * f, 1.0) * after) for v in x)

        return (
            x,
            scale(tables[0], self.compute_efficiency, 1.0, cfactor),
            scale(tables[1], self.memory_efficiency, factor, 1.0),
        )

    def drafting(self) -> RuntimeProfile:
        """The profile a proposer's draft steps run under on this stack (the drafting rule,
        :mod:`specsim.cost.drafting`): the stack's host cost per draft step
        (``draft_step_overhead_s``) instead of its cost per pass, no sampling cost per token
        (a draft's proposals are inside the step), and launches as the stack drafts
        (``draft_graphs``: replayed graphs, or every layer launched eagerly). Where the stack
        drafts inside the target's step and graph (``draft_worker = "same"``) a step adds no
        per-sequence work and no graph padding of its own; where its drafter is a separate
        worker (``"separate"``, vLLM V0's proposer worker) each step is a pass of that
        worker: its per-sequence host work (``sequence_overhead_s``) and, on graphs, its own
        captured sizes (padding, eager above the largest), as the stack's passes. So a draft
        step's host cost is :meth:`StackProfile.draft_step_host_s
        <specsim.cards.stack.StackProfile.draft_step_host_s>`. A profile without a stack is
        its own drafting profile (the costs as before)."""
        st = self.stack_profile
        if st is None:
            return self
        hit = _DRAFTING.get(self)
        if hit is not None:
            return hit
        layer = st.layer_overhead_s + (0.0 if st.draft_graphs else st.eager_layer_overhead_s)
        if st.draft_worker == "separate" and st.draft_graphs:  # the worker's own graph path
            draft_stack = st
        elif st.draft_worker == "separate":  # every layer launched eagerly, above
            draft_stack = replace(st, graph_sizes=None, eager_layer_overhead_s=0.0)
        else:  # inside the target's step: no scheduling or padding of its own
            draft_stack = replace(
                st, graph_sizes=None, sequence_overhead_s=0.0, eager_layer_overhead_s=0.0
            )
        prof = replace(
            self,
            slug=f"{self.slug}-draft",
            name=f"draft steps of {self.name}",
            pass_overhead_s=st.draft_step_overhead_s,
            layer_overhead_s=layer,
            sampling_s_per_token=0.0,
            stack_profile=draft_stack,
        )
        if len(_DRAFTING) > 64:
            _DRAFTING.clear()
        _DRAFTING[self] = prof
        return prof

    def dequant_ops(self, weight_format: str, default: float) -> float:
        """Dequantization operations per weight and row for ``weight_format`` in this stack:
        ``format_dequant_ops[weight_format]`` where the profile gives it, else ``default``
        (the format's own, :attr:`specsim.cost.quant.WeightFormat.dequant_ops`)."""
        return float((self.format_dequant_ops or {}).get(weight_format, default))


_DRAFTING: dict[RuntimeProfile, RuntimeProfile] = {}


def _interp(v: float, xs: list[float], ys: list[float]) -> float:
    """Piecewise-linear ``ys`` at ``v`` over increasing ``xs``, flat beyond the ends."""
    if v <= xs[0]:
        return ys[0]
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False):
        if v <= x1:
            return y0 + (v - x0) / (x1 - x0) * (y1 - y0)
    return ys[-1]


def _check_moe(where: str, fixed: object, efficiency: object) -> None:
    """The MoE kernel tables: format names to a fixed cost >= 0 and a fraction in (0, 1]."""
    for table, values in (("moe_fixed_s", fixed), ("moe_memory_efficiency", efficiency)):
        if values is None:
            continue
        _table(where, table, values)
        assert isinstance(values, dict)
        for key, value in values.items():
            if not (isinstance(key, str) and key):
                raise TypeError(f"{where}: {table} key {key!r} must be a format name")
            if table == "moe_fixed_s":
                check_float(where, f"{table}.{key}", value)
            else:
                _fraction(where, f"{table}.{key}", value)


def _table(where: str, name: str, value: object) -> None:
    if not isinstance(value, dict) or not value:
        raise TypeError(f"{where}: field {name!r} must be a non-empty table, got {value!r}")


def _fraction(where: str, name: str, value: object) -> None:
    check_float(where, name, value, strict=True)
    if float(value) > 1:  # type: ignore[arg-type]
        raise ValueError(f"{where}: field {name!r} must be in (0, 1], got {value}")


def profile_of_card(hw: HardwareCard) -> RuntimeProfile:
    """The profile a hardware card's own (legacy) numbers make: the default of a card that is
    given no runtime, and what every result before runtime profiles used."""
    return _LEGACY.get(hw) or _legacy(hw)


_LEGACY: dict[HardwareCard, RuntimeProfile] = {}


def _legacy(hw: HardwareCard) -> RuntimeProfile:
    prof = RuntimeProfile(
        slug=f"{hw.slug}-card",
        name=f"the numbers on hardware card {hw.slug!r}",
        stack="card",
        compute_efficiency=hw.compute_efficiency,
        memory_efficiency=hw.memory_efficiency,
        layer_overhead_s=hw.layer_overhead_s,
        pass_overhead_s=hw.pass_overhead_s,
        sources={"card": hw.source_path or hw.slug},
        fitted_on=hw.slug if hw.calibration is not None else None,
    )
    if len(_LEGACY) > 64:
        _LEGACY.clear()
    _LEGACY[hw] = prof
    return prof


def check_runtime_device(profile: RuntimeProfile, hw: HardwareCard) -> None:
    """A ValueError when ``profile`` was fitted on another device than ``hw``, or is for
    another kind of accelerator (``kinds``)."""
    if profile.fitted_on is not None and profile.fitted_on != hw.slug:
        raise ValueError(
            f"runtime: profile {profile.slug!r} was fitted on {profile.fitted_on!r}; it does "
            f"not describe hardware {hw.slug!r} (fit a profile on that device)"
        )
    if profile.kinds is not None and hw.kind not in profile.kinds:
        raise ValueError(
            f"runtime: profile {profile.slug!r} is for {profile.kinds} accelerators, not "
            f"{hw.slug!r} ({hw.kind})"
        )
