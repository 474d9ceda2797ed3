"""Run a preset and write its traces incrementally, resuming what a previous run left.

The output folder holds one trace per kind (``ceilings``, ``passes``,
``autoregressive``, ``specdec`` with ``positions``, ``assisted``; see
:mod:`specsim.traces`). Work is split into units (a ceiling op and size; a
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import transformers

import specsim
from specsim import traces
from specsim.cards import ModelCard, load_model
from specsim.measure.assisted import assisted_runs
from specsim.measure.decode import autoregressive_decode, speculative_decode
from specsim.measure.models import build_model, quantize_weights, resolve_device
from specsim.measure.presets import Preset, check_resume
from specsim.measure.timing import (
    interleaved_until,
    measure_allreduce,
    measure_ceilings,
    time_passes,
)
from specsim.rng import keyed_rng
from specsim.trace_schema import SCHEMAS

__all__ = ["SECTIONS", "unit_rng", "device_name", "run_preset"]

SECTIONS = ("ceilings", "passes", "autoregressive", "specdec", "assisted")
"""The parts of a preset run, in the order they run."""


def unit_rng(seed: int, key: str) -> np.random.Generator:
    """The generator of one unit of work: seeded by the run's seed and a CRC of its key."""
    return keyed_rng(seed, key)


def device_name(device: torch.device) -> str:
    """A human-readable name of the device (GPU model, or the CPU's model name)."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class _Models:
    """Models built on demand and kept for the run, keyed by role, slug and vocabulary."""

    def __init__(self, preset: Preset, device: str, seed: int, log: Callable[[str], None]):
        self.preset, self.device, self.seed, self.log = preset, device, seed, log
        self.built: dict[tuple[str, str, int], Any] = {}

    def get(self, role: str, card: ModelCard, vocab: int | None = None) -> Any:
        v = card.vocab if vocab is None else vocab
        key = (role, card.slug, v)
        if key not in self.built:
            t0 = time.perf_counter()
            self.built[key] = build_model(
                card,
                rng=unit_rng(self.seed, f"model/{role}/{card.slug}/{v}"),
                dtype=self.preset.dtype,
                device=self.device,
                vocab=v,
                min_positions=self.preset.positions_needed,
            )
            self.log(f"built {role} {card.slug} (vocab {v}) in {time.perf_counter() - t0:.1f} s")
        return self.built[key]


_FORMAT_COLS = ["weights", "quant", "group_size"]
"""Columns a passes trace of several weight formats adds: the format (``fp32``, ``int8``,
``int4``...), how it was made (``none``, ``dynamic``, ``weight-only``) and int4's group size."""


def _kv_bytes(card: ModelCard, dtype: str, batch: int, context: int) -> float:
    element = torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    return float(card.kv_bytes_per_token(element)) * batch * context


def _done(frame: pd.DataFrame, columns: Sequence[str]) -> set[tuple[Any, ...]]:
    if frame.empty:
        return set()
    return {tuple(r) for r in frame[list(columns)].itertuples(index=False, name=None)}


def _with(rows: pd.DataFrame, **constants: Any) -> list[dict[str, Any]]:
    out = rows.assign(**constants)
    return [{str(k): v for k, v in r.items()} for r in out.to_dict(orient="records")]


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
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
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


