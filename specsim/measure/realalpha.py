"""Acceptance of the trained tiny pairs on real text: alpha = sum_x min(p(x), q(x)) per position.

For a (draft, target) pair, a temperature and a text, every position t gets
the acceptance probability of Leviathan et al. (ICML 2023, Definition 3.1,
measured as in their Table 3) with no sampling noise: ``alpha_t = sum_x
min(p_t(x), q_t(x))`` where ``p_t = softmax(z_target / T)`` and ``q_t =
softmax(z_draft / T)`` given the same prefix. At ``T = 0`` both are one-hot
argmaxes and ``alpha_t`` is 1 when the argmaxes agree, else 0.

Texts: held-out test text of each corpus (windows of the test split), and
text the target generated at the same temperature from a prompt cut from
that test text. Each window scores the positions after its first
``context`` tokens.

Per drafted token, the signals a per-token lookahead policy may read: the
draft samples ``x ~ q_t`` (argmax at T = 0), and we record ``q_t(x)`` (the
draft's probability of its own token), the entropy of ``q_t`` (both at T = 1
when T = 0, where the one-hot would say nothing), and whether a
verification accepts it (a uniform below ``min(1, p_t(x) / q_t(x))``).

Intervals: the windows are independent but positions inside one are not,
so the interval is batch means with one batch per window (a t interval on
the window means) beside a percentile bootstrap over windows; the
autocorrelation of alpha along the sequence is pooled over windows at lags
1..k around the overall mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray

from specsim.acceptance.realtext import CORPORA, DRAFTS, TEXTS
from specsim.measure.decode import autoregressive_decode
from specsim.rng import keyed_rng
from specsim.sampling import acceptance_rate
from specsim.stats import mean_interval

__all__ = [
    "TEMPERATURES",
    "TEST_CORPORA",
    "DRAFTS",
    "PositionStats",
    "position_stats",
    "alpha_direct",
    "model_logits",
    "autocorrelation",
    "summarize",
    "measure_alpha",
]

TEMPERATURES: tuple[float, ...] = (0.0, 0.3, 0.7, 1.0, 1.3)
TEST_CORPORA = CORPORA  # every corpus is measured on its test split
FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class PositionStats:
    """Per-position arrays, each of shape (sequences, positions)."""

    alpha: FloatArray
    draft_prob: FloatArray
    draft_entropy: FloatArray
    accepted: NDArray[np.bool_]
    target_nll: FloatArray
    draft_nll: FloatArray


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    return -(logp.exp() * logp).sum(-1)


def position_stats(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    *,
    next_tokens: torch.Tensor,
    temperature: float,
    rng: np.random.Generator,
) -> PositionStats:
    """alpha and the draft's signals at every position of (sequences, positions, vocab) logits.

    ``next_tokens`` (sequences, positions) are the tokens that actually follow
    (for the negative log-likelihoods at T = 1). Uses ``2 * sequences *
    positions`` uniforms from ``rng`` (one for the draft's token, one for
    verification), also at T = 0, so streams line up across temperatures.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    if temperature < 0 or not np.isfinite(temperature):
        raise ValueError(f"temperature: expected a finite value >= 0, got {temperature!r}")
    if target_logits.shape != draft_logits.shape or target_logits.ndim != 3:
        raise ValueError(
            f"logits: expected equal (sequences, positions, vocab) shapes, got "
            f"{tuple(target_logits.shape)} and {tuple(draft_logits.shape)}"
        )
    shape = tuple(target_logits.shape[:2])
    u = rng.random((2, *shape))
    zt = target_logits.double()
    zd = draft_logits.double()
    lt1 = torch.log_softmax(zt, dim=-1)
    ld1 = torch.log_softmax(zd, dim=-1)
    idx = next_tokens.long()[..., None]
    target_nll = -lt1.gather(-1, idx)[..., 0]
    draft_nll = -ld1.gather(-1, idx)[..., 0]
    if temperature == 0:
        top_t = zt.argmax(-1)
        x = zd.argmax(-1)
        alpha = (top_t == x).double()
        accepted = (top_t == x).numpy()
        draft_prob = ld1.gather(-1, x[..., None])[..., 0].exp()
        draft_entropy = _entropy(ld1)
    else:
        lp = torch.log_softmax(zt / temperature, dim=-1)
        lq = torch.log_softmax(zd / temperature, dim=-1)
        p, q = lp.exp(), lq.exp()
        alpha = torch.minimum(p, q).sum(-1)
        # Inverse CDF: the first token whose cumulative probability exceeds u.
        cdf = q.cumsum(-1)
        x = torch.searchsorted(
            cdf, torch.from_numpy(u[0] * cdf[..., -1].numpy())[..., None], right=True
        )[..., 0].clamp_(max=q.shape[-1] - 1)
        px = p.gather(-1, x[..., None])[..., 0]
        qx = q.gather(-1, x[..., None])[..., 0]
        accepted = (torch.from_numpy(u[1]) < torch.clamp(px / qx, max=1.0)).numpy()
        draft_prob = qx
        draft_entropy = _entropy(lq)
    return PositionStats(
        alpha=alpha.clamp(0.0, 1.0).numpy(),
        draft_prob=draft_prob.numpy(),
        draft_entropy=draft_entropy.numpy(),
        accepted=np.asarray(accepted, dtype=bool),
        target_nll=target_nll.numpy(),
        draft_nll=draft_nll.numpy(),
    )


