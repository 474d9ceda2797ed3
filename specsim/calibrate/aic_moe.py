"""aiconfigurator's MoE tables: the routed experts' kernel at decode sizes, its floor and its
bandwidth, with held-out errors.

aiconfigurator times one MoE layer's routed experts (``moe_perf.parquet``: the fused expert
kernel of the framework, gate-up and down projections of every expert a batch routes to) by
``num_tokens``, the model's ``hidden_size``, ``inter_size`` (per expert), ``topk``,
``num_experts`` and the expert-parallel group ``moe_ep_size``. :func:`moe_rows` keeps the
shapes of the MoE cards in ``models/lm/`` (:data:`MOE_SHAPES`) at decode and verification
sizes (:data:`MOE_TOKENS`), one GPU of tensor parallelism, the ``balanced`` routing (every
expert takes the same share of the ``T k`` assignments), in the formats of
:data:`MOE_FORMATS`; of the framework versions shipped it reads the one with the most such
rows (the newest on a tie), since a newer version's table is sometimes a partial addition.

**The fit** (:func:`fit_moe`, per weight format and kernel): the time of one layer's experts
on one GPU is

    ``t = floor_s + n * bytes_per_expert / (efficiency * bandwidth)``

with ``n`` the experts this GPU reads: under balanced routing ``T k`` assignments over ``E``
experts touch ``min(E, T k)`` of them, ``1 / ep`` of those on each GPU, at least one
(:func:`local_experts`); ``bytes_per_expert`` the gate, up and down matrices' weights
(``3 x hidden x inter``) at the format's bytes per weight
(:data:`specsim.cost.quant.WEIGHT_FORMATS`,
scales included); ``bandwidth`` the card's. Linear in ``(floor_s, 1 / efficiency)``: weighted
least squares on the relative error (each row by ``1 / t``), standard errors
``sqrt(diag(s^2 (X^T X)^-1))`` (Seber and Lee, 2003, Section 3.3). Rows past the memory-bound
range (more than :data:`MAX_TOKENS_PER_EXPERT` tokens per touched expert) and rows whose
weights would sit in the L2 cache (under :data:`MIN_READ_BYTES`) are left out.

**What the cost model assumes today** (:func:`current_seconds`): no floor, and the device
part's memory efficiency on the same bytes. :func:`moe_holdout` fits on alternate shapes and
predicts the others, both ways, against that assumption on the same held-out rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specsim.calibrate.aic_tables import (
    SYSTEMS,
    check_pair,
    read_table,
    timing_columns,
    version_key,
)
from specsim.cards import load_hardware
from specsim.cost.quant import WEIGHT_FORMATS

__all__ = [
    "MOE_SHAPES",
    "MOE_TOKENS",
    "MOE_FORMATS",
    "MAX_TOKENS_PER_EXPERT",
    "MIN_READ_BYTES",
    "MoeFit",
    "moe_table",
    "moe_rows",
    "local_experts",
    "expert_bytes",
    "fit_moe",
    "current_seconds",
    "moe_holdout",
    "extract_moe",
    "MoeChoice",
    "choose_moe",
]

MOE_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "deepseek-v3": (7168, 2048, 256, 8),
    "qwen3-235b-a22b": (4096, 1536, 128, 8),
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "mixtral-8x7b": (4096, 14336, 8, 2),
}
"""``(hidden_size, inter_size, num_experts, topk)`` of the MoE model cards kept, by card."""

MOE_TOKENS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
"""The ``num_tokens`` kept: a decode or verification pass's new tokens over its batch."""

MOE_FORMATS: dict[str, str] = {"bfloat16": "bfloat16", "fp8_block": "float8", "nvfp4": "nvfp4"}
"""aiconfigurator ``moe_dtype`` -> specsim weight format (``fp8_block``: fp8 weights with
128 x 128 block scales, DeepSeek-V3's released format)."""

MAX_TOKENS_PER_EXPERT = 16.0
"""Tokens per touched expert above which a row is left out of the fit: past it the expert
GEMMs leave the memory-bound range the formula prices (the rows of a 16-row tensor-core tile
are filled)."""

MIN_READ_BYTES = 256e6
"""Bytes of expert weights a row reads on its GPU below which it is left out of the fit: a
collector times one layer's call again and again, so weights that fit in the L2 cache are
read from it, not from memory, where in a decode step every other layer's weights come in
between. 256 MB is twice the largest L2 of the tables' GPUs (B200: 126 MB, against 50 MB on
the H100 and 40 MB on the A100; chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut,
"Cache and Memory Access")."""


