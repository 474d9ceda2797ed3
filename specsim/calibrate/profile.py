"""Fit a runtime profile to timed plain passes; predict measured speculative runs from it.

:func:`fit_profile` chooses the numbers of a :class:`~specsim.cards.RuntimeProfile` on
a fixed hardware card (its peaks stay as measured) by bounded least squares on the log
of the median time of each measured configuration, jointly over row counts (tokens of a
pass, ``batch * new_tokens``) and weight formats: the host cost per pass
(``pass_overhead_s``), the launch cost per layer (``layer_overhead_s``), the fraction
of peak compute reached at each row count of :data:`ROW_KNOTS`
(``compute_efficiency_rows``, interpolated in log2 rows by the cost model), the
fraction of peak bandwidth at each of them (``memory_efficiency_rows``: a one-row GEMV
and a few-row GEMM stream weights at different rates) and, for each quantized weight
format, its factors on both and its dequantization work (:mod:`specsim.calibrate.formats`).
At a row count where one
roofline term binds, the other's efficiency does not move the prediction: its standard
error is infinite and the fit says it is not determined. Standard errors come from the
Jacobian at the optimum (as in :func:`specsim.calibrate.cards.fit_card`); a parameter the data
do not determine says so (:func:`profile_trust_problems`). Only plain passes enter the
fit: speculative runs are what it is checked against (:func:`predict_profile_runs`).

Measured runs and their intervals (:func:`specsim.stats.ratio_interval`, :func:`paired_runs`)
live in :mod:`specsim.calibrate.runs` and are importable from here too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.calibrate import formats as cf
from specsim.calibrate.cards import past_positions
from specsim.calibrate.runs import enough_blocks, paired_runs, plain_twin
from specsim.cards import HardwareCard, ModelCard, RuntimeProfile, load_model
from specsim.cards.toml_out import toml_table, toml_value
from specsim.cost import Deployment, draft_on, step_cost_grid

__all__ = [
    "ROW_KNOTS",
    "FIT_COLUMNS",
    "enough_blocks",
    "profile_configs",
    "check_fit_device",
    "ProfileFit",
    "fit_profile",
    "predict_profile",
    "profile_trust_problems",
    "paired_runs",
    "predict_profile_runs",
    "profile_toml",
]

ROW_KNOTS = (1, 2, 4, 8, 16, 32, 64)
"""Row counts at which the efficiencies are fitted (flat beyond the ends)."""

FIT_COLUMNS = ("model", "dtype", "batch", "context", "new_tokens", "time_s")
"""Columns of a ``passes`` trace the fit needs (``weights``, default the dtype, if present)."""

_FULL = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def profile_configs(passes: pd.DataFrame) -> pd.DataFrame:
    """One row per measured configuration (model, dtype, weights, batch, context, new
    tokens): the median time over its repeats, ``repeats`` and ``rows`` (batch * new tokens).
    A trace without a column the fit needs is refused, naming them (:data:`FIT_COLUMNS`)."""
    missing = [c for c in FIT_COLUMNS if c not in passes.columns]
    if missing:
        raise ValueError(
            f"passes: the trace lacks column(s) {missing} that the profile fit "
            f"needs (it needs {list(FIT_COLUMNS)})"
        )
    if len(passes) == 0:
        raise ValueError("passes: the trace has no rows")
    d = passes.copy()
    if "weights" not in d.columns:
        d["weights"] = d["dtype"].map(lambda v: _FULL.get(str(v), str(v)))
    keys = ["model", "dtype", "weights", "batch", "context", "new_tokens"]
    out = d.groupby(keys, as_index=False).agg(
        time_s=("time_s", "median"),
        repeats=("time_s", "size"),
        **({"quant": ("quant", "first")} if "quant" in d.columns else {}),
    )
    if (out["time_s"] <= 0).any():
        raise ValueError("passes: a measured time is <= 0")
    out["rows"] = out["batch"] * out["new_tokens"]
    return out


def check_fit_device(meta: Mapping[str, Any], card: HardwareCard) -> None:
    """A ValueError when traces measured on the device ``meta`` describes (``device``: cpu or
    cuda; ``device_name``) cannot be fitted on ``card``: another kind of accelerator, or
    another device than the one whose ceilings made the card (``device_name`` in the card's
    ``[calibration]``, else the sidecar of the trace named there)."""
    want = {"cpu": "cpu", "cuda": "gpu"}.get(kind := str(meta.get("device", "")))
    if want is not None and card.kind != want:
        raise ValueError(
            f"traces: measured on a {kind} device, but card {card.slug!r} is a "
            f"{card.kind}; fit a profile on that device's own card"
        )
    name, known = str(meta.get("device_name", "")), _card_device(card)
    if name and known and name != known:
        raise ValueError(
            f"traces: measured on {name!r}, but card {card.slug!r} describes "
            f"{known!r}: a profile fitted on another device is refused"
        )


def _card_device(card: HardwareCard) -> str:
    cal = card.calibration or {}
    if cal.get("device_name"):
        return str(cal["device_name"])
    trace = cal.get("trace")
    if not trace or not card.source_path:
        return ""
    first = Path(str(trace).split(", ")[0])
    for root in (Path.cwd(), *Path(card.source_path).resolve().parents):
        for side in (root / first / "passes.json", (root / first).with_suffix(".json")):
            if side.is_file():
                return str(json.loads(side.read_text()).get("device_name", ""))
    return ""


@dataclass(frozen=True)
class ProfileFit:
    """A fitted profile, each parameter's value, standard error and bounds, the residuals."""

    profile: RuntimeProfile
    params: dict[str, float]
    stderr: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    residuals: pd.DataFrame
    rms_log_error: float
    past_positions: int = 0

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "parameter": list(self.params),
                "value": list(self.params.values()),
                "stderr": list(self.stderr.values()),
            }
        )