def alpha_direct(
    target_logits: torch.Tensor, draft_logits: torch.Tensor, *, temperature: float
) -> FloatArray:
    """alpha by :func:`specsim.sampling.acceptance_rate` on host probabilities (the reference)."""
    if temperature == 0:
        return (target_logits.argmax(-1) == draft_logits.argmax(-1)).double().numpy()
    p = torch.softmax(target_logits.double() / temperature, -1).numpy()
    q = torch.softmax(draft_logits.double() / temperature, -1).numpy()
    p /= p.sum(-1, keepdims=True)
    q /= q.sum(-1, keepdims=True)
    return np.asarray(acceptance_rate(p, q), dtype=np.float64)


def model_logits(model: Any, tokens: NDArray[np.int64], *, chunk: int = 8) -> torch.Tensor:
    """Float32 logits of ``model`` at every position of ``tokens`` (sequences, length)."""
    out = []
    with torch.inference_mode():
        for i in range(0, len(tokens), chunk):
            x = torch.from_numpy(np.ascontiguousarray(tokens[i : i + chunk]))
            out.append(model(input_ids=x).logits.float())
    return torch.cat(out)


def autocorrelation(a: FloatArray, *, lags: int) -> FloatArray:
    """Lag-1..``lags`` autocorrelation of rows of ``a`` pooled around the overall mean.

    >>> a = np.tile([0.0, 1.0], (3, 10))
    >>> np.round(autocorrelation(a, lags=2), 6).tolist()
    [-1.0, 1.0]
    """
    x = np.asarray(a, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] <= lags:
        raise ValueError(f"a: expected (sequences, positions > {lags}), got {x.shape}")
    d = x - x.mean()
    var = float((d * d).mean())
    if var == 0:
        return np.full(lags, np.nan)
    return np.asarray([float((d[:, :-k] * d[:, k:]).mean()) / var for k in range(1, lags + 1)])


def summarize(
    alpha: FloatArray,
    *,
    rng: np.random.Generator,
    lags: int = 5,
    boot: int = 2000,
    level: float = 0.95,
) -> dict[str, float]:
    """Mean alpha of (sequences, positions) with batch-means and bootstrap intervals,
    its spread over positions, and its autocorrelation along the sequence."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 2:
        raise ValueError(f"alpha: expected (sequences >= 2, positions), got {a.shape}")
    means = a.mean(axis=1)
    n = len(means)
    half = mean_interval(means, level=level).half
    resampled = means[rng.integers(0, n, size=(boot, n))].mean(axis=1)
    lo, hi = np.quantile(resampled, [(1 - level) / 2, (1 + level) / 2])
    q = np.quantile(a, [0.05, 0.25, 0.5, 0.75, 0.95])
    row = {
        "alpha_mean": float(a.mean()),
        "alpha_sd": float(a.std(ddof=1)),
        # alpha is a probability: an interval reaching past 0 or 1 is cut there
        "ci_low": max(0.0, float(a.mean()) - half),
        "ci_high": min(1.0, float(a.mean()) + half),
        "boot_low": float(lo),
        "boot_high": float(hi),
        "alpha_p05": float(q[0]),
        "alpha_p25": float(q[1]),
        "alpha_p50": float(q[2]),
        "alpha_p75": float(q[3]),
        "alpha_p95": float(q[4]),
    }
    for k, r in enumerate(autocorrelation(a, lags=lags), start=1):
        row[f"acf_{k}"] = float(r)
    return row


def summary_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows of :func:`summarize` (with their keys) as a DataFrame, numbers rounded to 6 digits."""
    return pd.DataFrame(rows).round(6)


