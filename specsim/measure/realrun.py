"""Measure the trained tiny pairs: acceptance per position on test and generated text.

:func:`measure_real` loads the shared tokenizer and the trained models from
``models_dir``, cuts windows of every test corpus, lets the target generate
text at each temperature, and writes into ``out``:

- ``alpha-summary.csv``: one row per (draft, temperature, corpus, text) with
  mean alpha, its batch-means and bootstrap 95% intervals, quantiles over
  positions, the lag-1..5 autocorrelation, and the means of the per-token
  signals (see :mod:`specsim.measure.realalpha`);
- ``alpha-positions.csv.gz``: the per-position rows (alpha, the draft's
  probability of its token, its entropy, accepted) of the first ``keep``
  windows of every cell, for fitting acceptance processes and lookahead
  policies;
- ``alpha.json``: the command, seed, software versions, models and tokenizer;
- ``autoregressive.csv``, ``specdec.csv``, ``positions.csv`` (traces of the
  documented schema, with sidecars): real speculative decoding against its
  plain twin (:mod:`specsim.measure.realspec`).

Every random choice comes from :func:`specsim.rng.keyed_rng` with the seed
and a key naming the cell, so cells do not depend on each other's order.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from specsim.acceptance.realtext import TEXTS
from specsim.measure.corpus import atomic_write_bytes, atomic_write_text
from specsim.measure.realalpha import DRAFTS, TEMPERATURES, TEST_CORPORA, measure_alpha
from specsim.measure.realspec import SPECDEC_TEMPERATURES, measure_specdec, write_specdec
from specsim.measure.tinylm import load_tiny, load_tokenizer
from specsim.measure.train import encode_corpora, eval_windows

__all__ = ["measure_real", "alpha_table", "with_time_left"]

Log = Callable[[str], None]


SHRUNK: dict[str, Any] = {
    "sequences": 2,
    "length": 48,
    "context": 16,
    "keep": 2,
    "temperatures": (1.0,),
    "drafts": ("draft-all",),
    "corpora": ("en", "code"),
    "specdec_prompts": 1,
    "specdec_tokens": 8,
}
"""The alpha stage cut to a check of every path (``specsim measure --preset real --stage
alpha --shrink``): one draft, two corpora, two windows of 48 tokens each, one
temperature, one short speculative run per corpus. Windows of 48 tokens fit the
committed sample corpora (``--sample models/corpora/sample``), whose smallest test
split has about 100 tokens; the full stage's 128 do not."""


def _check_corpora(data: Any, corpora: Sequence[str], *, length: int, work: Path) -> None:
    """A ValueError before any measuring if a corpus's test split is too short for windows
    of ``length`` tokens, saying what to do."""
    for c in corpora:
        n = len(data.get(c, "test"))
        if n <= length:
            raise ValueError(
                f"corpus {c!r} in {work / 'corpora'}: its test split has {n} tokens, the "
                f"alpha stage's windows need more than {length}. The committed --sample "
                "corpora are too small for the full stage: build the corpora from the Debian "
                "packages (docs/real-acceptance.md), or add --shrink (windows of "
                f"{SHRUNK['length']} tokens)"
            )


