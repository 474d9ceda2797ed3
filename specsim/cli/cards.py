"""``specsim cards``: list every card (models, accelerators, runtime profiles, stacks, heads,
proposers) with its key numbers and where they come from.

Examples::

    specsim cards
    specsim cards --sources
    specsim cards --json
    specsim cards --cards my_cards/

Cards are found as every command finds them (:mod:`specsim.cards.files`): ``--cards``
folders and ``SPECSIM_CARDS`` first, then the shipped ``models/``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specsim.cards import (
    HardwareCard,
    HeadCard,
    ModelCard,
    ProposerCard,
    RuntimeProfile,
    StackProfile,
    list_hardware,
    list_heads,
    list_models,
    list_proposer_cards,
    list_runtimes,
    list_stacks,
)
from specsim.cards.root import packaged_root
from specsim.cost import ridge_tokens

AnyCard = ModelCard | HardwareCard | RuntimeProfile | StackProfile | HeadCard | ProposerCard
"""Any card this command lists."""

KINDS = ("models", "hardware", "runtimes", "stacks", "heads", "proposers")
"""The sections of the listing, in order (the keys of ``--json``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cards", action="append", default=None, metavar="DIR", help="extra card folder"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--sources", action="store_true", help="print each card's sources under its line"
    )


def _best_dtype(peaks: dict[str, float]) -> str:
    for dt in ("bfloat16", "float16", "float32"):
        if dt in peaks:
            return dt
    return next(iter(peaks))


def check_slugs(cards: Sequence[AnyCard], what: str) -> None:
    """Each card's file is named after its slug, and no slug is found twice.

    A card is looked up by the stem of its file, so a file whose name is not its
    slug answers for another card, and of two cards with one slug only one is
    ever used.
    """
    seen: dict[str, str] = {}
    for card in cards:
        where = card.source_path or "?"
        if card.source_path and Path(card.source_path).stem != card.slug:
            raise ValueError(
                f"{where}: this {what} card's slug is {card.slug!r}, but its file is named "
                f"{Path(card.source_path).name!r}; name the file {card.slug}.toml"
            )
        if card.slug in seen:
            raise ValueError(
                f"{what} card slug {card.slug!r} is defined twice: {seen[card.slug]} and "
                f"{where}; remove or rename one"
            )
        seen[card.slug] = where


def collect(cards: Sequence[str] | None) -> dict[str, list[Any]]:
    """Every card found with ``cards`` searched first, by section (:data:`KINDS`), each
    section's slugs checked (:func:`check_slugs`)."""
    out: dict[str, list[Any]] = {
        "models": list_models(search_path=cards),
        "hardware": list_hardware(search_path=cards),
        "runtimes": list_runtimes(search_path=cards),
        "stacks": list_stacks(search_path=cards),
        "heads": list_heads(search_path=cards),
        "proposers": list_proposer_cards(search_path=cards),
    }
    for kind, found in out.items():
        check_slugs(found, kind.removesuffix("s"))
    return out


def _where(card: AnyCard) -> str | None:
    """The card's file, relative to the shipped cards' folder when it is one of them."""
    if not card.source_path:
        return None
    path, root = Path(card.source_path), packaged_root()
    if root is not None and path.is_relative_to(root):
        return str(Path("models") / path.relative_to(root))
    return str(path)


def _sources(card: AnyCard) -> Mapping[str, str]:
    src = card.sources
    return dict(src) if isinstance(src, Mapping) else {str(i): s for i, s in enumerate(src)}


# JSON rows -----------------------------------------------------------------------------------
_MODEL_KEYS: tuple[str, ...] = (
    "name",
    "family",
    "architecture",
    "layers",
    "encoder_layers",
    "d_model",
    "heads",
)
_MODEL_KEYS += ("kv_heads", "head_dim", "d_ff", "vocab", "params", "shape_params")
_MODEL_KEYS += ("decode_params", "dtype")
_HARDWARE_KEYS: tuple[str, ...] = ("name", "kind", "peak_flops", "mem_bandwidth", "mem_capacity")
_HARDWARE_KEYS += ("interconnect_bandwidth", "compute_efficiency", "memory_efficiency")
_HARDWARE_KEYS += ("layer_overhead_s", "pass_overhead_s", "idle_power_w", "max_power_w")
_HARDWARE_KEYS += ("runtime", "collective_algorithm")
_RUNTIME_KEYS: tuple[str, ...] = (
    "name",
    "stack",
    "compute_efficiency",
    "memory_efficiency",
    "layer_overhead_s",
)
_RUNTIME_KEYS += ("pass_overhead_s", "sampling_s_per_token", "fitted_on", "kinds")
_STACK_KEYS: tuple[str, ...] = (
    "name",
    "verify",
    "trees",
    "draft_worker",
    "pass_overhead_s",
    "layer_overhead_s",
)
_STACK_KEYS += ("sequence_overhead_s", "draft_step_overhead_s", "graph_sizes", "kinds")
_STACK_KEYS += ("vendors", "assumptions")
_HEAD_KEYS: tuple[str, ...] = ("name", "kind", "target", "layer_fraction", "max_depth", "accept")
_HEAD_KEYS += ("assumed_depths",)
_PROPOSER_KEYS: tuple[str, ...] = (
    "name",
    "kind",
    "target",
    "draft",
    "k",
    "pass_positions",
    "max_depth",
)
_PROPOSER_KEYS += ("exit_layer", "budget", "assumed_depths")
_KEYS = {"models": _MODEL_KEYS, "hardware": _HARDWARE_KEYS, "runtimes": _RUNTIME_KEYS}
_KEYS |= {"stacks": _STACK_KEYS, "heads": _HEAD_KEYS, "proposers": _PROPOSER_KEYS}


