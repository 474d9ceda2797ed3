"""Run a preset and write its traces incrementally, resuming what a previous run left.

The output folder holds one trace per kind (``ceilings``, ``passes``,
``autoregressive``, ``specdec`` with ``positions``, ``assisted``; see
:mod:`specsim.traces.io`). Work is split into units (a ceiling op and size; a
model, batch and context of the pass grid; one decoding run) and each unit's
rows are appended and flushed when the unit finishes. Rerunning with the same
folder skips the units already there, so an interruption loses at most the
unit in progress. A folder is resumed only by a run of the same device
(kind and name), dtype, preset and seed, as each trace's sidecar records them
per session; anything else raises ValueError rather than mixing traces. Every
unit draws its random numbers from a generator seeded by ``(seed, unit key)``,
so a resumed run makes the same choices (weights, prompts, samples) as an
uninterrupted one; only the timings differ.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import transformers

import specsim
from specsim.cards import ModelCard, load_model
from specsim.checks import check_int
from specsim.measure import run_decoding
from specsim.measure.models import quantize_weights, resolve_device
from specsim.measure.presets import Preset, check_resume
from specsim.measure.run_state import (
    FORMAT_COLS,
    RunState,
    device_name,
    done_keys,
    kv_bytes,
    unit_rng,
    with_constants,
)
from specsim.measure.timing import (
    measure_allreduce,
    measure_ceilings,
    time_passes,
)
from specsim.traces import io as traces
from specsim.traces.schema import SCHEMAS

__all__ = ["SECTIONS", "unit_rng", "device_name", "run_preset"]

SECTIONS = ("ceilings", "passes", "autoregressive", "specdec", "assisted")
"""The parts of a preset run, in the order they run."""


def run_preset(
    preset: Preset,
    *,
    device: str,
    out: str | os.PathLike[str],
    seed: int = 0,
    sections: Iterable[str] = SECTIONS,
    command: str = "",
    log: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Measure ``preset`` on ``device`` into folder ``out``; return rows written per trace.

    ``sections`` picks parts of :data:`SECTIONS`; ``log`` receives one line per
    finished unit. On the CPU the preset's ``threads`` (if set) applies for the
    duration of the call. Traces already in ``out`` are resumed only if every
    session they record has this run's device (kind and name), dtype, preset
    and seed; otherwise ValueError names the folder and the first key that differs.
    """
    chosen = tuple(sections)
    for s in chosen:
        if s not in SECTIONS:
            raise ValueError(f"sections: unknown section {s!r}; expected some of {SECTIONS}")
    check_int(seed, name="seed", minimum=0)
    dev = resolve_device(device)
    say = log if log is not None else (lambda line: None)
    folder = Path(out)
    old_threads = torch.get_num_threads()
    old_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if dev.type == "cpu" and preset.threads is not None:
        # On a machine shared with other work, more threads than idle cores slow
        # small ops down many times over (OpenMP threads wait on each other).
        torch.set_num_threads(preset.threads)
        if preset.pin_threads and old_cpus is not None:
            os.sched_setaffinity(0, sorted(old_cpus)[: preset.threads])
    meta = {
        "device_name": device_name(dev),
        "device": dev.type,
        "dtype": preset.dtype,
        "preset": preset.name,
        "seed": seed,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "specsim": specsim.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command or " ".join(sys.argv),
    }
    if old_cpus is not None:
        meta["cpus"] = sorted(os.sched_getaffinity(0))
    if dev.type == "cuda":
        meta["cuda"] = torch.version.cuda
    written = dict.fromkeys(traces.KINDS, 0)
    try:
        check_resume(folder, meta)
        ctx = _Run(preset, dev, folder, seed, meta, say, written)
        for section in SECTIONS:
            if section in chosen:
                getattr(ctx, section)()
    finally:
        torch.set_num_threads(old_threads)
        if old_cpus is not None:
            os.sched_setaffinity(0, old_cpus)
    return written