def _parameters(cfg: pd.DataFrame, base: str) -> list[tuple[str, float, float, float]]:
    """``(name, start, low, high)`` of every fitted number."""
    formats = sorted(cfg["weights"].unique())
    out = [("pass_overhead_s", 1e-3, 0.0, 0.5), ("layer_overhead_s", 1e-4, 0.0, 0.05)]
    out += [
        (f"{t}_efficiency_rows.{r}", 0.3, 1e-4, 1.0)
        for t in ("compute", "memory")
        for r in ROW_KNOTS
    ]
    return out + cf.format_parameters(formats, base, own=cf.own_arithmetic(cfg))


def _profile(names: list[str], x: np.ndarray, *, base: RuntimeProfile) -> RuntimeProfile:
    v = dict(zip(names, map(float, x), strict=True))
    comp, mem = (
        {k.split(".")[1]: v[k] for k in names if k.startswith(f"{t}_efficiency_rows.")}
        for t in ("compute", "memory")
    )
    return cf.with_format_tables(
        dataclasses.replace(
            base,
            pass_overhead_s=v["pass_overhead_s"],
            layer_overhead_s=v["layer_overhead_s"],
            compute_efficiency=comp["1"],
            memory_efficiency=mem["1"],
            compute_efficiency_rows=comp,
            memory_efficiency_rows=mem,
        ),
        v,
    )


def predict_profile(
    configs: pd.DataFrame,
    card: HardwareCard,
    profile: RuntimeProfile,
    models: Mapping[str, ModelCard] | None = None,
) -> np.ndarray:
    """The cost model's pass time of each configuration row with ``profile`` on ``card``."""
    models = models or {}
    pred = np.empty(len(configs))
    for (slug, dtype, fmt), grp in configs.groupby(["model", "dtype", "weights"], sort=False):
        model = models.get(str(slug)) or load_model(str(slug))
        own = _FULL.get(str(dtype), str(dtype)) == str(fmt)
        grid = step_cost_grid(
            model,
            card,
            batch=grp["batch"].to_numpy(),
            context=grp["context"].to_numpy(),
            new_tokens=grp["new_tokens"].to_numpy(),
            dtype=str(dtype),
            weights=None if own else str(fmt),
            runtime=profile,
            check_memory=False,
            check_positions=False,  # measured passes are fitted as they ran
        )
        pred[configs.index.get_indexer(grp.index)] = grid.time_s
    return pred