def card_row(kind: str, card: AnyCard) -> dict[str, Any]:
    """One card as a JSON object: its slug, the section's key numbers (the ones the card
    has), the file and its sources; a model card's attention kind, a hardware card's
    calibration flag."""
    row: dict[str, Any] = {"slug": card.slug}
    row |= {k: getattr(card, k) for k in _KEYS[kind] if hasattr(card, k)}
    if isinstance(card, ModelCard):
        spec = card.attention_spec
        row["attention"] = None if spec is None else spec.kind
    if isinstance(card, HardwareCard):
        row["calibrated"] = card.calibration is not None
    row["source"] = _where(card)
    row["sources"] = _sources(card)
    return row


# The listing ---------------------------------------------------------------------------------
def _models(models: Sequence[ModelCard]) -> list[str]:
    ms = max([len(m.slug) for m in models] + [13]) + 2  # columns fit their contents
    head = f"  {'slug':<{ms}}{'arch':<9}{'layers':>7}{'d_model':>8}{'heads':>7}{'kv':>4}"
    out = ["language models", head + f"{'d_ff':>7}{'vocab':>8}{'params':>10}{'decode':>9}  dtype"]
    for m in models:
        arch = "enc-dec" if m.architecture == "encoder-decoder" else "decoder"
        spec = m.attention_spec
        out.append(
            f"  {m.slug:<{ms}}{arch:<9}{m.layers:>7}{m.d_model:>8}{m.heads:>7}{m.kv_heads:>4}"
            f"{m.d_ff:>7}{m.vocab:>8}{m.params / 1e9:>9.3f}B{m.decode_params / 1e9:>8.3f}B"
            f"  {m.dtype}" + ("" if spec is None else f" [{spec.kind} attention]")
        )
    return out


def _hardware(hardware: Sequence[HardwareCard]) -> list[str]:
    hs = max([len(h.slug) for h in hardware] + [9]) + 2
    out = ["accelerators (peak at the dtype shown; ridge in tokens per pass)"]
    out.append(
        f"  {'slug':<{hs}}{'kind':<5}{'dtype':<9}{'TFLOP/s':>8}{'TB/s':>6}{'GB':>6}"
        f"{'link GB/s':>10}{'W max':>6}{'ridge':>6}  efficiencies, overheads"
    )
    for h in hardware:
        dt = _best_dtype(h.peak_flops)
        out.append(
            f"  {h.slug:<{hs}}{h.kind:<5}{dt:<9}{h.peak(dt) / 1e12:>8.1f}"
            f"{h.mem_bandwidth / 1e12:>6.2f}{h.mem_capacity / 1e9:>6.0f}"
            f"{h.interconnect_bandwidth / 1e9:>10.0f}{h.max_power_w:>6.0f}"
            f"{ridge_tokens(h, dt):>6.0f}  ce {h.compute_efficiency:.3g}, "
            f"me {h.memory_efficiency:.3g}, {h.layer_overhead_s * 1e6:.1f} us/layer, "
            f"{h.pass_overhead_s * 1e6:.0f} us/pass"
            + (f" [runtime {h.runtime}]" if h.runtime else "")
            + (" [calibrated]" if h.calibration else "")
        )
    return out


def _runtimes(runtimes: Sequence[RuntimeProfile]) -> list[str]:
    rs = max([len(r.slug) for r in runtimes] + [7]) + 2
    out = ["runtime profiles (software stacks' fitted numbers; `specsim cost --runtime SLUG`)"]
    out.append(
        f"  {'slug':<{rs}}{'stack':<15}{'ce':>6}{'me':>7}{'us/layer':>9}{'us/pass':>9}"
        f"{'us/token':>9}  for"
    )
    for r in runtimes:
        where = r.fitted_on or ("/".join(r.kinds) if r.kinds else "any")
        out.append(
            f"  {r.slug:<{rs}}{r.stack:<15}{r.compute_efficiency:>6.3g}"
            f"{r.memory_efficiency:>7.3g}{r.layer_overhead_s * 1e6:>9.1f}"
            f"{r.pass_overhead_s * 1e6:>9.0f}{r.sampling_s_per_token * 1e6:>9.1f}  "
            + (f"fitted on {where}" if r.fitted_on else where)
        )
    return out


