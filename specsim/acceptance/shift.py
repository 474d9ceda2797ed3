"""Acceptance under shift: the library half of ``specsim study shift``.

**Measured**: the alphas of the tiny real-text pairs
(:func:`specsim.acceptance.realtext.read_alpha_summary`) turned into the walltime
improvement each implies for a draft/target pair with cost coefficient ``c``
and verification factors ``v(gamma)`` (:func:`measured_speedups`: the best
gamma by :func:`specsim.theory.optimal_gamma`, its improvement by
:func:`specsim.theory.walltime_speedup`, Theorem 3.8 of Leviathan et al. 2023
with the cost model's v); what each shift (language, domain, temperature)
costs (:func:`shift_costs`); and Leviathan et al.'s Table 3 beside the pairs
here (:func:`table3_comparison`).

**What-if (synthetic)**: synthetic acceptance processes under temperature,
domain and language shift (:func:`stress_scenarios`, with :func:`softmax`),
simulated at each fixed gamma beside the i.i.d. formula (:func:`what_if_speedups`),
and the best gamma per scenario by simulation and by the i.i.d. formula
(:func:`best_by_scenario`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim import sampling
from specsim.acceptance.processes import (
    AcceptanceProcess,
    DistributionAcceptance,
    MarkovAcceptance,
    TraceAcceptance,
)
from specsim.acceptance.realtext import CORPORA, DRAFTS
from specsim.policies.lookahead import FixedGamma
from specsim.sim import PlainCost, StreamConfig, simulate_stream
from specsim.theory import optimal_gamma, walltime_speedup

__all__ = [
    "HOME",
    "SHIFTS",
    "implied_speedup",
    "measured_speedups",
    "measured_cells",
    "by_temperature",
    "shift_costs",
    "table3_comparison",
    "softmax",
    "stress_scenarios",
    "what_if_speedups",
    "best_by_scenario",
]

HOME: dict[str, str] = {
    "draft-all": "en",
    "draft-en": "en",
    "draft-code": "code",
    "draft-distil": "en",
}
"""Each draft's home corpus (the one it was trained on; English for the general drafts)."""
SHIFTS: tuple[tuple[str, str, str, str], ...] = (
    ("language", "draft-en", "en", "de"),
    ("language", "draft-en", "en", "es"),
    ("language", "draft-en", "en", "it"),
    ("domain", "draft-code", "code", "en"),
    ("domain", "draft-en", "en", "code"),
)
"""(shift, draft, home corpus, shifted corpus): the shifts measured, in domain and language."""
_TABLE3_RATIO = 97.0 / 6.0  # GPT-like 97M target against its 6M draft
_HERE_RATIO = 2.56e6 / 259e3  # the tiny target (2.56M) against a tiny draft (259k)


def implied_speedup(alpha: float, c: float, v: Sequence[float]) -> tuple[int, float]:
    """The best gamma in ``0..len(v) - 1`` for ``alpha`` and its walltime improvement.

    ``optimal_gamma(alpha, c, v)`` and ``walltime_speedup(alpha, gamma, c, v[gamma])``
    (Leviathan et al. 2023, Theorem 3.8 with the cost model's v; i.i.d. acceptance).
    """
    g = int(optimal_gamma(alpha, c, max_gamma=len(v) - 1, v=np.asarray(v)))
    return g, float(walltime_speedup(alpha, g, c, v[g]))


def measured_speedups(
    summary: pd.DataFrame, *, c: float, v: Sequence[float], cards: str
) -> pd.DataFrame:
    """One row per measured cell of ``summary`` (from
    :func:`specsim.acceptance.realtext.read_alpha_summary`), ``part = "measured"``: alpha with its
    95%
    interval, and the best gamma and walltime improvement it implies (:func:`implied_speedup`)
    at cost coefficient ``c`` and verification factors ``v[0..max_gamma]``; the interval's ends
    give ``speedup_low`` and ``speedup_high``. ``cards`` labels the pair and accelerator."""
    rows = []
    for r in summary.itertuples(index=False):
        g, w = implied_speedup(float(r.alpha_mean), c, v)
        rows.append(
            {
                "part": "measured",
                "draft": r.draft,
                "corpus": r.corpus,
                "text": r.text,
                "temperature": float(r.temperature),
                "mean_alpha": float(r.alpha_mean),
                "ci_low": float(r.ci_low),
                "ci_high": float(r.ci_high),
                "acf_1": float(r.acf_1),
                "c": c,
                "gamma": g,
                "speedup": w,
                "speedup_low": implied_speedup(float(r.ci_low), c, v)[1],
                "speedup_high": implied_speedup(float(r.ci_high), c, v)[1],
                "cards": cards,
            }
        )
    return pd.DataFrame(rows)


