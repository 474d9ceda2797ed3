"""Rows of the fidelity table: measured with its interval, predicted, error and verdict.

One row is one anchor (a measured figure) and one quantity. Every prediction is
out of sample: ``fitted_on`` says what the prediction used, and never names the
row's own measurement. The measured interval is a 95% interval from the data
(:func:`specsim.stats.ratio_interval`, :func:`speedup_interval`) or, for a published figure,
the rounding interval of its printed digits (:func:`rounding_interval`).

The families here are the committed speculative runs on this CPU:

- :func:`cpu_rows`: ``models/measured/cpu`` predicted by the calibrated card
  through :func:`specsim.validate.forms.predict_runs` (``replay``: the run's own
  accepted counts timed by the cost model; the card was fitted on plain passes
  only).
- :func:`cpu_pass_rows`: the same runs predicted from the timed passes of
  ``passes.csv`` themselves, no cost model.
- :func:`real_rows`: ``models/measured/real`` (the tiny models trained on real
  text, no cards), predicted from measured pass times of *other* rows and the
  cell's own accepted counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from specsim.cards import HardwareCard
from specsim.stats import ratio_interval, t_quantile
from specsim.validate.runs import predict_runs

__all__ = [
    "COLUMNS",
    "LEVEL",
    "fidelity_row",
    "run_rows",
    "speedup_interval",
    "rounding_interval",
    "cpu_runs",
    "cpu_rows",
    "cpu_pass_rows",
    "real_rows",
]

COLUMNS: tuple[str, ...] = (
    "family",
    "anchor",
    "source",
    "quantity",
    "unit",
    "measured",
    "measured_low",
    "measured_high",
    "interval",
    "predicted",
    "error",
    "fitted_on",
    "verdict",
)
"""The fidelity table's columns, in order (``error`` = predicted / measured - 1)."""
LEVEL = 0.95
"""Confidence level of every interval computed from data."""


def fidelity_row(
    *,
    family: str,
    anchor: str,
    source: str,
    quantity: str,
    unit: str,
    measured: float,
    interval: tuple[float, float],
    how: str,
    predicted: float,
    fitted_on: str,
) -> dict[str, object]:
    """One row: ``error = predicted / measured - 1``; ``verdict`` is ``within interval`` when
    ``low <= predicted <= high``, else ``miss``. ValueError naming the anchor for a measured
    value that is not finite and > 0, an interval that does not hold it, or a prediction that
    is not finite."""
    low, high = (float(x) for x in interval)
    m, p = float(measured), float(predicted)
    if not (math.isfinite(m) and m > 0):
        raise ValueError(f"fidelity row {anchor!r}: measured must be finite and > 0, got {m!r}")
    if not (low <= m <= high):
        raise ValueError(
            f"fidelity row {anchor!r}: interval [{low}, {high}] does not hold the "
            f"measured value {m}"
        )
    if not math.isfinite(p):
        raise ValueError(f"fidelity row {anchor!r}: predicted must be finite, got {p!r}")
    return {
        "family": family,
        "anchor": anchor,
        "source": source,
        "quantity": quantity,
        "unit": unit,
        "measured": m,
        "measured_low": low,
        "measured_high": high,
        "interval": how,
        "predicted": p,
        "error": p / m - 1.0,
        "fitted_on": fitted_on,
        "verdict": "within interval" if low <= p <= high else "miss",
    }


def run_rows(
    *,
    anchor: str,
    common: dict[str, str],
    latency: tuple[float, tuple[float, float], str, float],
    speedup: tuple[float, tuple[float, float], str, float],
) -> list[dict[str, object]]:
    """A measured speculative run's two rows, per-token latency (s/token) and speedup over
    plain decoding (x): each of ``latency`` and ``speedup`` is (measured, interval, how,
    predicted); ``common``: the ``family``, ``source`` and ``fitted_on`` they share."""
    return [
        fidelity_row(
            anchor=f"{anchor} {what}",
            quantity=quantity,
            unit=unit,
            measured=m,
            interval=iv,
            how=how,
            predicted=p,
            **common,
        )
        for what, quantity, unit, (m, iv, how, p) in (
            ("latency", "per-token latency", "s/token", latency),
            ("speedup", "speedup over plain", "x", speedup),
        )
    ]


def _t(dof: float) -> float:
    return t_quantile(dof, level=LEVEL)