def _stacks(stacks: Sequence[StackProfile]) -> list[str]:
    ss = max([len(s.slug) for s in stacks] + [7]) + 2
    out = ["stack profiles (any card of their kinds and vendors; `specsim cost --runtime SLUG`)"]
    out.append(f"  {'slug':<{ss}}{'verify':<17}{'trees':<7}{'drafts':<10}{'us/pass':>8}  vendors")
    for s in stacks:
        out.append(
            f"  {s.slug:<{ss}}{s.verify:<17}{'yes' if s.trees else 'no':<7}"
            f"{s.draft_worker:<10}{s.pass_overhead_s * 1e6:>8.0f}  "
            f"{'/'.join(s.vendors or ())} {'/'.join(s.kinds)}"
        )
    return out


def _assumed(depths: Sequence[int], of: int) -> str:
    return f"; {len(depths)} of {of} depths assumed" if depths else ""


def _heads(heads: Sequence[HeadCard]) -> list[str]:
    ws = max([len(h.slug) for h in heads] + [7]) + 2
    out = ["head cards (`specsim plan --heads SLUG`, `specsim tree --head SLUG`)"]
    out.append(f"  {'slug':<{ws}}{'kind':<16}{'layers':>7}{'depth':>6}  target, acceptance")
    for h in heads:
        top = ", ".join(f"{row[0]:.3g}" for row in h.accept[:3])
        assumed = _assumed(h.assumed_depths, len(h.accept))
        out.append(
            f"  {h.slug:<{ws}}{h.kind:<16}{h.layer_fraction:>7.3g}{h.max_depth:>6}  "
            f"{h.target}: {top}{'...' if len(h.accept) > 3 else ''}{assumed}"
        )
    return out


def _proposers(cards: Sequence[ProposerCard]) -> list[str]:
    ws = max([len(c.slug) for c in cards] + [7]) + 2
    out = ["proposer cards (`specsim plan --parallel SLUG`, `--selfspec SLUG`)"]
    out.append(f"  {'slug':<{ws}}{'kind':<28}{'depth':>6}  target, what drafts")
    for c in cards:
        what = getattr(c, "draft", None)
        if what is not None:
            what = f"{what}, {c.pass_positions} positions a pass"  # type: ignore[union-attr]
        elif getattr(c, "budget", None) is not None:
            what = f"the target over a {c.budget}-token KV budget"  # type: ignore[union-attr]
        elif getattr(c, "exit_layer", None) is not None:
            what = f"its first {c.exit_layer} layers"  # type: ignore[union-attr]
        else:
            what = f"itself without {len(c.skip_layers)} layers"  # type: ignore[union-attr]
        assumed = _assumed(c.assumed_depths, c.max_depth)
        out.append(f"  {c.slug:<{ws}}{c.kind:<28}{c.max_depth:>6}  {c.target}: {what}{assumed}")
    return out


_SECTIONS: dict[str, Callable[[Any], list[str]]] = {
    "models": _models,
    "hardware": _hardware,
    "runtimes": _runtimes,
    "stacks": _stacks,
    "heads": _heads,
    "proposers": _proposers,
}


def render(found: Mapping[str, Sequence[Any]], *, sources: bool = False) -> str:
    """The listing of :func:`collect`'s cards, a section per kind; with ``sources`` each
    card's file and sources follow its line."""
    blocks = []
    for kind, lines_of in _SECTIONS.items():
        lines = lines_of(found[kind])
        if sources:  # each card's line is followed by its file and [sources] entries
            body = lines[2:]
            lines = lines[:2]
            for card, line in zip(found[kind], body, strict=True):
                lines.append(line)
                lines.append(f"      file: {_where(card)}")
                lines += [f"      {k}: {v}" for k, v in _sources(card).items()]
        blocks.append("\n".join(lines))
    hint = "" if sources else "\n(--sources: each card's file and where its numbers come from)\n"
    return "\n\n".join(blocks) + "\n" + hint


def run(args: argparse.Namespace) -> int:
    found = collect(args.cards)
    if args.json:
        out = {kind: [card_row(kind, c) for c in found[kind]] for kind in KINDS}
        print(json.dumps(out, indent=2))
        return 0
    print(render(found, sources=args.sources), end="")
    return 0