def measured_cells(df: pd.DataFrame, text: str = "test") -> pd.DataFrame:
    """The rows of ``df`` with ``part = "measured"`` on ``text`` (ValueError without ``part``)."""
    if "part" not in df.columns:
        raise ValueError("shift: the frame has no 'part' column; is it from shift.run?")
    return df[(df["part"] == "measured") & (df["text"] == text)]


def by_temperature(cells: pd.DataFrame, cell: Callable[[pd.Series], str]) -> pd.DataFrame:
    """A wide table of measured cells (from :func:`measured_cells`): one row per draft and
    corpus (in the order of :data:`specsim.acceptance.realtext.DRAFTS` and ``CORPORA``), one column
    ``T = t`` per measured temperature holding ``cell(row)``."""
    temps = sorted(set(cells["temperature"]))
    rows = []
    for d in DRAFTS:
        for corpus in CORPORA:
            g = cells[(cells["draft"] == d) & (cells["corpus"] == corpus)].set_index("temperature")
            if g.empty:
                continue
            row = {"draft": d, "corpus": corpus}
            row.update({f"T = {t:g}": cell(g.loc[t]) for t in temps if t in g.index})
            rows.append(row)
    return pd.DataFrame(rows)


def shift_costs(df: pd.DataFrame, *, temperatures: tuple[float, ...] = (0.0, 1.0)) -> pd.DataFrame:
    """What each shift costs on held-out test text: alpha and implied walltime improvement at
    home and after the shift, and the share of the improvement lost; sorted, costliest first.

    ``df`` holds :func:`measured_speedups`'s rows (other parts are ignored). Language:
    ``draft-en`` on de/es/it against on en; domain: ``draft-code`` on en against on code,
    ``draft-en`` on code against on en (each at ``temperatures``); temperature: each draft on
    its home corpus at T = 0 (greedy) against T = 1.
    """
    m = measured_cells(df).set_index(["draft", "corpus", "temperature"])
    cases = [(k, d, a, b, t, t) for k, d, a, b in SHIFTS for t in temperatures]
    cases += [("temperature", d, h, h, 1.0, 0.0) for d, h in HOME.items()]
    out = []
    for kind, d, a, b, ta, tb in cases:
        home, away = m.loc[(d, a, ta)], m.loc[(d, b, tb)]
        out.append(
            {
                "shift": kind,
                "draft": d,
                "from": f"{a}, T = {ta:g}",
                "to": f"{b}, T = {tb:g}",
                "alpha from": float(home["mean_alpha"]),
                "alpha to": float(away["mean_alpha"]),
                "speedup from": float(home["speedup"]),
                "speedup to": float(away["speedup"]),
                "speedup lost (%)": 100.0 * (1.0 - float(away["speedup"]) / float(home["speedup"])),
            }
        )
    return pd.DataFrame(out).sort_values("speedup lost (%)", ascending=False, ignore_index=True)


