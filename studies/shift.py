"""Acceptance under stress: temperature, domain shift and language shift.

What each stress does to the speedup, to the best gamma, and to the error of
the i.i.d. formula (Theorem 3.8 with the cost model's v, evaluated at the mean
alpha; Leviathan et al. 2023, Sections 3.1 and 3.3). The cost parameters c and
v(gamma) come from real cards (:func:`specsim.costgrid.cost_coefficient`,
:func:`specsim.costgrid.verification_factor`) so that the only difference
between formula and simulator is the acceptance process:

- **temperature**: a target and a draft give logit vectors at ``positions``
  positions (synthetic, stated as such: target logits ``N(0, logit_scale^2)``;
  draft logits ``draft_sharpness`` times the target's plus ``N(0, draft_noise^2)``,
  a smaller model that is less sure of itself, which reproduces the drop of
  alpha from T = 0 to T = 1 of the paper's Table 3, e.g. 0.75 to 0.62 for
  T5-small on EnDe). At temperature T
  both are softmaxed at T and each position's alpha is ``sum min(p, q)``
  (:func:`specsim.sampling.acceptance_rate`); T = 0 is greedy decoding (one-hot
  rows: accepted iff the argmaxes agree). The simulator replays the pairs
  (:class:`specsim.acceptance.DistributionAcceptance`).
- **domain shift**: a Markov-modulated process
  (:class:`specsim.acceptance.MarkovAcceptance`) that spends ``shift_fraction``
  of the text in a shifted domain with alpha ``shifted_alpha`` (stretches of
  mean length ``1 / (1 - persistence)`` tokens) and the rest at ``alpha``.
- **language shift**: a replayed trace (:class:`specsim.acceptance.TraceAcceptance`)
  of per-position alphas from the temperature-1 pairs, in which stretches of
  ``stretch`` tokens (a share ``foreign_fractions`` of the trace) come from a
  draft whose logits are a further ``N(0, foreign_noise^2)`` off in that language.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from numpy.typing import NDArray

from specsim import sampling
from specsim.acceptance import (
    AcceptanceProcess,
    DistributionAcceptance,
    MarkovAcceptance,
    TraceAcceptance,
)
from specsim.plots import STYLE_CYCLE, describe, figure, legend_outside
from specsim.sim import PlainCost
from specsim.theory import walltime_speedup

from ._common import (
    check_positive_int,
    check_probability,
    md_table,
    plain_cost_from_cards,
    stream_metrics,
)

__all__ = ["Config", "run", "figures", "summary", "softmax", "best_by_scenario"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study shift --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    draft: str = "llama-3.2-1b"
    hardware: str = "h200"
    tensor_parallel: int = 2
    context: int = 1024
    max_gamma: int = 10
    tokens: int = 40000
    fast_tokens: int = 6000
    vocab: int = 2048
    positions: int = 256
    logit_scale: float = 6.0
    draft_sharpness: float = 0.6
    draft_noise: float = 0.5
    temperatures: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    alpha: float = 0.8
    shifted_alpha: tuple[float, ...] = (0.8, 0.6, 0.4, 0.2)
    shift_fraction: float = 0.3
    persistence: float = 0.98
    foreign_fractions: tuple[float, ...] = (0.0, 0.25, 0.5)
    foreign_noise: float = 3.0
    stretch: int = 64

    def __post_init__(self) -> None:
        check_probability(
            [self.alpha, self.shift_fraction, self.persistence],
            "alpha, shift_fraction and persistence",
        )
        check_probability(self.shifted_alpha, "shifted_alpha")
        check_probability(self.foreign_fractions, "foreign_fractions")
        for key in (
            "max_gamma",
            "tokens",
            "fast_tokens",
            "vocab",
            "positions",
            "stretch",
            "context",
            "tensor_parallel",
        ):
            check_positive_int(getattr(self, key), key)
        if any(t < 0 for t in self.temperatures):
            raise ValueError(f"temperatures must be >= 0, got {self.temperatures!r}")


def softmax(logits: NDArray[np.float64], temperature: float) -> NDArray[np.float64]:
    """Rows of ``softmax(logits / T)``; at T = 0 the one-hot argmax (greedy decoding)."""
    if temperature < 0 or not np.isfinite(temperature):
        raise ValueError(f"temperature: expected a finite value >= 0, got {temperature!r}")
    if temperature == 0.0:
        out = np.zeros_like(logits)
        out[np.arange(logits.shape[0]), np.argmax(logits, axis=-1)] = 1.0
        return out
    z = logits / temperature
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=-1, keepdims=True))


def _scenarios(cfg: Config, rng: np.random.Generator) -> list[tuple[str, float, AcceptanceProcess]]:
    n, v = int(cfg.positions), int(cfg.vocab)
    z_t = float(cfg.logit_scale) * rng.standard_normal((n, v))
    z_d = float(cfg.draft_sharpness) * z_t + float(cfg.draft_noise) * rng.standard_normal((n, v))
    out: list[tuple[str, float, AcceptanceProcess]] = []
    for t in cfg.temperatures:
        p, q = softmax(z_t, float(t)), softmax(z_d, float(t))
        out.append(("temperature", float(t), DistributionAcceptance(target=p, draft=q)))
    a, f = float(cfg.alpha), float(cfg.shift_fraction)
    for b in cfg.shifted_alpha:
        out.append(
            (
                "domain shift",
                float(b),
                MarkovAcceptance(
                    alphas=(a, float(b)),
                    weights=(1.0 - f, f),
                    persistence=float(cfg.persistence),
                ),
            )
        )
    home = np.asarray(sampling.acceptance_rate(softmax(z_t, 1.0), softmax(z_d, 1.0)))
    z_f = z_d + float(cfg.foreign_noise) * rng.standard_normal((n, v))
    away = np.asarray(sampling.acceptance_rate(softmax(z_t, 1.0), softmax(z_f, 1.0)))
    stretch = int(cfg.stretch)
    for frac in cfg.foreign_fractions:
        # A trace of 64 stretches; a share ``frac`` of them (spread evenly) are foreign.
        k = 64
        foreign = np.zeros(k, dtype=bool)
        foreign[np.linspace(0, k, round(float(frac) * k), endpoint=False).astype(int)] = True
        idx = np.arange(k * stretch) % n
        trace = np.where(np.repeat(foreign, stretch), away[idx], home[idx])
        out.append(("language shift", float(frac), TraceAcceptance.from_values(trace)))
    return out


def _mean_alpha(acc: AcceptanceProcess) -> float:
    return float(acc.mean)  # type: ignore[attr-defined]


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Rows per (stress, level, gamma, method): simulator speedup with SE, i.i.d. formula."""
    cfg = config
    gmax = int(cfg.max_gamma)
    tokens = int(cfg.fast_tokens if fast else cfg.tokens)
    c, v = plain_cost_from_cards(
        target=cfg.target,
        draft=cfg.draft,
        hardware=cfg.hardware,
        context=int(cfg.context),
        max_gamma=gmax,
        tensor_parallel=int(cfg.tensor_parallel),
    )
    cost = PlainCost(c=c, v=v)
    rows: list[dict[str, Any]] = []
    for stress, level, acc in _scenarios(cfg, rng):
        alpha = _mean_alpha(acc)
        seed = int(rng.integers(2**63 - 1))  # common random numbers across gamma
        for g in range(1, gmax + 1):
            m = stream_metrics(
                acc, gamma=g, cost=cost, tokens=tokens, rng=np.random.default_rng(seed)
            )
            base = {
                "stress": stress,
                "level": level,
                "mean_alpha": alpha,
                "gamma": g,
                "c": c,
                "v": v[g],
            }
            rows.append(
                {
                    **base,
                    "method": "simulator",
                    "speedup": float(m["speedup"]),
                    "se": float(m["speedup_se"]),
                }
            )
            rows.append(
                {
                    **base,
                    "method": "i.i.d. formula",
                    "speedup": float(walltime_speedup(alpha, g, c, v[g])),
                    "se": 0.0,
                }
            )
    return pd.DataFrame(rows)


