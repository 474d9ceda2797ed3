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

Calibration only changes card parameters; it adds no code path to the cost
model. The result is an ordinary hardware card (:func:`calibrated_card`),
written as TOML by :func:`specsim.cards.write_hardware_card`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.cards import HardwareCard, ModelCard, load_model
from specsim.cost import step_cost_grid

__all__ = [
    "PARAMETERS",
    "Fit",
    "summarize_passes",
    "predict",
    "fit_card",
    "holdout_errors",
    "calibrated_card",
    "card_from_ceilings",
    "predict_runs",
]

PARAMETERS = ("compute_efficiency", "memory_efficiency", "layer_overhead_s", "pass_overhead_s")
_LOWER = np.array([1e-4, 1e-4, 0.0, 0.0])
_UPPER = np.array([1.0, 1.0, 0.05, 0.5])


def summarize_passes(passes: pd.DataFrame) -> pd.DataFrame:
    """One row per measured configuration: the median time over its repeats."""
    need = {"model", "dtype", "batch", "context", "new_tokens", "time_s"}
    missing = sorted(need - set(passes.columns))
    if missing:
        raise ValueError(f"passes: missing column(s) {missing}")
    if len(passes) == 0:
        raise ValueError("passes: the trace has no rows")
    keys = ["model", "dtype", "batch", "context", "new_tokens"]
    out = passes.groupby(keys, as_index=False).agg(
        time_s=("time_s", "median"), repeats=("time_s", "size")
    )
    if (out["time_s"] <= 0).any():
        raise ValueError("passes: a measured time is <= 0")
    return out


def predict(
    configs: pd.DataFrame, card: HardwareCard, models: dict[str, ModelCard] | None = None
) -> np.ndarray:
    """The cost model's pass time for each configuration row, with this card."""
    models = models or {}
    pred = np.empty(len(configs))
    for (slug, dtype), grp in configs.groupby(["model", "dtype"], sort=False):
        model = models.get(str(slug)) or load_model(str(slug))
        grid = step_cost_grid(
            model,
            card,
            batch=grp["batch"].to_numpy(),
            context=grp["context"].to_numpy(),
            new_tokens=grp["new_tokens"].to_numpy(),
            dtype=str(dtype),
            check_memory=False,
        )
        pred[configs.index.get_indexer(grp.index)] = grid.time_s
    return pred


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
    dof = max(n - k, 1)
    s2 = float(sol.fun @ sol.fun) / dof
    try:
        cov = np.linalg.pinv(sol.jac.T @ sol.jac) * s2
        se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:  # pragma: no cover - pinv does not raise in practice
        se = np.full(k, np.inf)
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


def calibrated_card(fit: Fit, *, slug: str, name: str, trace: str, note: str = "") -> HardwareCard:
    """The fitted card under its own slug, with a ``[calibration]`` table saying where from."""
    meta: dict[str, Any] = {
        "trace": trace,
        "rms_log_error": fit.rms_log_error,
        "configurations": int(len(fit.residuals)),
        **{f"{k}_stderr": v for k, v in fit.stderr.items()},
    }
    if note:
        meta["note"] = note
    return dataclasses.replace(fit.card, slug=slug, name=name, calibration=meta)


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


_RUN_KEYS = ["dtype", "device", "batch", "temperature", "prompt_len"]
"""What a speculative run and its plain (autoregressive) twin must share, besides the model."""


def _run_frames(specdec: pd.DataFrame, autoregressive: pd.DataFrame) -> pd.DataFrame:
    """Measured per-token latency of each speculative run and of its plain twin.

    The twin is the autoregressive run of the same target, dtype, device, batch,
    temperature and prompt length: per-token latency grows with the batch, so
    runs of different batches (or devices) are never pooled.
    """
    spec = specdec[specdec["seq"] == 0].copy()
    spec["wall_s"] = spec["draft_s"] + spec["target_s"] + spec["verify_s"]
    keys = ["run_id", "target", "draft", "gamma", *_RUN_KEYS]
    runs = spec.groupby(keys, as_index=False).agg(
        blocks=("block", "size"), tokens=("emitted", "sum"), wall_s=("wall_s", "sum"),
        host_s=("verify_s", "sum"), accepted=("accepted", "sum"),
    )  # fmt: skip
    ar = autoregressive.copy()
    ar["wall_s"] = ar["forward_s"] + ar["sample_s"]
    plain = ar.groupby(["model", *_RUN_KEYS], as_index=False).agg(
        ar_steps=("step", "size"), ar_wall_s=("wall_s", "sum")
    )
    plain = plain.rename(columns={"model": "target"})
    out = runs.merge(plain, on=["target", *_RUN_KEYS], how="left")
    if out["ar_wall_s"].isna().any():
        missing = out.loc[out["ar_wall_s"].isna(), "run_id"].tolist()
        raise ValueError(f"no autoregressive run matches speculative run(s) {missing}")
    out["measured_token_s"] = out["wall_s"] / out["tokens"]
    out["measured_ar_token_s"] = out["ar_wall_s"] / out["ar_steps"]
    out["measured_speedup"] = out["measured_ar_token_s"] / out["measured_token_s"]
    return out


