"""Measured speculative runs paired with their plain twins, and the intervals of their
latencies and speedups.

Measured speedups carry a 95% interval from block-level data (:func:`ratio_interval`):
a speculative run timed in turn with its plain twin (``specsim measure``, interleaved
runs) gives, for each block ``i``, the speculative time ``S_i`` and the time ``P_i`` the
plain run took for the same ``e_i`` tokens; the speedup is ``sum P / sum S``, a ratio
estimator whose standard error is the delta method's (Cochran, *Sampling Techniques*,
3rd ed., 1977, Section 6.4) over the paired blocks. :func:`enough_blocks` is the stop
rule of an interleaved measurement; :func:`paired_runs` the table the profile fit's
end-to-end check (:func:`specsim.calibrate.profile.predict_profile_runs`) starts from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsim.stats import ratio_interval

__all__ = ["enough_blocks", "paired_runs", "plain_twin"]


def enough_blocks(
    num: Sequence[float] | np.ndarray,
    den: Sequence[float] | np.ndarray,
    *,
    halfwidth: float,
    min_blocks: int,
) -> bool:
    """The stop rule: ``min_blocks`` blocks or more, and the 95% interval of ``sum(num) /
    sum(den)`` (:func:`ratio_interval`) within ``+-halfwidth`` times the estimate."""
    if len(num) < max(min_blocks, 2):
        return False
    ri = ratio_interval(num, den)
    return ri.half <= halfwidth * ri.estimate


def paired_runs(specdec: pd.DataFrame, autoregressive: pd.DataFrame) -> pd.DataFrame:
    """Each speculative run (batch row 0) with its plain twin and the measured per-token
    latencies and speedup, each with a 95% interval (:func:`ratio_interval`).

    The twin of ``sd/...`` is ``ar/...`` with the same rest of the id where it exists (an
    interleaved run: blocks paired with the plain steps that followed them); else the
    plain run of the same target, temperature, batch and prompt length, and the speedup's
    interval combines the two latencies' as independent (unpaired runs)."""
    rows = []
    for run_id, blocks in specdec[specdec["seq"] == 0].groupby("run_id", sort=False):
        b = blocks.sort_values("block")
        first = b.iloc[0]
        twin, paired = plain_twin(autoregressive, str(run_id), first)
        if twin.empty:
            raise ValueError(f"no autoregressive run matches speculative run {run_id!r}")
        spec = (b["draft_s"] + b["target_s"] + b["verify_s"]).to_numpy()
        emitted = b["emitted"].to_numpy(dtype=float)
        twin = twin.sort_values(["run_id", "step"])
        step_s = (twin["forward_s"] + twin["sample_s"]).to_numpy()
        lat = ratio_interval(spec, emitted).bounds()
        if paired:
            if len(step_s) != int(emitted.sum()):
                raise ValueError(
                    f"run {run_id!r}: {len(step_s)} plain steps for "
                    f"{int(emitted.sum())} emitted tokens; not an interleaved pair"
                )
            plain_block = np.add.reduceat(step_s, np.r_[0, np.cumsum(emitted)[:-1]].astype(int))
            plain = ratio_interval(plain_block, emitted).bounds()
            speed = ratio_interval(plain_block, spec).bounds()
        else:
            plain = ratio_interval(step_s, np.ones(len(step_s))).bounds()
            s = plain[0] / lat[0]
            rel = math.hypot((plain[2] - plain[0]) / plain[0], (lat[2] - lat[0]) / lat[0])
            speed = (s, s * (1 - rel), s * (1 + rel))
        row = {
            "run_id": run_id,
            "target": first["target"],
            "draft": first["draft"],
            "temperature": float(first["temperature"]),
            "gamma": int(first["gamma"]),
            "batch": int(first["batch"]),
            "blocks": len(b),
            "tokens": int(emitted.sum()),
            "paired": paired,
            "twin_steps": len(step_s),
        }
        for name, (v, lo, hi) in (
            ("spec_token_s", lat),
            ("plain_token_s", plain),
            ("speedup", speed),
        ):
            row.update({name: v, f"{name}_low": lo, f"{name}_high": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def plain_twin(plain: pd.DataFrame, run_id: str, first: Any) -> tuple[pd.DataFrame, bool]:
    """The plain twin of run ``run_id`` (first block row ``first``); True if interleaved."""
    twin = plain[plain["run_id"] == "ar/" + run_id[3:]]
    if len(twin):
        return twin, True
    same = (
        (plain["model"] == first["target"])
        & (plain["temperature"] == first["temperature"])
        & (plain["batch"] == first["batch"])
        & (plain["prompt_len"] == first["prompt_len"])
    )
    return plain[same], False
