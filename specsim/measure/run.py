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

import json
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
from specsim.measure.assisted import hf_generate
from specsim.measure.decode import autoregressive_decode, speculative_decode
from specsim.measure.models import build_model, resolve_device
from specsim.measure.presets import Preset
from specsim.measure.timing import measure_ceilings, time_passes
from specsim.rng import keyed_rng

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
                card, rng=unit_rng(self.seed, f"model/{role}/{card.slug}/{v}"),
                dtype=self.preset.dtype, device=self.device, vocab=v,
                min_positions=self.preset.positions_needed,
            )
            self.log(f"built {role} {card.slug} (vocab {v}) in {time.perf_counter() - t0:.1f} s")
        return self.built[key]


_RESUME_KEYS = ("device", "device_name", "dtype", "preset", "seed")
"""Session metadata a run must share with the traces already in its output folder."""


def _check_resume(folder: Path, meta: Mapping[str, Any]) -> None:
    """Refuse to resume into ``folder`` if its traces came from another device, dtype,
    preset or seed: their units would be skipped as done and the traces mixed."""
    for kind in traces.KINDS:
        csv_path, json_path = traces.trace_paths(folder / f"{kind}.csv")
        if not csv_path.exists() or not json_path.exists():
            continue  # nothing to resume, or start_trace reports the missing sidecar
        try:
            recorded = json.loads(json_path.read_text())
        except json.JSONDecodeError:
            continue  # start_trace reports it
        if not isinstance(recorded, dict):
            continue
        sessions = recorded.get("sessions")
        records = [recorded, *(sessions if isinstance(sessions, list) else [])]
        for record in records:
            if not isinstance(record, dict):
                continue
            for key in _RESUME_KEYS:
                if record.get(key) != meta[key]:
                    raise ValueError(
                        f"out: {folder} already holds {kind} traces measured with "
                        f"{key}={record.get(key)!r}, but this run has {key}={meta[key]!r}; "
                        "resuming would skip its units as done and mix the traces (use "
                        f"another out folder, or the same {key})"
                    )


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
    if dev.type == "cpu" and preset.threads is not None:
        # On a machine shared with other work, more threads than idle cores slow
        # small ops down many times over (OpenMP threads wait on each other).
        torch.set_num_threads(preset.threads)
    meta = {
        "device_name": device_name(dev), "device": dev.type, "dtype": preset.dtype,
        "preset": preset.name, "seed": seed, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "specsim": specsim.__version__, "python": sys.version.split()[0],
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command or " ".join(sys.argv),
    }
    if dev.type == "cuda":
        meta["cuda"] = torch.version.cuda
    written = dict.fromkeys(traces.KINDS, 0)
    try:
        _check_resume(folder, meta)
        ctx = _Run(preset, dev, folder, seed, meta, say, written)
        for section in SECTIONS:
            if section in chosen:
                getattr(ctx, section)()
    finally:
        torch.set_num_threads(old_threads)
    return written