def table3_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """Leviathan et al. 2023, Table 3's GPT-like pair (6M draft, 97M target, lm1b) beside each
    draft here on its home corpus: columns ``pair``, ``size ratio``, ``alpha T = 0`` and
    ``alpha T = 1``. ``df`` holds :func:`measured_speedups`'s rows and Table 3's
    (``part = "paper"``, from :func:`specsim.acceptance.realtext.read_table3`); an empty frame when
    it
    has no GPT-like row."""
    paper = df[df["part"] == "paper"] if "alpha_temp0" in df.columns else df.iloc[0:0]
    gpt = paper[paper["draft"] == "GPT-like (6M)"]
    if gpt.empty:
        return pd.DataFrame(columns=["pair", "size ratio", "alpha T = 0", "alpha T = 1"])
    p = gpt.iloc[0]
    rows = [
        {
            "pair": f"{p['target']} / {p['draft']} (Table 3, lm1b)",
            "size ratio": _TABLE3_RATIO,
            "alpha T = 0": float(p["alpha_temp0"]),
            "alpha T = 1": float(p["alpha_temp1"]),
        }
    ]
    m = measured_cells(df)
    for d, home in HOME.items():
        a0 = m[(m["draft"] == d) & (m["corpus"] == home) & (m["temperature"] == 0.0)]
        a1 = m[(m["draft"] == d) & (m["corpus"] == home) & (m["temperature"] == 1.0)]
        if a0.empty or a1.empty:
            continue
        rows.append(
            {
                "pair": f"target 2.56M / {d} 259k (here, {home})",
                "size ratio": _HERE_RATIO,
                "alpha T = 0": float(a0["mean_alpha"].iloc[0]),
                "alpha T = 1": float(a1["mean_alpha"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)


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


def stress_scenarios(
    rng: np.random.Generator,
    *,
    positions: int,
    vocab: int,
    logit_scale: float,
    draft_sharpness: float,
    draft_noise: float,
    temperatures: Sequence[float],
    alpha: float,
    shifted_alpha: Sequence[float],
    shift_fraction: float,
    persistence: float,
    foreign_fractions: Sequence[float],
    foreign_noise: float,
    stretch: int,
) -> list[tuple[str, float, AcceptanceProcess]]:
    """Synthetic ``(stress, level, acceptance process)`` triples, stated as synthetic.

    Temperature: target logits ``N(0, logit_scale^2)`` at ``positions`` positions over
    ``vocab`` tokens, draft logits ``draft_sharpness`` times the target's plus
    ``N(0, draft_noise^2)``, softmaxed at each of ``temperatures`` and replayed
    (:class:`specsim.acceptance.processes.DistributionAcceptance`). Domain shift: a Markov-modulated
    process at ``alpha`` with a share ``shift_fraction`` at each of ``shifted_alpha``
    (:class:`specsim.acceptance.processes.MarkovAcceptance`). Language shift: a trace of the
    temperature-1 per-position alphas in which stretches of ``stretch`` tokens (a share of
    each of ``foreign_fractions``) come from a draft a further ``N(0, foreign_noise^2)`` off
    (:class:`specsim.acceptance.processes.TraceAcceptance`).
    """
    n, v = int(positions), int(vocab)
    z_t = float(logit_scale) * rng.standard_normal((n, v))
    z_d = float(draft_sharpness) * z_t + float(draft_noise) * rng.standard_normal((n, v))
    out: list[tuple[str, float, AcceptanceProcess]] = []
    # Each temperature's pair is computed once (temperature 1 serves the language shift too).
    pairs = {
        float(t): (softmax(z_t, float(t)), softmax(z_d, float(t))) for t in (*temperatures, 1.0)
    }
    for t in temperatures:
        p, q = pairs[float(t)]
        out.append(("temperature", float(t), DistributionAcceptance(target=p, draft=q)))
    a, f = float(alpha), float(shift_fraction)
    for b in shifted_alpha:
        acc = MarkovAcceptance(
            alphas=(a, float(b)), weights=(1.0 - f, f), persistence=float(persistence)
        )
        out.append(("domain shift", float(b), acc))
    p1, q1 = pairs[1.0]
    home = np.asarray(sampling.acceptance_rate(p1, q1))
    z_f = z_d + float(foreign_noise) * rng.standard_normal((n, v))
    away = np.asarray(sampling.acceptance_rate(p1, softmax(z_f, 1.0)))
    stretch = int(stretch)
    for frac in foreign_fractions:
        # A trace of 64 stretches; a share ``frac`` of them (spread evenly) are foreign.
        k = 64
        foreign = np.zeros(k, dtype=bool)
        foreign[np.linspace(0, k, round(float(frac) * k), endpoint=False).astype(int)] = True
        idx = np.arange(k * stretch) % n
        trace = np.where(np.repeat(foreign, stretch), away[idx], home[idx])
        out.append(("language shift", float(frac), TraceAcceptance.from_values(trace)))
    return out


def what_if_speedups(
    scenarios: Sequence[tuple[str, float, AcceptanceProcess]],
    *,
    c: float,
    v: Sequence[float],
    tokens: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Rows ``part = "what-if"`` per (stress, level, gamma = 1..len(v) - 1, method): the
    walltime improvement of a simulated stream of ``tokens`` tokens at fixed gamma
    (:func:`specsim.sim.simulate_stream` with cost ``PlainCost(c, v)``; ``method =
    "simulator"``, with its standard error ``se``) and of the i.i.d. formula at the
    process's mean alpha (:func:`specsim.theory.walltime_speedup`, Theorem 3.8 of
    Leviathan et al. 2023 with the cost model's v; ``method = "i.i.d. formula"``, se 0).

    Each scenario draws one seed from ``rng`` and every gamma replays it (common random
    numbers across gamma). The processes must have a ``mean``.
    """
    cost = PlainCost(c=c, v=tuple(v))
    rows: list[dict[str, object]] = []
    for stress, level, acc in scenarios:
        alpha = float(acc.mean)  # type: ignore[attr-defined]
        seed = int(rng.integers(2**63 - 1))  # common random numbers across gamma
        for g in range(1, len(v)):
            cfg = StreamConfig(
                tokens=tokens, acceptance=acc, policy=FixedGamma(gamma=g), cost=cost, max_gamma=g
            )
            m = simulate_stream(cfg, np.random.default_rng(seed)).metrics()
            base = {
                "part": "what-if",
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
            formula = float(walltime_speedup(alpha, g, c, v[g]))
            rows.append({**base, "method": "i.i.d. formula", "speedup": formula, "se": 0.0})
    return pd.DataFrame(rows)


def best_by_scenario(df: pd.DataFrame) -> pd.DataFrame:
    """Per (stress, level) of the ``part = "what-if"`` rows: mean alpha, the best gamma and
    speedup by simulation and by the formula, and the formula's relative error at its own
    best gamma."""
    out = []
    df = df[df["part"] == "what-if"]
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
