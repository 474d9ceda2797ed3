"""Fit an accelerator card's efficiencies and overheads to measured pass times.

The cost model (:mod:`specsim.cost`) predicts a pass's time from the card's
peaks and four free parameters: ``compute_efficiency``,
``memory_efficiency``, ``layer_overhead_s`` and ``pass_overhead_s``.
:func:`fit_card` chooses them by bounded least squares on the log of the
measured times (so every configuration weighs by its relative error), reports
their standard errors from the Jacobian at the optimum, and the residuals.
:func:`holdout_errors` says honestly how well the fit predicts what it did not
see: each whole batch size (or context length) is left out in turn, the
parameters are refitted on the rest, and the left-out passes are predicted.

Every pass a trace holds is fitted, including passes whose context plus new
tokens lie past the model card's ``max_position``: :func:`specsim.measure.build_model`
stretches a learned position table when a measurement needs more positions (a
user's engine may run rope-scaled contexts likewise), and the pass's cost does
not depend on where the card's positions end. The check that refuses such
contexts guards what-if inputs, not measurements; :func:`past_positions` counts
them so that the command says how many it fitted.

Calibration only changes card parameters; it adds no code path to the cost
model. The result is an ordinary hardware card (:func:`calibrated_card`),
written as TOML by :func:`specsim.cards.write_hardware_card`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.cards import HardwareCard, ModelCard, load_model
from specsim.cost import step_cost_grid

__all__ = [
    "PARAMETERS",
    "TRUST_LIMITS",
    "Fit",
    "one_device",
    "past_positions",
    "trust_problems",
    "summarize_passes",
    "predict",
    "fit_card",
    "holdout_errors",
    "calibrated_card",
    "card_from_ceilings",
]

PARAMETERS = ("compute_efficiency", "memory_efficiency", "layer_overhead_s", "pass_overhead_s")
_LOWER = np.array([1e-4, 1e-4, 0.0, 0.0])
_UPPER = np.array([1.0, 1.0, 0.05, 0.5])

TRUST_LIMITS: dict[str, float] = {
    "stderr_ratio": 1.0,
    "bound_tolerance": 1e-9,
    "holdout_worst": 1.0,
}
"""When a fit is not to be trusted (:func:`trust_problems`): a parameter whose standard
error exceeds ``stderr_ratio`` times its estimate (the data cannot tell it from zero), a
parameter within ``bound_tolerance`` (relative to its range) of a bound of the fit (the
optimum was cut off: 1e-15 s for an overhead means the data pushed it below zero), or a
held-out prediction off by more than ``holdout_worst`` (100%) for some configuration."""


def one_device(sources: Sequence[tuple[str, Mapping[str, Any], pd.DataFrame]]) -> str:
    """The one device that every trace was measured on, or a ValueError naming them.

    ``sources``: (where, sidecar metadata, rows) per trace. A trace's ``device``
    column must hold one value, and every trace must name the same device
    (``device_name`` and ``device`` of the sidecar): a card describes one device,
    and times pooled from two devices fit neither.
    """
    seen: dict[tuple[str, str], list[str]] = {}
    for where, meta, rows in sources:
        if "device" in rows.columns:
            kinds = sorted({str(v) for v in rows["device"].unique()})
            if len(kinds) > 1:
                raise ValueError(
                    f"{where}: column 'device' mixes devices {kinds}; calibrate one device at a "
                    "time (split the trace by device)"
                )
        column = str(rows["device"].iloc[0]) if "device" in rows.columns and len(rows) else ""
        key = (str(meta.get("device_name", "")), str(meta.get("device", column)))
        seen.setdefault(key, []).append(where)
    if len(seen) > 1:
        listed = "; ".join(
            f"{name or '?'} ({kind or '?'}): {', '.join(wheres)}"
            for (name, kind), wheres in seen.items()
        )
        raise ValueError(
            f"the traces come from {len(seen)} different devices ({listed}); a card describes "
            "one device, so calibrate each device's traces separately"
        )
    name, kind = next(iter(seen), ("", ""))
    return name or kind or "device"


def trust_problems(fit: Fit, holdout: pd.DataFrame | None = None) -> list[str]:
    """Why ``fit`` cannot be trusted, one sentence with the numbers each; empty if it can.

    The limits are :data:`TRUST_LIMITS`; ``holdout`` is :func:`holdout_errors`'s table.
    """
    out = []
    n, k = len(fit.residuals), len(PARAMETERS)
    if n <= k:
        out.append(
            f"{n} configuration(s) for {k} parameters: the fit has no degrees of freedom, so "
            "its standard errors and residuals say nothing (measure more configurations)"
        )
    ratio = TRUST_LIMITS["stderr_ratio"]
    tol = TRUST_LIMITS["bound_tolerance"]
    for i, name in enumerate(PARAMETERS):
        value, se = fit.params[name], fit.stderr[name]
        if not np.isfinite(se) or se > ratio * abs(value):
            out.append(
                f"{name} = {value:.4g} has a standard error of {se:.4g}, larger than the "
                "estimate itself: the data do not determine it"
            )
        span = float(_UPPER[i] - _LOWER[i])
        for bound, side in ((float(_LOWER[i]), "lower"), (float(_UPPER[i]), "upper")):
            if abs(value - bound) <= tol * span:
                out.append(
                    f"{name} = {value:.4g} sits at the fit's {side} bound {bound:g}: the "
                    "optimum lies outside the allowed range"
                )
    if holdout is not None and len(holdout):
        err = holdout["rel_error"].abs()
        worst = float(err.max())
        if worst > TRUST_LIMITS["holdout_worst"]:
            row = holdout.loc[err.idxmax()]
            out.append(
                f"the held-out prediction is off by {worst:.0%} at worst (limit "
                f"{TRUST_LIMITS['holdout_worst']:.0%}; {row['model']}, batch {row['batch']}, "
                f"context {row['context']}, {row['new_tokens']} new tokens, "
                f"{row['held_out']} held out)"
            )
    return out


def summarize_passes(passes: pd.DataFrame) -> pd.DataFrame:
    """One row per measured configuration: the median time over its repeats.

    A trace of several weight formats (a ``weights`` column) contributes its unquantized
    passes only (``quant`` ``none``, or weights named as the dtype): a card's four numbers
    describe the dtype's own kernels; :mod:`specsim.calibrate.profile` fits the formats."""
    need = {"model", "dtype", "batch", "context", "new_tokens", "time_s"}
    missing = sorted(need - set(passes.columns))
    if missing:
        raise ValueError(f"passes: missing column(s) {missing}")
    if "quant" in passes.columns:
        passes = passes[passes["quant"].astype(str) == "none"]
    if len(passes) == 0:
        raise ValueError("passes: the trace has no rows")
    keys = ["model", "dtype", "batch", "context", "new_tokens"]
    out = passes.groupby(keys, as_index=False).agg(
        time_s=("time_s", "median"), repeats=("time_s", "size")
    )
    if (out["time_s"] <= 0).any():
        raise ValueError("passes: a measured time is <= 0")
    return out


