"""Timing forward passes and the device's own ceilings.

:func:`time_passes` times one model's forward pass over ``new_tokens`` tokens
per sequence after ``context`` cached tokens, for a batch of sequences: the
unit a cost model predicts (:func:`specsim.cost.step_cost`). The KV cache is
filled with random keys and values (their values do not change the work of
attention, only its result), so the grid costs no prefill compute. After each
pass the cache is cropped back to ``context``: Hugging Face's dynamic cache
appends by concatenation, so each pass copies the cache, as it does in
``generate()``; that copy is part of the measured time.

Clocks: on a GPU each repetition is bracketed by CUDA events and the device
synchronised once at the end; on the CPU each call is timed with
:func:`time.perf_counter` (calls block). Peak memory is
:func:`torch.cuda.max_memory_allocated` over a configuration's passes (CPU:
left empty). Energy comes from NVML's total-energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules) where the ``pynvml``
module (package ``nvidia-ml-py``) is importable and the GPU supports it: the
counter is read around a loop of extra passes lasting at least
``energy_window_s`` (its update period is coarse) and divided by their number.

:func:`measure_ceilings` times what the device itself can do: a square matmul
(FLOP/s at the dtype), a matrix-vector product (the weight-streaming pattern of
decoding) and a device-to-device copy (bytes/s), so a CPU card can be built
from measurement rather than from a datasheet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.cuda import comm

from specsim.calibrate.profile import enough_blocks
from specsim.measure.decode import DecodeState
from specsim.measure.interleave import Interleaved, interleaved_decode
from specsim.measure.models import synchronize, torch_dtype
from specsim.stats import ratio_interval

__all__ = [
    "time_calls",
    "energy_meter",
    "filled_state",
    "time_passes",
    "measure_ceilings",
    "interleaved_until",
    "measure_allreduce",
]


def time_calls(
    fn: Callable[[], Any],
    *,
    device: torch.device,
    repeats: int,
    warmup: int,
    after: Callable[[], Any] | None = None,
) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones.

    ``after`` (untimed, host-side) runs after every call, e.g. to undo its effect.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats >= 1 and warmup >= 0 required, got {repeats}, {warmup}")
    for _ in range(warmup):
        fn()
        if after is not None:
            after()
    synchronize(device)
    times: list[float] = []
    if device.type == "cuda":
        pairs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(repeats)
        ]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
            if after is not None:
                after()
        synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in pairs]
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if after is not None:
            after()
    return times


def energy_meter(device: torch.device) -> Callable[[], float] | None:
    """A function returning the GPU's cumulative energy in joules, or None where unavailable.

    None on the CPU, without ``pynvml``, or when NVML cannot read the counter.
    The NVML handle is found by the device's UUID, else by its index.
    """
    if device.type != "cuda":
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except pynvml.NVMLError:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except pynvml.NVMLError:
        return None

    def read() -> float:
        return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1e3

    return read


def filled_state(
    model: Any,
    *,
    batch: int,
    context: int,
    rng: np.random.Generator,
    source_len: int = 0,
) -> DecodeState:
    """A decoding state whose self-attention cache holds ``context`` random positions.

    One real pass on a single token per sequence creates the cache with the
    model's own layer shapes (and, for an encoder-decoder model, the cross
    keys and values of a random ``source_len``-token source); each layer's keys
    and values are then replaced by normal noise of length ``context``.
    """
    if batch < 1 or context < 0:
        raise ValueError(f"batch >= 1 and context >= 0 required, got {batch}, {context}")
    device = next(model.parameters()).device
    vocab = int(model.config.vocab_size)
    seed = int(rng.integers(0, 2**63 - 1))
    gen = torch.Generator(device=device).manual_seed(seed)
    source = None
    if model.config.is_encoder_decoder:
        if source_len < 1:
            raise ValueError(f"source_len: an encoder-decoder model needs >= 1, got {source_len}")
        source = torch.from_numpy(rng.integers(0, vocab, (batch, source_len)))
    state = DecodeState(model, batch=batch, source=source)
    state.forward(torch.from_numpy(rng.integers(0, vocab, (batch, 1))), last_only=True)
    cache = state.cache.self_attention_cache if state.encoder_decoder else state.cache
    for layer in cache.layers:
        b, heads, _, dim = layer.keys.shape
        for name in ("keys", "values"):
            old = getattr(layer, name)
            noise = torch.empty((b, heads, context, dim), dtype=old.dtype, device=device)
            setattr(layer, name, noise.normal_(generator=gen))
    if state.length != context:
        raise RuntimeError(f"filled cache holds {state.length} positions, expected {context}")
    return state


def time_passes(
    model: Any,
    *,
    batch: int,
    context: int,
    new_tokens: Sequence[int],
    repeats: int,
    warmup: int,
    rng: np.random.Generator,
    source_len: int = 0,
    energy_window_s: float = 0.0,
) -> pd.DataFrame:
    """Time forward passes of ``new_tokens[i]`` tokens per sequence after ``context`` cached.

    One row per (new_tokens, repeat) with the columns of the ``passes`` trace
    kind that the model determines: ``batch, context, source_len, new_tokens,
    repeat, time_s, peak_mem_bytes, energy_j``.
    """
    state = filled_state(model, batch=batch, context=context, rng=rng, source_len=source_len)
    device = state.device
    vocab = int(model.config.vocab_size)
    meter = energy_meter(device) if energy_window_s > 0 else None
    rows = []
    for n in new_tokens:
        tokens = torch.from_numpy(rng.integers(0, vocab, (batch, int(n)))).to(device)

        def one_pass(tokens: torch.Tensor = tokens) -> None:
            state.forward(tokens)

        def undo() -> None:
            state.rollback(context)

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = time_calls(one_pass, device=device, repeats=repeats, warmup=warmup, after=undo)
        peak = float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else np.nan
        energy = np.nan
        if meter is not None:
            synchronize(device)
            e0, t0, count = meter(), time.perf_counter(), 0
            while count == 0 or time.perf_counter() - t0 < energy_window_s:
                one_pass()
                undo()
                count += 1
                synchronize(device)
            energy = (meter() - e0) / count
        for r, t in enumerate(times):
            rows.append(
                {
                    "batch": batch,
                    "context": context,
                    "source_len": source_len,
                    "new_tokens": int(n),
                    "repeat": r,
                    "time_s": t,
                    "peak_mem_bytes": peak,
                    "energy_j": energy,
                }
            )
    return pd.DataFrame(rows)


def measure_ceilings(
    *,
    device: str | torch.device,
    dtype: str,
    matmul_sizes: Sequence[int],
    copy_bytes: Sequence[int],
    repeats: int,
    warmup: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Time n x n matmuls, n x n by n matrix-vector products and buffer copies.

    Rows have the columns of the ``ceilings`` trace kind except ``dtype`` and
    ``device``: ``op, size, repeat, time_s, flops, bytes, rate``. A matmul
    counts ``2 n^3`` FLOP and ``3 n^2`` elements moved; a matrix-vector
    product ``2 n^2`` FLOP and ``n^2 + 2n`` elements; a copy of ``s`` bytes
    reads and writes ``2 s`` bytes.
    """
    dev = torch.device(device)
    tdtype = torch_dtype(dtype)
    size = torch.tensor([], dtype=tdtype).element_size()
    gen = torch.Generator(device=dev).manual_seed(int(rng.integers(0, 2**63 - 1)))
    rows: list[dict[str, Any]] = []

    def record(op: str, n: int, times: list[float], flops: float, nbytes: float) -> None:
        for r, t in enumerate(times):
            rate = (flops if op != "copy" else nbytes) / t
            rows.append(
                {
                    "op": op,
                    "size": n,
                    "repeat": r,
                    "time_s": t,
                    "flops": flops,
                    "bytes": nbytes,
                    "rate": rate,
                }
            )

    def noise(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=tdtype, device=dev).normal_(generator=gen)

    def timed(fn: Callable[[], Any]) -> list[float]:
        return time_calls(fn, device=dev, repeats=repeats, warmup=warmup)

    with torch.inference_mode():
        for n in matmul_sizes:
            a, b = noise(n, n), noise(n, n)
            times = timed(partial(torch.matmul, a, b))
            record("matmul", n, times, 2.0 * n**3, 3.0 * n * n * size)
            v = noise(n, 1)
            times = timed(partial(torch.matmul, a, v))
            record("gemv", n, times, 2.0 * n * n, (n * n + 2.0 * n) * size)
            del a, b, v
        for nbytes in copy_bytes:
            # Written once: never-touched pages could read as shared zero pages.
            src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            times = timed(partial(dst.copy_, src))
            record("copy", nbytes, times, 0.0, 2.0 * nbytes)
            del src, dst
    return pd.DataFrame(rows)


