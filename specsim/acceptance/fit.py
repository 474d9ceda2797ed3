r"""Acceptance processes fitted to measured accept/reject sequences, and how well they fit.

The data are 0/1 acceptance flags along a text, one sequence per window (the
``accepted`` column of ``models/measured/real/alpha-positions.csv.gz``). A block
of lookahead ``gamma`` at position ``t`` accepts the leading run ``N`` of flags
(at most ``gamma``), emits ``N + 1`` tokens, and the next block starts at
``t + N + 1``, as :mod:`specsim.sim` consumes an
:class:`~specsim.acceptance.processes.AcceptanceDraw` (:func:`segment`). Three processes
of :mod:`specsim.acceptance.processes` are fitted by maximum likelihood to the same
observations, the positions the blocks of :data:`FIT_GAMMA` read:
**i.i.d.** (one alpha: the accepted share), **position-dependent** (one
``alpha_k`` per draft position of a block: accepted / reached there, a discrete
hazard) and **Markov-modulated** (two hidden states' acceptance, the easy
state's weight and the persistence ``rho``: a hidden Markov model with Bernoulli
emissions, its likelihood by the scaled forward recursion, Rabiner 1989, Proc.
IEEE 77(2), Section III.A, maximised numerically from several starts).
Standard errors: the inverse observed information. AIC = 2k - 2 log L, BIC =
k log n - 2 log L (n observed flags). :func:`gof_table` compares, for each
``gamma``, the observed accepted counts per block with each process's law by a
G test (Sokal and Rohlf, *Biometry*, the G test of goodness of fit), bins pooled to an expected
5; degrees of freedom bins - 1, not reduced for fitted parameters (lenient to
the positional fit) and blocks taken as independent (exact under the i.i.d.
null). :func:`tokens_table` sets measured tokens per block beside Leviathan et
al. 2023's Equation (1), ``(1 - alpha^(gamma+1)) / (1 - alpha)`` (the tokens
term of their Theorem 3.8, i.i.d.), and each fitted process's expectation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import optimize, stats

from specsim.acceptance.processes import IIDAcceptance, MarkovAcceptance, PositionalAcceptance
from specsim.policies.replay import jackknife_ratio
from specsim.theory import expected_tokens, markov_tokens_per_pass
from specsim.theory.markov import block_start_law, markov_chain

__all__ = [
    "FIT_GAMMA",
    "Segmented",
    "Fitted",
    "CellFit",
    "segment",
    "fit_iid",
    "fit_positional",
    "fit_markov",
    "fit_cell",
    "block_law",
    "sequences_by_cell",
    "fit_table",
    "gof_table",
    "measured_tokens",
    "tokens_table",
]

FIT_GAMMA = 8
"""The lookahead whose blocks define the observations the processes are fitted on."""
CELL = ("draft", "temperature", "corpus")
BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]
ArrayLikeBool = NDArray[np.bool_] | Sequence[bool] | Sequence[int]


@dataclass(frozen=True)
class Segmented:
    """Blocks of one lookahead: ``counts[b]`` accepted drafts of complete block ``b``,
    ``seq_of[b]`` its sequence, ``observed`` per sequence the positions a block read."""

    counts: NDArray[np.int64]
    seq_of: NDArray[np.int64]
    observed: list[BoolArray]


def _as_flags(seqs: Sequence[ArrayLikeBool]) -> list[BoolArray]:
    out: list[BoolArray] = []
    for i, s in enumerate(seqs):
        a = np.asarray(s)
        if a.ndim != 1 or a.shape[0] == 0:
            raise ValueError(f"sequences[{i}]: expected a non-empty 1-d array, got shape {a.shape}")
        if a.dtype != np.bool_ and not np.isin(a, (0, 1)).all():
            raise ValueError(f"sequences[{i}]: expected 0/1 acceptance flags")
        out.append(a.astype(bool))
    if not out:
        raise ValueError("sequences: expected at least one sequence")
    return out


def _check_gamma(gamma: int) -> int:
    if isinstance(gamma, bool) or not isinstance(gamma, int | np.integer) or gamma < 1:
        raise ValueError(f"gamma: expected an integer >= 1, got {gamma!r}")
    return int(gamma)


def segment(seqs: Sequence[ArrayLikeBool], gamma: int) -> Segmented:
    """Cut each sequence into the blocks of lookahead ``gamma`` (module docstring)."""
    g = _check_gamma(gamma)
    counts: list[int] = []
    seq_of: list[int] = []
    observed: list[BoolArray] = []
    for i, flags in enumerate(_as_flags(seqs)):
        obs, t = np.zeros(flags.shape[0], dtype=bool), 0
        while t < flags.shape[0]:
            window = flags[t : t + g]
            run = int(np.argmin(np.append(window, False)))
            if run == window.shape[0] and window.shape[0] < g:
                break  # cut by the end of the text: neither full nor rejected
            obs[t : t + min(run + 1, g)] = True
            counts, seq_of, t = counts + [run], seq_of + [i], t + run + 1
        observed.append(obs)
    return Segmented(
        np.asarray(counts, dtype=np.int64), np.asarray(seq_of, dtype=np.int64), observed
    )


def _bern_ll(ones: float, total: float, a: float) -> float:
    return float(
        (ones * np.log(a) if ones else 0.0)
        + ((total - ones) * np.log1p(-a) if total - ones else 0.0)
    )


@dataclass(frozen=True)
class Fitted:
    """One fitted process: the process, its parameters' MLE and standard errors, log L."""

    process: IIDAcceptance | PositionalAcceptance | MarkovAcceptance
    params: tuple[float, ...]
    se: tuple[float, ...]
    loglik: float
    n_obs: int
    mean_tokens: Callable[[Sequence[float], int], float]

    @property
    def k(self) -> int:
        return len(self.params)

    @property
    def aic(self) -> float:
        return 2 * self.k - 2 * self.loglik

    @property
    def bic(self) -> float:
        return self.k * float(np.log(self.n_obs)) - 2 * self.loglik

    def tokens(self, gamma: int) -> tuple[float, float]:
        """Expected tokens per block at ``gamma`` and its delta-method standard error."""
        p, var = np.asarray(self.params, dtype=float), 0.0
        for j in range(p.shape[0]):
            lo, hi = p.copy(), p.copy()
            lo[j], hi[j] = max(p[j] - 1e-5, 0.0), min(p[j] + 1e-5, 1.0 - 1e-12)
            diff = self.mean_tokens(tuple(hi), gamma) - self.mean_tokens(tuple(lo), gamma)
            var += (diff / (hi[j] - lo[j]) * self.se[j]) ** 2 if diff else 0.0
        return float(self.mean_tokens(tuple(p), gamma)), float(np.sqrt(var))


