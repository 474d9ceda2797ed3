"""The fidelity family of the weight-only kernel sweeps (in sample): every GEMM call of the
committed sweeps (``models/measured/kernels``) against the time the fit of
:mod:`specsim.calibrate.kernels` prices it at, through the cost model's own pass arithmetic.

The sweeps are what the dequantization work per row and the memory factors of the device
parts are fitted on (issue 23, item 2), so this family is in sample. Each time is derived
from a published rate (tokens per second, or TFLOP/s) printed to some decimals; the interval
is the times that rate's rounding allows. Calls screened out of the fit (faster than the
card's fp16 peak allows) are not rows.
"""

from __future__ import annotations

import pandas as pd

from specsim.calibrate.kernels import SWEEP_FITS, fit_committed_sweep

from .rows import COLUMNS, fidelity_row, rounding_interval

__all__ = ["kernel_sweep_rows", "FAMILY"]

FAMILY = "in-sample: kernel sweeps ({sweep}, {kernel})"


def _decimals(value: float) -> int:
    text = repr(float(value))
    return 0 if "e" in text or "." not in text else len(text.split(".")[1].rstrip("0"))


def kernel_sweep_rows() -> pd.DataFrame:
    """One fidelity row per fitted call of every committed sweep (module docstring)."""
    rows = []
    for sweep in SWEEP_FITS:
        fit = fit_committed_sweep(sweep)
        for r in fit.residuals.itertuples(index=False):
            t, p = float(r.time_s), float(r.published)
            lo, hi = rounding_interval(p, _decimals(p))
            # the time is inversely proportional to the published rate
            interval = (min(t, t * p / hi), max(t, t * p / lo) if lo > 0 else float("inf"))
            rows.append(
                fidelity_row(
                    family=FAMILY.format(sweep=sweep, kernel=r.kernel),
                    anchor=f"{r.kernel} {r.weights} K={r.K} N={r.N} at {r.rows} rows",
                    source=f"{r.source} (line {r.line})",
                    quantity="time per kernel call",
                    unit="s",
                    measured=t,
                    interval=interval,
                    how=f"rounding of the published {r.published_unit} ({p:g}), one run",
                    predicted=float(r.predicted_s),
                    fitted_on=f"itself: the {fit.hardware} device part's format factors and "
                    "dequantization work were fitted to this sweep",
                )
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))