def fit_profile(
    configs: pd.DataFrame,
    card: HardwareCard,
    *,
    base: RuntimeProfile,
    models: Mapping[str, ModelCard] | None = None,
) -> ProfileFit:
    """Least-squares fit of ``base``'s numbers (efficiencies at :data:`ROW_KNOTS`, format
    factors, overheads) to ``configs`` (:func:`profile_configs`) on ``card``."""
    given = models or {}
    models = {str(m): given.get(str(m)) or load_model(str(m)) for m in configs["model"].unique()}
    # Passes past a card's positions are fitted as they ran (specsim.calibrate.cards's module doc).
    cfg = configs.reset_index(drop=True)
    if cfg.empty:
        raise ValueError("configs: no configuration to fit")
    dtype = str(cfg["dtype"].iloc[0])
    params = _parameters(cfg, _FULL.get(dtype, dtype))
    names = [p[0] for p in params]
    x0, low, high = (np.array([p[i] for p in params]) for i in (1, 2, 3))
    measured = np.log(cfg["time_s"].to_numpy(dtype=float))

    timed = dataclasses.replace(base, sampling_s_per_token=0.0)  # passes are timed unsampled

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(predict_profile(cfg, card, _profile(names, x, base=timed), models)) - measured

    sol = optimize.least_squares(residual, x0, bounds=(low, high), x_scale="jac", method="trf")
    dof = len(cfg) - len(names)
    if dof <= 0:  # no degrees of freedom: the residual variance, hence every error, is unknown
        se = np.full(len(names), np.inf)
    else:
        s2 = float(sol.fun @ sol.fun) / dof
        se = np.sqrt(np.clip(np.diag(np.linalg.pinv(sol.jac.T @ sol.jac) * s2), 0.0, None))
    # A parameter the residuals do not move is not determined: its standard error is
    # infinite, not the pseudo-inverse's zero. "Do not move": over its whole allowed range
    # it changes no log pass time by 1e-6 (a finite-difference Jacobian leaves ~1e-8 noise
    # in a column that is zero in fact).
    effect = np.abs(sol.jac).max(axis=0) * (high - low)
    se = np.where(effect < 1e-6, np.inf, se)
    res = cfg.copy()
    res["predicted_s"] = predict_profile(cfg, card, _profile(names, sol.x, base=timed), models)
    res["rel_error"] = res["predicted_s"] / res["time_s"] - 1.0
    return ProfileFit(
        profile=_profile(names, sol.x, base=base),
        params=dict(zip(names, map(float, sol.x), strict=True)),
        stderr=dict(zip(names, map(float, se), strict=True)),
        bounds={n: (float(a), float(b)) for n, a, b in zip(names, low, high, strict=True)},
        residuals=res,
        rms_log_error=float(np.sqrt(np.mean(sol.fun**2))),
        past_positions=past_positions(cfg, models),
    )


def profile_trust_problems(
    fit: ProfileFit, *, stderr_ratio: float = 1.0, bound_tolerance: float = 1e-6
) -> list[str]:
    """Why a fitted number cannot be trusted, one sentence each: a standard error above
    ``stderr_ratio`` times the estimate, or an estimate at a bound of the fit."""
    out = []
    n, k = len(fit.residuals), len(fit.params)
    if n <= k:
        out.append(
            f"{n} configuration(s) for {k} parameters: the fit has no degrees of freedom, so "
            "its standard errors and residuals say nothing (measure more configurations)"
        )
    for name, value in fit.params.items():
        se = fit.stderr[name]
        if not np.isfinite(se) or se > stderr_ratio * abs(value):
            out.append(
                f"{name} = {value:.4g} has a standard error of {se:.3g}: the data do "
                "not determine it"
            )
        lo, hi = fit.bounds[name]
        for bound, side in ((lo, "lower"), (hi, "upper")):
            if abs(value - bound) <= bound_tolerance * (hi - lo):
                out.append(f"{name} = {value:.4g} sits at the fit's {side} bound {bound:g}")
    return out