def moe_table(root: Path, system: str, backend: str) -> Path:
    """The ``moe_perf.parquet`` of ``system`` and ``backend`` with the most kept rows (module
    docstring); a ValueError naming what is not shipped."""
    check_pair(system, backend)
    found = sorted(
        (root / "data" / system / "moe" / backend).glob("*/moe_perf.parquet"),
        key=lambda p: version_key(p.parent.name),
    )
    if not found:
        raise ValueError(
            f"aiconfigurator: system {system!r} backend {backend!r} ships no MoE table "
            f"(moe/{backend}/*/moe_perf.parquet)"
        )
    counts = [len(_keep(read_table(p))) for p in found]
    best = max(range(len(found)), key=lambda i: (counts[i], i))
    if counts[best] == 0:
        raise ValueError(
            f"aiconfigurator: no MoE table of {system!r} {backend!r} has rows of the kept "
            f"shapes {sorted(MOE_SHAPES)}"
        )
    return found[best]


def _keep(df: pd.DataFrame) -> pd.DataFrame:
    shapes = set(MOE_SHAPES.values())
    key = zip(df["hidden_size"], df["inter_size"], df["num_experts"], df["topk"], strict=True)
    keep = pd.Series([k in shapes for k in key], index=df.index)
    keep &= df["moe_dtype"].isin(list(MOE_FORMATS)) & df["num_tokens"].isin(list(MOE_TOKENS))
    keep &= (df["moe_tp_size"] == 1) & (df["distribution"] == "balanced")
    return df.loc[keep]


def moe_rows(root: Path, system: str, backend: str) -> pd.DataFrame:
    """The kept MoE rows of ``system`` and ``backend``: ``model`` (the card whose shape it
    is), ``weights``, ``kernel``, the shape, ``ep``, ``tokens``, ``time_s`` (``latency`` /
    1000: milliseconds per call, as every table), source and row."""
    path = moe_table(root, system, backend)
    rows = _keep(read_table(path))
    by_shape = {v: k for k, v in MOE_SHAPES.items()}
    key = zip(
        rows["hidden_size"], rows["inter_size"], rows["num_experts"], rows["topk"], strict=True
    )
    out = pd.DataFrame(
        {
            "sweep": f"aic-{system}-{backend}-moe",
            "hardware": SYSTEMS[system],
            "model": [by_shape[k] for k in key],
            "kernel": rows["kernel_source"].astype(str),
            "weights": rows["moe_dtype"].map(MOE_FORMATS),
            "hidden": rows["hidden_size"].astype(int),
            "inter": rows["inter_size"].astype(int),
            "experts": rows["num_experts"].astype(int),
            "topk": rows["topk"].astype(int),
            "ep": rows["moe_ep_size"].astype(int),
            "tokens": rows["num_tokens"].astype(int),
            **timing_columns(rows, root=root, path=path, backend=backend),
        }
    )
    cols = ["weights", "kernel", "model", "ep", "tokens"]
    return out.sort_values(cols).reset_index(drop=True)


def local_experts(rows: pd.DataFrame) -> np.ndarray:
    """Experts one GPU reads under balanced routing: ``max(1, min(E, T k) / ep)``."""
    touched = np.minimum(rows["experts"], rows["tokens"] * rows["topk"]).to_numpy(float)
    return np.maximum(1.0, touched / rows["ep"].to_numpy(float))


def expert_bytes(rows: pd.DataFrame) -> np.ndarray:
    """One expert's gate, up and down weights in bytes, at each row's format."""
    keys = list(zip(rows["weights"], rows["hidden"], strict=True))
    per = {
        (w, h): WEIGHT_FORMATS[w].bytes_per_weight(d_model=int(h), group_size=None)
        for w, h in set(keys)
    }  # a few formats and widths: each priced once
    widths = np.array([per[k] for k in keys])
    return 3.0 * rows["hidden"].to_numpy(float) * rows["inter"].to_numpy(float) * widths


