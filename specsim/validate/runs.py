"""Measured speculative runs against the calibrated model: :func:`predict_runs`.

Each measured speculative run (``specsim measure``) is predicted from a calibrated card,
by replaying its accepted counts through the cost model and by simulating it end to end,
and compared with what was measured (``specsim validate``'s fidelity part; the fidelity
table's CPU rows, :mod:`specsim.validate.fidelity.rows`). Also importable as
``specsim.validate.forms.predict_runs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from specsim.acceptance.processes import TraceAcceptance
from specsim.cards import HardwareCard, ModelCard, load_model
from specsim.checks import check_int
from specsim.cost import Deployment, draft_on, step_cost_grid
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost
from specsim.sim.stream.stream import StreamConfig, simulate_stream

__all__ = ["predict_runs"]

_RUN_KEYS = ["dtype", "device", "batch", "temperature", "prompt_len"]
"""What a speculative run and its plain (autoregressive) twin must share, besides the model."""


def _times(
    dep: Deployment, *, batch: int, context: np.ndarray, new_tokens: ArrayLike
) -> np.ndarray:
    """Pass times on ``dep`` over the contexts (:func:`specsim.cost.step_cost_grid`)."""
    return np.asarray(
        step_cost_grid(
            dep.target,
            dep.hardware,
            batch=batch,
            context=context,
            new_tokens=new_tokens,
            **dep.keywords(),
        ).time_s
    )


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
        blocks=("block", "size"),
        tokens=("emitted", "sum"),
        wall_s=("wall_s", "sum"),
        host_s=("verify_s", "sum"),
        accepted=("accepted", "sum"),
    )
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
      :class:`~specsim.acceptance.processes.TraceAcceptance`, averaged over ``seeds``
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
    check_int(seeds, name="seeds", minimum=1)
    runs = _run_frames(specdec, autoregressive)
    rows = []
    for r in runs.itertuples(index=False):
        target, draft = load_model(str(r.target)), load_model(str(r.draft))
        dtype, batch = str(r.dtype), int(r.batch)
        blocks = specdec[(specdec["run_id"] == r.run_id) & (specdec["seq"] == 0)]
        gam = blocks["gamma"].to_numpy(dtype=np.int64)
        ctx = blocks["context"].to_numpy(dtype=np.int64)
        dep = Deployment(target=target, hardware=card, dtype=dtype)  # the run's, once
        verify = _times(dep, batch=batch, context=ctx, new_tokens=gam + 1)
        draft_s = _times(draft_on(dep, draft), batch=batch, context=ctx, new_tokens=1)
        replay = float((gam * draft_s + verify).sum()) / float(r.tokens)
        steps = int(r.ar_steps)
        ar_ctx = int(r.prompt_len) + np.arange(steps, dtype=np.int64)
        ar = _times(dep, batch=batch, context=ar_ctx, new_tokens=1).sum() / steps
        pos = positions[(positions["run_id"] == r.run_id) & (positions["seq"] == 0)]
        alphas = pos.loc[pos["reached"].astype(bool), "alpha"].to_numpy(dtype=float)
        sim = float("nan")
        if batch == 1:
            sim = _simulated_token_s(r, alphas, deployment=dep, draft=draft, rng=rng, seeds=seeds)
        rows.append(
            {
                "run_id": r.run_id,
                "target": r.target,
                "draft": r.draft,
                "temperature": r.temperature,
                "gamma": r.gamma,
                "batch": batch,
                "tokens": r.tokens,
                "acceptance": float(np.mean(alphas)) if alphas.size else float("nan"),
                "measured_token_s": r.measured_token_s,
                "replay_token_s": replay,
                "simulated_token_s": sim,
                "measured_speedup": r.measured_speedup,
                "replay_speedup": float(ar) / replay,
                "simulated_speedup": float(ar) / sim,
                "host_share": float(r.host_s) / float(r.wall_s),
            }
        )
    out = pd.DataFrame(rows)
    for kind in ("replay", "simulated"):
        out[f"{kind}_latency_error"] = out[f"{kind}_token_s"] / out["measured_token_s"] - 1
        out[f"{kind}_speedup_error"] = out[f"{kind}_speedup"] / out["measured_speedup"] - 1
    return out


def _simulated_token_s(
    r: Any,
    alphas: np.ndarray,
    *,
    deployment: Deployment,
    draft: ModelCard,
    rng: np.random.Generator,
    seeds: int,
) -> float:
    """A batch-1 run's time per token simulated ``seeds`` times with its measured
    acceptances ``alphas`` replayed, on the run's deployment and draft (the mean)."""
    cfg = StreamConfig(
        tokens=int(r.tokens),
        prompt=int(r.prompt_len),
        acceptance=TraceAcceptance.from_values(np.clip(alphas, 0.0, 1.0)),
        policy=FixedGamma(gamma=int(r.gamma)),
        cost=CardCost(deployment=deployment, draft=draft),
        max_gamma=int(r.gamma),
    )
    sim_token_s = []
    for _ in range(seeds):
        m = simulate_stream(cfg, rng).metrics()
        sim_token_s.append(m["time_s"] / m["tokens"])
    return float(np.mean(sim_token_s))
