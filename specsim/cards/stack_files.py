"""Stack profiles and device parts from ``models/stacks/``, and their product for a card.

:func:`compose` is the one place a stack (:class:`~specsim.cards.stack.StackProfile`) and
a device part (:class:`~specsim.cards.stack.DevicePart`) become the
:class:`~specsim.cards.RuntimeProfile` the roofline consumes, for one hardware card. It
refuses only what is device-specific, naming the part: a stack for another kind of
accelerator (a GPU stack on a TPU or CPU card: the stack's ``kinds``), or a stack limited
to other vendors' devices (TensorRT-LLM on an AMD card: the stack's ``vendors`` against
the device part's ``vendor``).

>>> from specsim.cards import load_hardware
>>> rt = compose(load_stack("sglang"), load_hardware("a40"))
>>> rt.slug, rt.stack_profile.verify
('sglang', 'multi-query')
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.cards.files import (
    SearchPath,
    build_card,
    card_kind,
    card_paths,
    find_card,
    found_cards,
    load_hardware,
    packaged_root,
    read_toml,
)
from specsim.cards.hardware import HardwareCard
from specsim.cards.runtime import RuntimeProfile
from specsim.cards.stack import DevicePart, StackProfile

__all__ = [
    "FormatSource",
    "compose",
    "device_part_for",
    "format_source",
    "is_stack",
    "list_device_parts",
    "list_stacks",
    "load_stack",
    "stacks_dir",
]


def stacks_dir() -> Path:
    """The folder of the shipped stack profiles (``models/stacks``; device parts in
    ``devices/`` under it)."""
    root = packaged_root()
    if root is None:  # pragma: no cover - an installation without its cards
        raise ValueError("stack: the packaged cards (models/) are not found")
    return root / "stacks"


def is_stack(value: object, *, search_path: SearchPath = None) -> bool:
    """True when ``value`` names a stack profile: a path to one (a TOML file whose fields make
    it a stack, :func:`specsim.cards.files.card_kind`: a stack that lacks ``verify`` is still a
    stack), or the slug of one found as every card is (in ``stacks/`` or directly under each
    folder of ``search_path`` and of ``SPECSIM_CARDS``, then the shipped ``models/stacks/``).
    A runtime profile's slug names that profile (``gpt-fast``, every GPU card's default: its
    numbers, so results made with it do not move; the gpt-fast stack is ``gpt-fast-stack``). A
    slug that names both a runtime profile and a stack, wherever either lies, is a ValueError
    naming both files: a name means one thing."""
    if not isinstance(value, str | os.PathLike):
        return False
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        return False
    if text.endswith(".toml"):
        return Path(text).is_file() and card_kind(read_toml(text)) == "stacks"
    stacks = found_cards("stacks", text, search_path)
    profiles = found_cards("runtime", text, search_path)
    if profiles and stacks:
        raise ValueError(
            f"runtime: {text!r} names both the runtime profile {profiles[0]} and the stack "
            f"{stacks[0]}; rename one, or name the stack by its path"
        )
    return bool(stacks)


def load_stack(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> StackProfile:
    """A stack profile by slug (``"vllm-v1"``, looked up as :func:`is_stack` says) or from a
    ``.toml`` path; a ValueError naming the known stacks for an unknown slug."""
    path = find_card("stacks", slug_or_path, search_path)
    return build_card(StackProfile, read_toml(path), path)


def list_stacks(*, search_path: SearchPath = None) -> list[StackProfile]:
    """Every stack profile found (the user's folders', then the shipped ones), sorted by slug."""
    return [build_card(StackProfile, read_toml(p), p) for p in card_paths("stacks", search_path)]


def list_device_parts() -> list[DevicePart]:
    """Every shipped device part, sorted by slug."""
    folder = stacks_dir() / "devices"
    return [build_card(DevicePart, read_toml(p), p) for p in sorted(folder.glob("*.toml"))]


def device_part_for(hw: HardwareCard, stack: str | None = None) -> DevicePart:
    """The device part of ``hw`` (for ``stack``, a slug): one that names its slug and the
    stack, else one that names its slug and no stack, else the default of its kind (a part
    that names no card and no stack); a ValueError when two parts tie or none exists. A part
    that names stacks is used for those stacks only."""
    parts = list_device_parts()
    for_stack = [p for p in parts if hw.slug in p.cards and stack is not None and stack in p.stacks]
    named = for_stack or [p for p in parts if hw.slug in p.cards and not p.stacks]
    if len(named) > 1:
        raise ValueError(
            f"stack: hardware {hw.slug!r} is named by two device parts, {named[0].source_path} "
            f"and {named[1].source_path}"
        )
    if named:
        return named[0]
    default = [p for p in parts if not p.cards and not p.stacks and p.kind == hw.kind]
    if not default:
        raise ValueError(
            f"stack: no device part for hardware {hw.slug!r} ({hw.kind}): the achieved "
            f"fractions of a {hw.kind} are not known (add a part to {stacks_dir() / 'devices'})"
        )
    return default[0]


_COMPOSED: dict[tuple[StackProfile, HardwareCard], RuntimeProfile] = {}


_TABLES = ("format_memory_factor", "format_compute_factor", "format_dequant_ops")


@dataclass(frozen=True, kw_only=True)
class FormatSource:
    """A weight format whose kernel tables a composed profile borrows: ``part`` (a device
    part's slug) measured them on ``card``, of the same ``generation`` as the card that
    borrows them, which has no measurement of ``weight_format`` of its own."""

    weight_format: str
    part: str
    card: str
    generation: str


def _measured(part: DevicePart) -> set[str]:
    """The formats ``part`` has a table entry for, when it is a measured part (it names
    cards); the default parts of a class of devices measure none."""
    if not part.cards:
        return set()
    return {w for name in _TABLES for w in getattr(part, name) or {}}


_SOURCES: dict[tuple[HardwareCard, StackProfile], tuple[FormatSource, ...]] = {}


def format_source(hw: HardwareCard, stack: StackProfile) -> tuple[FormatSource, ...]:
    """The weight formats ``hw`` borrows under ``stack``, each from whom: a format that the
    card's own device part (:func:`device_part_for`) has no table entry for takes the entries
    of the nearest card (by memory bandwidth, ``|log(bw / bw_hw)|``, then by slug) of the same
    ``generation`` (architecture generation) whose device part for ``stack`` measured it (a
    part that names cards and has the entry). A card without a generation, a format no card of
    its generation
    measured, and a stack that runs kernels of its own (``weight_kernels = "own"``) borrow
    nothing: those keep the default costs (:mod:`specsim.cost.quant`)."""
    key = (hw, stack)
    hit = _SOURCES.get(key)
    if hit is not None:
        return hit
    own = _measured(device_part_for(hw, stack.slug))
    found: dict[str, FormatSource] = {}
    if hw.generation is not None and stack.weight_kernels != "own":
        # Only cards a measured part names can lend: read those, not every card found.
        named = sorted({c for p in list_device_parts() if _measured(p) for c in p.cards})
        peers = [
            c
            for c in (load_hardware(slug) for slug in named)
            if c.generation == hw.generation and c.kind == hw.kind and c.slug != hw.slug
        ]
        peers.sort(key=lambda c: (abs(math.log(c.mem_bandwidth / hw.mem_bandwidth)), c.slug))
        for card in peers:
            part = device_part_for(card, stack.slug)
            for w in sorted(_measured(part) - own - set(found)):
                found[w] = FormatSource(
                    weight_format=w, part=part.slug, card=card.slug, generation=hw.generation
                )
    out = tuple(found[w] for w in sorted(found))
    _SOURCES[key] = out
    return out


def _format_tables(stack: StackProfile, hw: HardwareCard, part: DevicePart) -> dict[str, Any]:
    """The device part's weight-format tables, each format it lacks borrowed as
    :func:`format_source` says; none when the stack runs kernels of its own."""
    if stack.weight_kernels == "own":
        return dict.fromkeys(_TABLES)
    tables = {name: dict(getattr(part, name) or {}) for name in _TABLES}
    parts = {p.slug: p for p in list_device_parts()}
    for src in format_source(hw, stack):
        donor = parts[src.part]
        for name in _TABLES:
            value = (getattr(donor, name) or {}).get(src.weight_format)
            if value is not None:
                tables[name][src.weight_format] = value
    return {name: table or None for name, table in tables.items()}


def compose(stack: StackProfile, hw: HardwareCard) -> RuntimeProfile:
    """The runtime profile of ``stack`` on ``hw``: host costs and the speculative path from
    the stack, achieved fractions from :func:`device_part_for` (memoized, so one stack on
    one card is one profile and the roofline's cache finds it)."""
    hit = _COMPOSED.get((stack, hw))
    if hit is not None:
        return hit
    if hw.kind not in stack.kinds:
        raise ValueError(
            f"runtime: stack {stack.slug!r} runs on {'/'.join(stack.kinds)} accelerators, "
            f"not hardware {hw.slug!r} ({hw.kind}) (the stack part, {stack.source_path})"
        )
    part = device_part_for(hw, stack.slug)
    if stack.vendors is not None and part.vendor is not None and part.vendor not in stack.vendors:
        raise ValueError(
            f"runtime: stack {stack.slug!r} runs on {'/'.join(stack.vendors)} devices only, and "
            f"hardware {hw.slug!r} is {part.vendor} (device part {part.slug!r})"
        )
    prof = RuntimeProfile(
        slug=stack.slug,
        name=f"{stack.name} on {hw.name} (device part {part.slug})",
        stack=stack.slug,
        compute_efficiency=part.compute_efficiency,
        memory_efficiency=part.memory_efficiency,
        layer_overhead_s=stack.layer_overhead_s,
        pass_overhead_s=stack.pass_overhead_s,
        sampling_s_per_token=stack.sampling_s_per_token,
        compute_efficiency_rows=part.compute_efficiency_rows,
        memory_efficiency_rows=part.memory_efficiency_rows,
        **_format_tables(stack, hw, part),
        allreduce_latency_s=part.allreduce_latency_s,
        allreduce_bandwidth=part.allreduce_bandwidth,
        moe_fixed_s=part.moe_fixed_s,
        moe_memory_efficiency=part.moe_memory_efficiency,
        kinds=[hw.kind],
        sources={
            "stack": stack.source_path or stack.slug,
            "device": part.source_path or part.slug,
        },
        stack_profile=stack,
    )
    if len(_COMPOSED) > 256:
        _COMPOSED.clear()
    _COMPOSED[(stack, hw)] = prof
    return prof
