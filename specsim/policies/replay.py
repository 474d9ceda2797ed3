"""Replays of measured acceptance: lookahead policies on real (signal, accepted) sequences,
and the closed forms against the measured speculative runs.

**Lookahead on real signals** (:func:`replay_cells`). The sequences are the
rows of ``models/measured/real/alpha-positions.csv.gz``: at each position of a
text, the draft's probability of the token it drafted, its entropy and whether
verification accepted it. A sequence is replayed as a stream of blocks the way
:mod:`specsim.sim` consumes an :class:`~specsim.acceptance.processes.AcceptanceDraw`: a
block of lookahead ``gamma`` at position ``t`` accepts the leading run ``N`` of
flags and the next block starts at ``t + N + 1``; it emits ``N + 1`` tokens and
costs ``gamma c + v(gamma)`` target passes (``v(0) = 1``: a plain step). The
policies are the :class:`specsim.policies.lookahead.LookaheadPolicy` objects themselves:
every fixed ``gamma`` in ``0..max_gamma`` (the best one is chosen *in
hindsight*, on the very text it is scored on, which flatters it), the
:class:`~specsim.policies.lookahead.Oracle` (drafts exactly the run that will be
accepted) and :class:`~specsim.policies.signal.SignalThreshold`, whose
acceptance model is fitted on the text the target *generated* from the same
prompts (``text = "generated"``, not the held-out test text it is scored on) and
whose threshold comes from the cost ratio by Dinkelbach's iteration on that
same generated text (:func:`calibrate_threshold`). A limit of the data: the
flags are teacher-forced (each position's draft conditions on the text, not on
earlier drafts), as Leviathan et al. measured alpha.

**Closed forms against the measured runs** (:func:`predict_speedups`): each
speculative run of ``specdec.csv`` is predicted from its own measured per-pass
times (draft pass, verification pass, and its plain twin's step in
``autoregressive.csv``) and a measured acceptance: the speedup is
``E(alpha, gamma) t_step / (gamma t_draft + t_verify)``, with ``E`` from
Leviathan et al. 2023, Equation (1) (i.i.d.), or from an acceptance process
fitted by :mod:`specsim.acceptance.fit`.

Standard errors are jackknife over sequences (or runs): positions inside one
text are correlated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim.acceptance.processes import AcceptanceDraw, accepted_in_block
from specsim.policies.lookahead import (
    FixedGamma,
    LookaheadPolicy,
    Oracle,
    PolicyContext,
    fixed_gamma,
)
from specsim.policies.signal import (
    AcceptanceModel,
    SignalThreshold,
    fit_acceptance_model,
    prefix_threshold,
    signal_draw,
)
from specsim.stats import jackknife_ratio, mean_interval

__all__ = [
    "CostModel",
    "measured_cost",
    "replay",
    "calibrate_threshold",
    "fit_signal_models",
    "replay_cells",
    "compare_policies",
    "predict_speedups",
    "prediction_table",
]

FloatArray = NDArray[np.float64]
CELL = ["draft", "temperature", "corpus"]


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Block cost in target passes: ``gamma c + v[gamma]``, ``v[0] = 1``."""

    c: float
    v: tuple[float, ...]
    label: str = ""

    def __post_init__(self) -> None:
        if not (np.isfinite(self.c) and self.c >= 0):
            raise ValueError(f"CostModel.c: expected a finite value >= 0, got {self.c!r}")
        if len(self.v) < 2 or self.v[0] != 1.0 or not all(np.isfinite(x) and x > 0 for x in self.v):
            raise ValueError(f"CostModel.v: expected v[0] = 1 and positive v[1..], got {self.v!r}")

    @property
    def max_gamma(self) -> int:
        return len(self.v) - 1

    def block(self, gamma: int) -> float:
        return gamma * self.c + self.v[gamma]


def measured_cost(
    specdec: pd.DataFrame, autoregressive: pd.DataFrame, *, max_gamma: int = 8
) -> CostModel:
    """``c`` = median draft pass / median plain step, ``v(gamma)`` = median (target_s +
    verify_s) / median plain step at each measured gamma, linear in between (and beyond the
    largest, its value); the plain step is ``forward_s + sample_s`` of ``autoregressive``."""
    step = float((autoregressive["forward_s"] + autoregressive["sample_s"]).median())
    c = float((specdec["draft_s"] / specdec["gamma"]).median()) / step
    ver = (specdec["target_s"] + specdec["verify_s"]).groupby(specdec["gamma"]).median() / step
    g = ver.index.to_numpy(dtype=float)
    v = np.interp(np.arange(1, max_gamma + 1), g, ver.to_numpy(dtype=float))
    return CostModel(c=c, v=(1.0, *map(float, v)), label="measured CPU")


