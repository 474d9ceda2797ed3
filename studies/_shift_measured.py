"""The shift study's measured part, drawn and told: the alphas of the tiny real-text pairs
against temperature per draft and corpus, the speedups they imply, what each shift costs,
and Leviathan et al.'s Table 3 beside them (``studies/shift.py`` computes the rows)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.acceptance.realtext import CORPORA, DRAFTS
from specsim.acceptance.shift import by_temperature, measured_cells, shift_costs, table3_comparison
from specsim.plots.figures import STYLE_CYCLE, describe, figure, legend_outside

from ._common import md_table

__all__ = ["measured_figures", "measured_summary"]


_CORPUS_NAME = {
    "en": "English",
    "de": "German",
    "es": "Spanish",
    "it": "Italian",
    "code": "Python code",
    "licences": "licences (formal English)",
}
_DRAFT_NAME = {
    "draft-all": "draft-all (every corpus)",
    "draft-en": "draft-en (English only)",
    "draft-code": "draft-code (code only)",
    "draft-distil": "draft-distil (distilled)",
}


def _measured_figure(m: pd.DataFrame, *, y: str, lo: str, hi: str, ylabel: str) -> Figure:
    # Overlapping series get far-apart colours: en and licences, de and it lie together.
    styles = dict(zip(CORPORA, (STYLE_CYCLE[i] for i in (0, 1, 2, 4, 3, 6)), strict=True))
    fig, axes = figure(len(DRAFTS), width=3.4, height=3.6)
    for ax, d in zip(axes, DRAFTS, strict=True):
        for corpus, st in styles.items():
            g = m[(m["draft"] == d) & (m["corpus"] == corpus)].sort_values("temperature")
            if g.empty:
                continue
            err = np.vstack([g[y] - g[lo], g[hi] - g[y]])
            ax.errorbar(
                g["temperature"],
                g[y],
                yerr=err,
                capsize=2,
                markersize=4,
                label=_CORPUS_NAME[str(corpus)],
                **st.line(),
            )
        ax.set_title(_DRAFT_NAME[d], fontsize=10)
        ax.set_xlabel("temperature T (0: greedy)")
        ax.set_ylabel(ylabel)
        temps = sorted(set(m["temperature"]))
        ax.set_xticks(temps, [f"{t:g}" for t in temps])
        ax.grid(True, alpha=0.3)
    lows = [a.get_ylim()[0] for a in axes]
    highs = [a.get_ylim()[1] for a in axes]
    for ax in axes:  # one y scale, so the panels compare at a glance
        ax.set_ylim(min(lows), max(highs))
    legend_outside(fig, ncols=len(CORPORA))
    return fig


def measured_figures(df: pd.DataFrame) -> dict[str, Figure]:
    m = measured_cells(df)
    if m.empty:
        return {}
    cards = str(m["cards"].iloc[0])
    out = {}
    fig = _measured_figure(
        m, y="mean_alpha", lo="ci_low", hi="ci_high", ylabel="mean alpha (probability)"
    )
    out["shift_measured_alpha"] = describe(
        fig,
        title="Measured acceptance rate alpha of the tiny pairs trained on real text, by "
        "draft, test corpus\nand temperature (held-out test text; bars: 95% intervals)",
        alt="Four panels, one per draft (trained on every corpus, on English only, on code "
        "only, distilled from the target), each with one line per test corpus (English, German, "
        "Spanish, Italian, Python code, licences; distinct colours, markers and line styles) "
        "of mean alpha against temperature from 0 to 1.3 with 95% batch-means intervals. "
        "Alpha rises with temperature everywhere; the English-only draft falls on the other "
        "languages and on code, the code-only draft is high only on code.",
    )
    fig = _measured_figure(
        m, y="speedup", lo="speedup_low", hi="speedup_high", ylabel="speedup at the best gamma (x)"
    )
    for ax in fig.axes:
        ax.axhline(1.0, color="0.3", linewidth=0.8, label="_plain decoding")
    out["shift_measured_speedup"] = describe(
        fig,
        title=f"Walltime improvement (speedup) these alphas imply on {cards}\n"
        f"(c = {float(m['c'].iloc[0]):.3f}; at the best gamma; Theorem 3.8 with the cost "
        "model's v; bars: alpha's 95% interval)",
        alt="Four panels, one per draft, with one line per test corpus of the walltime "
        "improvement at the best gamma that the measured mean alpha implies on the real "
        f"cards {cards}, against temperature; bars are the improvements at the ends of "
        "alpha's 95% interval, and a grey line at 1 marks plain decoding.",
    )
    return out


def measured_summary(df: pd.DataFrame) -> list[str]:
    m = measured_cells(df)
    if m.empty:
        return []
    r0 = m.iloc[0]
    lines = [
        "### Measured acceptance: tiny pairs trained on real text (held-out test text)",
        "",
        "Mean alpha = sum min(p, q) and its 95% batch-means interval, from "
        "`models/measured/real/alpha-summary.csv` (`docs/real-acceptance.md`):",
        "",
        md_table(
            by_temperature(
                m, lambda r: f"{r['mean_alpha']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            )
        ),
        "",
        f"Walltime improvement each alpha implies on {r0['cards']} (c = {r0['c']:.4f}; "
        "best gamma by `specsim.theory.optimal_gamma` with the cost model's v(gamma), "
        "improvement by `walltime_speedup`; in brackets: at the interval's ends): what a "
        "68M draft would give *if* it agreed with its 7B target as these tiny pairs agree.",
        "",
        md_table(
            by_temperature(
                m,
                lambda r: (
                    f"{r['speedup']:.2f}x (gamma {int(r['gamma'])}) "
                    f"[{r['speedup_low']:.2f}, {r['speedup_high']:.2f}]"
                ),
            )
        ),
        "",
        "What each shift costs (held-out text; language and domain at T = 0 and 1, "
        "temperature from T = 1 to greedy on each draft's home corpus), costliest first:",
        "",
    ]
    costs = shift_costs(df)
    lines += [md_table(costs), ""]
    top = costs.iloc[0]
    worst = {k: g.iloc[0] for k, g in costs.groupby("shift", sort=False)}
    lines.append(
        f"- Costliest shift: {top['shift']} ({top['draft']}, {top['from']} to {top['to']}): "
        f"alpha {top['alpha from']:.3f} to {top['alpha to']:.3f}, improvement "
        f"{top['speedup from']:.2f}x to {top['speedup to']:.2f}x "
        f"({top['speedup lost (%)']:.0f}% of it lost)."
    )
    for kind, w in worst.items():
        lines.append(
            f"- Worst {kind} shift: {w['draft']}, {w['from']} to {w['to']}: "
            f"{w['speedup lost (%)']:.0f}% of the improvement lost."
        )
    table3 = table3_comparison(df)
    lines += ["", "### Against Leviathan et al. 2023, Table 3", ""]
    if table3.empty:
        lines.append(
            "The published acceptance rates of Leviathan et al.'s Table 3 are not in this "
            "copy of specsim (a data file that sits beside a development checkout, not in it), "
            "so the comparison is left out."
        )
    else:
        table3 = table3.assign(
            **{"size ratio": [f"{r:.2g}" for r in table3["size ratio"]]},
            **{f"alpha T = {t}": [f"{a:.2f}" for a in table3[f"alpha T = {t}"]] for t in (0, 1)},
        )
        lines += [
            "From Leviathan et al.'s Table 3: their GPT-like 6M draft against a 97M target "
            "on lm1b, beside the pairs here at a similar size ratio (about 10) on each "
            "draft's home corpus.",
            "",
            md_table(table3),
            "",
            "The pairs here are far less trained (minutes on one CPU core, target loss "
            "3.5-4.6 nats per token): their alphas are about half of Table 3's. They show "
            "how acceptance moves under shift, not the level a well-trained pair reaches.",
        ]
    return lines + [""]
