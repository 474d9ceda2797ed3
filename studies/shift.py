"""Acceptance under stress: temperature, domain shift and language shift.

**Measured** (the default's first part): alpha = sum min(p, q) measured
on the tiny draft/target pairs trained on real text (``models/measured/real/``,
read by :func:`specsim.acceptance.realtext.read_alpha_summary`; ``docs/real-acceptance.md``),
for each draft, corpus and temperature with its 95% interval, and the walltime
improvement each alpha implies on real cards (``measured_target`` with
``measured_draft`` on ``measured_hardware``; :func:`specsim.acceptance.shift.measured_speedups`),
i.e. *if* a 68M draft agreed with a 7B target as these tiny pairs agree; which
shift (language, domain, temperature) costs most (:func:`specsim.acceptance.shift.shift_costs`);
and Leviathan et al.'s Table 3 (GPT-like 6M against 97M on lm1b) beside the pairs
here (:func:`specsim.acceptance.shift.table3_comparison`), read from the data folder beside
the repository (:data:`LEVIATHAN_TABLE3`) when that file is present.

**What-if (synthetic)**, the second part (``what_if = false`` leaves it out):
what each stress does to the speedup, to the best gamma, and to the error of
the i.i.d. formula (Theorem 3.8 with the cost model's v, evaluated at the mean
alpha; Leviathan et al. 2023, Sections 3.1 and 3.3), with c and v(gamma) from
real cards so that the only difference between formula and simulator is the
acceptance process (:func:`specsim.acceptance.shift.what_if_speedups`). The processes are
synthetic, stated as such (:func:`specsim.acceptance.shift.stress_scenarios`):

- **temperature**: synthetic target logits ``N(0, logit_scale^2)`` and draft logits
  ``draft_sharpness`` times the target's plus ``N(0, draft_noise^2)`` (a smaller model
  that is less sure of itself: alpha drops from T = 0 to T = 1 as in the paper's
  Table 3), softmaxed at each temperature (T = 0: greedy) and replayed;
- **domain shift**: a Markov-modulated process that spends ``shift_fraction`` of the
  text at ``shifted_alpha`` (stretches of mean ``1 / (1 - persistence)`` tokens);
- **language shift**: a replayed trace of the temperature-1 per-position alphas in
  which stretches of ``stretch`` tokens (a share ``foreign_fractions``) come from a
  draft a further ``N(0, foreign_noise^2)`` off in that language.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.acceptance.realtext import read_alpha_summary, read_table3
from specsim.acceptance.shift import (
    best_by_scenario,
    measured_speedups,
    shift_costs,
    softmax,
    stress_scenarios,
    what_if_speedups,
)
from specsim.plots.figures import STYLE_CYCLE, describe, figure, legend_outside

from ._common import (
    check_positive_int,
    check_probability,
    md_table,
    plain_cost_from_cards,
    setting,
)
from ._shift_measured import measured_figures, measured_summary

__all__ = [
    "Config",
    "run",
    "figures",
    "summary",
    "softmax",
    "best_by_scenario",
    "measured_rows",
    "shift_costs",
    "LEVIATHAN_TABLE3",
]

LEVIATHAN_TABLE3 = (
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / ("leviathan2023_table3.csv")
)
"""Leviathan et al. 2023, Table 3 (beside the repository); the study says so when absent."""


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
    vocab: int = setting(2048, "synthetic logits: vocabulary size", "tokens")
    positions: int = setting(256, "synthetic logits: positions sampled per temperature", "count")
    logit_scale: float = setting(6.0, "synthetic logits: standard deviation of the target's logits")
    draft_sharpness: float = setting(
        0.6, "synthetic logits: the draft's logits are this times the target's, plus noise"
    )
    draft_noise: float = setting(
        0.5, "synthetic logits: standard deviation of the draft's added noise"
    )
    temperatures: tuple[float, ...] = setting(
        (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0), "sampling temperatures compared (0: greedy)"
    )
    alpha: float = 0.8
    shifted_alpha: tuple[float, ...] = setting(
        (0.8, 0.6, 0.4, 0.2), "domain shift: acceptance in the shifted stretches", "probability"
    )
    shift_fraction: float = setting(
        0.3, "domain shift: share of the text that is shifted", "fraction"
    )
    persistence: float = 0.98
    foreign_fractions: tuple[float, ...] = setting(
        (0.0, 0.25, 0.5), "language shift: shares of foreign stretches compared", "fraction"
    )
    foreign_noise: float = setting(
        3.0, "language shift: how far the draft's logits are off in foreign stretches"
    )
    stretch: int = setting(64, "language shift: length of a foreign stretch", "tokens")
    measured_target: str = setting("llama-2-7b", "target card the measured alphas are priced on")
    measured_draft: str = setting("llama-68m", "draft card the measured alphas are priced on")
    measured_hardware: str = setting(
        "a100-80gb", "accelerator card the measured alphas are priced on"
    )
    measured_summary: str = setting("", "another alpha-summary.csv (empty: the committed one)")
    what_if: bool = setting(True, "run the synthetic what-if part")

    def __post_init__(self) -> None:
        check_probability(
            [self.alpha, self.shift_fraction, self.persistence],
            "alpha, shift_fraction and persistence",
        )
        check_probability(self.shifted_alpha, "shifted_alpha")
        check_probability(self.foreign_fractions, "foreign_fractions")
        ints = ("max_gamma", "tokens", "fast_tokens", "vocab", "positions", "stretch", "context")
        for key in (*ints, "tensor_parallel"):
            check_positive_int(getattr(self, key), key)
        if any(t < 0 for t in self.temperatures):
            raise ValueError(f"temperatures must be >= 0, got {self.temperatures!r}")


def measured_rows(cfg: Config) -> pd.DataFrame:
    """One row per measured cell (``part = "measured"``,
    :func:`specsim.acceptance.shift.measured_speedups`
    on the configured cards), then Table 3's rows (``part = "paper"``) when present."""
    summary = read_alpha_summary(cfg.measured_summary or None)
    c, v = plain_cost_from_cards(
        target=cfg.measured_target,
        draft=cfg.measured_draft,
        hardware=cfg.measured_hardware,
        context=int(cfg.context),
        max_gamma=int(cfg.max_gamma),
    )
    cards = f"{cfg.measured_target} / {cfg.measured_draft} on {cfg.measured_hardware}"
    frames = [measured_speedups(summary, c=c, v=v, cards=cards)]
    if LEVIATHAN_TABLE3.is_file():
        frames.append(read_table3(LEVIATHAN_TABLE3))
    return pd.concat(frames, ignore_index=True)


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Measured rows (see :func:`measured_rows`), then, with ``what_if``, the synthetic rows
    (``part = "what-if"``) per (stress, level, gamma, method): simulator speedup with SE and
    the i.i.d. formula."""
    cfg = config
    measured = measured_rows(cfg)
    if not cfg.what_if:
        return measured
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
    scenarios = stress_scenarios(
        rng,
        positions=cfg.positions,
        vocab=cfg.vocab,
        logit_scale=cfg.logit_scale,
        draft_sharpness=cfg.draft_sharpness,
        draft_noise=cfg.draft_noise,
        temperatures=cfg.temperatures,
        alpha=cfg.alpha,
        shifted_alpha=cfg.shifted_alpha,
        shift_fraction=cfg.shift_fraction,
        persistence=cfg.persistence,
        foreign_fractions=cfg.foreign_fractions,
        foreign_noise=cfg.foreign_noise,
        stretch=cfg.stretch,
    )
    whatif = what_if_speedups(scenarios, c=c, v=v, tokens=tokens, rng=rng)
    return pd.concat([measured, whatif], ignore_index=True)


_LEVEL = {
    "temperature": "temperature T (0: greedy)",
    "domain shift": "alpha in the shifted domain (probability)",
    "language shift": "share of the trace in the foreign language (fraction)",
}
_SIM, _FORMULA = STYLE_CYCLE[0], STYLE_CYCLE[1]


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Measured: alpha against temperature per draft and corpus (95% intervals), and the
    walltime improvement it implies on the cards. What-if, per stress: mean alpha, best
    speedup (sim and formula), and the formula's error; every panel has the stress level on
    its x axis, ascending left to right."""
    out = measured_figures(df)
    if "stress" not in df.columns:
        return out
    best = best_by_scenario(df)
    for stress, b in best.groupby("stress", sort=False):
        b = b.sort_values("level")
        x = b["level"].to_numpy(dtype=float)
        fig, axes = figure(3, width=4.3, height=4.0)
        axes[0].plot(x, b["mean alpha"], color="0.2", marker="o", label="_mean alpha")
        axes[0].set_ylabel("mean acceptance rate alpha (probability)")
        axes[0].set_title("acceptance", fontsize=10)
        axes[1].errorbar(
            x,
            b["speedup (sim)"],
            yerr=1.96 * b["se"],
            capsize=2,
            label="simulator at its best gamma (95% CI)",
            **_SIM.line(),
        )
        axes[1].plot(
            x, b["speedup (formula)"], label="i.i.d. formula at its best gamma", **_FORMULA.line()
        )
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
        axes[2].bar(
            x,
            100 * b["formula error"],
            width=width,
            color=_FORMULA.color,
            hatch=_FORMULA.hatch,
            edgecolor="0.15",
            linewidth=0.6,
        )
        axes[2].axhline(0.0, color="0.3", linewidth=0.8)
        axes[2].set_ylabel("i.i.d. formula error against the simulator (%)")
        axes[2].set_title("error of the i.i.d. formula", fontsize=10)
        for ax in axes:
            ax.set_xlabel(_LEVEL.get(str(stress), "stress level"))
            ax.set_xticks(x, [f"{v:g}" for v in x])
        legend_outside(fig, ncols=2)
        out[f"shift_{str(stress).replace(' ', '_')}"] = describe(
            fig,
            title=f"What-if (synthetic acceptance), {stress}: the simulator against the "
            "i.i.d. formula",
            alt=f"Three panels against the {_LEVEL.get(str(stress), 'level').split(' (')[0]}, "
            f"ascending from {x.min():g} to {x.max():g}: the mean acceptance rate; the best "
            "walltime improvement by the simulator (solid, circles, 95% intervals) and by the "
            "i.i.d. formula (dashed, squares), labelled with each one's best gamma; and "
            "bars of the formula's relative error against the simulator in percent.",
        )
    return out


def summary(df: pd.DataFrame) -> str:
    """Measured: alpha tables, implied speedups, shift costs and Table 3; what-if: the
    best-gamma table and the largest errors of the i.i.d. formula, from ``df``."""
    lines = measured_summary(df)
    if "stress" not in df.columns:
        return "\n".join(lines)
    best = best_by_scenario(df)
    r0 = df[df["part"] == "what-if"].iloc[0]
    lines += [
        f"### What-if (synthetic acceptance) under stress (c = {r0['c']:.3f})",
        "",
        "Synthetic logits, a Markov-modulated process and a replayed synthetic trace, "
        "labelled as such (module docstring): the i.i.d. formula against the simulator.",
        "",
        md_table(best),
        "",
    ]
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