def replay(
    draws: Sequence[AcceptanceDraw], policy: LookaheadPolicy, cost: CostModel
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Tokens, blocks, time (target passes) and drafted tokens per sequence for ``policy``.

    A sequence is replayed while ``cost.max_gamma`` positions remain, so every
    policy's blocks are complete; the policy must choose ``0..cost.max_gamma``.
    """
    fixed = fixed_gamma(policy)
    out = np.zeros((4, len(draws)))
    for i, draw in enumerate(draws):
        pos, last_g, last_n = 0, None, None
        while pos + cost.max_gamma <= len(draw):
            g = (
                fixed
                if fixed is not None
                else int(
                    policy.choose(
                        PolicyContext(
                            position=pos, draw=draw, last_gamma=last_g, last_accepted=last_n
                        )
                    )
                )
            )
            if not 0 <= g <= cost.max_gamma:
                raise ValueError(f"policy {policy!r} chose gamma {g}, outside 0..{cost.max_gamma}")
            n = accepted_in_block(draw, pos, g) if g else 0
            out[:, i] += (n + 1, 1, cost.block(g), g)
            pos += n + 1
            last_g, last_n = g, n
    return out[0], out[1], out[2], out[3]


def calibrate_threshold(
    draws: Sequence[AcceptanceDraw], cost: CostModel, *, mean_accept: float, iterations: int = 6
) -> tuple[float, float]:
    """``(h, rho)``: the threshold of :func:`specsim.policies.signal.prefix_threshold` at
    the throughput ``rho`` it achieves on ``draws`` (Dinkelbach's iteration from ``rho = 1``;
    ``dv`` is the mean step of ``v`` per extra position)."""
    dv = float(np.mean(np.diff(cost.v[1:]))) if cost.max_gamma > 1 else 0.0
    rate = 1.0
    h = prefix_threshold(c=cost.c, rate=rate, mean_accept=mean_accept, dv=dv)
    for _ in range(iterations):
        pol = SignalThreshold(threshold=h, max_gamma=cost.max_gamma)
        tok, _, time, _ = replay(draws, pol, cost)
        rate = float(tok.sum() / time.sum())
        h = prefix_threshold(c=cost.c, rate=rate, mean_accept=mean_accept, dv=dv)
    return h, rate


def _draws(rows: pd.DataFrame, model: AcceptanceModel) -> list[AcceptanceDraw]:
    out = []
    for _, s in rows.sort_values(["seq", "position"]).groupby("seq", sort=True):
        pred = model.predict(s["draft_prob"].to_numpy(float), s["draft_entropy"].to_numpy(float))
        out.append(signal_draw(accepted=s["accepted"].to_numpy(bool), predicted=pred))
    return out


def fit_signal_models(
    positions: pd.DataFrame, *, fit_text: str = "generated"
) -> dict[tuple[str, float], AcceptanceModel]:
    """One :class:`~specsim.policies.signal.AcceptanceModel` per (draft, temperature), fitted
    on the rows of ``fit_text`` of every corpus."""
    rows = positions[positions["text"] == fit_text]
    if rows.empty:
        raise ValueError(f"fit_text: no rows for {fit_text!r}")
    return {
        (str(d), float(t)): fit_acceptance_model(
            g["draft_prob"], g["draft_entropy"], g["accepted"].astype(bool)
        )
        for (d, t), g in rows.groupby(["draft", "temperature"])
    }


def replay_cells(
    positions: pd.DataFrame,
    cost: CostModel,
    *,
    fit_text: str = "generated",
    test_text: str = "test",
    cells: Sequence[tuple[str, float, str]] | None = None,
) -> pd.DataFrame:
    """One row per cell and policy on ``test_text``: tokens per target pass, modelled
    speedup, mean gamma, with jackknife standard errors over sequences; the signal policy
    is fitted and calibrated on ``fit_text`` only (module docstring). The column ``_loo``
    holds each policy's leave-one-sequence-out speedups, which :func:`compare_policies`
    pairs across policies."""
    models = fit_signal_models(positions, fit_text=fit_text)
    rows = []
    test = positions[positions["text"] == test_text]
    fit = positions[positions["text"] == fit_text]
    for key, g in test.groupby(CELL, sort=True):
        cell = (str(key[0]), float(key[1]), str(key[2]))
        if cells is not None and cell not in cells:
            continue
        model = models[cell[:2]]
        draws = _draws(g, model)
        fit_rows = fit[
            (fit.draft == cell[0]) & (fit.temperature == cell[1]) & (fit.corpus == cell[2])
        ]
        h, rate = calibrate_threshold(_draws(fit_rows, model), cost, mean_accept=model.mean_accept)
        policies: list[tuple[str, LookaheadPolicy]] = [
            (f"fixed-{k}", FixedGamma(gamma=k)) for k in range(cost.max_gamma + 1)
        ]
        policies += [
            ("oracle", Oracle(max_gamma=cost.max_gamma)),
            ("signal", SignalThreshold(threshold=h, max_gamma=cost.max_gamma)),
        ]
        for name, pol in policies:
            tok, blk, time, drafted = replay(draws, pol, cost)
            tpp, tpp_se, _ = jackknife_ratio(tok, blk)
            sp, sp_se, loo = jackknife_ratio(tok, time)
            rows.append(
                {
                    "draft": cell[0],
                    "temperature": cell[1],
                    "corpus": cell[2],
                    "policy": name,
                    "tokens_per_pass": tpp,
                    "tokens_per_pass_se": tpp_se,
                    "speedup": sp,
                    "speedup_se": sp_se,
                    "threshold": h,
                    "fit_rate": rate,
                    "mean_gamma": float(drafted.sum() / blk.sum()),
                    "blocks": int(blk.sum()),
                    "_loo": loo,
                }
            )
    return pd.DataFrame(rows)


def compare_policies(replayed: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the best fixed gamma in hindsight, the signal policy and the oracle, with
    the signal policy's gain over the best fixed gamma (``gain``, relative) and its
    paired jackknife standard error."""
    rows = []
    for key, g in replayed.groupby(CELL, sort=True):
        fixed = g[g.policy.str.startswith("fixed-")]
        best = fixed.loc[fixed.speedup.idxmax()]
        sig = g[g.policy == "signal"].iloc[0]
        orc = g[g.policy == "oracle"].iloc[0]
        ratio = sig["_loo"] / best["_loo"] - 1
        m = ratio.shape[0]
        gain_se = float(np.sqrt((m - 1) / m * np.sum((ratio - ratio.mean()) ** 2)))
        gain = sig.speedup / best.speedup - 1
        rows.append(
            {
                "draft": key[0],
                "temperature": key[1],
                "corpus": key[2],
                "best_gamma": int(best.policy.split("-")[1]),
                "speedup_best_fixed": best.speedup,
                "se_best_fixed": best.speedup_se,
                "speedup_signal": sig.speedup,
                "se_signal": sig.speedup_se,
                "speedup_oracle": orc.speedup,
                "se_oracle": orc.speedup_se,
                "threshold": sig.threshold,
                "gain": gain,
                "gain_se": gain_se,
                "z_gain": gain / gain_se if gain_se > 0 else 0.0,
            }
        )
    return pd.DataFrame(rows)


def predict_speedups(
    specdec: pd.DataFrame, autoregressive: pd.DataFrame, tokens: dict[str, Callable[[Any], float]]
) -> pd.DataFrame:
    """Measured and predicted speedup of every speculative run (one row per ``run_id``).

    ``tokens[name](run)`` predicts a run's tokens per block (``run`` has the fields
    ``run_id, draft, temperature, corpus, prompt, gamma``): for example
    Equation (1) at a measured alpha, or a fitted process's ``mean_tokens``; each
    gives a column ``pred_<name>``, the speedup ``E t_step / (t_draft + t_verify)``
    with the run's own mean per-block draft time (its ``gamma`` passes), mean
    verification time and its plain twin's mean step. The measured speedup is
    tokens per second over the plain twin's (same corpus, temperature and prompt).
    """
    ar = autoregressive.assign(step_s=autoregressive["forward_s"] + autoregressive["sample_s"])
    twin = ar.groupby(["corpus", "temperature", "prompt"]).agg(
        ar_tokens=("step", "size"), ar_time=("step_s", "sum"), step=("step_s", "mean")
    )
    sd = specdec.assign(block_s=specdec["draft_s"] + specdec["target_s"] + specdec["verify_s"])
    runs = (
        sd.groupby("run_id")
        .agg(
            draft=("draft", "first"),
            temperature=("temperature", "first"),
            corpus=("corpus", "first"),
            prompt=("prompt", "first"),
            gamma=("gamma", "first"),
            tokens=("emitted", "sum"),
            blocks=("block", "size"),
            time=("block_s", "sum"),
            draft_s=("draft_s", "mean"),
            block_s=("block_s", "mean"),
        )
        .reset_index()
    )
    runs = runs.join(twin, on=["corpus", "temperature", "prompt"])
    if runs["step"].isna().any():
        bad = runs.loc[runs["step"].isna(), "run_id"].iloc[0]
        raise ValueError(f"autoregressive: no plain twin for run {bad!r}")
    runs["measured"] = (runs["tokens"] / runs["time"]) / (runs["ar_tokens"] / runs["ar_time"])
    runs["measured_tokens"] = runs["tokens"] / runs["blocks"]
    scale = runs["step"] / runs["block_s"]  # block_s = gamma draft passes + one verification
    for name, fn in tokens.items():
        runs[f"tokens_{name}"] = [float(fn(r)) for r in runs.itertuples(index=False)]
        runs[f"pred_{name}"] = runs[f"tokens_{name}"] * scale
    return runs


def prediction_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per draft, temperature and gamma: mean measured speedup and each prediction's mean
    relative error (prediction / measured - 1) with a 95% t interval over the runs."""
    preds = [c for c in runs.columns if c.startswith("pred_")]
    rows = []
    for key, g in runs.groupby(["draft", "temperature", "gamma"], sort=True):
        row = {
            "draft": key[0],
            "temperature": key[1],
            "gamma": key[2],
            "runs": len(g),
            "measured": g["measured"].mean(),
        }
        for p in preds:
            err = g[p] / g["measured"] - 1
            half = mean_interval(err).half if len(g) > 1 else float("inf")
            name = p[len("pred_") :]
            row[f"{name}"] = g[p].mean()
            row[f"err_{name}"] = err.mean()
            row[f"err_{name}_half"] = half
        rows.append(row)
    return pd.DataFrame(rows)