def trace_model(slug: str) -> ModelCard:
    """The model card a trace's ``model`` column names; a ValueError saying that the name
    came from the trace when no card has it."""
    try:
        return load_model(slug)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise ValueError(f"passes: the trace's column 'model' names {slug!r}: {exc}") from None


def predict(
    configs: pd.DataFrame, card: HardwareCard, models: dict[str, ModelCard] | None = None
) -> np.ndarray:
    """The cost model's pass time for each configuration row, with this card."""
    models = models or {}
    pred = np.empty(len(configs))
    for (slug, dtype), grp in configs.groupby(["model", "dtype"], sort=False):
        model = models.get(str(slug)) or trace_model(str(slug))
        grid = step_cost_grid(
            model,
            card,
            batch=grp["batch"].to_numpy(),
            context=grp["context"].to_numpy(),
            new_tokens=grp["new_tokens"].to_numpy(),
            dtype=str(dtype),
            check_memory=False,
            check_positions=False,  # measured passes are fitted as they ran (module doc)
        )
        pred[configs.index.get_indexer(grp.index)] = grid.time_s
    return pred


def past_positions(configs: pd.DataFrame, models: Mapping[str, ModelCard] | None = None) -> int:
    """How many configuration rows run past their model card's ``max_position``
    (``context + new_tokens``), decoder models only (as
    :func:`specsim.cost.checks.check_positions`)."""
    given = models or {}
    cards = {str(m): given.get(str(m)) or load_model(str(m)) for m in configs["model"].unique()}
    limit = configs["model"].map(
        lambda m: (
            cards[str(m)].max_position if cards[str(m)].architecture == "decoder" else float("inf")
        )
    )
    return int((configs["context"] + configs["new_tokens"] > limit).sum())


@dataclass(frozen=True)
class Fit:
    """Fitted parameters, their standard errors, and per-configuration residuals."""

    card: HardwareCard
    params: dict[str, float]
    stderr: dict[str, float]
    residuals: pd.DataFrame
    rms_log_error: float

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "parameter": list(self.params),
                "value": list(self.params.values()),
                "stderr": [self.stderr[k] for k in self.params],
            }
        )


def _with(card: HardwareCard, x: np.ndarray) -> HardwareCard:
    params: dict[str, Any] = {k: float(v) for k, v in zip(PARAMETERS, x, strict=True)}
    return dataclasses.replace(card, **params)


