"""``specsim cards``: list the model and accelerator cards and runtime profiles with their key
numbers.

Examples::

    specsim cards
    specsim cards --json
    specsim cards --cards my_cards/
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from specsim.cards import (
    HardwareCard,
    ModelCard,
    RuntimeProfile,
    list_hardware,
    list_models,
    list_runtimes,
)
from specsim.cost import ridge_tokens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cards", action="append", default=None, metavar="DIR", help="extra card folder"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _best_dtype(peaks: dict[str, float]) -> str:
    for dt in ("bfloat16", "float16", "float32"):
        if dt in peaks:
            return dt
    return next(iter(peaks))


def check_slugs(cards: Sequence[ModelCard | HardwareCard | RuntimeProfile], what: str) -> None:
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


def run(args: argparse.Namespace) -> int:
    models = list_models(search_path=args.cards)
    hardware = list_hardware(search_path=args.cards)
    runtimes = list_runtimes(search_path=args.cards)
    check_slugs(models, "model")
    check_slugs(hardware, "hardware")
    check_slugs(runtimes, "runtime")
    if args.json:
        out = {
            "models": [
                {
                    "slug": m.slug,
                    "name": m.name,
                    "family": m.family,
                    "architecture": m.architecture,
                    "layers": m.layers,
                    "encoder_layers": m.encoder_layers,
                    "d_model": m.d_model,
                    "heads": m.heads,
                    "kv_heads": m.kv_heads,
                    "head_dim": m.head_dim,
                    "d_ff": m.d_ff,
                    "vocab": m.vocab,
                    "params": m.params,
                    "shape_params": m.shape_params,
                    "decode_params": m.decode_params,
                    "dtype": m.dtype,
                    "source": m.source_path,
                }
                for m in models
            ],
            "hardware": [
                {
                    "slug": h.slug,
                    "name": h.name,
                    "kind": h.kind,
                    "peak_flops": h.peak_flops,
                    "mem_bandwidth": h.mem_bandwidth,
                    "mem_capacity": h.mem_capacity,
                    "interconnect_bandwidth": h.interconnect_bandwidth,
                    "compute_efficiency": h.compute_efficiency,
                    "memory_efficiency": h.memory_efficiency,
                    "layer_overhead_s": h.layer_overhead_s,
                    "pass_overhead_s": h.pass_overhead_s,
                    "idle_power_w": h.idle_power_w,
                    "max_power_w": h.max_power_w,
                    "calibrated": h.calibration is not None,
                    "runtime": h.runtime,
                    "collective_algorithm": h.collective_algorithm,
                    "source": h.source_path,
                }
                for h in hardware
            ],
            "runtimes": [
                {
                    "slug": r.slug,
                    "name": r.name,
                    "stack": r.stack,
                    "compute_efficiency": r.compute_efficiency,
                    "memory_efficiency": r.memory_efficiency,
                    "layer_overhead_s": r.layer_overhead_s,
                    "pass_overhead_s": r.pass_overhead_s,
                    "sampling_s_per_token": r.sampling_s_per_token,
                    "fitted_on": r.fitted_on,
                    "kinds": r.kinds,
                    "source": r.source_path,
                }
                for r in runtimes
            ],
        }
        print(json.dumps(out, indent=2))
        return 0
    ms = max([len(m.slug) for m in models] + [13]) + 2  # columns fit their contents
    hs = max([len(h.slug) for h in hardware] + [9]) + 2
    print("language models")
    head = f"  {'slug':<{ms}}{'arch':<9}{'layers':>7}{'d_model':>8}{'heads':>7}{'kv':>4}"
    print(head + f"{'d_ff':>7}{'vocab':>8}{'params':>10}{'decode':>9}  dtype")
    for m in models:
        arch = "enc-dec" if m.architecture == "encoder-decoder" else "decoder"
        print(
            f"  {m.slug:<{ms}}{arch:<9}{m.layers:>7}{m.d_model:>8}{m.heads:>7}{m.kv_heads:>4}"
            f"{m.d_ff:>7}{m.vocab:>8}{m.params / 1e9:>9.3f}B{m.decode_params / 1e9:>8.3f}B"
            f"  {m.dtype}"
        )
    print("\naccelerators (peak at the dtype shown; ridge in tokens per pass)")
    print(
        f"  {'slug':<{hs}}{'kind':<5}{'dtype':<9}{'TFLOP/s':>8}{'TB/s':>6}{'GB':>6}"
        f"{'link GB/s':>10}{'W max':>6}{'ridge':>6}  efficiencies, overheads"
    )
    for h in hardware:
        dt = _best_dtype(h.peak_flops)
        print(
            f"  {h.slug:<{hs}}{h.kind:<5}{dt:<9}{h.peak(dt) / 1e12:>8.1f}"
            f"{h.mem_bandwidth / 1e12:>6.2f}{h.mem_capacity / 1e9:>6.0f}"
            f"{h.interconnect_bandwidth / 1e9:>10.0f}{h.max_power_w:>6.0f}"
            f"{ridge_tokens(h, dt):>6.0f}  ce {h.compute_efficiency:.3g}, "
            f"me {h.memory_efficiency:.3g}, {h.layer_overhead_s * 1e6:.1f} us/layer, "
            f"{h.pass_overhead_s * 1e6:.0f} us/pass"
            + (f" [runtime {h.runtime}]" if h.runtime else "")
            + (" [calibrated]" if h.calibration else "")
        )
    rs = max([len(r.slug) for r in runtimes] + [7]) + 2
    print("\nruntime profiles (software stacks; `specsim cost --runtime SLUG`)")
    print(
        f"  {'slug':<{rs}}{'stack':<15}{'ce':>6}{'me':>7}{'us/layer':>9}{'us/pass':>9}"
        f"{'us/token':>9}  for"
    )
    for r in runtimes:
        where = r.fitted_on or ("/".join(r.kinds) if r.kinds else "any")
        print(
            f"  {r.slug:<{rs}}{r.stack:<15}{r.compute_efficiency:>6.3g}"
            f"{r.memory_efficiency:>7.3g}{r.layer_overhead_s * 1e6:>9.1f}"
            f"{r.pass_overhead_s * 1e6:>9.0f}{r.sampling_s_per_token * 1e6:>9.1f}  "
            + (f"fitted on {where}" if r.fitted_on else where)
        )
    return 0
