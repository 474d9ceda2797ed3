"""Real speculative decoding on the trained tiny pairs, timed beside its plain twin.

For each corpus, temperature and prompt (cut from the corpus' test text),
the target decodes ``new_tokens`` tokens plainly
(:func:`~specsim.measure.decode.autoregressive_decode`) and then, interleaved
so that both see the same machine state, speculatively with every draft and
``gamma`` (:func:`~specsim.measure.decode.speculative_decode`:
:func:`specsim.sampling.verify_batch` and KV-cache rollback). The rows go
into the documented trace kinds ``autoregressive``, ``specdec`` and
``positions`` (``docs/traces.md``) with two extra columns, ``corpus`` and
``prompt``; model columns name the tiny models (``target``, ``draft-all``...),
which are not cards.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from specsim.measure.decode import autoregressive_decode, speculative_decode
from specsim.measure.run import device_name
from specsim.rng import keyed_rng
from specsim.traces import io as traces

__all__ = ["GAMMAS", "SPECDEC_TEMPERATURES", "measure_specdec", "write_specdec"]

GAMMAS: tuple[int, ...] = (1, 2, 4, 8)
Log = Callable[[str], None]


SPECDEC_TEMPERATURES: tuple[float, ...] = (0.0, 1.0)
"""The temperatures of the real speculative runs: greedy and the models' own distribution."""


def measure_specdec(
    *,
    target: Any,
    drafts: dict[str, Any],
    windows: dict[str, np.ndarray],
    context: int,
    new_tokens: int,
    gammas: Sequence[int] = GAMMAS,
    temperatures: Sequence[float] = SPECDEC_TEMPERATURES,
    seed: int = 0,
    log: Log | None = None,
) -> dict[str, pd.DataFrame]:
    """Frames of kinds ``autoregressive``, ``specdec`` and ``positions`` (one run per prompt).

    Each window's first ``context`` tokens are a prompt of batch 1.
    """
    say = log if log is not None else (lambda line: None)
    common = {"dtype": "float32", "device": "cpu", "batch": 1, "prompt_len": context}
    ar: list[pd.DataFrame] = []
    sd: list[pd.DataFrame] = []
    pos: list[pd.DataFrame] = []
    for corpus, win in windows.items():
        for temp in temperatures:
            for i, row in enumerate(win):
                runs = _prompt_runs(
                    target,
                    drafts,
                    np.asarray(row[None, :context], dtype=np.int64),
                    corpus=corpus,
                    index=i,
                    temperature=temp,
                    gammas=gammas,
                    new_tokens=new_tokens,
                    seed=seed,
                    common=common,
                )
                ar.append(runs[0])
                sd.extend(runs[1])
                pos.extend(runs[2])
            done = pd.concat(sd[-len(drafts) * len(gammas) * len(win) :])
            say(
                f"specdec {corpus} T={temp:g}: accepted/block by gamma "
                + " ".join(f"{g}:{done[done.gamma == g].accepted.mean():.2f}" for g in gammas)
            )
    return {
        "autoregressive": pd.concat(ar, ignore_index=True),
        "specdec": pd.concat(sd, ignore_index=True),
        "positions": pd.concat(pos, ignore_index=True),
    }


def _prompt_runs(
    target: Any,
    drafts: dict[str, Any],
    prompt: np.ndarray,
    *,
    corpus: str,
    index: int,
    temperature: float,
    gammas: Sequence[int],
    new_tokens: int,
    seed: int,
    common: dict[str, Any],
) -> tuple[pd.DataFrame, list[pd.DataFrame], list[pd.DataFrame]]:
    """One prompt decoded plainly, then speculatively with every draft and gamma (greedy
    output checked against the plain one): its ``autoregressive`` rows and each run's
    ``specdec`` and ``positions`` rows."""
    tag = f"{corpus}/T{temperature:g}/p{index}"
    plain = autoregressive_decode(
        target,
        prompt=prompt,
        new_tokens=new_tokens,
        temperature=temperature,
        rng=keyed_rng(seed, "ar/" + tag),
    )
    ar = plain.steps.assign(
        run_id="ar/" + tag,
        model="target",
        temperature=float(temperature),
        corpus=corpus,
        prompt=index,
        **common,
    )
    vocab = int(target.config.vocab_size)
    sd: list[pd.DataFrame] = []
    pos: list[pd.DataFrame] = []
    for name, draft in drafts.items():
        for gamma in gammas:
            run_id = f"sd/{name}/{tag}/g{gamma}"
            res = speculative_decode(
                target,
                draft,
                prompt=prompt,
                new_tokens=new_tokens,
                gamma=gamma,
                temperature=temperature,
                rng=keyed_rng(seed, run_id),
            )
            _check_greedy(run_id, res.tokens, plain.tokens, temperature=temperature)
            sd.append(
                res.blocks.assign(
                    run_id=run_id,
                    target="target",
                    draft=name,
                    temperature=float(temperature),
                    gamma=gamma,
                    vocab=vocab,
                    corpus=corpus,
                    prompt=index,
                    **common,
                )
            )
            pos.append(res.positions.assign(run_id=run_id))
    return ar, sd, pos


def _check_greedy(
    run_id: str, tokens: np.ndarray, plain: np.ndarray, *, temperature: float
) -> None:
    """A RuntimeError if greedy (T = 0) speculative output is not the target's own greedy
    output: exact verification must change no token."""
    if temperature == 0 and not np.array_equal(tokens, plain):
        raise RuntimeError(
            f"{run_id}: greedy speculative output differs from the target's greedy output"
        )


def write_specdec(
    frames: dict[str, pd.DataFrame],
    *,
    out: str | os.PathLike[str],
    command: str,
    seed: int,
    threads: int,
) -> list[Path]:
    """Write the frames as traces ``<out>/<kind>.csv`` with their sidecars."""
    meta = {
        "device_name": device_name(torch.device("cpu")),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "device": "cpu",
        "dtype": "float32",
        "seed": seed,
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "preset": "real",
    }
    paths = []
    for kind, frame in frames.items():
        paths.append(
            traces.write_trace(
                Path(out) / f"{kind}.csv", traces.Trace(kind=kind, data=frame, meta=meta)
            )
        )
    return paths
