"""Plain decode runs read from the benchmark outputs engines already write.

Each reader returns :class:`DecodeRun` records: one batch size, the mean context of its
decode steps, and the measured time of one decode step (seconds). The field names are
those the engines write:

* ``vllm bench serve --save-result`` and SGLang ``bench_serving --output-file`` (one JSON
  object, or JSON lines, per run): ``median_tpot_ms`` (time per output token after the
  first, per request, median over requests), ``max_concurrency`` (the batch the run held,
  required: a run without a concurrency limit has no fixed batch), ``random_input_len``
  and ``random_output_len`` (or the means ``total_input_tokens / completed`` and
  ``total_output_tokens / completed``). Source: github:vllm-project/vllm
  ``vllm/benchmarks/serve.py`` (the result dict saved by ``--save-result``) and
  github:sgl-project/sglang ``python/sglang/bench_serving.py``; the metric names were
  checked against their use in public code through the code search of this project, not
  against a pinned commit (named in the report of this change as left to do).
* SGLang ``bench_one_batch --result-filename`` (JSON lines, one per batch size and
  length): ``batch_size``, ``input_len``, ``output_len``, ``median_decode_latency``
  (seconds, the median of the decode steps after the first). Source:
  github:sgl-project/sglang ``python/sglang/bench_one_batch.py`` (``latency_test_run_once``:
  ``measurement_results["median_decode_latency"] = med_decode_latency``).
* llama.cpp ``llama-bench -o json`` (a JSON array of tests): the text-generation tests
  (``n_prompt`` 0, ``n_gen`` > 0) at batch 1, ``avg_ts`` (tokens per second, the mean over
  repetitions), ``n_depth`` (tokens already in the context, absent in older builds: 0).
  Source: github:ggml-org/llama.cpp ``tools/llama-bench/llama-bench.cpp``
  (``test::get_fields``).

Not read yet: ``vllm bench latency --output-json`` (its JSON holds ``avg_latency``,
``latencies`` and ``percentiles`` but not the batch or lengths, which are only in its
arguments), TensorRT-LLM ``trtllm-bench`` reports and forced-acceptance runs.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DecodeRun", "read_engine_output", "ENGINE_FORMATS"]

ENGINE_FORMATS = ("serve", "sglang-one-batch", "llama-bench")
"""The formats :func:`read_engine_output` recognizes (by their fields)."""


@dataclass(frozen=True, kw_only=True)
class DecodeRun:
    """One measured plain decode configuration: ``step_s`` per step of ``batch`` sequences
    at a mean context of ``context`` tokens, read from ``source`` in format ``engine``."""

    engine: str
    source: str
    batch: int
    context: float
    step_s: float


def _records(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: neither JSON nor JSON lines ({exc})") from None
    return data if isinstance(data, list) else [data]


def _number(where: str, rec: dict[str, Any], key: str, *, positive: bool = True) -> float:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: field {key!r} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{where}: field {key!r} must be positive, got {value!r}")
    return float(value)


def _serve(where: str, rec: dict[str, Any]) -> DecodeRun:
    batch = rec.get("max_concurrency")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(
            f"{where}: field 'max_concurrency' is {batch!r}; a serving run fits the stack only "
            "when run at a fixed concurrency (--max-concurrency B with --request-rate inf)"
        )
    if "random_input_len" in rec and "random_output_len" in rec:
        n_in = _number(where, rec, "random_input_len")
        n_out = _number(where, rec, "random_output_len")
    else:
        done = _number(where, rec, "completed")
        n_in = _number(where, rec, "total_input_tokens") / done
        n_out = _number(where, rec, "total_output_tokens") / done
    step = _number(where, rec, "median_tpot_ms") / 1e3
    return DecodeRun(
        engine="serve", source=where, batch=batch, context=n_in + n_out / 2, step_s=step
    )


def _one_batch(where: str, rec: dict[str, Any]) -> DecodeRun:
    batch = int(_number(where, rec, "batch_size"))
    ctx = _number(where, rec, "input_len") + _number(where, rec, "output_len") / 2
    step = _number(where, rec, "median_decode_latency")
    return DecodeRun(engine="sglang-one-batch", source=where, batch=batch, context=ctx, step_s=step)


def _llama_bench(where: str, rec: dict[str, Any]) -> DecodeRun | None:
    if _number(where, rec, "n_prompt", positive=False) != 0:
        return None  # a prompt-processing test, not decoding
    n_gen = _number(where, rec, "n_gen")
    depth = _number(where, rec, "n_depth", positive=False) if "n_depth" in rec else 0.0
    step = 1.0 / _number(where, rec, "avg_ts")
    return DecodeRun(
        engine="llama-bench", source=where, batch=1, context=depth + n_gen / 2, step_s=step
    )


def read_engine_output(path: str | os.PathLike[str]) -> list[DecodeRun]:
    """The plain decode runs in one engine output file (format told by its fields, see the
    module docstring); a ValueError naming the file and record for anything else."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--engine-output: no file {str(p)!r}")
    runs: list[DecodeRun] = []
    for i, rec in enumerate(_records(p)):
        where = f"{p} record {i}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if str(next(iter(rec), "")).startswith("_") and len(rec) == 1:
            continue  # a lone note record
        if "median_tpot_ms" in rec:
            runs.append(_serve(where, rec))
        elif "median_decode_latency" in rec:
            runs.append(_one_batch(where, rec))
        elif "avg_ts" in rec and "n_gen" in rec:
            run = _llama_bench(where, rec)
            if run is not None:
                runs.append(run)
        else:
            raise ValueError(
                f"{where}: not a known engine output (expected median_tpot_ms, "
                f"median_decode_latency or avg_ts with n_gen; formats {ENGINE_FORMATS})"
            )
    if not runs:
        raise ValueError(f"{p}: no plain decode run in it (llama-bench: no tg test)")
    return runs
