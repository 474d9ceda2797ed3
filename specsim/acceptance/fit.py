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
k log n - 2 log L (n observed flags). How well they fit: :mod:`specsim.acceptance.goodness`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import optimize

from specsim.acceptance.processes import IIDAcceptance, MarkovAcceptance, PositionalAcceptance
from specsim.checks import check_int
from specsim.theory import expected_tokens, markov_tokens_per_pass

__all__ = [
    "ArrayLikeBool",
    "BoolArray",
    "FloatArray",
    "check_gamma",
    "FIT_GAMMA",
    "Segmented",
    "Fitted",
    "CellFit",
    "segment",
    "fit_iid",
    "fit_positional",
    "fit_markov",
    "fit_cell",
    "sequences_by_cell",
    "fit_table",
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


def check_gamma(gamma: int) -> int:
    return check_int(gamma, name="gamma", minimum=1)


def segment(seqs: Sequence[ArrayLikeBool], gamma: int) -> Segmented:
    """Cut each sequence into the blocks of lookahead ``gamma`` (module docstring)."""
    g = check_gamma(gamma)
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