def fit_iid(seqs: Sequence[ArrayLikeBool], *, fit_gamma: int = FIT_GAMMA) -> Fitted:
    """MLE of one alpha over the positions the blocks of ``fit_gamma`` observe."""
    flags = _as_flags(seqs)
    seg = segment(flags, fit_gamma)
    ones = float(sum(f[o].sum() for f, o in zip(flags, seg.observed, strict=True)))
    n = int(sum(o.sum() for o in seg.observed))
    if n == 0:
        raise ValueError("sequences: no complete block to fit on")
    a = ones / n
    se = float(np.sqrt(max(a * (1 - a), 1.0 / n) / n))  # floor: a boundary MLE still has a scale
    return Fitted(
        IIDAcceptance(alpha=a),
        (a,),
        (se,),
        _bern_ll(ones, n, a),
        n,
        lambda p, g: float(expected_tokens(p[0], g)),
    )


def fit_positional(seqs: Sequence[ArrayLikeBool], *, fit_gamma: int = FIT_GAMMA) -> Fitted:
    """MLE of ``alpha_k`` = accepted / reached at draft position ``k`` of a block."""
    flags = _as_flags(seqs)
    seg = segment(flags, fit_gamma)
    alphas, ses, ll, n = [0.0], [1.0], 0.0, 0  # the leading entries are dropped below
    for k in range(fit_gamma):
        reached, acc = float(np.sum(seg.counts >= k)), float(np.sum(seg.counts >= k + 1))
        if reached == 0:  # never reached: the last estimate carries on
            alphas, ses = alphas + alphas[-1:], ses + ses[-1:]
            continue
        a = acc / reached
        alphas.append(a)
        ses.append(float(np.sqrt(max(a * (1 - a), 1.0 / reached) / reached)))
        ll, n = ll + _bern_ll(acc, reached, a), n + int(reached)
    alphas, ses = alphas[1:], ses[1:]
    if n == 0:
        raise ValueError("sequences: no complete block to fit on")
    proc = PositionalAcceptance(alphas=tuple(alphas))
    return Fitted(
        proc,
        tuple(alphas),
        tuple(ses),
        ll,
        n,
        lambda p, g: PositionalAcceptance(alphas=tuple(p)).mean_tokens(g),
    )


