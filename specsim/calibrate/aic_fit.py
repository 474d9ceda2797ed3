"""Device parts' kernel terms fitted on aiconfigurator's operation tables, with held-out errors.

Two fits per system and backend, each through the cost model's own arithmetic:

- **GEMM** (:func:`fit_gemm`): a kernel sweep (:mod:`specsim.calibrate.aic_tables`) fitted
  by :func:`specsim.calibrate.kernels.fit_kernel_sweep` (the pass of one GEMM,
  :mod:`specsim.calibrate.kernels_gemm`): the bf16 GEMM's bandwidth and compute fractions
  (``memory_efficiency``, ``compute_efficiency``: the rows up to 256 reach the compute roof
  on these shapes), a fixed cost per call for each format (``fixed_s.<format>``: the floor
  of a GEMM at few rows), and for each other format its memory factor (and, weight-only,
  its dequantization work per weight and row). An fp8 x fp8 GEMM multiplies in fp8 on the
  card's fp8 peak and dequantizes nothing (its work is held at 0).
- **all-reduce** (:func:`fit_allreduce`): ``t = alpha + 2 (p - 1) / p * bytes / beta`` over
  every message size and GPU count, the ``per-allreduce`` form of
  :func:`specsim.cost.collectives.allreduce_time` (the form the cost model prices a
  tensor-parallel pass's all-reduces with): ``alpha`` (``interconnect_latency_s``) and the bus
  bandwidth ``beta`` (``interconnect_bandwidth``), by least squares on log time.

Standard errors come from the Jacobian at the optimum (the GEMM's cluster-robust over the
shapes, as every kernel sweep's). :func:`gemm_holdout` and :func:`allreduce_holdout` are the
out-of-sample comparisons: two folds (alternate shapes; alternate message sizes), each fitted
on one fold and predicting the other, against the numbers the stack uses today on the same
held-out rows (the GEMM's with a fixed cost per call fitted on the same training rows, so
the two differ only in the numbers a fit would replace).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.calibrate.kernels import (
    KernelFit,
    fit_kernel_sweep,
    predict_sweep,
    profile_with,
    std_errors,
)
from specsim.calibrate.kernels_gemm import kernel_profile
from specsim.cards import HardwareCard, load_hardware
from specsim.cards.stack_files import device_part_for
from specsim.cost.collectives import allreduce_time
from specsim.cost.quant import WEIGHT_FORMATS

__all__ = [
    "AllreduceFit",
    "fit_gemm",
    "current_gemm_values",
    "fit_allreduce",
    "allreduce_seconds",
    "gemm_holdout",
    "allreduce_holdout",
]

_NATIVE = {"float8"}  # formats multiplied in their own dtype: nothing dequantized


def _free_formats(rows: pd.DataFrame) -> list[str]:
    return [w for w in dict.fromkeys(map(str, rows["weights"])) if w != "bfloat16"]


def _check(rows: pd.DataFrame, what: str, columns: tuple[str, ...]) -> None:
    if rows.empty:
        raise ValueError(f"aiconfigurator {what} fit: no rows")
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise ValueError(f"aiconfigurator {what} fit: rows lack column(s) {missing}")


def fit_gemm(
    rows: pd.DataFrame, *, hardware: HardwareCard | str, fixed: dict[str, float] | None = None
) -> KernelFit:
    """The GEMM fit of one system and backend's ``rows`` (module docstring); ``fixed`` holds
    more parameters (name -> value, :func:`current_gemm_values`)."""
    _check(rows, "GEMM", ("weights", "compute", "K", "N", "rows", "time_s"))
    if "bfloat16" not in set(rows["weights"]):
        raise ValueError("aiconfigurator GEMM fit: no bfloat16 rows (the bandwidth fraction's)")
    held = {f"format_dequant_ops.{w}": 0.0 for w in _free_formats(rows) if w in _NATIVE}
    return fit_kernel_sweep(
        rows, hardware=hardware, fixed=held | dict(fixed or {}), base="bfloat16", compute=True
    )


def current_gemm_values(rows: pd.DataFrame, hw: HardwareCard) -> dict[str, float]:
    """The numbers the card's device part prices these GEMMs with today: its compute and
    bandwidth fractions, its format tables (else :mod:`specsim.cost.quant`'s defaults)."""
    prof = kernel_profile(hw)
    part = device_part_for(hw)
    values = {"memory_efficiency": prof.memory_efficiency}
    values["compute_efficiency"] = prof.compute_efficiency
    for w in _free_formats(rows):
        values[f"format_memory_factor.{w}"] = (part.format_memory_factor or {}).get(w, 1.0)
        if w not in _NATIVE:
            default = WEIGHT_FORMATS[w].dequant_ops
            values[f"format_dequant_ops.{w}"] = (part.format_dequant_ops or {}).get(w, default)
    return values


def _shape_folds(rows: pd.DataFrame) -> list[np.ndarray]:
    shapes = list(dict.fromkeys(zip(rows["K"], rows["N"], strict=True)))
    which = pd.Series(list(zip(rows["K"], rows["N"], strict=True))).map(
        {s: i % 2 for i, s in enumerate(shapes)}
    )
    return [which.to_numpy() == f for f in (0, 1)]


def _rel(pred: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
    return pred / rows["time_s"].to_numpy(dtype=float) - 1.0


def gemm_holdout(rows: pd.DataFrame, *, hardware: HardwareCard | str) -> pd.DataFrame:
    """Held-out errors of the GEMM fit (two folds of alternate shapes): one row per held-out
    GEMM call, ``rel_error`` of the fitted numbers (``fitted``) and of today's numbers with a
    fixed cost per call fitted on the same training rows (``current``)."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    rows = rows.reset_index(drop=True)
    now = current_gemm_values(rows, hw)
    out = []
    for test in _shape_folds(rows):
        train, held = rows.loc[~test], rows.loc[test].reset_index(drop=True)
        if held.empty or train.empty:
            raise ValueError("aiconfigurator GEMM hold-out: needs at least two shapes")
        errs = {}
        for label, fixed in (("fitted", None), ("current", now)):
            fit = fit_gemm(train, hardware=hw, fixed=fixed)
            values = dict(zip(fit.parameters["name"], fit.parameters["value"], strict=True))
            pred = predict_sweep(held, hw, profile_with(kernel_profile(hw), values), values)
            errs[label] = _rel(pred, held)
        out.append(held.assign(fitted=errs["fitted"], current=errs["current"]))
    return pd.concat(out, ignore_index=True)


@dataclass(frozen=True)
class AllreduceFit:
    """``latency_s`` (alpha) and ``bandwidth`` (beta, bytes/s) with standard errors, and the
    rows with their prediction and relative error (``residuals``)."""

    latency_s: float
    latency_s_se: float
    bandwidth: float
    bandwidth_se: float
    residuals: pd.DataFrame


def allreduce_seconds(
    rows: pd.DataFrame,
    *,
    latency_s: float,
    bandwidth: float,
    algorithm: str = "per-allreduce",
    overhead_s: float = 0.0,
) -> np.ndarray:
    """Seconds of each row's all-reduce (``bytes`` over ``devices``) by
    :func:`specsim.cost.collectives.allreduce_time`."""
    pairs = zip(rows["bytes"], rows["devices"], strict=True)
    return np.array(
        [
            allreduce_time(
                b,
                p,
                bandwidth=bandwidth,
                latency_s=latency_s,
                algorithm=algorithm,
                overhead_s=overhead_s,
            )
            for b, p in pairs
        ]
    )


def fit_allreduce(rows: pd.DataFrame) -> AllreduceFit:
    """The all-reduce fit of one system and backend's ``rows`` (module docstring); a
    ValueError when there are no more rows than its two parameters."""
    _check(rows, "all-reduce", ("devices", "bytes", "time_s"))
    rows = rows.reset_index(drop=True)
    if len(rows) <= 2:
        raise ValueError(
            f"aiconfigurator all-reduce fit: {len(rows)} rows cannot fit 2 parameters "
            "(latency and bandwidth: no degrees of freedom)"
        )
    log_t = np.log(rows["time_s"].to_numpy(dtype=float))

    def residual(x: np.ndarray) -> np.ndarray:
        t = allreduce_seconds(rows, latency_s=float(np.exp(x[0])), bandwidth=float(np.exp(x[1])))
        return np.log(t) - log_t

    res = optimize.least_squares(residual, np.log([5e-6, 2e11]))
    se_log = std_errors(res.jac, res.fun, [np.arange(len(rows))])
    lat, bw = (float(v) for v in np.exp(res.x))
    pred = allreduce_seconds(rows, latency_s=lat, bandwidth=bw)
    return AllreduceFit(
        latency_s=lat,
        latency_s_se=lat * float(se_log[0]),
        bandwidth=bw,
        bandwidth_se=bw * float(se_log[1]),
        residuals=rows.assign(predicted_s=pred, rel_error=_rel(pred, rows)),
    )


def allreduce_holdout(rows: pd.DataFrame, *, hardware: HardwareCard | str) -> pd.DataFrame:
    """Held-out errors of the all-reduce fit (two folds of alternate message sizes): one row
    per held-out all-reduce, ``rel_error`` of the fitted numbers (``fitted``) and of the
    hardware card's (``current``: its latency, bandwidth, algorithm and overhead)."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    rows = rows.reset_index(drop=True)
    sizes = sorted(set(rows["elements"]))
    fold = rows["elements"].map({s: i % 2 for i, s in enumerate(sizes)}).to_numpy()
    card = allreduce_seconds(
        rows,
        latency_s=hw.interconnect_latency_s,
        bandwidth=hw.interconnect_bandwidth,
        algorithm=hw.collective_algorithm,
        overhead_s=hw.collective_overhead_s,
    )
    out = []
    for f in (0, 1):
        test = fold == f
        fit = fit_allreduce(rows.loc[~test])
        held = rows.loc[test]
        pred = allreduce_seconds(held, latency_s=fit.latency_s, bandwidth=fit.bandwidth)
        out.append(held.assign(fitted=_rel(pred, held), current=_rel(card[test], held)))
    return pd.concat(out, ignore_index=True)
