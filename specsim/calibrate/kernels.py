"""Weight-only quantized GEMM kernels by rows: a device part's format numbers fitted on
published kernel sweeps.

A quantized weight format costs three numbers of a device part
(:class:`~specsim.cards.stack.DevicePart`, read by the roofline through the
:class:`~specsim.cards.RuntimeProfile` it composes): ``format_memory_factor`` (the kernel
streams the packed weights at that factor of the fp16 GEMM's bandwidth fraction) and
``format_dequant_ops`` (operations per weight and row, on the card's vector peak, that add
to the GEMM's roofline time). A batch-1 decode rate cannot tell them apart: both make one
step slower. A sweep over the rows of one GEMM can: the weight reads do not grow with the
rows, the dequantization does (full work per row up to
:data:`specsim.cost.quant.DEQUANT_TILE_ROWS` rows, then a tile's worth per tile).

Each sweep (``models/measured/kernels/``, sources in its README) times the same shapes in
fp16 and in the quantized format. The model of one call is the cost model's own pass
arithmetic for a pass of one GEMM (:mod:`specsim.calibrate.kernels_gemm`:
:func:`~specsim.calibrate.kernels_gemm.gemm_roofline` builds a
:class:`specsim.cost.roofline.Roofline` whose only kernel is that GEMM, with a fixed cost
per call ``fixed_s``, evaluated by :func:`specsim.cost.roofline.time_energy`, the function
every pass of specsim goes through): no formula here prices a kernel.
:func:`fit_kernel_sweep` chooses, by bounded least squares on log time, the bandwidth
fraction of the fp16 GEMM (``memory_efficiency``), a fixed cost per call for each kernel
(``fixed_s.<format>``) and, for each quantized format, its memory factor and dequantization
work; standard errors come from the Jacobian at the optimum (cluster-robust over the shapes
where there are enough of them). The compute fraction is the device part's (at most 64 rows
the GEMMs are memory-bound, so it is not identified). The tile of
:data:`~specsim.cost.quant.DEQUANT_TILE_ROWS` rows is kept: with no growth in the rows at
all (Marlin's, below), neither a work per row nor a tile is seen. :data:`SWEEP_FITS` says
how each committed sweep is fitted (a sweep of one shape cannot separate a fixed cost from
a bandwidth: its fixed costs are held at 0), and :func:`kernel_fit_rows` gives the
in-sample errors of every fit, the rows a fidelity family
"kernel sweeps (in-sample)" shows.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.calibrate.formats import with_format_tables
from specsim.calibrate.kernels_gemm import gemm_roofline, gemm_time, kernel_profile
from specsim.cards import HardwareCard, RuntimeProfile, load_hardware
from specsim.cards.files import packaged_root

__all__ = [
    "SWEEP_COLUMNS",
    "SWEEP_FITS",
    "KernelFit",
    "load_kernel_sweeps",
    "kernel_profile",
    "gemm_roofline",
    "gemm_time",
    "fit_kernel_sweep",
    "predict_sweep",
    "profile_with",
    "std_errors",
    "beyond_peak",
    "fit_committed_sweep",
    "kernel_fit_rows",
]

SWEEP_COLUMNS = (
    "sweep",
    "hardware",
    "kernel",
    "weights",
    "group_size",
    "K",
    "N",
    "rows",
    "time_s",
    "source",
    "line",
)
"""Columns every kernel-sweep CSV has (``models/measured/kernels/README.md``)."""

SWEEP_FITS: dict[str, dict[str, float]] = {
    "marlin-a100-vllm-layers": {},
    "marlin-h100-humming": {"fixed_s.float16": 0.0, "fixed_s.int4": 0.0, "fixed_s.int8": 0.0},
}
"""The committed sweeps and the parameters each fit holds fixed: the H100 sweep has one shape
(K = N = 8192), so a fixed cost per call and the bandwidth are not separable there; its
fixed costs are held at 0 (a kernel's launch latency is then inside the bandwidth terms)."""

_BOUNDS = {
    "memory_efficiency": (0.05, 1.0),
    "compute_efficiency": (0.05, 1.0),
    "fixed_s": (0.0, 1e-3),
    "format_memory_factor": (1e-2, 50.0),
    "format_dequant_ops": (0.0, 1e4),
}


def _folder() -> Path:
    root = packaged_root()
    if root is None:  # pragma: no cover - an installation without its cards
        raise ValueError("kernel sweeps: the packaged measurements (models/) are not found")
    return root / "measured" / "kernels"


def load_kernel_sweeps(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Every committed kernel sweep (``models/measured/kernels/*.csv``), or the CSV at
    ``path``, as one table with :data:`SWEEP_COLUMNS` (and the others of the files);
    a ValueError naming the file and the problem for a missing column, an empty source, or
    a time or row count that is not positive."""
    files = [Path(path)] if path is not None else sorted(_folder().glob("*.csv"))
    if not files:
        raise ValueError(f"kernel sweeps: no CSV in {_folder()}")
    tables = []
    for f in files:
        df = pd.read_csv(f, dtype={"group_size": "Int64", "line": str, "source": str})
        missing = [c for c in SWEEP_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"kernel sweep {f}: lacks column(s) {missing}")
        if df["source"].isna().any() or df["line"].isna().any():
            raise ValueError(f"kernel sweep {f}: a row has no source or line")
        for col in ("time_s", "rows", "K", "N"):
            if not (df[col].astype(float) > 0).all():
                raise ValueError(f"kernel sweep {f}: column {col!r} must be > 0 on every row")
        tables.append(df)
    return pd.concat(tables, ignore_index=True)


@dataclass(frozen=True)
class KernelFit:
    """A fitted sweep: ``parameters`` (name, value, std_error, fixed), the rows with their
    prediction and relative error (``residuals``), the profile the values make, and the rows
    left out of the fit (``excluded``: :func:`beyond_peak`; None when none were screened)."""

    sweep: str
    hardware: str
    parameters: pd.DataFrame
    residuals: pd.DataFrame
    profile: RuntimeProfile
    excluded: pd.DataFrame | None = None

    def value(self, name: str) -> float:
        """The fitted (or fixed) value of parameter ``name``."""
        row = self.parameters.loc[self.parameters["name"] == name]
        if row.empty:
            raise ValueError(f"kernel fit {self.sweep}: no parameter {name!r}")
        return float(row["value"].iloc[0])

    def std_error(self, name: str) -> float:
        """The standard error of parameter ``name`` (0 for a fixed one)."""
        row = self.parameters.loc[self.parameters["name"] == name]
        if row.empty:
            raise ValueError(f"kernel fit {self.sweep}: no parameter {name!r}")
        return float(row["std_error"].iloc[0])


def _names(rows: pd.DataFrame, base: str, *, compute: bool = False) -> list[str]:
    formats = list(dict.fromkeys(str(w) for w in rows["weights"]))
    if base not in formats:
        raise ValueError(f"kernel sweep: no {base} rows to fit the bandwidth fraction on")
    names = ["memory_efficiency"] + ["compute_efficiency"] * compute
    names += [f"fixed_s.{w}" for w in formats]
    for w in formats:
        if w != base:
            names += [f"format_memory_factor.{w}", f"format_dequant_ops.{w}"]
    return names


def profile_with(base: RuntimeProfile, values: Mapping[str, float]) -> RuntimeProfile:
    """``base`` with the fitted bandwidth fraction and format tables (``table.format`` keys)."""
    prof = with_format_tables(base, values)
    ce = values.get("compute_efficiency", prof.compute_efficiency)
    return dataclasses.replace(
        prof, memory_efficiency=values["memory_efficiency"], compute_efficiency=ce
    )


def predict_sweep(
    rows: pd.DataFrame, hw: HardwareCard, prof: RuntimeProfile, values: Mapping[str, float]
) -> np.ndarray:
    """Seconds of each row's GEMM call under ``prof`` (:func:`profile_with`) and the fixed
    costs per call in ``values`` (``fixed_s.<format>``)."""
    out = np.empty(len(rows))
    # A sweep may say which dtype each kernel multiplies in (fp8 x fp8 GEMMs); else fp16.
    compute = rows["compute"] if "compute" in rows.columns else pd.Series("float16", rows.index)
    keys = [rows["weights"], rows["K"], rows["N"], rows["group_size"], compute]
    for (w, K, N, g, c), idx in rows.groupby(keys, dropna=False, sort=False).indices.items():
        co = gemm_roofline(
            hw,
            prof,
            weights=str(w),
            K=int(K),
            N=int(N),
            group_size=None if pd.isna(g) else int(g),
            dtype=str(c),
            fixed_s=values[f"fixed_s.{w}"],
        )
        out[idx] = gemm_time(co, rows["rows"].to_numpy(dtype=float)[idx])
    return out


def std_errors(jac: np.ndarray, fun: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Standard errors at a least-squares optimum. A kernel's misfit is mostly one offset per
    shape (its tiling suits some shapes better than others), so the residuals of one shape are
    not independent: with more shapes than parameters the errors are cluster-robust over the
    shapes (the sandwich estimator, with a G / (G - 1) small-sample factor); else the usual
    ``s^2 (J^T J)^-1``. Infinite where ``J^T J`` is singular (a parameter not determined)."""
    n, p = jac.shape
    try:
        bread = np.linalg.inv(jac.T @ jac)
    except np.linalg.LinAlgError:
        return np.full(p, np.inf)
    G = len(groups)
    if G > p:
        scores = np.array([jac[idx].T @ fun[idx] for idx in groups])
        cov = bread @ (scores.T @ scores) @ bread * (G / (G - 1))
    else:
        cov = bread * float(fun @ fun) / max(n - p, 1)
    return np.sqrt(np.clip(np.diag(cov), 0.0, None))


def fit_kernel_sweep(
    rows: pd.DataFrame,
    *,
    hardware: HardwareCard | str,
    fixed: Mapping[str, float] | None = None,
    base: str = "float16",
    compute: bool = False,
) -> KernelFit:
    """Fit one sweep's ``rows`` (columns :data:`SWEEP_COLUMNS`; one card) on ``hardware``:
    the parameters named in the module docstring (and the compute fraction,
    ``compute_efficiency``, with ``compute``: rows that reach the compute roof identify it),
    less those in ``fixed`` (name -> value). Bounded least squares on log time; standard
    errors from the Jacobian (:func:`std_errors`); a ValueError when the rows are no more
    than the free parameters (no degrees of freedom)."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    rows = rows.reset_index(drop=True)
    names, fixed = _names(rows, base, compute=compute), dict(fixed or {})
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"kernel sweep: fixed parameter(s) {unknown} not in {names}")
    free = [n for n in names if n not in fixed]
    if len(rows) <= len(free):
        raise ValueError(
            f"kernel sweep: {len(rows)} rows cannot fit the {len(free)} free parameters "
            f"{free} (no degrees of freedom)"
        )
    start0 = kernel_profile(hw)
    start = {"memory_efficiency": start0.memory_efficiency, "fixed_s": 5e-6}
    start["compute_efficiency"] = start0.compute_efficiency
    start |= {"format_memory_factor": 1.0, "format_dequant_ops": 1.0}
    x0 = np.array([start[n.split(".")[0]] for n in free])
    lo = np.array([_BOUNDS[n.split(".")[0]][0] for n in free])
    hi = np.array([_BOUNDS[n.split(".")[0]][1] for n in free])
    log_t = np.log(rows["time_s"].to_numpy(dtype=float))

    def values_of(x: np.ndarray) -> dict[str, float]:
        return fixed | {n: float(v) for n, v in zip(free, x, strict=True)}

    def residual(x: np.ndarray) -> np.ndarray:
        v = values_of(x)
        return np.log(predict_sweep(rows, hw, profile_with(start0, v), v)) - log_t

    res = optimize.least_squares(residual, x0, bounds=(lo, hi), x_scale="jac")
    groups = rows.groupby(["weights", "K", "N"], sort=False).indices.values()
    se = std_errors(res.jac, res.fun, list(groups))
    values = values_of(res.x)
    errors = dict(zip(free, se, strict=True)) | dict.fromkeys(fixed, 0.0)
    params = pd.DataFrame(
        {
            "name": names,
            "value": [values[n] for n in names],
            "std_error": [float(errors[n]) for n in names],
            "fixed": [n in fixed for n in names],
        }
    )
    prof = profile_with(start0, values)
    pred = predict_sweep(rows, hw, prof, values)
    resid = rows.assign(predicted_s=pred, rel_error=pred / rows["time_s"] - 1.0)
    sweep = str(rows["sweep"].iloc[0]) if "sweep" in rows.columns else "sweep"
    return KernelFit(
        sweep=sweep, hardware=hw.slug, parameters=params, residuals=resid, profile=prof
    )


def beyond_peak(rows: pd.DataFrame, hw: HardwareCard, *, dtype: str = "float16") -> pd.Series:
    """True on every row of a kernel and shape (``weights``, ``K``, ``N``) of which some row
    implies more than ``hw``'s dense ``dtype`` peak (``2 rows K N / time_s``): a kernel that
    multiplies in that dtype cannot, so those times are not of the whole GEMM (work skipped,
    or a timing error), at any of the shape's rows."""
    rate = 2.0 * rows["rows"] * rows["K"] * rows["N"] / rows["time_s"]
    over = rate > hw.peak(dtype)
    return over.groupby([rows["weights"], rows["K"], rows["N"]]).transform("any").astype(bool)


def fit_committed_sweep(sweep: str) -> KernelFit:
    """The fit of committed sweep ``sweep`` (a key of :data:`SWEEP_FITS`) on its card,
    without the shapes :func:`beyond_peak` rejects (kept in ``KernelFit.excluded``)."""
    if sweep not in SWEEP_FITS:
        raise ValueError(f"kernel sweep: unknown sweep {sweep!r}; known: {sorted(SWEEP_FITS)}")
    data = load_kernel_sweeps()
    rows = data.loc[data["sweep"] == sweep].reset_index(drop=True)
    cards = sorted(set(rows["hardware"]))
    if len(cards) != 1:
        raise ValueError(f"kernel sweep {sweep!r}: expected one hardware card, got {cards}")
    hw = load_hardware(cards[0])
    out = beyond_peak(rows, hw)
    fit = fit_kernel_sweep(rows.loc[~out], hardware=hw, fixed=SWEEP_FITS[sweep])
    return dataclasses.replace(fit, excluded=rows.loc[out].reset_index(drop=True))


def kernel_fit_rows() -> pd.DataFrame:
    """In-sample errors of every committed sweep's fit, one row per sweep and kernel: the
    family "kernel sweeps (in-sample)" of a fidelity table (calls, median and worst
    |relative error| of the time per call, the fitted dequantization work and memory factor
    with their standard errors)."""
    out = []
    for sweep in SWEEP_FITS:
        fit = fit_committed_sweep(sweep)
        for (kernel, w), g in fit.residuals.groupby(["kernel", "weights"], sort=False):
            err = np.abs(g["rel_error"].to_numpy(dtype=float))
            quant = w != "float16"
            out.append(
                {
                    "family": "kernel sweeps (in-sample)",
                    "sweep": sweep,
                    "hardware": fit.hardware,
                    "kernel": kernel,
                    "weights": w,
                    "source": str(g["source"].iloc[0]),
                    "calls": len(g),
                    "excluded": int((fit.excluded["kernel"] == kernel).sum())
                    if fit.excluded is not None
                    else 0,
                    "rows_min": int(g["rows"].min()),
                    "rows_max": int(g["rows"].max()),
                    "median_abs_error": float(np.median(err)),
                    "worst_abs_error": float(err.max()),
                    "dequant_ops": fit.value(f"format_dequant_ops.{w}") if quant else 0.0,
                    "dequant_ops_se": fit.std_error(f"format_dequant_ops.{w}") if quant else 0.0,
                    "memory_factor": fit.value(f"format_memory_factor.{w}") if quant else 1.0,
                    "memory_factor_se": (
                        fit.std_error(f"format_memory_factor.{w}") if quant else 0.0
                    ),
                    "fitted_on": "itself",
                }
            )
    return pd.DataFrame(out)
