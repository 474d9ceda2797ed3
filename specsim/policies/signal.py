r"""Per-token lookahead from a draft's own signals: predicted acceptance and a stopping rule.

Two pieces, in the spirit of SpecDec++ (Huang, Guo and Wang 2024,
arXiv:2405.19715: an acceptance-prediction head and a stop-when-the-prefix-is-
unlikely-to-survive rule from a Markov decision process) and DISCO (Mamou et
al. 2024, arXiv:2405.04304: a classifier on the draft's probabilities and
entropy that decides whether to keep drafting):

- :class:`AcceptanceModel`: ``P(accept | draft prob, draft entropy)`` as a
  logistic regression on ``(1, log q(x), H(q))`` (q: the draft's distribution, x:
  the token it drafted; q(x) floored at 5e-6, the rounding of the measured
  file), fitted by Newton's method (iteratively reweighted
  least squares; McCullagh and Nelder, *Generalized Linear Models*, 2nd ed.,
  1989, the binary-data chapter) with :func:`fit_acceptance_model`. Its predictions are what
  :class:`SignalThreshold` reads as the draft's confidence signal
  (``AcceptanceDraw.confidence``), so the policy fits the
  :class:`specsim.policies.lookahead.LookaheadPolicy` protocol unchanged.
- :class:`SignalThreshold`: keep drafting while the predicted probability that
  the whole drafted prefix is accepted, ``P_k = prod_{i<=k} a_i`` (a_i the
  predicted acceptance of the i-th drafted token), stays at or above a
  threshold ``h``; :func:`prefix_threshold` derives ``h`` from the cost ratio.

The threshold, derived. Times are in units of one target pass; a block that
drafts ``k`` tokens costs ``k c + v(k)`` (``c``: a draft pass, ``v(k)``:
verifying ``k + 1`` positions, ``v(0) = 1`` for a plain step) and emits
``N_k + 1`` tokens, ``N_k`` the leading run of accepted drafts. Over a stream
of blocks the throughput is ``rho = E[N + 1] / E[k c + v(k)]`` (renewal-reward,
Ross, *Stochastic Processes*, 2nd ed., Theorem 3.6.1). Maximising a ratio is
maximising ``E[N + 1 - rho* (k c + v(k))]`` per block at the optimum
``rho*`` (Dinkelbach 1967, "On nonlinear fractional programming", Management
Science 13(7)). Drafting token ``k + 1``
adds one token exactly when all ``k + 1`` drafts are accepted (the bonus token
comes either way), so its expected gain given what the draft has seen is
``P_k a_{k+1}``, and it costs ``c + v(k+1) - v(k)``. The next token's
acceptance is not seen before it is drafted; with its mean prediction ``a_bar``
the rule is: draft token ``k + 1`` iff

.. math:: P_k \ge h = \rho^* (c + \Delta v) / \bar a .

``P_k`` only falls with ``k``, so once drafting stops paying it never pays
again (the monotone case of optimal stopping: Chow, Robbins and Siegmund,
*Great Expectations: The Theory of Optimal Stopping*, 1971): the one-step rule is the optimal
threshold rule. At break-even (``rho* = 1``, ``v`` flat, ``a_bar`` near 1)
``h = c``: drafting one more token pays when the predicted prefix acceptance
exceeds the cost ratio. ``rho*`` is found by Dinkelbach's iteration on data
the policy is not tested on (:func:`specsim.policies.replay.calibrate_threshold`).
Assumption: ``a_{k+1}`` is replaced by its mean, so ``h`` is the rule for an
average next token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.acceptance.processes import AcceptanceDraw, leading_run
from specsim.checks import check_int
from specsim.policies.lookahead import MAX_GAMMA, PolicyContext

__all__ = [
    "AcceptanceModel",
    "fit_acceptance_model",
    "prefix_threshold",
    "SignalThreshold",
    "signal_draw",
]

FloatArray = NDArray[np.float64]
_FLOOR = 5e-6  # alpha-positions.csv.gz rounds to 5 decimals: a 0 there means below 5e-6


def _features(draft_prob: ArrayLike, draft_entropy: ArrayLike) -> FloatArray:
    p = np.asarray(draft_prob, dtype=float)
    h = np.asarray(draft_entropy, dtype=float)
    if p.shape != h.shape or p.ndim != 1:
        raise ValueError(
            f"draft_prob and draft_entropy: expected 1-d arrays of one shape, got "
            f"{p.shape} and {h.shape}"
        )
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("draft_prob: expected probabilities in [0, 1]")
    if not np.all(np.isfinite(h) & (h >= 0)):
        raise ValueError("draft_entropy: expected finite entropies >= 0 (nats)")
    return np.column_stack([np.ones_like(p), np.log(np.maximum(p, _FLOOR)), h])


@dataclass(frozen=True, kw_only=True)
class AcceptanceModel:
    """``P(accept) = 1 / (1 + exp(-(b0 + b_logp log q(x) + b_entropy H(q))))``.

    ``se`` holds the coefficients' standard errors (inverse Fisher information);
    ``n`` the rows it was fitted on and ``mean_accept`` their accepted share.
    """

    coef: tuple[float, float, float]
    se: tuple[float, float, float] = (0.0, 0.0, 0.0)
    n: int = 0
    mean_accept: float = 0.5

    def __post_init__(self) -> None:
        if len(self.coef) != 3 or not np.all(np.isfinite(self.coef)):
            raise ValueError(f"coef: expected three finite numbers, got {self.coef!r}")

    def predict(self, draft_prob: ArrayLike, draft_entropy: ArrayLike) -> FloatArray:
        """Predicted acceptance of each drafted token."""
        z = _features(draft_prob, draft_entropy) @ np.asarray(self.coef)
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=float)

    def log_loss(
        self, draft_prob: ArrayLike, draft_entropy: ArrayLike, accepted: ArrayLike
    ) -> float:
        """Mean negative log-likelihood (nats) of ``accepted`` under the model."""
        y = np.asarray(accepted, dtype=float)
        pr = np.clip(self.predict(draft_prob, draft_entropy), 1e-12, 1 - 1e-12)
        return float(-np.mean(y * np.log(pr) + (1 - y) * np.log1p(-pr)))


def fit_acceptance_model(
    draft_prob: ArrayLike,
    draft_entropy: ArrayLike,
    accepted: ArrayLike,
    *,
    ridge: float = 1e-6,
    max_iter: int = 50,
) -> AcceptanceModel:
    """Maximum-likelihood logistic regression by Newton's method (IRLS).

    ``ridge`` adds a tiny penalty so that separable data still converge. ValueError
    when the arrays differ in length, are empty, or ``accepted`` is not 0/1.
    """
    x = _features(draft_prob, draft_entropy)
    y = np.asarray(accepted)
    if y.shape != (x.shape[0],):
        raise ValueError(f"accepted: expected {x.shape[0]} flags, got shape {y.shape}")
    if x.shape[0] == 0:
        raise ValueError("accepted: no rows to fit on")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("accepted: expected 0/1 (or bool) flags")
    yf = y.astype(float)
    beta = np.zeros(3)
    beta[0] = np.log((yf.mean() + 0.5 / len(yf)) / (1 - yf.mean() + 0.5 / len(yf)))
    info = np.eye(3)
    for _ in range(max_iter):
        pr = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (yf - pr) - ridge * beta
        info = (x * (pr * (1 - pr))[:, None]).T @ x + ridge * np.eye(3)
        step = np.linalg.solve(info, grad)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    se = np.sqrt(np.diag(np.linalg.inv(info)))
    return AcceptanceModel(
        coef=(float(beta[0]), float(beta[1]), float(beta[2])),
        se=(float(se[0]), float(se[1]), float(se[2])),
        n=int(len(yf)),
        mean_accept=float(yf.mean()),
    )


def prefix_threshold(
    *, c: float, rate: float = 1.0, mean_accept: float = 1.0, dv: float = 0.0
) -> float:
    """``h = rate (c + dv) / mean_accept``: the prefix acceptance above which drafting one
    more token pays (module docstring). ``rate`` is the throughput ``rho*`` in tokens per
    target pass, ``dv`` the extra verification time of one more position."""
    for name, value in (("c", c), ("rate", rate), ("dv", dv)):
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{name}: expected a finite value >= 0, got {value!r}")
    if not (0 < mean_accept <= 1):
        raise ValueError(f"mean_accept: expected a value in (0, 1], got {mean_accept!r}")
    return float(rate * (c + dv) / mean_accept)


@dataclass(frozen=True, kw_only=True)
class SignalThreshold:
    """Draft while the predicted prefix acceptance stays at or above ``threshold``.

    Reads ``ctx.draw.confidence`` as each drafted token's predicted acceptance
    (:func:`signal_draw` builds such a draw from an :class:`AcceptanceModel`).
    The first token is drafted iff ``threshold <= 1`` (with ``P_0 = 1``); token
    ``k + 1`` iff ``P_k >= threshold``; the token whose prefix falls below is
    drafted, paid for and verified (its signals are seen only once it exists).
    """

    threshold: float
    max_gamma: int = MAX_GAMMA

    def __post_init__(self) -> None:
        if not (np.isfinite(self.threshold) and self.threshold >= 0):
            raise ValueError(f"threshold: expected a finite value >= 0, got {self.threshold!r}")
        check_int(self.max_gamma, name="max_gamma", minimum=1)

    def choose(self, ctx: PolicyContext) -> int:
        if ctx.draw is None:
            raise ValueError("SignalThreshold needs the draft's predicted acceptances (a draw)")
        if self.threshold > 1.0:
            return 0
        conf = ctx.draw.confidence[ctx.position : ctx.position + self.max_gamma - 1]
        return 1 + leading_run(np.cumprod(conf) >= self.threshold)


def signal_draw(*, accepted: ArrayLike, predicted: ArrayLike) -> AcceptanceDraw:
    """A draw that replays measured flags (``accepts`` is True exactly where ``accepted``
    is) with ``predicted`` acceptance as the confidence signal."""
    acc = np.asarray(accepted)
    pred = np.asarray(predicted, dtype=float)
    if acc.ndim != 1 or acc.shape != pred.shape:
        raise ValueError(
            f"accepted and predicted: expected 1-d arrays of one shape, got "
            f"{acc.shape} and {pred.shape}"
        )
    if not np.all((pred >= 0) & (pred <= 1)):
        raise ValueError("predicted: expected probabilities in [0, 1]")
    return AcceptanceDraw(u=np.full(acc.shape[0], 0.5), prob=acc.astype(float), confidence=pred)
