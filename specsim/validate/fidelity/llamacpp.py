"""llama.cpp's speculative runs on this CPU (``models/measured/llama.cpp``), predicted held
out: rows of the fidelity table's columns (:data:`specsim.validate.fidelity.rows.COLUMNS`).

A cell is one pair, thread count and draft length ``k`` of ``llama-speculative-simple``
(its prompts and repeats pooled), at the thread counts of :data:`THREADS`. Its measured
quantity is the per-token latency, the decode seconds over the tokens emitted, with a 95%
t interval by the delta method over the cell's runs (:func:`specsim.stats.ratio_interval`).
Every prediction replays the cell's own accepted counts (``steps = n_predict - n_accept``)
and prices a step without the cell's own times:

- :func:`line_rows` (family ``llama.cpp speculative (CPU), step line in k``): the step time
  is a least-squares line ``a + b k`` through the step times of the same pair and threads
  at the *other* draft lengths (``b`` is one draft pass plus what one more token adds to the
  verification; ``a`` the rest);
- :func:`bench_rows` (family ``llama.cpp speculative (CPU), priced by llama-bench``): the
  step is what llama.cpp runs in it, each pass timed by the model's own ``llama-bench``
  test at these threads and the cell's mean context (:func:`pass_time`): the target's
  ``k + 1``-token verification pass (``pp{k+1}``), the draft's ``k`` decode passes
  (``tg``) and the draft's own ``k + 1``-token pass over the verified batch. What is
  left out is the host's work between passes (sampling, batch set-up).

:func:`llamacpp_rows` gives both families; :func:`specsim.validate.fidelity.fidelity_table`
holds them after the CPU runs' families (``docs/fidelity.md``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from specsim.calibrate.engine_llamacpp import SpecLog, read_speculative_log
from specsim.stats import ratio_interval
from specsim.validate.fidelity.rows import LEVEL, fidelity_row

__all__ = [
    "MEASURED",
    "BENCH_MODELS",
    "cells",
    "line_rows",
    "pass_time",
    "bench_rows",
    "llamacpp_rows",
]

MEASURED = "models/measured/llama.cpp"
BENCH_MODELS = {
    "tiny": ("target-f32", "draft-all-f32"),
    "tiny-distil": ("target-f32", "draft-distil-f32"),
    "rand-f16": ("rand-93m-f16", "rand-9m-f16"),
}
"""Per pair with llama-bench files for both models: (target, draft) file stems."""
THREADS = (1,)
"""The thread counts scored: at 2 threads on the shared 2-core machine a pass stalls for a
scheduler slice (about 270 ms) whenever other work holds a core, in llama-bench's
repetitions and the speculative runs alike, so those cells measure the machine's load."""
LINE = "llama.cpp speculative (CPU), step line in k"
BENCH = "llama.cpp speculative (CPU), priced by llama-bench"


def cells(
    folder: Path, threads: tuple[int, ...] = THREADS
) -> dict[tuple[str, int, int], list[SpecLog]]:
    """The logs of ``folder/speculative`` at ``threads`` by (pair, threads, k)."""
    out: dict[tuple[str, int, int], list[SpecLog]] = defaultdict(list)
    for path in sorted((folder / "speculative").glob("*.log")):
        pair, rest = path.stem.split("-t", 1)
        t, k = rest.split("-k", 1)
        if int(t) in threads:
            out[(pair, int(t), int(k.split("-")[0]))].append(read_speculative_log(path))
    if not out:
        raise FileNotFoundError(f"fidelity: no speculative logs under {folder / 'speculative'}")
    return dict(out)


def _measured(logs: list[SpecLog]) -> tuple[float, tuple[float, float], str]:
    iv = ratio_interval([g.decode_s for g in logs], [g.n_predict for g in logs], level=LEVEL)
    how = f"{LEVEL:.0%} t interval, delta method over {len(logs)} runs (prompts x repeats)"
    return iv.estimate, (iv.low, iv.high), how


def _step(logs: list[SpecLog]) -> float:
    return sum(g.decode_s for g in logs) / sum(g.steps for g in logs)


def _row(
    family: str, key: tuple[str, int, int], logs: list[SpecLog], step: float, fitted: str
) -> dict[str, object]:
    pair, threads, k = key
    lat, interval, how = _measured(logs)
    predicted = step * sum(g.steps for g in logs) / sum(g.n_predict for g in logs)
    return fidelity_row(
        family=family,
        anchor=f"{pair} t{threads} k{k}",
        source=f"{MEASURED}/speculative",
        quantity="per-token latency",
        unit="s/token",
        measured=lat,
        interval=interval,
        how=how,
        predicted=predicted,
        fitted_on=fitted + "; this cell's accepted counts",
    )