def speedup_interval(
    plain_steps: np.ndarray, block_wall: np.ndarray, block_tokens: np.ndarray
) -> tuple[float, float, float, float, float]:
    """Speedup of speculative over plain decoding with its 95% interval.

    ``S = P / L``: ``P`` the mean time of a plain step (one token each), ``L`` the
    speculative time per token (:func:`specsim.stats.ratio_interval` over blocks). The two are
    independent samples, so the relative standard errors add in quadrature; the interval is
    ``S exp(+/- t se_rel)`` (symmetric on the log scale) with the smaller sample's degrees of
    freedom. Returns (S, low, high, L, L's half-width). Assumes independent blocks and steps:
    a slow drift of the machine's load shared by neighbours makes the interval too narrow.
    """
    p = np.asarray(plain_steps, dtype=float)
    if p.size < 2:
        raise ValueError(f"speedup_interval: need >= 2 plain steps, got {p.size}")
    lat, lat_se, lat_half = ratio_interval(block_wall, block_tokens, level=LEVEL)
    pm, p_se = float(p.mean()), float(p.std(ddof=1) / math.sqrt(p.size))
    rel = math.hypot(p_se / pm, lat_se / lat)
    s = pm / lat
    t = _t(min(p.size, len(block_wall)) - 1)
    return s, s * math.exp(-t * rel), s * math.exp(t * rel), lat, lat_half


def rounding_interval(value: float, decimals: int) -> tuple[float, float]:
    """The values that print as ``value`` to ``decimals`` decimals: ``value +/- 0.5 10^-d``."""
    h = 0.5 * 10.0 ** (-int(decimals))
    return float(value) - h, float(value) + h


def _blocks(specdec: pd.DataFrame) -> pd.DataFrame:
    b = specdec[specdec["seq"] == 0].copy()
    b["wall_s"] = b["draft_s"] + b["target_s"] + b["verify_s"]
    return b


def cpu_runs(
    traces: Mapping[str, pd.DataFrame],
    card: HardwareCard,
    rng: np.random.Generator,
    *,
    seeds: int = 8,
) -> pd.DataFrame:
    """:func:`specsim.validate.forms.predict_runs` on ``traces`` (keys ``specdec``,
    ``autoregressive``, ``positions``) with ``card``, ``seeds`` simulated streams per run."""
    return predict_runs(
        traces["specdec"], traces["autoregressive"], traces["positions"], card, rng, seeds=seeds
    )


def cpu_rows(
    runs: pd.DataFrame,
    traces: Mapping[str, pd.DataFrame],
    *,
    source: str,
    card_source: str,
) -> list[dict[str, object]]:
    """Per-token latency and speedup of every speculative run, measured (from ``traces``:
    ``specdec``, ``autoregressive``, ``passes``) against the ``replay`` prediction of
    :func:`cpu_runs` (``runs``)."""
    spec, ar = traces["specdec"], traces["autoregressive"]
    blocks = _blocks(spec)
    n_pass = len(traces["passes"])
    fitted = (
        f"{card_source} (fitted on the {n_pass} timed plain passes of {source}/passes.csv, "
        "no speculative run) + this run's accepted counts"
    )
    out: list[dict[str, object]] = []
    for r in runs.itertuples(index=False):
        b = blocks[blocks["run_id"] == r.run_id]
        twin = spec[spec["run_id"] == r.run_id].iloc[0]
        keys = ar["model"] == r.target
        for k in ("dtype", "device", "batch", "temperature", "prompt_len"):
            keys &= ar[k] == twin[k]
        steps = (ar.loc[keys, "forward_s"] + ar.loc[keys, "sample_s"]).to_numpy()
        s, lo, hi, lat, half = speedup_interval(
            steps, b["wall_s"].to_numpy(), b["emitted"].to_numpy()
        )
        how = f"{LEVEL:.0%} t interval, delta method over {len(b)} blocks"
        common = dict(
            family=f"CPU runs, {r.target} + {r.draft} (calibrated card)",
            source=f"{source}/specdec.csv",
            fitted_on=fitted,
        )
        out += run_rows(
            anchor=r.run_id,
            common=common,
            latency=(lat, (lat - half, lat + half), how, float(r.replay_token_s)),
            speedup=(s, (lo, hi), how + f" and {len(steps)} plain steps", float(r.replay_speedup)),
        )
    return out


