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

* ``vllm bench latency --output-json FILE.json`` run with ``SAVE_TO_PYTORCH_BENCHMARK_FORMAT=1``,
  which writes ``FILE.pytorch.json`` beside it: records with ``benchmark.extra_info.args``
  (the run's arguments: ``batch_size``, ``input_len``, ``output_len``) and ``metric``
  (``name`` ``"latency"``, ``benchmark_values``: the seconds of each timed iteration).
  The plain ``FILE.json`` holds ``avg_latency``, ``latencies`` and ``percentiles`` but not
  the batch or lengths, so it is refused, naming the sidecar. One latency is a prefill
  plus ``output_len`` decode steps; the step time is the slope of the mean latency
  against ``output_len`` over two runs or more of the same batch and input length
  (:func:`read_engine_outputs`). Source: github:vllm-project/vllm
  ``vllm/benchmarks/latency.py`` (``save_to_pytorch_benchmark_format``) and
  ``vllm/benchmarks/lib/utils.py`` (``convert_to_pytorch_benchmark_format``).

* TensorRT-LLM ``trtllm-bench ... throughput --streaming --concurrency B --report_json
  FILE`` (one JSON object): ``streaming_metrics.tpot_percentiles.p50`` (ms; else
  ``streaming_metrics.avg_tpot_ms``), ``request_info.avg_num_concurrent_requests`` (the
  batch, rounded to the nearest integer; below ``B`` by the ramp-up and drain of the run),
  ``request_info.avg_input_length`` and ``avg_output_length``. A report without
  ``streaming_metrics`` (run without ``--streaming``) has no decode step and is refused.
  Source: github:NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/dataclasses/reporting.py``
  (``get_statistics_dict``; stored version at commit
  2787769cae353023784dce105d648bcd4d04f4d4).

Speculative runs (forced-acceptance or measured) are read by
:mod:`specsim.calibrate.engine_spec`, and llama.cpp's ``llama-speculative-simple --log-file``
logs (text, told apart from JSON by their ``n_drafted`` line) by
:mod:`specsim.calibrate.engine_llamacpp`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.calibrate.engine_llamacpp import (
    forced_run,
    is_speculative_log,
    read_speculative_log,
    refuse_llama_bench_text,
)
from specsim.calibrate.engine_records import (
    DecodeRun,
    integer_field,
    number_field,
    read_records,
)
from specsim.calibrate.engine_spec import sglang_spec, trtllm_spec, vllm_forced
from specsim.calibrate.spec_fit import ForcedRun
from specsim.checks import check_int

__all__ = [
    "DecodeRun",
    "read_engine_output",
    "read_engine_outputs",
    "read_all_outputs",
    "ENGINE_FORMATS",
    "RunFields",
    "RUN_FIELDS",
]

ENGINE_FORMATS = ("serve", "sglang-one-batch", "llama-bench", "vllm-latency", "trtllm-bench")
"""The formats :func:`read_engine_output` recognizes (by their fields)."""


@dataclass(frozen=True, kw_only=True)
class RunFields:
    """The fields a format's decode run is read from, in the engine's words (named in the
    errors raised after reading, and in a unit slip), and the unit of its step field."""

    batch: str
    context: str
    step: str
    unit: str


RUN_FIELDS: dict[str, RunFields] = {
    "serve": RunFields(
        batch="max_concurrency",
        context="random_input_len + random_output_len / 2",
        step="median_tpot_ms",
        unit="ms",
    ),
    "sglang-one-batch": RunFields(
        batch="batch_size",
        context="input_len + output_len / 2",
        step="median_decode_latency",
        unit="s",
    ),
    "llama-bench": RunFields(
        batch="batch 1", context="n_depth + n_gen / 2", step="avg_ts", unit="tokens/s"
    ),
    "vllm-latency": RunFields(
        batch="benchmark.extra_info.args.batch_size",
        context="input_len + mean output_len / 2",
        step="metric.benchmark_values",
        unit="s",
    ),
    "trtllm-bench": RunFields(
        batch="request_info.avg_num_concurrent_requests",
        context="request_info.avg_input_length + avg_output_length / 2",
        step="streaming_metrics.tpot_percentiles.p50",
        unit="ms",
    ),
}
"""Per format of :data:`ENGINE_FORMATS` (a :class:`DecodeRun`'s ``engine``), its fields."""


def _serve(where: str, rec: dict[str, Any]) -> DecodeRun:
    if rec.get("max_concurrency") is None:
        raise ValueError(
            f"{where}: field 'max_concurrency' is {rec.get('max_concurrency')!r}; a serving run "
            "fits the stack only when run at a fixed concurrency (--max-concurrency B with "
            "--request-rate inf)"
        )
    batch = integer_field(where, rec, "max_concurrency", limit="batch")
    if "random_input_len" in rec and "random_output_len" in rec:
        n_in = float(integer_field(where, rec, "random_input_len"))
        n_out = float(integer_field(where, rec, "random_output_len"))
    else:
        done = integer_field(where, rec, "completed", limit="requests")
        n_in = number_field(where, rec, "total_input_tokens") / done
        n_out = number_field(where, rec, "total_output_tokens") / done
    step = number_field(where, rec, "median_tpot_ms") / 1e3
    return DecodeRun(
        engine="serve", source=where, batch=batch, context=n_in + n_out / 2, step_s=step
    )


def _one_batch(where: str, rec: dict[str, Any]) -> DecodeRun:
    batch = integer_field(where, rec, "batch_size", limit="batch")
    ctx = integer_field(where, rec, "input_len") + integer_field(where, rec, "output_len") / 2
    step = number_field(where, rec, "median_decode_latency")
    return DecodeRun(engine="sglang-one-batch", source=where, batch=batch, context=ctx, step_s=step)


def _llama_bench(where: str, rec: dict[str, Any]) -> DecodeRun | None:
    if integer_field(where, rec, "n_prompt", minimum=0) != 0:
        return None  # a prompt-processing test, not decoding
    n_gen = integer_field(where, rec, "n_gen")
    depth = integer_field(where, rec, "n_depth", minimum=0) if "n_depth" in rec else 0
    step = 1.0 / number_field(where, rec, "avg_ts")
    return DecodeRun(
        engine="llama-bench", source=where, batch=1, context=depth + n_gen / 2, step_s=step
    )


def _trtllm(where: str, rec: dict[str, Any]) -> DecodeRun:
    stream, info = rec.get("streaming_metrics"), rec.get("request_info")
    if not isinstance(stream, dict):
        raise ValueError(
            f"{where}: a trtllm-bench report without 'streaming_metrics' has no decode step "
            "time (run trtllm-bench throughput with --streaming)"
        )
    if not isinstance(info, dict):
        raise ValueError(f"{where}: no 'request_info' table in the trtllm-bench report")
    tpot = stream.get("tpot_percentiles")
    if isinstance(tpot, dict) and "p50" in tpot:
        step = number_field(f"{where} streaming_metrics.tpot_percentiles", tpot, "p50") / 1e3
    else:
        step = number_field(f"{where} streaming_metrics", stream, "avg_tpot_ms") / 1e3
    w = f"{where} request_info"
    batch = max(1, round(number_field(w, info, "avg_num_concurrent_requests")))
    ctx = number_field(w, info, "avg_input_length") + number_field(w, info, "avg_output_length") / 2
    return DecodeRun(engine="trtllm-bench", source=where, batch=batch, context=ctx, step_s=step)


@dataclass(frozen=True, kw_only=True)
class _Latency:
    """One ``vllm bench latency`` run: the mean seconds of a whole batch (prefill and
    ``output_len`` decode steps)."""

    source: str
    batch: int
    input_len: int
    output_len: int
    latency_s: float


def _vllm_latency(where: str, rec: dict[str, Any]) -> _Latency | None:
    metric, bench = rec.get("metric"), rec.get("benchmark")
    if not isinstance(metric, dict) or metric.get("name") != "latency":
        return None  # another metric of the pytorch benchmark format
    if not isinstance(bench, dict) or not isinstance(bench.get("extra_info"), dict):
        got = bench.get("extra_info") if isinstance(bench, dict) else bench
        name = "benchmark.extra_info" if isinstance(bench, dict) else "benchmark"
        raise ValueError(f"{where}: field {name!r} must be a table (the run's info), got {got!r}")
    args = bench["extra_info"].get("args")
    if not isinstance(args, dict):
        raise ValueError(
            f"{where}: field 'benchmark.extra_info.args' must be a table (the run's "
            f"arguments), got {args!r}"
        )
    values = metric.get("benchmark_values")
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: metric.benchmark_values must be a non-empty list")
    lat = [number_field(where, {"benchmark_values[]": v}, "benchmark_values[]") for v in values]
    w = f"{where} benchmark.extra_info.args"
    return _Latency(
        source=where,
        batch=integer_field(w, args, "batch_size", limit="batch"),
        input_len=integer_field(w, args, "input_len"),
        output_len=integer_field(w, args, "output_len"),
        latency_s=sum(lat) / len(lat),
    )


def _latency_runs(lats: list[_Latency]) -> list[DecodeRun]:
    """A decode run per batch and input length: the least-squares slope of the mean latency
    on ``output_len`` (two output lengths or more, else a ValueError naming the runs)."""
    groups: dict[tuple[int, int], list[_Latency]] = {}
    for lat in lats:
        groups.setdefault((lat.batch, lat.input_len), []).append(lat)
    runs = []
    for (batch, n_in), g in sorted(groups.items()):
        outs = [x.output_len for x in g]
        if len(set(outs)) < 2:
            raise ValueError(
                f"vllm bench latency at batch {batch}, input {n_in}: one output length "
                f"({outs[0]}) in {[x.source for x in g]}; the decode step is the slope over "
                "two output lengths or more (run it again with another --output-len)"
            )
        mean_out = sum(outs) / len(outs)
        dx = [o - mean_out for o in outs]
        slope = sum(d * x.latency_s for d, x in zip(dx, g, strict=True)) / sum(d * d for d in dx)
        if slope <= 0:
            raise ValueError(
                f"{'; '.join(x.source for x in g)}: vllm bench latency at batch {batch}, input "
                f"{n_in}: the mean latency (metric.benchmark_values) falls as output_len grows"
            )
        source = "; ".join(x.source for x in g)
        ctx = n_in + mean_out / 2
        runs.append(
            DecodeRun(engine="vllm-latency", source=source, batch=batch, context=ctx, step_s=slope)
        )
    return runs


def read_engine_outputs(paths: list[str | os.PathLike[str]]) -> list[DecodeRun]:
    """The plain decode runs in every file of ``paths`` (:func:`read_engine_output`), the
    ``vllm bench latency`` runs combined across files (see the module docstring)."""
    return read_all_outputs(paths)[0]


def _steps_per_file(
    paths: list[str | os.PathLike[str]], steps: int | Sequence[int] | None
) -> list[int | None]:
    if steps is None:
        return [None] * len(paths)
    if isinstance(steps, int):
        return [check_int(steps, name="--speculative-steps", minimum=1)] * len(paths)
    given: list[int | None] = [check_int(k, name="--speculative-steps", minimum=1) for k in steps]
    if len(given) == 1:
        return given * len(paths)
    if len(given) != len(paths):
        raise ValueError(
            f"--speculative-steps: give one K for every file or one per --engine-output file "
            f"({len(paths)}), got {len(given)}"
        )
    return list(given)


def read_all_outputs(
    paths: list[str | os.PathLike[str]],
    *,
    speculative_steps: int | Sequence[int] | None = None,
) -> tuple[list[DecodeRun], list[ForcedRun]]:
    """The plain decode runs and the forced-acceptance runs in every file of ``paths``;
    ``speculative_steps``: the lookahead of SGLang and TensorRT-LLM speculative runs
    (:mod:`specsim.calibrate.engine_spec`), one for every file or one per file."""
    steps = _steps_per_file(paths, speculative_steps)
    runs: list[DecodeRun] = []
    lats: list[_Latency] = []
    forced: list[ForcedRun] = []
    for path, k in zip(paths, steps, strict=True):
        for item in _read(Path(path), k):
            if isinstance(item, _Latency):
                lats.append(item)
            elif isinstance(item, ForcedRun):
                forced.append(item)
            else:
                runs.append(item)
    if lats:
        runs += _latency_runs(lats)
    if not runs:
        raise ValueError(f"--engine-output: no plain decode run in {[str(p) for p in paths]}")
    return runs, forced


def read_engine_output(path: str | os.PathLike[str]) -> list[DecodeRun]:
    """The plain decode runs in one engine output file (format told by its fields, see the
    module docstring); a ValueError naming the file and record for anything else."""
    return read_engine_outputs([path])


def _read(p: Path, steps: int | None) -> list[DecodeRun | _Latency | ForcedRun]:
    if not p.is_file():
        raise ValueError(f"--engine-output: no file {str(p)!r}")
    head = p.read_bytes()[: 1 << 20].decode("utf-8", errors="replace")
    if is_speculative_log(head):
        return [forced_run(read_speculative_log(p))]
    refuse_llama_bench_text(p, head)
    runs: list[DecodeRun | _Latency | ForcedRun] = []
    records = read_records(p)
    for i, rec in enumerate(records):
        where = f"{p} record {i}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if _note(rec):
            continue  # a lone note record
        if "avg_latency" in rec and "percentiles" in rec:
            raise ValueError(
                f"{where}: vllm bench latency's --output-json holds no batch size or lengths; "
                "run it with SAVE_TO_PYTORCH_BENCHMARK_FORMAT=1 and give the .pytorch.json "
                "file it writes beside this one"
            )
        if "metric" in rec and "benchmark" in rec:
            lat = _vllm_latency(where, rec)
            if lat is not None:
                runs.append(lat)
        elif "request_info" in rec and "performance" in rec and rec.get("decoding_stats"):
            runs.append(trtllm_spec(where, _trtllm(where, rec), rec, steps))
        elif "request_info" in rec and "performance" in rec:
            runs.append(_trtllm(where, rec))
        elif "median_tpot_ms" in rec and "num_speculative_tokens" in rec:
            runs.append(vllm_forced(where, _serve(where, rec), rec))
        elif "median_tpot_ms" in rec and rec.get("accept_length") is not None:
            runs.append(sglang_spec(where, _serve(where, rec), rec, steps))
        elif "median_tpot_ms" in rec:
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
                "median_decode_latency, avg_ts with n_gen, a trtllm-bench report or vLLM's "
                f"pytorch benchmark records; formats {ENGINE_FORMATS})"
            )
    if not runs:
        raise ValueError(f"{p}: no decode run in it ({_why_none(records)})")
    return runs


def _why_none(records: list[Any]) -> str:
    """Why a file whose records were all skipped holds no decode run."""
    if not records or all(_note(r) for r in records):
        return "no records, notes only" if records else "an empty list of records"
    if any(isinstance(r, dict) and "avg_ts" in r for r in records):
        return "llama-bench: no text-generation test, n_prompt 0 and n_gen > 0"
    return "vLLM's pytorch benchmark records: no metric named 'latency'"


def _note(rec: Any) -> bool:
    """A record that holds only a note (``{"_note": ...}``), which the readers skip."""
    return isinstance(rec, dict) and len(rec) == 1 and str(next(iter(rec))).startswith("_")