def interleaved_until(
    target: Any,
    draft: Any,
    *,
    prompt: Callable[[int], np.ndarray],
    new_tokens: int,
    gamma: int,
    temperature: float,
    rng: np.random.Generator,
    halfwidth: float,
    min_blocks: int,
    max_blocks: int,
    max_s: float = 0.0,
) -> tuple[Interleaved, str, tuple[float, float, float]]:
    """Segments of :func:`specsim.measure.interleave.interleaved_decode` (``new_tokens`` each,
    segment ``i`` from ``prompt(i)``) until the speedup's 95% interval, from the paired
    blocks so far, is within ``+-halfwidth`` (:func:`specsim.calibrate.profile.enough_blocks`)
    with at least ``min_blocks`` blocks; or until ``max_blocks`` blocks or ``max_s`` seconds
    (0: no limit). Returns the run, why it stopped (``interval``, ``blocks``, ``time``) and
    the speedup with its 95% interval (:func:`specsim.stats.ratio_interval`)."""
    parts: list[Interleaved] = []
    spec: list[float] = []
    plain: list[float] = []
    t0, segment, why = time.perf_counter(), 0, ""
    while not why:
        part = interleaved_decode(
            target,
            draft,
            prompt=prompt(segment),
            new_tokens=new_tokens,
            gamma=gamma,
            temperature=temperature,
            rng=rng,
            first_block=len(spec),
            first_step=sum(len(p.steps) for p in parts),
        )
        parts.append(part)
        b, s = part.blocks[part.blocks["seq"] == 0], part.steps
        spec += (b["draft_s"] + b["target_s"] + b["verify_s"]).tolist()
        ends = np.cumsum(b["emitted"].to_numpy())
        step_s = (s["forward_s"] + s["sample_s"]).to_numpy()
        plain += np.add.reduceat(step_s, np.r_[0, ends[:-1]]).tolist()
        segment += 1
        if enough_blocks(plain, spec, halfwidth=halfwidth, min_blocks=min_blocks):
            why = "interval"
        elif len(spec) >= max_blocks:
            why = "blocks"
        elif max_s and time.perf_counter() - t0 >= max_s:
            why = "time"
    run = Interleaved(
        *(
            pd.concat([getattr(p, f) for p in parts], ignore_index=True)
            for f in ("blocks", "positions", "steps")
        )
    )
    return run, why, ratio_interval(plain, spec).bounds()