def predict_runs(
    specdec: pd.DataFrame,
    autoregressive: pd.DataFrame,
    positions: pd.DataFrame,
    card: HardwareCard,
    rng: np.random.Generator,
    *,
    seeds: int = 8,
) -> pd.DataFrame:
    """Predict each measured speculative run's per-token latency and speedup from a card.

    Two predictions per run, both on the calibrated ``card``:

    - ``replay``: the run's own accepted counts, block by block, timed by the
      cost model at the run's ``batch`` (``gamma`` draft passes plus one
      verification pass, each over ``batch`` sequences at the block's
      context); this isolates the cost model.
    - ``simulated``: :func:`specsim.sim.simulate_stream` with the run's
      measured per-position acceptance ``sum min(p, q)`` replayed as a
      :class:`~specsim.acceptance.TraceAcceptance`, averaged over ``seeds``
      streams; this tests the simulator end to end. The stream simulator runs
      one sequence, while a batch of the harness emits the batch's smallest
      accepted count plus one to every row, so runs with ``batch > 1`` get
      NaN ``simulated_*`` columns rather than a batch-1 answer.

    Each run is compared with the plain (autoregressive) run of the same target,
    dtype, device, batch, temperature and prompt length, predicted as one target
    pass over ``batch`` sequences per token; a run without such a twin raises
    ValueError. Host-side work of the harness (softmax, sampling, verification,
    cache rollback) is not in the cost model; ``host_share`` reports how much of
    the measured time it was.
    """
    from specsim.acceptance import TraceAcceptance
    from specsim.cost import step_cost_grid
    from specsim.policies import FixedGamma
    from specsim.sim import CardCost, StreamConfig, simulate_stream

    if isinstance(seeds, bool) or not isinstance(seeds, int | np.integer) or seeds < 1:
        raise ValueError(f"seeds: expected an integer >= 1, got {seeds!r}")
    runs = _run_frames(specdec, autoregressive)
    rows = []
    for r in runs.itertuples(index=False):
        target, draft = load_model(str(r.target)), load_model(str(r.draft))
        dtype, batch = str(r.dtype), int(r.batch)
        blocks = specdec[(specdec["run_id"] == r.run_id) & (specdec["seq"] == 0)]
        gam = blocks["gamma"].to_numpy(dtype=np.int64)
        ctx = blocks["context"].to_numpy(dtype=np.int64)
        verify = step_cost_grid(target, card, batch=batch, context=ctx, new_tokens=gam + 1,
                                dtype=dtype).time_s  # fmt: skip
        draft_s = step_cost_grid(draft, card, batch=batch, context=ctx, new_tokens=1,
                                 dtype=dtype).time_s  # fmt: skip
        replay = float((gam * draft_s + verify).sum()) / float(r.tokens)
        steps = int(r.ar_steps)
        ar_ctx = int(r.prompt_len) + np.arange(steps, dtype=np.int64)
        ar = step_cost_grid(target, card, batch=batch, context=ar_ctx, new_tokens=1,
                            dtype=dtype).time_s.sum() / steps  # fmt: skip
        pos = positions[(positions["run_id"] == r.run_id) & (positions["seq"] == 0)]
        alphas = pos.loc[pos["reached"].astype(bool), "alpha"].to_numpy(dtype=float)
        sim = float("nan")
        if batch == 1:
            cfg = StreamConfig(
                tokens=int(r.tokens), prompt=int(r.prompt_len),
                acceptance=TraceAcceptance.from_values(np.clip(alphas, 0.0, 1.0)),
                policy=FixedGamma(gamma=int(r.gamma)),
                cost=CardCost(target=target, draft=draft, hardware=card, dtype=dtype),
                max_gamma=int(r.gamma),
            )  # fmt: skip
            sim_token_s = []
            for _ in range(seeds):
                m = simulate_stream(cfg, rng).metrics()
                sim_token_s.append(m["time_s"] / m["tokens"])
            sim = float(np.mean(sim_token_s))
        rows.append(
            {
                "run_id": r.run_id, "target": r.target, "draft": r.draft,
                "temperature": r.temperature, "gamma": r.gamma, "batch": batch,
                "tokens": r.tokens,
                "acceptance": float(np.mean(alphas)) if alphas.size else float("nan"),
                "measured_token_s": r.measured_token_s,
                "replay_token_s": replay, "simulated_token_s": sim,
                "measured_speedup": r.measured_speedup,
                "replay_speedup": float(ar) / replay, "simulated_speedup": float(ar) / sim,
                "host_share": float(r.host_s) / float(r.wall_s),
            }
        )  # fmt: skip
    out = pd.DataFrame(rows)
    for kind in ("replay", "simulated"):
        out[f"{kind}_latency_error"] = out[f"{kind}_token_s"] / out["measured_token_s"] - 1
        out[f"{kind}_speedup_error"] = out[f"{kind}_speedup"] / out["measured_speedup"] - 1
    return out
