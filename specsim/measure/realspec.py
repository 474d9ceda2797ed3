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
    vocab = int(target.config.vocab_size)
    common = {"dtype": "float32", "device": "cpu", "batch": 1, "prompt_len": context}
    ar: list[pd.DataFrame] = []
    sd: list[pd.DataFrame] = []
    pos: list[pd.DataFrame] = []
    for corpus, win in windows.items():
        for temp in temperatures:
            for i, row in enumerate(win):
                prompt = np.asarray(row[None, :context], dtype=np.int64)
                tag = f"{corpus}/T{temp:g}/p{i}"
                plain = autoregressive_decode(
                    target,
                    prompt=prompt,
                    new_tokens=new_tokens,
                    temperature=temp,
                    rng=keyed_rng(seed, "ar/" + tag),
                )
                ar.append(
                    plain.steps.assign(
                        run_id="ar/" + tag,
                        model="target",
                        temperature=float(temp),
                        corpus=corpus,
                        prompt=i,
                        **common,
                    )
                )
                for name, draft in drafts.items():
                    for gamma in gammas:
                        run_id = f"sd/{name}/{tag}/g{gamma}"
                        res = speculative_decode(
                            target,
                            draft,
                            prompt=prompt,
                            new_tokens=new_tokens,
                            gamma=gamma,
                            temperature=temp,
                            rng=keyed_rng(seed, run_id),
                        )
                        if temp == 0 and not np.array_equal(res.tokens, plain.tokens):
                            raise RuntimeError(
                                f"{run_id}: greedy speculative output differs "
                                "from the target's greedy output"
                            )
                        sd.append(
                            res.blocks.assign(
                                run_id=run_id,
                                target="target",
                                draft=name,
                                temperature=float(temp),
                                gamma=gamma,
                                vocab=vocab,
                                corpus=corpus,
                                prompt=i,
                                **common,
                            )
                        )
                        pos.append(res.positions.assign(run_id=run_id))
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