def measure_real(
    *,
    work: str | os.PathLike[str],
    models_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    seed: int = 0,
    threads: int = 1,
    sequences: int = 32,
    length: int = 128,
    context: int = 32,
    keep: int = 8,
    drafts: Sequence[str] = DRAFTS,
    corpora: Sequence[str] = TEST_CORPORA,
    temperatures: Sequence[float] = TEMPERATURES,
    specdec_corpora: Sequence[str] = ("en", "code"),
    specdec_prompts: int = 3,
    specdec_tokens: int = 64,
    command: str = "",
    log: Log | None = None,
) -> pd.DataFrame:
    """Measure the committed pairs into ``out`` (see the module docstring); return the summary.

    Then, unless ``specdec_prompts`` is 0, real speculative decoding on
    ``specdec_corpora`` (:func:`specsim.measure.realspec.measure_specdec`).
    """
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    tok, target, target_side, loaded = _load_models(Path(models_dir), drafts=drafts, length=length)
    windows = _windows(
        Path(work), tokenizer=tok, corpora=corpora, sequences=sequences, length=length, seed=seed
    )
    summary = _alpha_stage(
        target,
        loaded,
        windows,
        target_side=target_side,
        outdir=Path(out),
        started=t0,
        command=command,
        seed=seed,
        threads=threads,
        sequences=sequences,
        length=length,
        context=context,
        keep=keep,
        temperatures=temperatures,
        corpora=corpora,
        drafts=drafts,
        log=log,
    )
    _specdec_stage(
        target,
        drafts={n: m for n, (m, _) in loaded.items()},
        windows=windows,
        corpora=specdec_corpora,
        prompts=specdec_prompts,
        context=context,
        new_tokens=specdec_tokens,
        seed=seed,
        threads=threads,
        command=command,
        outdir=Path(out),
        log=log,
    )
    return summary


