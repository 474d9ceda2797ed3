"""The README of a llama.cpp measurement folder, written from its raw outputs and manifest
(:func:`write_readme`, run at the end of ``specsim measure --engine llama.cpp``).

Every figure in it is read back from the committed files by the readers the calibration
uses (:func:`specsim.calibrate.engine_outputs.read_engine_output`,
:func:`specsim.calibrate.engine_llamacpp.read_speculative_log`), so the README and
``specsim calibrate --engine-output`` see the same numbers.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from specsim.calibrate.engine_llamacpp import SpecLog, read_speculative_log

__all__ = ["bench_rows", "verify_rows", "spec_rows", "write_readme"]


def bench_rows(out: Path) -> list[tuple[str, int, int, float, float]]:
    """(model, threads, depth, tokens/s mean, sd) of every llama-bench test in ``out``."""
    rows = []
    for path in sorted((out / "llama-bench").glob("*.json")):
        for rec in json.loads(path.read_text(encoding="utf-8")):
            if rec.get("n_prompt") == 0:
                rows.append((path.stem, int(rec["n_threads"]), int(rec.get("n_depth", 0)),
                             float(rec["avg_ts"]), float(rec["stddev_ts"])))  # fmt: skip
    return rows


def verify_rows(out: Path) -> dict[tuple[str, int, int], dict[int, float]]:
    """Milliseconds of one ``p``-token pass (the median of the repetitions' ``samples_ns``),
    by (model, threads, depth) and ``p``, from the ``-verify`` llama-bench files of ``out``."""
    rows: dict[tuple[str, int, int], dict[int, float]] = defaultdict(dict)
    for path in sorted((out / "llama-bench").glob("*-verify.json")):
        for rec in json.loads(path.read_text(encoding="utf-8")):
            key = (path.stem.removesuffix("-verify"), int(rec["n_threads"]), int(rec["n_depth"]))
            rows[key][int(rec["n_prompt"])] = 1e3 * statistics.median(rec["samples_ns"]) / 1e9
    return dict(rows)


def _verify_table(rows: dict[tuple[str, int, int], dict[int, float]]) -> list[str]:
    ps = sorted({p for r in rows.values() for p in r})
    lines = [
        "| model | threads | depth | " + " | ".join(f"pp{p} ms" for p in ps) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in ps) + " |",
    ]
    for (model, t, d), r in sorted(rows.items()):
        cells = " | ".join(f"{r[p]:.3f}" if p in r else "" for p in ps)
        lines.append(f"| {model} | {t} | {d} | {cells} |")
    return lines


def spec_rows(out: Path) -> dict[tuple[str, int, int], list[SpecLog]]:
    """The speculative logs of ``out`` grouped by (pair, threads, k) over prompts and repeats."""
    groups: dict[tuple[str, int, int], list[SpecLog]] = defaultdict(list)
    for path in sorted((out / "speculative").glob("*.log")):
        pair, t, k = path.stem.split("-t")[0], *path.stem.split("-t")[1].split("-k")
        groups[(pair, int(t), int(k.split("-")[0]))].append(read_speculative_log(path))
    return dict(groups)


def _spec_table(groups: dict[tuple[str, int, int], list[SpecLog]]) -> list[str]:
    lines = [
        "| pair | threads | k | runs | n_predict | n_drafted | n_accept | accept % | "
        "tokens/step | step ms (median) | decode tokens/s (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (pair, t, k), logs in sorted(groups.items()):
        pred = sum(g.n_predict for g in logs)
        drafted = sum(g.n_drafted for g in logs)
        acc = sum(g.n_accept for g in logs)
        steps = sum(g.steps for g in logs)
        step_ms = statistics.median(1e3 * g.step_s for g in logs)
        tps = statistics.median(g.n_predict / g.decode_s for g in logs)
        lines.append(
            f"| {pair} | {t} | {k} | {len(logs)} | {pred} | {drafted} | {acc} | "
            f"{100 * acc / drafted:.1f} | {pred / steps:.2f} | {step_ms:.2f} | {tps:.0f} |"
        )
    return lines


def _tool_seconds(manifest: dict[str, Any]) -> float:
    units = [*manifest["llama_bench"], *manifest["speculative"]]
    return float(sum(u.get("seconds", 0.0) for u in units))


def write_readme(out: Path, manifest: dict[str, Any]) -> Path:
    """``out/README.md``: build, CPU, threads, models, and the measured tables."""
    b, cpu = manifest["build"], manifest["cpu"]
    lines = [
        "# llama.cpp measured on this machine's CPU",
        "",
        "Written by `specsim measure --engine llama.cpp --out models/measured/llama.cpp` "
        "(docs/llama-cpp.md); raw outputs beside it, every command in `manifest.json`.",
        "",
        f"- build: {b['package']} {b['version']} (PyPI sdist, sha256 {b['sdist_sha256']}), "
        f"vendored llama.cpp commit {b['llama_cpp_commit']}",
        f"- cmake flags: `{' '.join(b['cmake_flags'])}`, `-j{b['jobs']}`; "
        f"compilers: {b['compilers']['c']}; {b['compilers']['cmake']}",
        f"- CPU: {cpu.get('Model name', '?')} ({cpu.get('CPU(s)', '?')} CPUs, "
        f"{cpu.get('Thread(s) per core', '?')} thread(s) per core; full `lscpu` in lscpu.txt), "
        "shared with other work while measured",
        f"- threads: {', '.join(map(str, manifest['threads']))}; the tools ran "
        f"{_tool_seconds(manifest):.0f} s of wall time in all",
        "",
        "## Models (GGUF, written from models/tiny and from seeded random weights)",
        "",
        "| file | sha256 |",
        "| --- | --- |",
        *(f"| {m['file']} | {m['sha256']} |" for m in manifest["models"].values()),
        "",
        "## Plain decoding: llama-bench -p 0 -n 32 -r 3 -o json",
        "",
        "| model | threads | depth | tokens/s | sd |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {m} | {t} | {d} | {ts:.1f} | {sd:.1f} |" for m, t, d, ts, sd in bench_rows(out)),
        "",
        "## Verification-sized passes: llama-bench -p 2,...,9 -n 0 -r 3 -o json",
        "",
        "Milliseconds of one pass of p tokens after `depth` cached tokens: the median of the "
        "three repetitions (`samples_ns`), which a repetition stalled by other work on the "
        "shared CPU does not move.",
        "",
        *_verify_table(verify_rows(out)),
        "",
        "## Speculative decoding: llama-speculative-simple, greedy",
        "",
        "Sums over prompts and repeats; tokens/step = n_predict / (n_predict - n_accept).",
        "",
        *_spec_table(spec_rows(out)),
        "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