def real_rows(traces: Mapping[str, pd.DataFrame], *, source: str) -> list[dict[str, object]]:
    """Per-token latency and speedup per (draft, temperature, gamma) cell of the tiny real-text
    runs (pooled over corpora and prompts), predicted from *other* cells' pass times.

    A block costs ``gamma d + t(gamma) + h`` (Leviathan et al. 2023, Sec. 3.3, with the
    verification pass measured rather than assumed equal to one step): ``d`` the draft's
    mean pass time in its cells at the *other* gammas, ``t(gamma)`` and ``h`` the mean
    verification pass and host verification time of blocks at this gamma with the *other*
    drafts (the same target). Blocks per token are the cell's own (its measured
    acceptance); the plain per-token time is the plain twins' (``autoregressive.csv``, same
    temperature). The speedup predicted is plain time / predicted latency.
    """
    blocks, ar = _blocks(traces["specdec"]), traces["autoregressive"]
    out: list[dict[str, object]] = []
    cells = blocks.groupby(["draft", "temperature", "gamma"], sort=True)
    for (draft, temp, gamma), b in cells:
        others = blocks[(blocks["draft"] != draft) & (blocks["gamma"] == gamma)]
        mine = blocks[(blocks["draft"] == draft) & (blocks["gamma"] != gamma)]
        if others.empty or mine.empty:
            raise ValueError(
                f"real_rows: cell {draft}, T {temp}, gamma {gamma} has no other "
                "cell to take pass times from"
            )
        d = float(mine["draft_s"].sum() / mine["gamma"].sum())
        per_block = gamma * d + float(others["target_s"].mean() + others["verify_s"].mean())
        plain = ar[ar["temperature"] == temp]
        steps = (plain["forward_s"] + plain["sample_s"]).to_numpy()
        s, lo, hi, lat, half = speedup_interval(
            steps, b["wall_s"].to_numpy(), b["emitted"].to_numpy()
        )
        pred_lat = per_block * len(b) / float(b["emitted"].sum())
        how = (
            f"{LEVEL:.0%} t interval, delta method over {len(b)} blocks of "
            f"{b['run_id'].nunique()} runs"
        )
        fitted = (
            f"draft passes of {draft} at gamma != {gamma}; verification passes at gamma "
            f"{gamma} of the other drafts; plain twins (autoregressive.csv, T = {temp:g}); "
            "this cell's accepted counts"
        )
        cell = f"{draft} T{temp:g} g{gamma}"
        common = dict(
            family="real tiny models (CPU)", source=f"{source}/specdec.csv", fitted_on=fitted
        )
        out += run_rows(
            anchor=cell,
            common=common,
            latency=(lat, (lat - half, lat + half), how, pred_lat),
            speedup=(
                s,
                (lo, hi),
                how + f" and {len(steps)} plain steps",
                float(steps.mean()) / pred_lat,
            ),
        )
    return out


def cpu_pass_rows(traces: Mapping[str, pd.DataFrame], *, source: str) -> list[dict[str, object]]:
    """The CPU runs predicted from the timed passes themselves, no cost model: what a perfect
    model of pass time (one per model, rows and context) would give.

    Each block costs ``gamma`` one-token draft passes plus one ``gamma + 1``-token target
    pass at the block's context, each the median of the batch-1 passes of ``passes.csv``
    (linear in context between the measured contexts); a plain token costs a one-token target
    pass at each step's context. The run's own accepted counts set the blocks; its timings
    are not used. Host work between passes is not counted (about 1% here).
    """
    spec, ar, passes = traces["specdec"], traces["autoregressive"], traces["passes"]
    med = passes[passes["batch"] == 1].groupby(["model", "new_tokens", "context"])["time_s"]
    med = med.median()

    def t(model: str, new: int, ctx: np.ndarray) -> np.ndarray:
        try:
            s = med.loc[(model, new)]
        except KeyError:
            raise ValueError(
                f"cpu_pass_rows: passes.csv has no batch-1 pass of {model!r} with {new} new tokens"
            ) from None
        return np.interp(ctx, s.index.to_numpy(dtype=float), s.to_numpy(dtype=float))

    out: list[dict[str, object]] = []
    blocks = _blocks(spec)
    for run_id, b in blocks.groupby("run_id", sort=False):
        r = b.iloc[0]
        g, ctx = int(r["gamma"]), b["context"].to_numpy(dtype=float)
        pred = float((g * t(r["draft"], 1, ctx) + t(r["target"], g + 1, ctx)).sum())
        pred /= float(b["emitted"].sum())
        keys = ar["model"] == r["target"]
        for k in ("dtype", "device", "batch", "temperature", "prompt_len"):
            keys &= ar[k] == r[k]
        twin = ar[keys]
        steps = (twin["forward_s"] + twin["sample_s"]).to_numpy()
        plain = float(t(r["target"], 1, twin["context"].to_numpy(dtype=float)).mean())
        s, lo, hi, lat, half = speedup_interval(
            steps, b["wall_s"].to_numpy(), b["emitted"].to_numpy()
        )
        how = f"{LEVEL:.0%} t interval, delta method over {len(b)} blocks"
        common = dict(
            family=f"CPU runs, {r['target']} + {r['draft']} (timed passes)",
            source=f"{source}/specdec.csv",
            fitted_on=f"median batch-1 pass times of {source}/passes.csv (no "
            "speculative run) + this run's accepted counts",
        )
        out += run_rows(
            anchor=run_id,
            common=common,
            latency=(lat, (lat - half, lat + half), how, pred),
            speedup=(s, (lo, hi), how + f" and {len(steps)} plain steps", plain / pred),
        )
    return out
