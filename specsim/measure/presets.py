"""Measurement presets: what ``specsim measure --preset NAME`` measures.

A preset is one flat frozen config: the ceilings to time, the grid of forward
passes, the pairs and temperatures of the decoding runs. ``smoke`` takes
seconds (tests use it); ``cpu`` is sized to finish in under 10 minutes on two
cores; ``h200`` (alias ``gpu``) in under 8 minutes on one H200 without its weight formats
and interleaved runs, which add about twice the pass grid's time and at
most 2.5 minutes (an estimate: not run on a GPU yet); ``cpu-rows`` times
plain passes at 1 to 64 new positions in three weight formats and speculative runs
interleaved with their plain twins, block by block, until each speedup's 95% interval is
within ``speedup_halfwidth`` (or ``max_blocks`` or ``max_run_s`` is reached). ``shrink``
cuts a preset to CPU size with every path kept (``specsim measure --shrink``).

Measured sizing of ``cpu`` (pieces run with one thread on a shared, busy
2-core machine, extrapolated to the full grid): ceilings 3 s, pass grid about
240 s (gpt-like-97m 95, llama-160m 105, llama-68m 35, gpt-like-6m 7),
autoregressive runs 60 s, speculative runs 110 s, Hugging Face generation
75 s, model builds 10 s: about 8 minutes. Two threads on idle cores should be
faster; two threads on cores busy with other work are many times slower
(OpenMP threads waiting on each other), hence ``specsim measure --threads``.
``h200`` was sized by arithmetic, not run: no GPU was available when it was
written; a rerun with the same ``--out`` finishes whatever a first run left.

Why temperatures: models with random weights have near-uniform next-token
distributions (logit standard deviation about 0.55 for these shapes), so two
unrelated random models agree more the flatter their distributions are. The
temperature therefore sets the acceptance rate: for llama-160m with llama-68m,
measured per-position ``alpha`` is about 0.05 at T = 0.2, 0.19 at 0.3, 0.43 at
0.5, 0.70 at 1 and 0.85 at 2 (greedy, T = 0, accepts almost nothing). The
spread exercises the timing of every acceptance regime; it does not reproduce
the position-to-position heterogeneity of trained pairs, which random models
lack (alpha barely varies between positions at a given T).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.checks import check_int
from specsim.traces import io as traces

QUANT_FORMATS = ("fp32", "bf16", "int8", "int4")
"""Weight formats a preset may time (:func:`specsim.measure.models.quantize_weights`)."""

__all__ = ["QUANT_FORMATS", "Preset", "PRESETS", "get_preset", "shrink", "check_resume"]

_MIB = 2**20
_GIB = 2**30


def _ints(name: str, values: tuple[int, ...], low: int) -> None:
    if not isinstance(values, tuple):
        raise TypeError(f"Preset.{name}: expected a tuple, got {type(values).__name__}")
    for v in values:
        check_int(v, name=f"Preset.{name}", minimum=low)


@dataclass(frozen=True, kw_only=True, slots=True)
class Preset:
    """Everything one measurement run does (see the module docstring).

    Ceilings: ``matmul_sizes`` (n of n x n matmuls and matrix-vector products)
    and ``copy_bytes``. Pass grid: every model of ``timing_models`` at every
    ``batches`` x ``contexts`` x ``new_tokens``, ``warmup`` untimed and
    ``repeats`` timed passes each, skipping points whose KV cache would exceed
    ``max_cache_bytes``; encoder-decoder models attend to ``source_len``
    encoder tokens. Decoding: for each (target, draft) of ``pairs``, each
    temperature, gamma and batch of ``decode_batches``, a speculative run and
    (once per target, temperature, batch) an autoregressive run, each
    generating ``decode_tokens`` after a random prompt of ``prompt_len``;
    ``assisted_repeats`` runs of Hugging Face generation per configuration
    (0: none) at each of ``assisted_temperatures``: plain, constant schedule at
    each gamma, and the heuristic schedule starting at the largest gamma.

    ``weight_formats``: (format, largest new_tokens) timed besides the dtype's own, int4 in
    groups of ``group_size``. ``interleave``: speculative runs in turn with their plain
    twins, in segments of ``decode_tokens``, from ``min_blocks`` until the speedup's 95%
    interval is within ``+-speedup_halfwidth`` or ``max_blocks`` or ``max_run_s`` (0: none)
    is reached. ``pin_threads``: the process is pinned to ``threads`` CPUs.
    ``allreduce_bytes``: all-reduce sizes timed where several GPUs exist.
    """

    name: str
    description: str
    dtype: str
    threads: int | None
    matmul_sizes: tuple[int, ...]
    copy_bytes: tuple[int, ...]
    ceiling_repeats: int
    timing_models: tuple[str, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    new_tokens: tuple[int, ...]
    warmup: int
    repeats: int
    energy_window_s: float
    max_cache_bytes: float
    source_len: int
    pairs: tuple[tuple[str, str], ...]
    temperatures: tuple[float, ...]
    gammas: tuple[int, ...]
    decode_batches: tuple[int, ...]
    prompt_len: int
    decode_tokens: int
    assisted_repeats: int
    assisted_temperatures: tuple[float, ...]
    weight_formats: tuple[tuple[str, int], ...] = ()
    group_size: int = 128
    interleave: bool = False
    speedup_halfwidth: float = 0.05
    min_blocks: int = 30
    max_blocks: int = 5000
    max_run_s: float = 0.0
    pin_threads: bool = False
    allreduce_bytes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "float64", "float16", "bfloat16"):
            raise ValueError(f"Preset.dtype: unknown dtype {self.dtype!r}")
        if self.threads is not None:
            _ints("threads", (self.threads,), 1)
        for name, low in (
            ("matmul_sizes", 1),
            ("copy_bytes", 1),
            ("batches", 1),
            ("contexts", 0),
            ("new_tokens", 1),
            ("gammas", 1),
            ("decode_batches", 1),
        ):
            _ints(name, getattr(self, name), low)
        for name, low in (
            ("ceiling_repeats", 1),
            ("warmup", 0),
            ("repeats", 1),
            ("source_len", 1),
            ("prompt_len", 1),
            ("decode_tokens", 1),
            ("assisted_repeats", 0),
        ):
            _ints(name, (getattr(self, name),), low)
        for name in ("temperatures", "assisted_temperatures"):
            temps = getattr(self, name)
            if not isinstance(temps, tuple) or any(
                isinstance(t, bool) or not isinstance(t, int | float) or t < 0 for t in temps
            ):
                raise ValueError(f"Preset.{name}: expected a tuple of numbers >= 0, got {temps!r}")
        if self.energy_window_s < 0 or self.max_cache_bytes <= 0:
            raise ValueError(
                f"Preset: energy_window_s >= 0 and max_cache_bytes > 0 required, got "
                f"{self.energy_window_s} and {self.max_cache_bytes}"
            )
        for pair in self.pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError(f"Preset.pairs: expected (target, draft) tuples, got {pair!r}")
        for item in self.weight_formats:
            if not (isinstance(item, tuple) and len(item) == 2 and item[0] in QUANT_FORMATS):
                raise ValueError(
                    f"Preset.weight_formats: expected (format, largest new_tokens) "
                    f"with a format of {QUANT_FORMATS}, got {item!r}"
                )
            _ints("weight_formats", (item[1],), 1)
        for name, low in (("group_size", 1), ("min_blocks", 2), ("max_blocks", 2)):
            _ints(name, (getattr(self, name),), low)
        _ints("allreduce_bytes", self.allreduce_bytes, 1)
        if not 0 < self.speedup_halfwidth < 1 or self.max_run_s < 0:
            raise ValueError(
                f"Preset: speedup_halfwidth in (0, 1) and max_run_s >= 0 required, "
                f"got {self.speedup_halfwidth} and {self.max_run_s}"
            )

    @property
    def positions_needed(self) -> int:
        """Longest sequence any pass of this preset feeds a model."""
        grid = max(self.contexts, default=0) + max(self.new_tokens, default=1)
        decode = self.prompt_len + self.decode_tokens + max(self.gammas, default=0) + 1
        return max(grid, decode)


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        name="smoke",
        description="seconds: the smallest card, a tiny grid and short runs (tests)",
        dtype="float32",
        # One thread: tiny ops on an oversubscribed machine (tests beside other work)
        # slow down tenfold when OpenMP threads wait for each other.
        threads=1,
        matmul_sizes=(64,),
        copy_bytes=(_MIB,),
        ceiling_repeats=2,
        timing_models=("gpt-like-6m",),
        batches=(1, 2),
        contexts=(8, 16),
        new_tokens=(1, 3),
        warmup=1,
        repeats=2,
        energy_window_s=0.0,
        max_cache_bytes=_GIB,
        source_len=8,
        pairs=(("gpt-like-6m", "gpt-like-6m"),),
        temperatures=(0.0, 1.0),
        gammas=(2,),
        decode_batches=(1, 2),
        prompt_len=4,
        decode_tokens=6,
        assisted_repeats=1,
        assisted_temperatures=(0.0, 1.0),
    ),
    "cpu": Preset(
        name="cpu",
        description="under 10 minutes on 2 cores: the GPT-like pair of Leviathan et al. "
        "(Table 3) and llama-160m with llama-68m, float32",
        dtype="float32",
        threads=2,
        matmul_sizes=(256, 512, 1024, 2048),
        copy_bytes=(_MIB, 16 * _MIB, 256 * _MIB),
        ceiling_repeats=5,
        timing_models=("gpt-like-97m", "gpt-like-6m", "llama-160m", "llama-68m"),
        batches=(1, 2, 4, 8),
        contexts=(64, 128, 256, 512),
        new_tokens=(1, 2, 3, 4, 6, 8),
        warmup=1,
        repeats=3,
        energy_window_s=0.0,
        max_cache_bytes=4 * _GIB,
        source_len=64,
        pairs=(("gpt-like-97m", "gpt-like-6m"), ("llama-160m", "llama-68m")),
        temperatures=(0.3, 0.6, 1.0, 2.0),
        gammas=(3, 5),
        decode_batches=(1,),
        prompt_len=64,
        decode_tokens=48,
        assisted_repeats=1,
        assisted_temperatures=(0.6, 2.0),
    ),
    "h200": Preset(
        name="h200",
        description="one H200 (estimated, not run: about 8 minutes in bfloat16, twice that "
        "with int8 and int4 weights, 2.5 more for interleaved runs): a Llama-2-7B-shaped target "
        "with llama-68m, llama-160m and Llama-3.2-1B-shaped drafts",
        dtype="bfloat16",
        threads=None,
        matmul_sizes=(1024, 4096, 8192, 16384),
        copy_bytes=(64 * _MIB, _GIB, 4 * _GIB),
        ceiling_repeats=10,
        timing_models=("llama-2-7b", "llama-3.2-1b", "llama-160m", "llama-68m"),
        batches=(1, 2, 4, 8, 16, 32, 64),
        contexts=(128, 512, 1024, 2048, 4096),
        new_tokens=(1, 2, 3, 4, 5, 6, 8),
        warmup=2,
        repeats=5,
        energy_window_s=0.05,
        max_cache_bytes=48 * _GIB,
        source_len=512,
        pairs=(
            ("llama-2-7b", "llama-68m"),
            ("llama-2-7b", "llama-160m"),
            ("llama-2-7b", "llama-3.2-1b"),
        ),
        temperatures=(0.3, 0.6, 1.0, 2.0),
        gammas=(3, 5),
        decode_batches=(1, 8),
        prompt_len=128,
        decode_tokens=96,
        assisted_repeats=1,
        assisted_temperatures=(0.6, 2.0),
        weight_formats=(("int8", 64), ("int4", 64)),
        interleave=True,
        min_blocks=50,
        max_run_s=3.0,  # 48 runs: about 2.5 minutes at most
        allreduce_bytes=(8192, 2**20, 64 * 2**20),
    ),
}
PRESETS["cpu-rows"] = dataclasses.replace(
    PRESETS["cpu"],
    name="cpu-rows",
    description="about 10 minutes on one thread: plain passes at 1 to 64 new positions in "
    "float32, dynamic int8 and int4 weights; speculative runs interleaved with their plain "
    "twins until each speedup is known within +-5% (95%)",
    # One thread: on this 2-vCPU VM two threads made the same passes up to 84 times
    # slower in some repeats under other load, and tiny ones 10 times slower when quiet.
    threads=1,
    batches=(1,),
    contexts=(64, 128),
    new_tokens=(1, 2, 4, 8, 16, 32, 64),
    temperatures=(0.6, 2.0),
    gammas=(3,),
    assisted_repeats=0,
    assisted_temperatures=(),
    # int4 stops at 4 rows: this torch build's CPU int4 kernel costs about 7x a float32
    # pass per row, linearly in the rows (measured: a 768 x 32000 LM head takes 0.17 s
    # for 1 row, 1.6 s for 8 and 13 s for 64), so 64 rows would take minutes per pass.
    weight_formats=(("int8", 64), ("int4", 4)),
    interleave=True,
    min_blocks=30,
    # 240 s: at 60 s the two temperature-0.6 runs stopped at +-5.5% and +-6.8%.
    max_run_s=240.0,
    pin_threads=True,
)


def shrink(preset: Preset) -> Preset:
    """``preset`` cut to CPU size, every path kept (dtype, weight formats, interleaved runs,
    collectives, energy): the smallest cards, short runs, a few blocks. For checking a GPU
    preset end to end on a machine without the GPU (``specsim measure --shrink``)."""
    return dataclasses.replace(
        preset,
        name=f"{preset.name}-shrunk",
        matmul_sizes=(32,),
        copy_bytes=(4096,),
        ceiling_repeats=1,
        timing_models=("gpt-like-6m",),
        batches=(1, 2),
        contexts=(8,),
        new_tokens=(1, 2),
        warmup=1,
        repeats=1,
        energy_window_s=min(preset.energy_window_s, 0.01),
        max_cache_bytes=1e8,
        source_len=8,
        pairs=(("gpt-like-6m", "gpt-like-6m"),),
        temperatures=(1.0,),
        gammas=(2,),
        decode_batches=(1,),
        prompt_len=4,
        decode_tokens=6,
        assisted_temperatures=preset.assisted_temperatures[:1],
        weight_formats=tuple((f, min(n, 2)) for f, n in preset.weight_formats),
        min_blocks=4,
        max_blocks=8,
        max_run_s=min(preset.max_run_s or 5.0, 5.0),
        allreduce_bytes=preset.allreduce_bytes[:1],
    )


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (``gpu`` is another name for ``h200``)."""
    key = "h200" if name == "gpu" else name
    if key not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; expected one of {[*PRESETS, 'gpu']}")
    return PRESETS[key]


_RESUME_KEYS = ("device", "device_name", "dtype", "preset", "seed")
"""Session metadata a run must share with the traces already in its output folder."""


def check_resume(folder: Path, meta: Mapping[str, Any]) -> None:
    """Refuse to resume into ``folder`` if its traces came from another device, dtype,
    preset or seed (``meta``: this run's session): their units would be skipped as done
    and the traces mixed."""
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
