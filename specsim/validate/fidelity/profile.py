"""Fidelity rows of the interleaved CPU runs, predicted by a runtime profile.

``models/measured/cpu-rows`` holds speculative runs timed block by block with their
plain twins interleaved in the same process (``specsim measure --preset cpu-rows``);
the runtime profile ``models/runtime/cpu-xeon-eager-rows-fp32.toml`` was fitted on the
same folder's timed plain passes only (``specsim calibrate --profile``), so no
speculative run enters the prediction (:func:`specsim.calibrate.profile.predict_profile_runs`:
the run's own accepted counts, its draft and verification passes priced by the profile).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from specsim.calibrate.profile import predict_profile_runs
from specsim.cards import HardwareCard, RuntimeProfile

from .rows import LEVEL, run_rows

__all__ = ["profile_rows"]


def profile_rows(
    traces: Mapping[str, pd.DataFrame],
    card: HardwareCard,
    profile: RuntimeProfile,
    *,
    source: str,
    profile_source: str,
    label: str = "runtime profile",
) -> list[dict[str, object]]:
    """Per-token latency and speedup of every speculative run in ``traces`` (``specdec``,
    ``autoregressive``, ``passes``) against ``profile`` on ``card``; ``label`` ends each
    row's family name (one family per pair and profile)."""
    runs = predict_profile_runs(traces["specdec"], traces["autoregressive"], card, profile)
    fitted = (
        f"{profile_source} (fitted on the {len(traces['passes'])} timed plain passes of "
        f"{source}/passes.csv, no speculative run) + this run's accepted counts"
    )
    how = f"{LEVEL:.0%} delta-method interval over the run's blocks"
    out: list[dict[str, object]] = []
    for r in runs.itertuples(index=False):
        common = dict(
            family=f"CPU interleaved runs, {r.target} + {r.draft} ({label})",
            source=f"{source}/specdec.csv",
            fitted_on=fitted,
        )
        paired = "paired with the interleaved plain steps" if r.paired else "unpaired"
        out += run_rows(
            anchor=r.run_id,
            common=common,
            latency=(
                float(r.spec_token_s),
                (float(r.spec_token_s_low), float(r.spec_token_s_high)),
                how + f" ({r.blocks} blocks)",
                float(r.predicted_spec_token_s),
            ),
            speedup=(
                float(r.speedup),
                (float(r.speedup_low), float(r.speedup_high)),
                how + f" ({r.blocks} blocks, {paired})",
                float(r.predicted_speedup),
            ),
        )
    return out