class _Run(RunState):
    """One call of :func:`run_preset`: one method per section (the decoding ones in
    :mod:`specsim.measure.run_decoding`)."""

    def ceilings(self) -> None:
        done = done_keys(self.start("ceilings"), ("dtype", "device", "op", "size"))
        units: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]]
        units = [("matmul", n, (n,), ()) for n in self.p.matmul_sizes]
        units += [("copy", b, (), (b,)) for b in self.p.copy_bytes]
        for op, size, mm, cp in units:
            if (self.p.dtype, self.dev.type, op, size) in done:
                continue
            t0 = time.perf_counter()
            rows = measure_ceilings(
                device=self.dev,
                dtype=self.p.dtype,
                matmul_sizes=mm,
                copy_bytes=cp,
                repeats=self.p.ceiling_repeats,
                warmup=1,
                rng=unit_rng(self.seed, f"ceilings/{op}/{size}"),
            )
            self.append("ceilings", with_constants(rows, **self.common))
            best = rows.groupby("op").rate.max()
            self.log(
                f"ceilings {op} {size}: "
                + ", ".join(f"{k} {v:.3g}/s" for k, v in best.items())
                + f" ({time.perf_counter() - t0:.1f} s)"
            )
        if self.p.allreduce_bytes and self.dev.type == "cuda":
            rows = measure_allreduce(
                self.p.allreduce_bytes, dtype=self.p.dtype, repeats=self.p.ceiling_repeats
            )
            if rows.empty:
                self.log("ceilings allreduce: skipped (fewer than two GPUs)")
            elif not any(str(k[2]).startswith("allreduce") for k in done):
                self.append("ceilings", with_constants(rows, **self.common))
                self.log(f"ceilings allreduce: busbw up to {rows.rate.max():.3g} B/s")

    def formats(self) -> list[tuple[str, int]]:
        """(weight format, largest new_tokens) of the pass grid, the dtype's own first."""
        own = {"float32": "fp32", "bfloat16": "bf16"}.get(self.p.dtype, self.p.dtype)
        return [(own, max(self.p.new_tokens)), *self.p.weight_formats]

    def passes(self) -> None:
        keys = ["model", "dtype", "device", "batch", "context"]
        path = self.folder / "passes.csv"
        if self.p.weight_formats:
            keys.append("weights")
            if not path.exists():  # a header with the weight-format columns
                empty = pd.DataFrame(columns=[c.name for c in SCHEMAS["passes"]] + FORMAT_COLS)
                traces.write_trace(path, traces.Trace(kind="passes", data=empty, meta=self.meta))
        done = done_keys(self.start("passes"), keys)
        # Weights do not change timings: reuse the decoding runs' models where they match.
        targets = {t for t, _ in self.p.pairs}
        drafts = {d for t, d in self.p.pairs if load_model(t).vocab == load_model(d).vocab}
        for slug in self.p.timing_models:
            card = load_model(slug)
            role = "target" if slug in targets else "draft" if slug in drafts else "timing"
            source = self.p.source_len if card.architecture == "encoder-decoder" else 0
            for batch in self.p.batches:
                for context in self.p.contexts:
                    if kv_bytes(card, self.p.dtype, batch, context) > self.p.max_cache_bytes:
                        self.log(
                            f"passes {slug} b{batch} c{context}: skipped (KV cache over "
                            f"{self.p.max_cache_bytes / 2**30:.0f} GiB)"
                        )
                        continue
                    for i, (fmt, most) in enumerate(self.formats()):
                        key = (slug, self.p.dtype, self.dev.type, batch, context)
                        if (*key, fmt)[: len(keys)] in done:
                            continue
                        label = f"passes {slug} b{batch} c{context}" + (f" {fmt}" if i else "")
                        self.time_format(
                            card,
                            role,
                            fmt,
                            label,
                            batch=batch,
                            context=context,
                            source=source,
                            most=most,
                        )
            self.quantized.clear()

    def time_format(
        self,
        card: ModelCard,
        role: str,
        fmt: str,
        label: str,
        *,
        batch: int,
        context: int,
        source: int,
        most: int,
    ) -> None:
        """Time one (model, weight format, batch, context) point of the pass grid."""
        model = self.models.get(role, card)
        method = "none"
        if fmt not in ("fp32", "bf16"):
            if fmt not in self.quantized:
                self.quantized[fmt] = quantize_weights(model, fmt, group_size=self.p.group_size)
            model, method = self.quantized[fmt]
        t0 = time.perf_counter()
        suffix = "" if fmt == self.formats()[0][0] else f"/{fmt}"
        rows = time_passes(
            model,
            batch=batch,
            context=context,
            new_tokens=tuple(n for n in self.p.new_tokens if n <= most),
            repeats=self.p.repeats,
            warmup=self.p.warmup,
            source_len=source,
            energy_window_s=self.p.energy_window_s,
            rng=unit_rng(self.seed, f"passes/{card.slug}/{batch}/{context}{suffix}"),
        )
        extra: dict[str, Any] = {}
        if self.p.weight_formats:
            extra = {
                "weights": fmt,
                "quant": method,
                "group_size": self.p.group_size if fmt == "int4" else 0,
            }
        self.append("passes", with_constants(rows, model=card.slug, **extra, **self.common))
        self.log(f"{label}: {len(rows)} passes, {time.perf_counter() - t0:.1f} s")

    def autoregressive(self) -> None:
        run_decoding.autoregressive(self)

    def specdec(self) -> None:
        run_decoding.specdec(self)

    def assisted(self) -> None:
        run_decoding.assisted(self)