def fit_card(
    configs: pd.DataFrame,
    base: HardwareCard,
    *,
    models: dict[str, ModelCard] | None = None,
) -> Fit:
    """Least-squares fit of the four parameters to ``configs`` (see :func:`summarize_passes`)."""
    cfg = configs.reset_index(drop=True)
    measured = np.log(cfg["time_s"].to_numpy(dtype=float))

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(predict(cfg, _with(base, x), models)) - measured

    x0 = np.clip([getattr(base, k) for k in PARAMETERS], _LOWER, _UPPER)
    x0 = np.where(x0 <= _LOWER, _LOWER + 1e-6, x0)
    sol = optimize.least_squares(residual, x0, bounds=(_LOWER, _UPPER), x_scale="jac", method="trf")
    n, k = len(cfg), len(PARAMETERS)
    if n <= k:  # no degrees of freedom: the residual variance, hence every error, is unknown
        se = np.full(k, np.inf)
    else:
        s2 = float(sol.fun @ sol.fun) / (n - k)
        se = np.sqrt(np.clip(np.diag(np.linalg.pinv(sol.jac.T @ sol.jac) * s2), 0.0, None))
    card = _with(base, sol.x)
    pred = predict(cfg, card, models)
    res = cfg.copy()
    res["predicted_s"] = pred
    res["rel_error"] = pred / res["time_s"] - 1.0
    return Fit(
        card=card,
        params=dict(zip(PARAMETERS, map(float, sol.x), strict=True)),
        stderr=dict(zip(PARAMETERS, map(float, se), strict=True)),
        residuals=res,
        rms_log_error=float(np.sqrt(np.mean(sol.fun**2))),
    )


def holdout_errors(
    configs: pd.DataFrame,
    base: HardwareCard,
    *,
    by: str = "batch",
    models: dict[str, ModelCard] | None = None,
) -> pd.DataFrame:
    """Leave each value of ``by`` out in turn, fit on the rest, predict the left-out passes."""
    if by not in configs.columns:
        raise ValueError(f"by: no column {by!r} in the configurations")
    values = sorted(configs[by].unique())
    if len(values) < 2:
        raise ValueError(f"by: need at least two distinct {by} values to hold one out")
    frames = []
    for v in values:
        train = configs[configs[by] != v]
        test = configs[configs[by] == v].reset_index(drop=True)
        fit = fit_card(train, base, models=models)
        pred = predict(test, fit.card, models)
        out = test.copy()
        out["held_out"] = f"{by}={v}"
        out["predicted_s"] = pred
        out["rel_error"] = pred / out["time_s"] - 1.0
        frames.append(out)
    return pd.concat(frames, ignore_index=True)


def calibrated_card(
    fit: Fit,
    *,
    slug: str,
    name: str,
    trace: str,
    note: str = "",
    command: str = "",
    sources: Mapping[str, str] | None = None,
    untrusted: Sequence[str] = (),
) -> HardwareCard:
    """The fitted card under its own slug, with a ``[calibration]`` table saying where from.

    ``command`` (the whole command line that made the card) and ``untrusted``
    (:func:`trust_problems`' findings, for a card written anyway) go into that
    table; ``sources``, when given, replaces the card's ``[sources]``.
    """
    meta: dict[str, Any] = {
        "trace": trace,
        "rms_log_error": fit.rms_log_error,
        "configurations": int(len(fit.residuals)),
        **{f"{k}_stderr": v for k, v in fit.stderr.items()},
    }
    if note:
        meta["note"] = note
    if command:
        meta["command"] = command
    if untrusted:
        meta["untrusted"] = list(untrusted)
    extra: dict[str, Any] = {} if sources is None else {"sources": dict(sources)}
    return dataclasses.replace(fit.card, slug=slug, name=name, calibration=meta, **extra)


def card_from_ceilings(
    ceilings: pd.DataFrame,
    *,
    slug: str,
    name: str,
    kind: str,
    mem_capacity: float,
    idle_power_w: float,
    max_power_w: float,
    sources: dict[str, str],
) -> HardwareCard:
    """A base card whose peaks are the device's own measured ceilings (best matmul, best copy)."""
    need = {"op", "dtype", "rate"}
    if need - set(ceilings.columns):
        raise ValueError(f"ceilings: missing column(s) {sorted(need - set(ceilings.columns))}")
    mm = ceilings[ceilings["op"] == "matmul"]
    cp = ceilings[ceilings["op"] == "copy"]
    if mm.empty or cp.empty:
        raise ValueError("ceilings: need both matmul and copy rows")
    peaks = {str(dt): float(g["rate"].max()) for dt, g in mm.groupby("dtype")}
    return HardwareCard(
        slug=slug,
        name=name,
        kind=kind,
        peak_flops=peaks,
        mem_bandwidth=float(cp["rate"].max()),
        mem_capacity=float(mem_capacity),
        interconnect_bandwidth=1.0,
        interconnect_latency_s=0.0,
        idle_power_w=idle_power_w,
        max_power_w=max_power_w,
        sources=sources,
    )