def line_rows(folder: Path) -> list[dict[str, object]]:
    """Each cell predicted by the step-time line of its pair's other draft lengths."""
    groups = cells(folder)
    out = []
    for key, logs in sorted(groups.items()):
        pair, threads, k = key
        others = [(kk, _step(g)) for (p, t, kk), g in groups.items() if (p, t) == (pair, threads)]
        others = [(kk, s) for kk, s in others if kk != k]
        if len(others) < 2:
            raise ValueError(f"line_rows: {pair} t{threads} k{k} has < 2 other draft lengths")
        b, a = np.polyfit([kk for kk, _ in others], [s for _, s in others], 1)
        fitted = (
            f"step times of {pair} at {threads} threads, k in "
            f"{sorted(kk for kk, _ in others)} (least-squares line in k)"
        )
        out.append(_row(LINE, key, logs, float(a + b * k), fitted))
    return out


def _median_pass_s(rec: dict[str, object], tokens: int) -> float:
    """One pass's seconds from a llama-bench test: the median of its repetitions
    (``samples_ns``; a ``tg`` sample times ``n_gen`` decode passes, a ``pp`` sample one pass
    of ``n_prompt`` tokens), robust to a repetition stalled by other work on the CPU."""
    samples = rec.get("samples_ns")
    per = int(rec["n_gen"]) if tokens == 1 else 1  # type: ignore[call-overload]
    if isinstance(samples, list) and samples:
        return float(np.median(np.asarray(samples, dtype=float))) / 1e9 / per
    return max(tokens, 1) / float(rec["avg_ts"])  # type: ignore[arg-type]


def pass_time(folder: Path, stem: str, threads: int, context: float, tokens: int) -> float:
    """Seconds of one ``tokens``-token pass of model ``stem`` at ``threads`` and ``context``
    from its llama-bench tests (the median repetition, :func:`_median_pass_s`): a decode
    pass (``tokens`` 1) from the ``tg`` tests of ``<stem>.json`` (context ``n_depth +
    n_gen / 2``), a longer pass from the ``pp<tokens>`` tests of ``<stem>-verify.json``
    (context ``n_depth``); linear in the context between the measured ones, flat beyond."""
    name = f"{stem}.json" if tokens == 1 else f"{stem}-verify.json"
    path = folder / "llama-bench" / name
    recs = json.loads(path.read_text(encoding="utf-8"))
    want = 0 if tokens == 1 else tokens
    tests = sorted(
        (int(r.get("n_depth", 0)) + int(r["n_gen"]) / 2, _median_pass_s(r, tokens))
        for r in recs
        if int(r["n_prompt"]) == want and int(r["n_threads"]) == threads
    )
    if not tests:
        raise ValueError(f"{path}: no {tokens}-token test at {threads} threads")
    return float(np.interp(context, [c for c, _ in tests], [t for _, t in tests]))


def bench_rows(folder: Path) -> list[dict[str, object]]:
    """Each cell of a pair in :data:`BENCH_MODELS` priced by its models' llama-bench tests:
    a step is the target's ``k + 1``-token verification pass, the draft's ``k`` decode
    passes and its own ``k + 1``-token pass over the verified batch (llama.cpp's
    ``common/speculative.cpp``, ``draft`` and ``process``)."""
    out = []
    for key, logs in sorted(cells(folder).items()):
        pair, threads, k = key
        if pair not in BENCH_MODELS:
            continue
        target, draft = BENCH_MODELS[pair]
        ctx = float(np.mean([g.n_prompt + g.n_predict / 2 for g in logs]))
        step = pass_time(folder, target, threads, ctx, k + 1)
        step += pass_time(folder, draft, threads, ctx, k + 1)
        step += k * pass_time(folder, draft, threads, ctx, 1)
        fitted = (
            f"llama-bench of {target} and {draft} at {threads} threads, context {ctx:.0f}: "
            f"pp{k + 1} of both, tg of {draft} x {k}"
        )
        out.append(_row(BENCH, key, logs, step, fitted))
    return out


def llamacpp_rows(
    root: Path | None = None, *, folder: Path | None = None
) -> list[dict[str, object]]:
    """Both families (module docstring) from ``folder``, by default
    ``<root>/models/measured/llama.cpp`` (``root``: the checkout)."""
    if folder is None:
        base = Path(__file__).resolve().parents[3] if root is None else Path(root)
        folder = base / MEASURED
    return line_rows(folder) + bench_rows(folder)