def _forward_ll(theta: FloatArray, code: NDArray[np.int64]) -> float:
    """Log-likelihood of the 2-state HMM; ``code`` (sequences, positions) is 0 where a
    position is not observed (padding included), 1 for an accepted flag, 2 for a rejected."""
    a_hi, a_lo, w, rho = theta
    emit = np.array([[1.0, 1.0], [a_hi, a_lo], [1 - a_hi, 1 - a_lo]])[code]  # (S, T, 2)
    law = np.array([w, 1 - w])
    f, ll = np.broadcast_to(law, (code.shape[0], 2)), 0.0  # the stationary start
    for t in range(code.shape[1]):
        # f @ P with P = rho I + (1 - rho) 1 w^T and rows of f summing to 1 (a speed trick).
        f = (rho * f + (1 - rho) * law) * emit[:, t]
        scale = f.sum(axis=1)
        ll += float(np.log(scale).sum())
        f /= scale[:, None]
    return ll


def fit_markov(
    seqs: Sequence[ArrayLikeBool], *, fit_gamma: int = FIT_GAMMA, starts: int = 2, seed: int = 0
) -> Fitted:
    """MLE of a two-state Markov-modulated process (easy state first): the best of one
    start near the i.i.d. fit and ``starts`` from ``numpy.random.default_rng(seed)``."""
    flags = _as_flags(seqs)
    seg = segment(flags, fit_gamma)
    length = max(f.shape[0] for f in flags)
    code = np.zeros((len(flags), length), dtype=np.int64)
    for i, (f, o) in enumerate(zip(flags, seg.observed, strict=True)):
        code[i, : f.shape[0]] = np.where(o, np.where(f, 1, 2), 0)
    n = int((code > 0).sum())
    if n == 0:
        raise ValueError("sequences: no complete block to fit on")
    eps = 1e-6

    def natural(z: FloatArray) -> FloatArray:
        return np.asarray(eps + (1 - 2 * eps) / (1 + np.exp(-z)), dtype=float)

    def nll(z: FloatArray) -> float:
        return -_forward_ll(natural(z), code)

    a0 = float((code == 1).sum() / n)
    rng = np.random.default_rng(seed)
    inits = [np.array([min(a0 + 0.2, 0.95), max(a0 - 0.2, 0.05), 0.5, 0.5])]
    inits += [rng.uniform([0.3, 0.01, 0.1, 0.05], [0.99, 0.6, 0.9, 0.95]) for _ in range(starts)]
    best = min(
        (
            optimize.minimize(
                nll, np.log(x0 / (1 - x0)), method="L-BFGS-B", bounds=[(-12.0, 12.0)] * 4
            )
            for x0 in inits
        ),
        key=lambda res: float(res.fun),
    )
    theta = natural(best.x)
    if theta[0] < theta[1]:  # label the easy state first
        theta = np.array([theta[1], theta[0], 1 - theta[2], theta[3]])
    se = _hessian_se(lambda t: -_forward_ll(t, code), theta)
    proc = MarkovAcceptance(
        alphas=(theta[0], theta[1]),
        weights=(theta[2], 1 - theta[2]),
        persistence=min(theta[3], 1 - 1e-9),
    )
    return Fitted(
        proc,
        tuple(float(v) for v in theta),
        se,
        -float(best.fun),
        n,
        lambda p, g: markov_tokens_per_pass(
            alphas=(p[0], p[1]), weights=(p[2], 1 - p[2]), persistence=p[3], gamma=g
        ),
    )