def measure_allreduce(sizes: Sequence[int], *, dtype: str, repeats: int) -> pd.DataFrame:
    """All-reduce times over every visible GPU, one process (``torch.cuda.comm.reduce_add``
    then ``broadcast``: NCCL where it is built in), for messages of ``sizes`` bytes; rows as
    :func:`measure_ceilings`' with ``op`` ``allreduce<p>`` (p devices) and ``rate`` the bus
    bandwidth ``2 (p - 1) / p * bytes / time`` (nccl-tests' ``busbw``). Empty with fewer than
    two GPUs. Not run on a multi-GPU machine yet: none was available when it was written."""
    p = torch.cuda.device_count() if torch.cuda.is_available() else 0
    rows: list[dict[str, Any]] = []
    if p < 2:
        return pd.DataFrame(rows)
    devs = [torch.device("cuda", i) for i in range(p)]
    tdtype = torch_dtype(dtype)
    element = torch.tensor([], dtype=tdtype).element_size()
    for size in sizes:
        bufs = [torch.ones(max(size // element, 1), dtype=tdtype, device=d) for d in devs]

        def allreduce(bufs: list[torch.Tensor] = bufs) -> None:
            total = comm.reduce_add(bufs, destination=0)
            comm.broadcast(total, out=bufs)

        for r in range(repeats + 1):
            for d in devs:
                synchronize(d)
            t0 = time.perf_counter()
            allreduce()
            for d in devs:
                synchronize(d)
            if r:  # the first is a warm-up
                t = time.perf_counter() - t0
                rows.append(
                    {
                        "op": f"allreduce{p}",
                        "size": size,
                        "repeat": r - 1,
                        "time_s": t,
                        "flops": 0.0,
                        "bytes": float(size),
                        "rate": 2 * (p - 1) / p * size / t,
                    }
                )
        del bufs
    return pd.DataFrame(rows)
