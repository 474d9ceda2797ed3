r"""How well the fitted acceptance processes fit: block laws, G tests and tokens per block.

The companion of :mod:`specsim.acceptance.fit`, which fits the processes. :func:`block_law`
is a fitted process's law of a block's accepted count; :func:`gof_table` compares, for each
``gamma``, the observed accepted counts per block with each process's law by a G test
(Sokal and Rohlf, *Biometry*, the G test of goodness of fit), bins pooled to an expected 5;
degrees of freedom bins - 1, not reduced for fitted parameters (lenient to the positional
fit) and blocks taken as independent (exact under the i.i.d. null). :func:`tokens_table`
sets measured tokens per block beside Leviathan et al. 2023's Equation (1),
``(1 - alpha^(gamma+1)) / (1 - alpha)`` (the tokens term of their Theorem 3.8, i.i.d.), and
each fitted process's expectation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from specsim.acceptance.fit import (
    ArrayLikeBool,
    BoolArray,
    CellFit,
    Fitted,
    FloatArray,
    check_gamma,
    segment,
)
from specsim.acceptance.processes import IIDAcceptance, PositionalAcceptance
from specsim.stats import jackknife_ratio
from specsim.theory import expected_tokens
from specsim.theory.markov import block_start_law, markov_chain

__all__ = ["block_law", "gof_table", "measured_tokens", "tokens_table"]


def block_law(fit: Fitted, gamma: int) -> FloatArray:
    """P(N = n), n = 0..gamma: a block's accepted count under the fitted process
    (a Markov block starts from the long-run law of block starts)."""
    g = check_gamma(gamma)
    proc = fit.process
    if isinstance(proc, IIDAcceptance):
        surv = proc.alpha ** np.arange(g + 1)
    elif isinstance(proc, PositionalAcceptance):
        k = np.minimum(np.arange(g), len(proc.alphas) - 1)
        surv = np.concatenate([[1.0], np.cumprod(np.asarray(proc.alphas)[k])])
    else:
        d, trans = markov_chain(
            alphas=proc.alphas, weights=proc.weights, persistence=proc.persistence
        )
        vec = block_start_law(
            alphas=proc.alphas, weights=proc.weights, persistence=proc.persistence, gamma=g
        )
        surv_l = [1.0]
        for _ in range(g):
            vec = vec @ d
            surv_l.append(float(vec.sum()))
            vec = vec @ trans
        surv = np.asarray(surv_l)
    law = surv - np.append(surv[1:], 0.0)
    return np.clip(law, 0.0, 1.0)


def _g_test(observed: FloatArray, expected: FloatArray) -> tuple[float, int, float]:
    """G statistic, degrees of freedom and p-value; bins are pooled from n = 0 up until
    each holds an expected count of at least 5 (a short remainder joins the last bin)."""
    edges, acc = [0], 0.0
    for n, e in enumerate(expected[:-1]):
        acc += e
        if acc >= 5:
            edges, acc = edges + [n + 1], 0.0
    if len(edges) > 1 and expected[edges[-1] :].sum() < 5:
        edges.pop()
    obs, exp = np.add.reduceat(observed, edges), np.add.reduceat(expected, edges)
    if len(obs) < 2:
        return 0.0, 0, 1.0
    res = stats.power_divergence(obs, exp * obs.sum() / exp.sum(), lambda_="log-likelihood")
    return float(res.statistic), len(obs) - 1, float(res.pvalue)


def gof_table(
    seqs_by: dict[tuple[str, float, str], list[BoolArray]],
    fits: dict[tuple[str, float, str], CellFit],
    gammas: Sequence[int] = tuple(range(1, 9)),
) -> pd.DataFrame:
    """Observed against predicted accepted counts per block: a G test per cell, process and
    ``gamma`` (``g_stat``, ``dof``, ``p_value``; see the module docstring)."""
    rows = []
    for key, seqs in seqs_by.items():
        for gamma in gammas:
            counts = segment(seqs, gamma).counts
            observed = np.bincount(counts, minlength=gamma + 1).astype(float)
            for name, f in fits[key].items():
                g, dof, p = _g_test(observed, counts.shape[0] * block_law(f, gamma))
                rows.append(
                    {
                        "draft": key[0],
                        "temperature": key[1],
                        "corpus": key[2],
                        "process": name,
                        "gamma": gamma,
                        "blocks": int(counts.shape[0]),
                        "g_stat": g,
                        "dof": dof,
                        "p_value": p,
                    }
                )
    return pd.DataFrame(rows)


def measured_tokens(seqs: Sequence[ArrayLikeBool], gamma: int) -> tuple[float, float]:
    """Mean tokens per block when the sequences are replayed at ``gamma``, and its
    jackknife standard error over sequences (positions inside one are correlated)."""
    seg = segment(seqs, gamma)
    m = len(seg.observed)
    tok = np.asarray(np.bincount(seg.seq_of, weights=seg.counts + 1.0, minlength=m), dtype=float)
    blk = np.asarray(np.bincount(seg.seq_of, minlength=m), dtype=float)
    keep = blk > 0
    est, se, _ = jackknife_ratio(tok[keep], blk[keep])
    return est, se


def tokens_table(
    seqs_by: dict[tuple[str, float, str], list[BoolArray]],
    fits: dict[tuple[str, float, str], CellFit],
    alpha_mean: dict[tuple[str, float, str], float] | None = None,
    gammas: Sequence[int] = tuple(range(1, 9)),
) -> pd.DataFrame:
    """Measured tokens per block against Equation (1) at ``alpha_mean[cell]`` (default: the
    i.i.d. fit) and the fitted processes; ``z_theorem`` = (Equation (1) - measured) / the
    measured standard error, ``z_<process>`` = (predicted - measured) / the combined one."""
    rows = []
    for key, seqs in seqs_by.items():
        cf = fits[key]
        for gamma in gammas:
            meas, meas_se = measured_tokens(seqs, gamma)
            a = alpha_mean[key] if alpha_mean is not None else cf.iid.params[0]
            theorem = float(expected_tokens(a, gamma))
            row = {
                "draft": key[0],
                "temperature": key[1],
                "corpus": key[2],
                "gamma": gamma,
                "measured": meas,
                "measured_se": meas_se,
                "alpha": a,
                "theorem": theorem,
                "z_theorem": (theorem - meas) / meas_se,
            }
            for name, f in cf.items():
                pred, se = f.tokens(gamma)
                row[f"pred_{name}"] = pred
                row[f"se_{name}"] = se
                row[f"z_{name}"] = (pred - meas) / float(np.hypot(se, meas_se))
            rows.append(row)
    df = pd.DataFrame(rows)
    return df.assign(gap=df["theorem"] - df["measured"])
