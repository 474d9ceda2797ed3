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
from specsim.measure.decode import autoregressive_decode
from specsim.measure.realalpha import (
    DRAFTS,
    TEMPERATURES,
    TEST_CORPORA,
    model_logits,
    position_stats,
    summarize,
)
from specsim.measure.realspec import SPECDEC_TEMPERATURES, measure_specdec, write_specdec
from specsim.measure.tinylm import load_tiny, load_tokenizer
from specsim.measure.train import encode_corpora, eval_windows
from specsim.rng import keyed_rng

__all__ = ["measure_alpha", "measure_real", "alpha_table", "with_time_left"]

Log = Callable[[str], None]


def _cell_rows(stats: Any, *, keys: dict[str, Any], keep: int) -> list[dict[str, Any]]:
    rows = []
    n, length = stats.alpha.shape
    for s in range(min(keep, n)):
        for t in range(length):
            rows.append(
                {
                    **keys,
                    "seq": s,
                    "position": t,
                    "alpha": round(float(stats.alpha[s, t]), 5),
                    "draft_prob": round(float(stats.draft_prob[s, t]), 5),
                    "draft_entropy": round(float(stats.draft_entropy[s, t]), 4),
                    "accepted": bool(stats.accepted[s, t]),
                }
            )
    return rows


def measure_alpha(
    *,
    target: Any,
    drafts: dict[str, Any],
    windows: dict[str, np.ndarray],
    context: int,
    temperatures: Sequence[float] = TEMPERATURES,
    texts: Sequence[str] = TEXTS,
    seed: int = 0,
    keep: int = 8,
    log: Log | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Summary and per-position frames for every draft, temperature, corpus and text.

    ``windows`` maps corpus to token windows (sequences, length); positions
    ``context..length-1`` are scored. ``generated`` text keeps each window's
    first ``context`` tokens as the prompt and lets the target generate the
    rest at the temperature being measured.
    """
    say = log if log is not None else (lambda line: None)
    summary: list[dict[str, Any]] = []
    positions: list[dict[str, Any]] = []
    for corpus, win in windows.items():
        length = win.shape[1]
        if not 1 <= context < length:
            raise ValueError(f"context: expected 1 <= context < {length}, got {context}")
        cached: dict[str, torch.Tensor] = {}
        for text in texts:
            for temp in temperatures:
                if text == "test":
                    seqs = win
                else:
                    gen = autoregressive_decode(
                        target,
                        prompt=win[:, :context],
                        new_tokens=length - context,
                        temperature=temp,
                        rng=keyed_rng(seed, f"generate/{corpus}/{temp}"),
                    )
                    seqs = np.concatenate([win[:, :context], gen.tokens], axis=1)
                    cached = {}
                feed = seqs[:, :-1]
                nxt = torch.from_numpy(seqs[:, context:])
                # Test text is the same at every temperature: its logits are computed once.
                if "target" not in cached:
                    cached["target"] = model_logits(target, feed)[:, context - 1 :]
                t_logits = cached["target"]
                for name, draft in drafts.items():
                    if name not in cached:
                        cached[name] = model_logits(draft, feed)[:, context - 1 :]
                    d_logits = cached[name]
                    key = f"{name}/{corpus}/{text}/{temp}"
                    st = position_stats(
                        t_logits,
                        d_logits,
                        next_tokens=nxt,
                        temperature=temp,
                        rng=keyed_rng(seed, "signals/" + key),
                    )
                    keys = {"draft": name, "temperature": temp, "corpus": corpus, "text": text}
                    summary.append(
                        {
                            **keys,
                            "sequences": st.alpha.shape[0],
                            "positions": st.alpha.size,
                            **summarize(st.alpha, rng=keyed_rng(seed, "boot/" + key)),
                            "accept_rate": float(st.accepted.mean()),
                            "draft_prob_mean": float(st.draft_prob.mean()),
                            "draft_entropy_mean": float(st.draft_entropy.mean()),
                            "target_nll": float(st.target_nll.mean()),
                            "draft_nll": float(st.draft_nll.mean()),
                        }
                    )
                    positions.extend(_cell_rows(st, keys=keys, keep=keep))
                say(
                    f"alpha {corpus} {text} T={temp}: "
                    + " ".join(
                        f"{r['draft']} {r['alpha_mean']:.3f}" for r in summary[-len(drafts) :]
                    )
                )
    return pd.DataFrame(summary).round(6), pd.DataFrame(positions)


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
    models = Path(models_dir)
    tok = load_tokenizer(models / "tokenizer.json")
    target, target_side = load_tiny(models / "target.safetensors", tokenizer=tok)
    loaded = {n: load_tiny(models / f"{n}.safetensors", tokenizer=tok) for n in drafts}
    max_len = min(
        int(m.config.max_position_embeddings) for m in [target, *(m for m, _ in loaded.values())]
    )
    if length > max_len:
        raise ValueError(f"length: {length} exceeds the models' {max_len} positions")
    data = encode_corpora(
        corpora_dir=Path(work) / "corpora",
        tokenizer=tok,
        corpora=corpora,
        cache_dir=Path(work) / "tokens",
        splits=("test",),
    )
    _check_corpora(data, corpora, length=length, work=Path(work))
    windows = {
        c: eval_windows(data, corpus=c, split="test", count=sequences, length=length, seed=seed)
        for c in corpora
    }
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
    outdir = Path(out)
    atomic_write_text(outdir / "alpha-summary.csv", summary.to_csv(index=False))
    payload = positions.to_csv(index=False).encode("utf-8")
    atomic_write_bytes(outdir / "alpha-positions.csv.gz", gzip.compress(payload, mtime=0))
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
        "seconds": round(time.perf_counter() - t0, 1),
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
    atomic_write_text(outdir / "alpha.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    if specdec_prompts > 0:
        frames = measure_specdec(
            target=target,
            drafts={n: m for n, (m, _) in loaded.items()},
            windows={c: windows[c][:specdec_prompts] for c in specdec_corpora},
            context=context,
            new_tokens=specdec_tokens,
            seed=seed,
            log=with_time_left(
                log, prefix="specdec ", total=len(specdec_corpora) * len(SPECDEC_TEMPERATURES)
            ),
        )
        write_specdec(frames, out=outdir, command=command, seed=seed, threads=threads)
    return summary


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