def _alpha_stage(
    target: Any,
    loaded: dict[str, tuple[Any, dict[str, Any]]],
    windows: dict[str, np.ndarray],
    *,
    target_side: dict[str, Any],
    outdir: Path,
    started: float,
    command: str,
    seed: int,
    threads: int,
    sequences: int,
    length: int,
    context: int,
    keep: int,
    temperatures: Sequence[float],
    corpora: Sequence[str],
    drafts: Sequence[str],
    log: Log | None,
) -> pd.DataFrame:
    """Alpha on every draft, corpus, text and temperature, written into ``outdir`` with its
    sidecar ``alpha.json`` (the settings, the software and the models); the summary."""
    summary, positions = measure_alpha(
        target=target,
        drafts={n: m for n, (m, _) in loaded.items()},
        windows=windows,
        context=context,
        temperatures=temperatures,
        seed=seed,
        keep=keep,
        log=with_time_left(
            log, prefix="alpha ", total=len(TEXTS) * len(corpora) * len(temperatures)
        ),
    )
    summary.insert(1, "target", "target")
    _write_alpha_tables(outdir, summary=summary, positions=positions)
    meta = {
        "command": command,
        "seed": seed,
        "threads": threads,
        "sequences": sequences,
        "length": length,
        "context": context,
        "keep": keep,
        "temperatures": list(temperatures),
        "corpora": list(corpora),
        "drafts": list(drafts),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 1),
        **_provenance(target_side, loaded),
    }
    atomic_write_text(outdir / "alpha.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return summary


def _write_alpha_tables(outdir: Path, *, summary: pd.DataFrame, positions: pd.DataFrame) -> None:
    """``alpha-summary.csv`` and the per-position rows, gzipped reproducibly (no mtime)."""
    atomic_write_text(outdir / "alpha-summary.csv", summary.to_csv(index=False))
    payload = positions.to_csv(index=False).encode("utf-8")
    atomic_write_bytes(outdir / "alpha-positions.csv.gz", gzip.compress(payload, mtime=0))


def _specdec_stage(
    target: Any,
    *,
    drafts: dict[str, Any],
    windows: dict[str, np.ndarray],
    corpora: Sequence[str],
    prompts: int,
    context: int,
    new_tokens: int,
    seed: int,
    threads: int,
    command: str,
    outdir: Path,
    log: Log | None,
) -> None:
    """Real speculative decoding on the first ``prompts`` windows of each of ``corpora``,
    written as traces into ``outdir``; nothing unless ``prompts`` is positive."""
    if prompts <= 0:
        return
    frames = measure_specdec(
        target=target,
        drafts=drafts,
        windows={c: windows[c][:prompts] for c in corpora},
        context=context,
        new_tokens=new_tokens,
        seed=seed,
        log=with_time_left(log, prefix="specdec ", total=len(corpora) * len(SPECDEC_TEMPERATURES)),
    )
    write_specdec(frames, out=outdir, command=command, seed=seed, threads=threads)


def _load_models(
    models: Path, *, drafts: Sequence[str], length: int
) -> tuple[Any, Any, dict[str, Any], dict[str, tuple[Any, dict[str, Any]]]]:
    """The shared tokenizer, the target and its sidecar, each draft with its own; a ValueError
    if windows of ``length`` tokens exceed the models' positions."""
    tokenizer = load_tokenizer(models / "tokenizer.json")
    target, target_side = load_tiny(models / "target.safetensors", tokenizer=tokenizer)
    loaded = {n: load_tiny(models / f"{n}.safetensors", tokenizer=tokenizer) for n in drafts}
    max_len = min(
        int(m.config.max_position_embeddings) for m in [target, *(m for m, _ in loaded.values())]
    )
    if length > max_len:
        raise ValueError(f"length: {length} exceeds the models' {max_len} positions")
    return tokenizer, target, target_side, loaded


def _windows(
    work: Path,
    *,
    tokenizer: Any,
    corpora: Sequence[str],
    sequences: int,
    length: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """``sequences`` test windows of ``length`` tokens from each corpus (encoded, cached)."""
    data = encode_corpora(
        corpora_dir=work / "corpora",
        tokenizer=tokenizer,
        corpora=corpora,
        cache_dir=work / "tokens",
        splits=("test",),
    )
    _check_corpora(data, corpora, length=length, work=work)
    return {
        c: eval_windows(data, corpus=c, split="test", count=sequences, length=length, seed=seed)
        for c in corpora
    }


def _provenance(
    target_side: dict[str, Any], loaded: dict[str, tuple[Any, dict[str, Any]]]
) -> dict[str, Any]:
    """What the measurement ran on: software versions, the tokenizer and each model."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "tokenizer_sha256": target_side.get("tokenizer_sha256"),
        "models": {
            n: {
                "params": s.get("params"),
                "weights_sha256": s.get("weights_sha256"),
                "final_validation_loss": s.get("final_validation_loss"),
            }
            for n, s in [("target", target_side)] + [(n, s) for n, (_, s) in loaded.items()]
        },
    }


def with_time_left(log: Log | None, *, prefix: str, total: int) -> Log | None:
    """``log`` with ``[done/total, about N min left]`` added to each line that starts with
    ``prefix`` (one such line per finished cell of a stage), the time left extrapolated from
    the stage's mean time per cell so far; other lines pass unchanged. None stays None.

    >>> lines = []
    >>> say = with_time_left(lines.append, prefix="alpha ", total=4)
    >>> say("alpha en test T=0: ..."); say("loading")
    >>> lines[0].split(" [")[1].startswith("1/4, about "), lines[1]
    (True, 'loading')
    """
    if log is None:
        return None
    t0, done = time.perf_counter(), 0

    def say(line: str) -> None:
        nonlocal done
        if not line.startswith(prefix):
            log(line)
            return
        done += 1
        left = (time.perf_counter() - t0) / done * max(total - done, 0)
        log(f"{line} [{done}/{total}, about {left / 60:.1f} min left in this stage]")

    return say


def alpha_table(summary: pd.DataFrame, *, text: str = "test") -> str:
    """A markdown table of mean alpha (with the 95% batch-means half-width) by draft and
    corpus (rows) and temperature (columns), for one ``text`` kind."""
    rows = summary[summary.text == text]
    if rows.empty:
        raise ValueError(f"text: no rows for {text!r}; have {sorted(set(summary.text))}")
    temps = sorted(set(rows.temperature))
    lines = [
        "| draft | corpus | " + " | ".join(f"T = {t:g}" for t in temps) + " |",
        "| --- | --- | " + " | ".join("---" for _ in temps) + " |",
    ]
    for (draft, corpus), g in rows.groupby(["draft", "corpus"], sort=False):
        cells = []
        for t in temps:
            r = g[g.temperature == t].iloc[0]
            cells.append(f"{r.alpha_mean:.3f} ± {(r.ci_high - r.ci_low) / 2:.3f}")
        lines.append(f"| {draft} | {corpus} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