class _Run:
    """State of one call of :func:`run_preset` (one method per section)."""

    def __init__(
        self,
        preset: Preset,
        dev: torch.device,
        folder: Path,
        seed: int,
        meta: Mapping[str, Any],
        log: Callable[[str], None],
        written: dict[str, int],
    ):
        self.p, self.dev, self.folder, self.seed = preset, dev, folder, seed
        self.meta, self.log, self.written = meta, log, written
        self.models = _Models(preset, str(dev), seed, log)
        self.quantized: dict[str, tuple[Any, str]] = {}
        self.common = {"dtype": preset.dtype, "device": dev.type}

    def start(self, kind: str) -> pd.DataFrame:
        return traces.start_trace(self.folder / f"{kind}.csv", kind=kind, meta=self.meta)

    def append(self, kind: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.written[kind] += traces.append_rows(self.folder / f"{kind}.csv", kind=kind, rows=rows)

    def ceilings(self) -> None:
        done = _done(self.start("ceilings"), ("dtype", "device", "op", "size"))
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
            self.append("ceilings", _with(rows, **self.common))
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
                self.append("ceilings", _with(rows, **self.common))
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
                empty = pd.DataFrame(columns=[c.name for c in SCHEMAS["passes"]] + _FORMAT_COLS)
                traces.write_trace(path, traces.Trace(kind="passes", data=empty, meta=self.meta))
        done = _done(self.start("passes"), keys)
        # Weights do not change timings: reuse the decoding runs' models where they match.
        targets = {t for t, _ in self.p.pairs}
        drafts = {d for t, d in self.p.pairs if load_model(t).vocab == load_model(d).vocab}
        for slug in self.p.timing_models:
            card = load_model(slug)
            role = "target" if slug in targets else "draft" if slug in drafts else "timing"
            source = self.p.source_len if card.architecture == "encoder-decoder" else 0
            for batch in self.p.batches:
                for context in self.p.contexts:
                    if _kv_bytes(card, self.p.dtype, batch, context) > self.p.max_cache_bytes:
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
        self.append("passes", _with(rows, model=card.slug, **extra, **self.common))
        self.log(f"{label}: {len(rows)} passes, {time.perf_counter() - t0:.1f} s")

    def _prompt(self, target: ModelCard, batch: int) -> np.ndarray:
        rng = unit_rng(self.seed, f"prompt/{target.slug}/{batch}")
        return rng.integers(0, target.vocab, (batch, self.p.prompt_len))

    def autoregressive(self) -> None:
        if self.p.interleave:
            return  # the plain runs are timed in turn with the speculative ones (specdec)
        done = _done(self.start("autoregressive"), ("run_id",))
        targets = dict.fromkeys(t for t, _ in self.p.pairs)
        for slug in targets:
            card = load_model(slug)
            for temp in self.p.temperatures:
                for batch in self.p.decode_batches:
                    run_id = f"ar/{slug}/T{temp:g}/b{batch}"
                    if (run_id,) in done:
                        continue
                    t0 = time.perf_counter()
                    res = autoregressive_decode(
                        self.models.get("target", card),
                        prompt=self._prompt(card, batch),
                        new_tokens=self.p.decode_tokens,
                        temperature=temp,
                        rng=unit_rng(self.seed, run_id),
                    )
                    self.append(
                        "autoregressive",
                        _with(
                            res.steps,
                            run_id=run_id,
                            model=slug,
                            temperature=float(temp),
                            batch=batch,
                            prompt_len=self.p.prompt_len,
                            **self.common,
                        ),
                    )
                    self.log(f"{run_id}: {time.perf_counter() - t0:.1f} s")

    def specdec(self) -> None:
        done = _done(self.start("specdec"), ("run_id",))
        positions = self.start("positions")
        finished = [key[0] for key in done]
        orphans = ~positions.run_id.isin(finished)
        if bool(orphans.any()):
            # A run cut between its appends: drop its positions, it reruns in full.
            traces.replace_rows(
                self.folder / "positions.csv", kind="positions", data=positions[~orphans]
            )
        if self.p.interleave:
            plain = self.start("autoregressive")
            twins = plain.run_id.str.contains("+", regex=False)
            lost = twins & ~plain.run_id.map(lambda r: "sd/" + r[3:]).isin(finished)
            if bool(lost.any()):
                traces.replace_rows(
                    self.folder / "autoregressive.csv", kind="autoregressive", data=plain[~lost]
                )
        for t_slug, d_slug in self.p.pairs:
            target, draft = load_model(t_slug), load_model(d_slug)
            for temp in self.p.temperatures:
                for gamma in self.p.gammas:
                    for batch in self.p.decode_batches:
                        run_id = f"sd/{t_slug}+{d_slug}/T{temp:g}/g{gamma}/b{batch}"
                        if (run_id,) in done:
                            continue
                        t0 = time.perf_counter()
                        if self.p.interleave:
                            self.interleaved(run_id, target, draft, temp, gamma, batch)
                            continue
                        res = speculative_decode(
                            self.models.get("target", target),
                            self.models.get("draft", draft, vocab=target.vocab),
                            prompt=self._prompt(target, batch),
                            new_tokens=self.p.decode_tokens,
                            gamma=gamma,
                            temperature=temp,
                            rng=unit_rng(self.seed, run_id),
                        )
                        # positions first: a run is done once its specdec rows exist.
                        self.append("positions", _with(res.positions, run_id=run_id))
                        self.append(
                            "specdec",
                            _with(
                                res.blocks,
                                run_id=run_id,
                                target=t_slug,
                                draft=d_slug,
                                temperature=float(temp),
                                gamma=gamma,
                                batch=batch,
                                prompt_len=self.p.prompt_len,
                                vocab=target.vocab,
                                **self.common,
                            ),
                        )
                        tokens = res.blocks.emitted.sum() / max(batch, 1)
                        self.log(
                            f"{run_id}: {len(res.blocks) // batch} blocks, "
                            f"{res.blocks.accepted.mean():.2f} accepted/block, "
                            f"{tokens:.0f} tokens, {time.perf_counter() - t0:.1f} s"
                        )

    def interleaved(
        self, run_id: str, target: ModelCard, draft: ModelCard, temp: float, gamma: int, batch: int
    ) -> None:
        """One speculative run timed in turn with its plain twin until the speedup is known
        (:func:`specsim.measure.timing.interleaved_until`)."""
        t0 = time.perf_counter()

        def prompt(segment: int) -> np.ndarray:
            rng = unit_rng(self.seed, f"prompt/{target.slug}/{batch}/{segment}")
            return rng.integers(0, target.vocab, (batch, self.p.prompt_len))

        res, why, ratio = interleaved_until(
            self.models.get("target", target),
            self.models.get("draft", draft, vocab=target.vocab),
            prompt=prompt,
            new_tokens=self.p.decode_tokens,
            gamma=gamma,
            temperature=temp,
            rng=unit_rng(self.seed, run_id),
            halfwidth=self.p.speedup_halfwidth,
            min_blocks=self.p.min_blocks,
            max_blocks=self.p.max_blocks,
            max_s=self.p.max_run_s,
        )
        run = {
            "temperature": float(temp),
            "batch": batch,
            "prompt_len": self.p.prompt_len,
            **self.common,
        }
        self.append("positions", _with(res.positions, run_id=run_id))
        self.append(
            "autoregressive", _with(res.steps, run_id="ar/" + run_id[3:], model=target.slug, **run)
        )
        self.append(
            "specdec",
            _with(
                res.blocks,
                run_id=run_id,
                target=target.slug,
                draft=draft.slug,
                gamma=gamma,
                vocab=target.vocab,
                **run,
            ),
        )
        self.log(
            f"{run_id}: {res.blocks.block.nunique()} blocks (stopped by {why}), "
            f"speedup {ratio[0]:.3f} "
            f"[{ratio[1]:.3f}, {ratio[2]:.3f}], {time.perf_counter() - t0:.1f} s"
        )

    def assisted(self) -> None:
        if self.p.assisted_repeats == 0:
            return
        done = _done(self.start("assisted"), ("run_id",))

        def model(role: str, slug: str, vocab: int | None = None) -> Any:
            return self.models.get(role, load_model(slug), vocab=vocab)

        for run_id, rows in assisted_runs(
            pairs=self.p.pairs,
            gammas=self.p.gammas,
            temperatures=self.p.assisted_temperatures,
            repeats=self.p.assisted_repeats,
            new_tokens=self.p.decode_tokens,
            done=done,
            model=model,
            prompt=lambda t: self._prompt(t, 1),
            rng=lambda key: unit_rng(self.seed, key),
        ):
            self.append(
                "assisted", [{**r, "prompt_len": self.p.prompt_len, **self.common} for r in rows]
            )
            self.log(
                f"{run_id}: {rows[-1]['time_s']:.2f} s, {rows[-1]['target_passes']} target passes"
            )