def _cell_rows(stats: Any, *, keys: dict[str, Any], keep: int) -> list[dict[str, Any]]:
    rows = []
    n, length = stats.alpha.shape
    for s in range(min(keep, n)):
        for t in range(length):
            rows.append(
                {
                    **keys,
                    "seq": s,
                    "position": t,
                    "alpha": round(float(stats.alpha[s, t]), 5),
                    "draft_prob": round(float(stats.draft_prob[s, t]), 5),
                    "draft_entropy": round(float(stats.draft_entropy[s, t]), 4),
                    "accepted": bool(stats.accepted[s, t]),
                }
            )
    return rows


def measure_alpha(
    *,
    target: Any,
    drafts: dict[str, Any],
    windows: dict[str, np.ndarray],
    context: int,
    temperatures: Sequence[float] = TEMPERATURES,
    texts: Sequence[str] = TEXTS,
    seed: int = 0,
    keep: int = 8,
    log: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Summary and per-position frames for every draft, temperature, corpus and text.

    ``windows`` maps corpus to token windows (sequences, length); positions
    ``context..length-1`` are scored. ``generated`` text keeps each window's
    first ``context`` tokens as the prompt and lets the target generate the
    rest at the temperature being measured.
    """
    say = log if log is not None else (lambda line: None)
    summary: list[dict[str, Any]] = []
    positions: list[dict[str, Any]] = []
    for corpus, win in windows.items():
        length = win.shape[1]
        if not 1 <= context < length:
            raise ValueError(f"context: expected 1 <= context < {length}, got {context}")
        cached: dict[str, torch.Tensor] = {}
        for text in texts:
            for temp in temperatures:
                if text == "test":
                    seqs = win
                else:
                    seqs = _generated(
                        target,
                        win,
                        context=context,
                        temperature=temp,
                        rng=keyed_rng(seed, f"generate/{corpus}/{temp}"),
                    )
                    cached = {}
                feed = seqs[:, :-1]
                nxt = torch.from_numpy(seqs[:, context:])
                # Test text is the same at every temperature: its logits are computed once.
                t_logits = _scored_logits(cached, "target", target, feed, context=context)
                for name, draft in drafts.items():
                    d_logits = _scored_logits(cached, name, draft, feed, context=context)
                    key = f"{name}/{corpus}/{text}/{temp}"
                    st = position_stats(
                        t_logits,
                        d_logits,
                        next_tokens=nxt,
                        temperature=temp,
                        rng=keyed_rng(seed, "signals/" + key),
                    )
                    keys = {"draft": name, "temperature": temp, "corpus": corpus, "text": text}
                    summary.append(_summary_row(st, keys=keys, rng=keyed_rng(seed, "boot/" + key)))
                    positions.extend(_cell_rows(st, keys=keys, keep=keep))
                say(
                    f"alpha {corpus} {text} T={temp}: "
                    + " ".join(
                        f"{r['draft']} {r['alpha_mean']:.3f}" for r in summary[-len(drafts) :]
                    )
                )
    return pd.DataFrame(summary).round(6), pd.DataFrame(positions)


def _scored_logits(
    cache: dict[str, torch.Tensor], name: str, model: Any, feed: np.ndarray, *, context: int
) -> torch.Tensor:
    """``model``'s logits at the scored positions (after the first ``context`` tokens), kept
    in ``cache`` under ``name`` so that one text is scored once."""
    if name not in cache:
        cache[name] = model_logits(model, feed)[:, context - 1 :]
    return cache[name]


def _generated(
    target: Any, win: np.ndarray, *, context: int, temperature: float, rng: np.random.Generator
) -> np.ndarray:
    """Each window's first ``context`` tokens and the rest generated by the target."""
    gen = autoregressive_decode(
        target,
        prompt=win[:, :context],
        new_tokens=win.shape[1] - context,
        temperature=temperature,
        rng=rng,
    )
    return np.concatenate([win[:, :context], gen.tokens], axis=1)


def _summary_row(st: Any, *, keys: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """One cell's summary: mean alpha with its intervals and the means of the signals."""
    return {
        **keys,
        "sequences": st.alpha.shape[0],
        "positions": st.alpha.size,
        **summarize(st.alpha, rng=rng),
        "accept_rate": float(st.accepted.mean()),
        "draft_prob_mean": float(st.draft_prob.mean()),
        "draft_entropy_mean": float(st.draft_entropy.mean()),
        "target_nll": float(st.target_nll.mean()),
        "draft_nll": float(st.draft_nll.mean()),
    }