def _hessian_se(fun: Callable[[FloatArray], float], x: FloatArray) -> tuple[float, ...]:
    """Standard errors from a central-difference Hessian; ``inf`` where the estimate sits on
    the boundary or the likelihood is flat there (no curvature to read a scale from)."""
    k = x.shape[0]
    h = np.minimum(1e-4, 0.5 * np.minimum(x, 1 - x))
    hess = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            ei, ej = np.eye(k)[i] * h[i], np.eye(k)[j] * h[j]
            hess[i, j] = (
                (fun(x + ei + ej) - fun(x + ei - ej) - fun(x - ei + ej) + fun(x - ei - ej))
                / (4 * h[i] * h[j])
                if h.min() > 1e-9
                else 0.0
            )
    var = np.diag(np.linalg.pinv(hess)) if np.all(np.diag(hess) > 0) else np.zeros(k)
    return tuple(float(np.sqrt(v)) if v > 0 else float("inf") for v in var)


@dataclass(frozen=True)
class CellFit:
    """The three fits of one set of sequences."""

    iid: Fitted
    positional: Fitted
    markov: Fitted

    def items(self) -> list[tuple[str, Fitted]]:
        return [("iid", self.iid), ("positional", self.positional), ("markov", self.markov)]


def fit_cell(
    seqs: Sequence[ArrayLikeBool], *, fit_gamma: int = FIT_GAMMA, seed: int = 0
) -> CellFit:
    """All three processes fitted to the same observations."""
    return CellFit(
        fit_iid(seqs, fit_gamma=fit_gamma),
        fit_positional(seqs, fit_gamma=fit_gamma),
        fit_markov(seqs, fit_gamma=fit_gamma, seed=seed),
    )


def block_law(fit: Fitted, gamma: int) -> FloatArray:
    """P(N = n), n = 0..gamma: a block's accepted count under the fitted process
    (a Markov block starts from the long-run law of block starts)."""
    g = _check_gamma(gamma)
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


def sequences_by_cell(
    positions: pd.DataFrame, *, text: str = "test"
) -> dict[tuple[str, float, str], list[BoolArray]]:
    """The ``accepted`` flags of ``alpha-positions.csv.gz`` rows, per (draft, temperature,
    corpus), one array per window in position order."""
    missing = sorted({*CELL, "text", "seq", "position", "accepted"} - set(positions.columns))
    if missing:
        raise ValueError(f"positions: missing column(s) {missing}")
    rows = positions[positions["text"] == text]
    if rows.empty:
        raise ValueError(f"text: no rows for {text!r}")
    out: dict[tuple[str, float, str], list[BoolArray]] = {}
    for key, g in rows.sort_values([*CELL, "seq", "position"]).groupby(list(CELL), sort=False):
        out[(str(key[0]), float(key[1]), str(key[2]))] = [
            s["accepted"].to_numpy(dtype=bool) for _, s in g.groupby("seq", sort=True)
        ]
    return out


def fit_table(fits: dict[tuple[str, float, str], CellFit]) -> pd.DataFrame:
    """One row per cell and process: parameters with standard errors, log L, AIC, BIC and
    the AIC/BIC ranks (1 = preferred)."""
    rows = []
    for (draft, temp, corpus), cf in fits.items():
        for name, f in cf.items():
            rows.append(
                {
                    "draft": draft,
                    "temperature": temp,
                    "corpus": corpus,
                    "process": name,
                    "params": " ".join(f"{v:.3f}" for v in f.params),
                    "se": " ".join(f"{v:.3f}" for v in f.se),
                    "k": f.k,
                    "n_obs": f.n_obs,
                    "loglik": f.loglik,
                    "aic": f.aic,
                    "bic": f.bic,
                }
            )
    df = pd.DataFrame(rows)
    grp = df.groupby(list(CELL))
    return df.assign(
        aic_rank=grp["aic"].rank(method="min").astype(int),
        bic_rank=grp["bic"].rank(method="min").astype(int),
    )


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