class _Run:
    """State of one call of :func:`run_preset` (one method per section)."""

    def __init__(self, preset: Preset, dev: torch.device, folder: Path, seed: int,
                 meta: Mapping[str, Any], log: Callable[[str], None], written: dict[str, int]):
        self.p, self.dev, self.folder, self.seed = preset, dev, folder, seed
        self.meta, self.log, self.written = meta, log, written
        self.models = _Models(preset, str(dev), seed, log)
        self.common = {"dtype": preset.dtype, "device": dev.type}

    def start(self, kind: str) -> pd.DataFrame:
        return traces.start_trace(self.folder / f"{kind}.csv", kind=kind, meta=self.meta)

    def append(self, kind: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.written[kind] += traces.append_rows(self.folder / f"{kind}.csv", kind=kind,
                                                 rows=rows)

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
                device=self.dev, dtype=self.p.dtype, matmul_sizes=mm, copy_bytes=cp,
                repeats=self.p.ceiling_repeats, warmup=1,
                rng=unit_rng(self.seed, f"ceilings/{op}/{size}"),
            )
            self.append("ceilings", _with(rows, **self.common))
            best = rows.groupby("op").rate.max()
            self.log(f"ceilings {op} {size}: " + ", ".join(
                f"{k} {v:.3g}/s" for k, v in best.items()) + f" ({time.perf_counter() - t0:.1f} s)")

    def passes(self) -> None:
        done = _done(self.start("passes"), ("model", "dtype", "device", "batch", "context"))
        # Weights do not change timings: reuse the decoding runs' models where they match.
        targets = {t for t, _ in self.p.pairs}
        drafts = {d for t, d in self.p.pairs if load_model(t).vocab == load_model(d).vocab}
        for slug in self.p.timing_models:
            card = load_model(slug)
            role = "target" if slug in targets else "draft" if slug in drafts else "timing"
            source = self.p.source_len if card.architecture == "encoder-decoder" else 0
            for batch in self.p.batches:
                for context in self.p.contexts:
                    if (slug, self.p.dtype, self.dev.type, batch, context) in done:
                        continue
                    if _kv_bytes(card, self.p.dtype, batch, context) > self.p.max_cache_bytes:
                        self.log(f"passes {slug} b{batch} c{context}: skipped (KV cache over "
                                 f"{self.p.max_cache_bytes / 2**30:.0f} GiB)")
                        continue
                    model = self.models.get(role, card)
                    t0 = time.perf_counter()
                    rows = time_passes(
                        model, batch=batch, context=context, new_tokens=self.p.new_tokens,
                        repeats=self.p.repeats, warmup=self.p.warmup, source_len=source,
                        energy_window_s=self.p.energy_window_s,
                        rng=unit_rng(self.seed, f"passes/{slug}/{batch}/{context}"),
                    )
                    self.append("passes", _with(rows, model=slug, **self.common))
                    self.log(f"passes {slug} b{batch} c{context}: {len(rows)} passes, "
                             f"{time.perf_counter() - t0:.1f} s")

    def _prompt(self, target: ModelCard, batch: int) -> np.ndarray:
        rng = unit_rng(self.seed, f"prompt/{target.slug}/{batch}")
        return rng.integers(0, target.vocab, (batch, self.p.prompt_len))

    def autoregressive(self) -> None:
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
                        self.models.get("target", card), prompt=self._prompt(card, batch),
                        new_tokens=self.p.decode_tokens, temperature=temp,
                        rng=unit_rng(self.seed, run_id),
                    )
                    self.append("autoregressive", _with(
                        res.steps, run_id=run_id, model=slug, temperature=float(temp),
                        batch=batch, prompt_len=self.p.prompt_len, **self.common))
                    self.log(f"{run_id}: {time.perf_counter() - t0:.1f} s")

    def specdec(self) -> None:
        done = _done(self.start("specdec"), ("run_id",))
        positions = self.start("positions")
        orphans = ~positions.run_id.isin([key[0] for key in done])
        if bool(orphans.any()):
            # A run cut between its two appends: drop its positions, it reruns in full.
            traces.replace_rows(self.folder / "positions.csv", kind="positions",
                                data=positions[~orphans])
        for t_slug, d_slug in self.p.pairs:
            target, draft = load_model(t_slug), load_model(d_slug)
            for temp in self.p.temperatures:
                for gamma in self.p.gammas:
                    for batch in self.p.decode_batches:
                        run_id = f"sd/{t_slug}+{d_slug}/T{temp:g}/g{gamma}/b{batch}"
                        if (run_id,) in done:
                            continue
                        t0 = time.perf_counter()
                        res = speculative_decode(
                            self.models.get("target", target),
                            self.models.get("draft", draft, vocab=target.vocab),
                            prompt=self._prompt(target, batch), new_tokens=self.p.decode_tokens,
                            gamma=gamma, temperature=temp, rng=unit_rng(self.seed, run_id),
                        )
                        # positions first: a run is done once its specdec rows exist.
                        self.append("positions", _with(res.positions, run_id=run_id))
                        self.append("specdec", _with(
                            res.blocks, run_id=run_id, target=t_slug, draft=d_slug,
                            temperature=float(temp), gamma=gamma, batch=batch,
                            prompt_len=self.p.prompt_len, vocab=target.vocab, **self.common))
                        tokens = res.blocks.emitted.sum() / max(batch, 1)
                        self.log(f"{run_id}: {len(res.blocks) // batch} blocks, "
                                 f"{res.blocks.accepted.mean():.2f} accepted/block, "
                                 f"{tokens:.0f} tokens, {time.perf_counter() - t0:.1f} s")

    def assisted(self) -> None:
        if self.p.assisted_repeats == 0:
            return
        done = _done(self.start("assisted"), ("run_id",))
        configs: list[tuple[str, str | None, str, int]] = []
        for t_slug in dict.fromkeys(t for t, _ in self.p.pairs):
            configs.append((t_slug, None, "none", 0))
        for t_slug, d_slug in self.p.pairs:
            configs += [(t_slug, d_slug, "constant", g) for g in self.p.gammas]
            configs.append((t_slug, d_slug, "heuristic", max(self.p.gammas)))
        for t_name, d_name, schedule, n in configs:
            target = load_model(t_name)
            for temp in self.p.assisted_temperatures:
                run_id = f"hf/{t_name}+{d_name or '-'}/T{temp:g}/{schedule}{n}"
                if (run_id,) in done:
                    continue
                rng = unit_rng(self.seed, run_id)
                tmodel = self.models.get("target", target)
                dmodel = (None if d_name is None else
                          self.models.get("draft", load_model(d_name), vocab=target.vocab))
                rows = []
                for r in range(self.p.assisted_repeats):
                    res = hf_generate(tmodel, dmodel, prompt=self._prompt(target, 1),
                                      new_tokens=self.p.decode_tokens, temperature=temp,
                                      rng=rng, num_assistant_tokens=n, schedule=schedule)
                    rows.append({
                        "run_id": run_id, "target": t_name, "draft": d_name or "",
                        "temperature": float(temp), "batch": 1, "prompt_len": self.p.prompt_len,
                        "vocab": target.vocab, "schedule": schedule, "num_assistant_tokens": n,
                        "repeat": r, "new_tokens": self.p.decode_tokens, "time_s": res["time_s"],
                        "target_passes": res["target_passes"],
                        "draft_passes": res["draft_passes"], **self.common,
                    })
                self.append("assisted", rows)
                self.log(f"{run_id}: {rows[-1]['time_s']:.2f} s, "
                         f"{rows[-1]['target_passes']} target passes")