def predict_profile_runs(
    specdec: pd.DataFrame,
    autoregressive: pd.DataFrame,
    card: HardwareCard,
    profile: RuntimeProfile,
) -> pd.DataFrame:
    """Each measured speculative run (:func:`paired_runs`) predicted from ``profile`` on
    ``card`` and the run's own accepted counts: its ``gamma`` draft passes and one
    verification pass per block at the block's context, and its plain twin's one-token
    passes at their measured contexts (sampling: ``profile.sampling_s_per_token`` per row).
    No speculative run enters the profile; this is the end-to-end check."""
    runs = paired_runs(specdec, autoregressive)
    pred_spec, pred_plain = [], []
    for r in runs.itertuples(index=False):
        t, d = load_model(str(r.target)), load_model(str(r.draft))
        b = specdec[(specdec["run_id"] == r.run_id) & (specdec["seq"] == 0)]
        dtype = str(b["dtype"].iloc[0])
        ctx = b["context"].to_numpy(dtype=np.int64)
        dep = Deployment(target=t, hardware=card, dtype=dtype, runtime=profile)  # the run's
        on = draft_on(dep, d)  # the draft beside it, on the same device and stack
        # Measured runs are priced as they ran, past a card's positions too (as the fit).
        kw: dict[str, Any] = dict(batch=int(r.batch), check_memory=False, check_positions=False)
        kw |= dep.keywords()
        verify = step_cost_grid(t, card, context=ctx, new_tokens=int(r.gamma) + 1, **kw).time_s
        draft = step_cost_grid(d, card, context=ctx, new_tokens=1, **(kw | on.keywords())).time_s
        pred_spec.append(float((int(r.gamma) * draft + verify).sum()) / r.tokens)
        twin, _ = plain_twin(autoregressive, str(r.run_id), b.iloc[0])
        actx = twin["context"].to_numpy(dtype=np.int64)
        pred_plain.append(
            float(step_cost_grid(t, card, context=actx, new_tokens=1, **kw).time_s.mean())
        )
    out = runs.copy()
    out["predicted_spec_token_s"] = pred_spec
    out["predicted_plain_token_s"] = pred_plain
    out["predicted_speedup"] = out["predicted_plain_token_s"] / out["predicted_spec_token_s"]
    out["latency_error"] = out["predicted_spec_token_s"] / out["spec_token_s"] - 1
    out["plain_latency_error"] = out["predicted_plain_token_s"] / out["plain_token_s"] - 1
    out["speedup_error"] = out["predicted_speedup"] / out["speedup"] - 1
    out["speedup_in_interval"] = out["predicted_speedup"].between(
        out["speedup_low"], out["speedup_high"]
    )
    return out


def profile_toml(
    fit: ProfileFit,
    *,
    slug: str,
    name: str,
    command: str,
    data: str,
    problems: Sequence[str] = (),
    notes: str = "",
) -> str:
    """The fitted profile as a ``models/runtime`` TOML card (read back by
    :func:`specsim.cards.load_runtime`): a header saying how it was made, every number's
    standard error beside it, and ``[sources]`` naming the command, the data and the trust
    problems (:func:`profile_trust_problems`) of a fit written anyway."""
    p = fit.profile
    head = [f"# Fitted by: {command}", f"# Data: {data}"]
    if problems:
        head.append("# UNTRUSTED numbers (written anyway): " + "; ".join(problems))
    se = fit.stderr

    def line(key: str, value: object, note: str = "") -> str:
        return f"{key} = {toml_value(value, key)}" + (f"  # {note}" if note else "")

    body = [
        line("slug", slug),
        line("name", name),
        line("stack", p.stack),
        line("fitted_on", p.fitted_on or ""),
        line("kinds", p.kinds or []),
    ]
    for key, note in (
        ("compute_efficiency", "= compute_efficiency_rows.1"),
        ("memory_efficiency", "= memory_efficiency_rows.1"),
        ("layer_overhead_s", f"stderr {se['layer_overhead_s']:.3g}"),
        ("pass_overhead_s", f"stderr {se['pass_overhead_s']:.3g}"),
        ("sampling_s_per_token", "measured, not fitted: see [sources]"),
    ):
        body.append(line(key, getattr(p, key), note))
    body.append(line("notes", notes))
    for table in ("compute_efficiency_rows", "memory_efficiency_rows", *cf.FORMAT_TABLES):
        values = getattr(p, table) or {}
        body += [f"\n[{table}]"] if values else []
        body += [line(k, v, f"stderr {se[f'{table}.{k}']:.3g}") for k, v in values.items()]
    sources = {
        "fit": command,
        "data": data,
        "fitted": "every number but sampling_s_per_token: bounded least squares on "
        "log pass times, specsim.calibrate.profile.fit_profile",
        **({"untrusted": "; ".join(problems)} if problems else {}),
    }
    body += toml_table("sources", sources, "sources")
    return "\n".join(head + body) + "\n"