def _design(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(X, t)``: columns 1 and the seconds at full bandwidth; rows in the memory-bound range."""
    cards = {h: load_hardware(h).mem_bandwidth for h in set(rows["hardware"])}
    bandwidth = rows["hardware"].map(cards).to_numpy(float)
    seconds = local_experts(rows) * expert_bytes(rows) / bandwidth
    return np.column_stack([np.ones(len(rows)), seconds]), rows["time_s"].to_numpy(float)


def _bound(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows the fit prices: memory-bound (at most :data:`MAX_TOKENS_PER_EXPERT` tokens
    per touched expert) and read from memory (at least :data:`MIN_READ_BYTES`)."""
    assigned = rows["tokens"] * rows["topk"]
    per_expert = (assigned / np.minimum(rows["experts"], assigned)).to_numpy(float)
    read = local_experts(rows) * expert_bytes(rows)
    return rows.loc[(per_expert <= MAX_TOKENS_PER_EXPERT) & (read >= MIN_READ_BYTES)]


@dataclass(frozen=True)
class MoeFit:
    """One format and kernel's fit: the floor per layer call (seconds), the bandwidth
    fraction, their standard errors, the rows' count and residual degrees of freedom."""

    weights: str
    kernel: str
    floor_s: float
    floor_se: float
    efficiency: float
    efficiency_se: float
    rows: int
    dof: int

    def seconds(self, rows: pd.DataFrame) -> np.ndarray:
        """The fitted time of each of ``rows``."""
        X, _ = _design(rows)
        return self.floor_s + X[:, 1] / self.efficiency


def fit_moe(rows: pd.DataFrame) -> list[MoeFit]:
    """One :class:`MoeFit` per (weight format, kernel) of ``rows`` (module docstring); a
    ValueError naming a group without two shapes or degrees of freedom."""
    if rows.empty:
        raise ValueError("aiconfigurator MoE fit: no rows")
    fits = []
    for (w, k), g in _bound(rows).groupby(["weights", "kernel"], sort=True):
        X, t = _design(g)
        n, p = X.shape
        if n - p < 1 or np.linalg.matrix_rank(X) < p:
            raise ValueError(
                f"aiconfigurator MoE fit: {w} {k}: {n} rows do not identify a floor and a "
                "bandwidth (no degree of freedom)"
            )
        Xw, tw = X / t[:, None], np.ones(n)
        beta, *_ = np.linalg.lstsq(Xw, tw, rcond=None)
        s2 = float(np.sum((tw - Xw @ beta) ** 2)) / (n - p)
        se = np.sqrt(np.diag(s2 * np.linalg.inv(Xw.T @ Xw)))
        eff = 1.0 / beta[1]
        fits.append(
            MoeFit(
                weights=str(w),
                kernel=str(k),
                floor_s=float(beta[0]),
                floor_se=float(se[0]),
                efficiency=float(eff),
                efficiency_se=float(se[1] * eff**2),
                rows=n,
                dof=n - p,
            )
        )
    return fits


def current_seconds(rows: pd.DataFrame, memory_efficiency: float) -> np.ndarray:
    """What the cost model prices the rows at today: no floor, ``memory_efficiency`` (the
    device part's) on the same bytes."""
    X, _ = _design(rows)
    return X[:, 1] / memory_efficiency


def moe_holdout(rows: pd.DataFrame, memory_efficiency: float) -> pd.DataFrame:
    """Per (format, kernel): the median and worst held-out |error| of the fit and of the
    current assumption, two folds of alternate model shapes, each predicting the other."""
    rows = _bound(rows)
    out = []
    for (w, k), g in rows.groupby(["weights", "kernel"], sort=True):
        models = sorted(set(g["model"]))
        if len(models) < 2:
            continue
        errs, base = [], []
        for fold in (models[0::2], models[1::2]):
            train, test = g[g["model"].isin(fold)], g[~g["model"].isin(fold)]
            try:
                (fit,) = fit_moe(train)
            except ValueError:
                continue
            measured = test["time_s"].to_numpy(float)
            errs.append(np.abs(fit.seconds(test) / measured - 1.0))
            base.append(np.abs(current_seconds(test, memory_efficiency) / measured - 1.0))
        if errs:
            e, b = np.concatenate(errs), np.concatenate(base)
            out.append(
                {
                    "weights": w,
                    "kernel": k,
                    "rows": len(e),
                    "fitted_median": float(np.median(e)),
                    "fitted_worst": float(e.max()),
                    "current_median": float(np.median(b)),
                    "current_worst": float(b.max()),
                }
            )
    return pd.DataFrame(out)


def extract_moe(system: str, backend: str, *, root: Path, out: Path) -> Path:
    """Write the kept MoE rows of ``system`` and ``backend`` as ``<system>-<backend>-moe.csv``
    under ``out``; the path."""
    path = out / f"{system}-{backend}-moe.csv"
    moe_rows(root, system, backend).to_csv(path, index=False, float_format="%.6g")
    return path


@dataclass(frozen=True)
class MoeChoice:
    """The fit a device part takes for one format of routed experts: its kernel's
    :class:`MoeFit`, the held-out median |error| of the fit and of the current assumption,
    and whether it is committed (physical, and better out of sample)."""

    fit: MoeFit
    fitted_median: float
    current_median: float

    @property
    def committed(self) -> bool:
        f = self.fit
        better = self.fitted_median < self.current_median
        return f.efficiency <= 1.0 and f.floor_s >= 0.0 and better


def choose_moe(rows: pd.DataFrame, memory_efficiency: float) -> list[MoeChoice]:
    """Per format of ``rows``: the kernel with a held-out comparison and a physical fit
    (bandwidth fraction at most 1, floor at least 0) fitted on the most rows, ties to the
    smaller held-out error (the framework's main lane: its other kernels are alternatives
    the tables also time); formats without one are left out."""
    if rows.empty:
        return []
    fits = {(f.weights, f.kernel): f for f in fit_moe(rows)}
    ho = moe_holdout(rows, memory_efficiency)
    out = []
    for w, g in ho.groupby("weights", sort=True):
        cands = [
            (fits[(w, k)], fm, cm)
            for k, fm, cm in zip(g["kernel"], g["fitted_median"], g["current_median"], strict=True)
            if fits[(w, k)].efficiency <= 1.0 and fits[(w, k)].floor_s >= 0.0
        ]
        if cands:
            fit, fm, cm = max(cands, key=lambda c: (c[0].rows, -c[1]))
            out.append(MoeChoice(fit=fit, fitted_median=float(fm), current_median=float(cm)))
    return out