def best_by_scenario(df: pd.DataFrame) -> pd.DataFrame:
    """Per (stress, level): mean alpha, the best gamma and speedup by simulation and by the
    formula, and the formula's relative error at its own best gamma."""
    out = []
    for (stress, level), g in df.groupby(["stress", "level"], sort=False):
        sim = g[g["method"] == "simulator"].set_index("gamma")
        th = g[g["method"] == "i.i.d. formula"].set_index("gamma")
        gs, gt = int(sim["speedup"].idxmax()), int(th["speedup"].idxmax())
        out.append(
            {
                "stress": stress,
                "level": level,
                "mean alpha": float(g["mean_alpha"].iloc[0]),
                "best gamma (sim)": gs,
                "speedup (sim)": float(sim.loc[gs, "speedup"]),
                "se": float(sim.loc[gs, "se"]),
                "best gamma (formula)": gt,
                "speedup (formula)": float(th.loc[gt, "speedup"]),
                "sim at formula's gamma": float(sim.loc[gt, "speedup"]),
                "formula error": float(th.loc[gt, "speedup"] / sim.loc[gt, "speedup"] - 1.0),
            }
        )
    return pd.DataFrame(out)


_LEVEL = {
    "temperature": "temperature T (0: greedy)",
    "domain shift": "alpha in the shifted domain (probability)",
    "language shift": "share of the trace in the foreign language (fraction)",
}
_SIM, _FORMULA = STYLE_CYCLE[0], STYLE_CYCLE[1]


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Per stress: mean alpha, best speedup (sim and formula), and the formula's error; every
    panel has the stress level on its x axis, ascending left to right."""
    best = best_by_scenario(df)
    out: dict[str, Figure] = {}
    for stress, b in best.groupby("stress", sort=False):
        b = b.sort_values("level")
        x = b["level"].to_numpy(dtype=float)
        fig, axes = figure(3, width=4.3, height=4.0)
        axes[0].plot(x, b["mean alpha"], color="0.2", marker="o", label="_mean alpha")
        axes[0].set_ylabel("mean acceptance rate alpha (probability)")
        axes[0].set_title("acceptance", fontsize=10)
        axes[1].errorbar(x, b["speedup (sim)"], yerr=1.96 * b["se"], capsize=2,
                         label="simulator at its best gamma (95% CI)", **_SIM.line())  # fmt: skip
        axes[1].plot(x, b["speedup (formula)"], label="i.i.d. formula at its best gamma",
                     **_FORMULA.line())  # fmt: skip
        for _, r in b.iterrows():
            axes[1].annotate(
                f"{r['best gamma (sim)']}/{r['best gamma (formula)']}",
                (r["level"], r["speedup (sim)"]),
                fontsize=7,
                xytext=(3, 4),
                textcoords="offset points",
            )
        axes[1].set_ylabel("walltime improvement (x)")
        axes[1].set_title("best speedup (labels: best gamma sim/formula)", fontsize=9)
        width = 0.6 * (float(np.diff(x).min()) if len(x) > 1 else 1.0)
        axes[2].bar(x, 100 * b["formula error"], width=width, color=_FORMULA.color,
                    hatch=_FORMULA.hatch, edgecolor="0.15", linewidth=0.6)  # fmt: skip
        axes[2].axhline(0.0, color="0.3", linewidth=0.8)
        axes[2].set_ylabel("i.i.d. formula error against the simulator (%)")
        axes[2].set_title("error of the i.i.d. formula", fontsize=10)
        for ax in axes:
            ax.set_xlabel(_LEVEL.get(str(stress), "stress level"))
            ax.set_xticks(x, [f"{v:g}" for v in x])
        legend_outside(fig, ncols=2)
        out[f"shift_{str(stress).replace(' ', '_')}"] = describe(
            fig,
            title=f"Acceptance under stress, {stress}: the simulator against the i.i.d. formula",
            alt=f"Three panels against the {_LEVEL.get(str(stress), 'level').split(' (')[0]}, "
            f"ascending from {x.min():g} to {x.max():g}: the mean acceptance rate; the best "
            "walltime improvement by the simulator (solid, circles, 95% intervals) and by the "
            "i.i.d. formula (dashed, squares), labelled with each one's best gamma; and "
            "bars of the formula's relative error against the simulator in percent.",
        )
    return out


def summary(df: pd.DataFrame) -> str:
    """The best-gamma table and the largest errors of the i.i.d. formula, from ``df``."""
    best = best_by_scenario(df)
    r0 = df.iloc[0]
    lines = [f"### Acceptance under stress (c = {r0['c']:.3f})", "", md_table(best), ""]
    for stress, b in best.groupby("stress", sort=False):
        worst = b.loc[b["formula error"].abs().idxmax()]
        lines.append(
            f"- {stress}: mean alpha from {b['mean alpha'].max():.3f} to "
            f"{b['mean alpha'].min():.3f}; best simulated speedup from "
            f"{b['speedup (sim)'].max():.2f}x to {b['speedup (sim)'].min():.2f}x; best gamma "
            f"from {int(b['best gamma (sim)'].max())} to {int(b['best gamma (sim)'].min())}; the "
            f"i.i.d. formula is off by at most {worst['formula error']:+.1%} (at level "
            f"{worst['level']:g})."
        )
    return "\n".join(lines) + "\n"
