"""The state one :func:`specsim.measure.run_preset` call shares between its sections
(:mod:`specsim.measure.run` times ceilings and passes, :mod:`specsim.measure.run_decoding`
the decoding runs): the preset, the device, the output folder and the traces in it, the
models built so far, and each unit's random generator."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from specsim.cards import ModelCard
from specsim.measure.models import build_model
from specsim.measure.presets import Preset
from specsim.rng import keyed_rng
from specsim.traces import io as traces

__all__ = [
    "unit_rng",
    "device_name",
    "Models",
    "FORMAT_COLS",
    "kv_bytes",
    "done_keys",
    "with_constants",
    "RunState",
]


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


class Models:
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


FORMAT_COLS = ["weights", "quant", "group_size"]
"""Columns a passes trace of several weight formats adds: the format (``fp32``, ``int8``,
``int4``...), how it was made (``none``, ``dynamic``, ``weight-only``) and int4's group size."""


def kv_bytes(card: ModelCard, dtype: str, batch: int, context: int) -> float:
    element = torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    return float(card.kv_bytes_per_token(element)) * batch * context


def done_keys(frame: pd.DataFrame, columns: Sequence[str]) -> set[tuple[Any, ...]]:
    if frame.empty:
        return set()
    return {tuple(r) for r in frame[list(columns)].itertuples(index=False, name=None)}


def with_constants(rows: pd.DataFrame, **constants: Any) -> list[dict[str, Any]]:
    out = rows.assign(**constants)
    return [{str(k): v for k, v in r.items()} for r in out.to_dict(orient="records")]


class RunState:
    """State of one call of :func:`specsim.measure.run_preset`: where its traces go, the
    models it built, and the preset's prompts."""

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
        self.models = Models(preset, str(dev), seed, log)
        self.quantized: dict[str, tuple[Any, str]] = {}
        self.common = {"dtype": preset.dtype, "device": dev.type}

    def start(self, kind: str) -> pd.DataFrame:
        return traces.start_trace(self.folder / f"{kind}.csv", kind=kind, meta=self.meta)

    def append(self, kind: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.written[kind] += traces.append_rows(self.folder / f"{kind}.csv", kind=kind, rows=rows)

    def prompt(self, target: ModelCard, batch: int) -> np.ndarray:
        rng = unit_rng(self.seed, f"prompt/{target.slug}/{batch}")
        return rng.integers(0, target.vocab, (batch, self.p.prompt_len))
