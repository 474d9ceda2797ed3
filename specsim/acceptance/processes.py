"""Acceptance processes: which drafted tokens the target accepts.

A process describes a stream of output positions ``t = 0, 1, 2, ...``. Its one
method, ``sample(rng, n)``, draws the next ``n`` positions as an
:class:`AcceptanceDraw`: for each position a latent acceptance probability
``prob[t]``, a uniform ``u[t]`` and a draft-confidence signal. A draft token
proposed for position ``t`` as the ``k``-th token of its block (k = 0, 1, ...)
is accepted iff ``u[t] < prob[t] * position_weights[k]``. That one rule covers
every process below, keeps the target's output exact in distribution (the
rejection step of :mod:`specsim.sampling` is what these Bernoulli draws stand
for), and lets the simulator and an oracle policy read outcomes ahead.

Processes that carry a closed form expose it as ``mean_tokens(gamma)``, the
expected tokens emitted per block with lookahead ``gamma``; theory-vs-simulation
checks use it (the Ciw habit: distributions carry their moments).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim import sampling
from specsim.checks import check_int
from specsim.theory import expected_tokens, markov_tokens_per_pass

__all__ = [
    "AcceptanceDraw",
    "AcceptanceProcess",
    "IIDAcceptance",
    "PositionalAcceptance",
    "MarkovAcceptance",
    "TraceAcceptance",
    "DistributionAcceptance",
    "accepted_in_block",
    "leading_run",
]

FloatArray = NDArray[np.float64]

_NO_WEIGHTS = np.ones(1)  # one weight for every position in a block, shared (read only)
_NO_WEIGHTS.flags.writeable = False


@dataclass(frozen=True)
class AcceptanceDraw:
    """The next ``n`` positions of an acceptance stream."""

    u: FloatArray
    prob: FloatArray
    confidence: FloatArray
    position_weights: FloatArray = field(default_factory=lambda: _NO_WEIGHTS)

    def __len__(self) -> int:
        return int(self.u.shape[0])

    def accepts(self, start: int, gamma: int) -> NDArray[np.bool_]:
        """Outcomes of a block of ``gamma`` proposals starting at position ``start``."""
        k = np.minimum(np.arange(gamma), self.position_weights.shape[0] - 1)
        sl = slice(start, start + gamma)
        return self.u[sl] < self.prob[sl] * self.position_weights[k[: len(self.u[sl])]]


def leading_run(ok: NDArray[np.bool_]) -> int:
    """How many entries of ``ok`` are True before the first False (all of them if none is)."""
    return int(np.argmin(np.append(ok, False)))


def accepted_in_block(draw: AcceptanceDraw, start: int, gamma: int) -> int:
    """How many of ``gamma`` proposals starting at ``start`` are accepted (leading run)."""
    ok = draw.accepts(start, gamma)
    if ok.shape[0] < gamma:
        raise ValueError(
            f"acceptance draw too short: block at {start} with gamma {gamma} needs "
            f"{start + gamma} positions, the draw has {len(draw)}"
        )
    return leading_run(ok)


@runtime_checkable
class AcceptanceProcess(Protocol):
    """One method: draw the next ``n`` positions of the stream."""

    def sample(self, rng: np.random.Generator, n: int) -> AcceptanceDraw: ...


def _plain(value: object) -> object:
    """A numpy scalar as the Python number it holds (messages show ``0.5``, not a numpy repr)."""
    return value.item() if isinstance(value, np.generic) else value


def _check_prob(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name}: expected a probability in [0, 1] (a number), got {_plain(value)!r}"
        )
    v = float(value)
    if not (0.0 <= v <= 1.0):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {_plain(value)!r}")
    return v


def _check_n(n: int) -> int:
    return check_int(n, name="n", minimum=0, why="a number of positions")


def _confidence(rng: np.random.Generator, prob: FloatArray, noise: float) -> FloatArray:
    """A noisy draft-side signal of the latent acceptance probability, clipped to [0, 1]."""
    # prob + noise * z, worked in place on the normals (a speed trick: serving draws one
    # signal per request; the same floats, IEEE products and sums being commutative).
    signal = rng.standard_normal(prob.shape)
    signal *= noise
    signal += prob
    return np.minimum(np.maximum(signal, 0.0, out=signal), 1.0, out=signal)  # np.clip, faster


_SHARED_MAX = 1 << 14  # draws this long or shorter share their constant arrays (at most 8 MB)


@functools.lru_cache(maxsize=64)
def _filled(value: float, sign: float, n: int) -> FloatArray:
    """``n`` copies of ``value`` (``sign``: its sign, which tells -0.0 from 0.0 in the
    cache's key), shared by the draws that ask for them, read only (a speed trick: serving
    draws a request at a time, most of them of a few lengths)."""
    out = np.full(n, value)
    out.flags.writeable = False
    return out


def _check_noise(noise: float) -> None:
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"confidence_noise: expected a finite value >= 0, got {_plain(noise)!r}")


@dataclass(frozen=True, kw_only=True)
class IIDAcceptance:
    """Every proposal accepted independently with probability ``alpha``.

    The assumption behind the closed forms (Leviathan et al. 2023, Section 3.1):
    tokens per block follow a geometric law capped at ``gamma + 1`` with mean
    ``(1 - alpha^(gamma+1)) / (1 - alpha)``.
    """

    alpha: float
    confidence_noise: float = 0.1

    def __post_init__(self) -> None:
        _check_prob(self.alpha, "alpha")
        _check_noise(self.confidence_noise)

    @property
    def mean(self) -> float:
        return float(self.alpha)

    def mean_tokens(self, gamma: int) -> float:
        return float(expected_tokens(self.alpha, gamma))

    def sample(self, rng: np.random.Generator, n: int) -> AcceptanceDraw:
        n = _check_n(n)
        a = float(self.alpha)
        prob = _filled(a, math.copysign(1.0, a), n) if n <= _SHARED_MAX else np.full(n, a)
        return AcceptanceDraw(
            u=rng.random(n), prob=prob, confidence=_confidence(rng, prob, self.confidence_noise)
        )


@dataclass(frozen=True, kw_only=True)
class PositionalAcceptance:
    """Acceptance that depends on the position ``k`` inside the block: ``alphas[k]``.

    Positions past the end of ``alphas`` use its last value. Expected tokens per
    block: ``1 + sum_{j=1..gamma} prod_{k<j} alphas[k]``.
    """

    alphas: tuple[float, ...]
    confidence_noise: float = 0.1

    def __post_init__(self) -> None:
        if len(self.alphas) == 0:
            raise ValueError("alphas: expected at least one acceptance probability")
        for i, a in enumerate(self.alphas):
            _check_prob(a, f"alphas[{i}]")
        _check_noise(self.confidence_noise)

    def mean_tokens(self, gamma: int) -> float:
        check_int(gamma, name="gamma", minimum=0)
        k = np.minimum(np.arange(gamma), len(self.alphas) - 1)
        return float(1.0 + np.cumprod(np.asarray(self.alphas, dtype=float)[k]).sum())

    def sample(self, rng: np.random.Generator, n: int) -> AcceptanceDraw:
        n = _check_n(n)
        weights = np.asarray(self.alphas, dtype=float)
        prob = np.ones(n)
        conf = _confidence(rng, np.full(n, float(np.mean(weights))), self.confidence_noise)
        return AcceptanceDraw(u=rng.random(n), prob=prob, confidence=conf, position_weights=weights)


@dataclass(frozen=True, kw_only=True)
class MarkovAcceptance:
    """Easy and hard stretches: a hidden Markov state per position with persistence.

    ``alphas[s]`` is the acceptance probability in state ``s``; the state is kept
    from one position to the next with probability ``persistence`` and otherwise
    redrawn from ``weights`` (the stationary distribution). The mean acceptance
    is ``sum weights[s] * alphas[s]``, the same as an i.i.d. process with that
    alpha, but accepted tokens cluster: what domain shift and bursty text look
    like. ``persistence = 0`` is i.i.d. with the mean alpha. Its tokens per pass
    (:meth:`mean_tokens`) are exact: :mod:`specsim.theory.markov`.
    """

    alphas: tuple[float, ...]
    weights: tuple[float, ...]
    persistence: float
    confidence_noise: float = 0.1

    def __post_init__(self) -> None:
        if len(self.alphas) == 0 or len(self.alphas) != len(self.weights):
            raise ValueError(
                f"alphas and weights: expected the same non-zero length, got "
                f"{len(self.alphas)} and {len(self.weights)}"
            )
        for i, a in enumerate(self.alphas):
            _check_prob(a, f"alphas[{i}]")
        sampling.check_distribution(np.asarray(self.weights, dtype=float), "weights")
        _check_prob(self.persistence, "persistence")
        if self.persistence == 1.0:
            raise ValueError("persistence: must be < 1 (at 1 the state never changes)")
        _check_noise(self.confidence_noise)

    @classmethod
    def two_state(
        cls, *, mean: float, spread: float, persistence: float, confidence_noise: float = 0.1
    ) -> MarkovAcceptance:
        """Easy (``mean + spread``) and hard (``mean - spread``) stretches, equally likely."""
        lo, hi = mean - spread, mean + spread
        if not (0.0 <= lo and hi <= 1.0):
            raise ValueError(
                f"spread: mean {mean} +/- spread {spread} leaves [0, 1] ({lo:.3g}, {hi:.3g})"
            )
        return cls(
            alphas=(hi, lo),
            weights=(0.5, 0.5),
            persistence=persistence,
            confidence_noise=confidence_noise,
        )

    @property
    def mean(self) -> float:
        return float(np.dot(self.alphas, self.weights))

    def mean_tokens(self, gamma: int) -> float:
        """Long-run tokens per pass of a stream of blocks with fixed lookahead ``gamma``.

        Exact (a Markov-chain calculation, not a simulation): see
        :func:`specsim.theory.markov_tokens_per_pass`, which also gives the mean of a
        single block started from the stationary state.
        """
        return markov_tokens_per_pass(
            alphas=self.alphas, weights=self.weights, persistence=self.persistence, gamma=gamma
        )

    def states(self, rng: np.random.Generator, n: int) -> NDArray[np.int64]:
        """The hidden state path: redraw points are Bernoulli(1 - persistence)."""
        n = _check_n(n)
        redraw = rng.random(n) >= self.persistence
        redraw[:1] = True  # start from the stationary distribution
        fresh = rng.choice(len(self.alphas), size=n, p=np.asarray(self.weights, dtype=float))
        # Each position takes the state drawn at the latest redraw point (vectorized hold).
        last = np.maximum.accumulate(np.where(redraw, np.arange(n), 0))
        return fresh[last]

    def sample(self, rng: np.random.Generator, n: int) -> AcceptanceDraw:
        s = self.states(rng, n)
        prob = np.asarray(self.alphas, dtype=float)[s]
        return AcceptanceDraw(
            u=rng.random(n), prob=prob, confidence=_confidence(rng, prob, self.confidence_noise)
        )


@dataclass(frozen=True, kw_only=True)
class TraceAcceptance:
    """Replay of a recorded per-position acceptance-probability trace, cycled.

    ``probs`` may be measured ``sum(min(p, q))`` values per position (as
    ``specsim measure`` records) or 0/1 outcomes. ``offset_from_rng`` starts
    each replay at a random point so that independent streams differ.
    """

    probs: tuple[float, ...]
    offset_from_rng: bool = True
    confidence_noise: float = 0.1

    def __post_init__(self) -> None:
        if len(self.probs) == 0:
            raise ValueError("probs: the trace is empty")
        arr = np.asarray(self.probs, dtype=float)
        bad = ~((arr >= 0) & (arr <= 1))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"probs[{i}]: expected a probability in [0, 1], got {_plain(arr[i])!r}"
            )
        _check_noise(self.confidence_noise)

    @classmethod
    def from_values(cls, values: ArrayLike, **kwargs: float | bool) -> TraceAcceptance:
        return cls(probs=tuple(np.asarray(values, dtype=float).tolist()), **kwargs)  # type: ignore[arg-type]

    @property
    def mean(self) -> float:
        return float(np.mean(self.probs))

    def sample(self, rng: np.random.Generator, n: int) -> AcceptanceDraw:
        n = _check_n(n)
        arr = np.asarray(self.probs, dtype=float)
        start = int(rng.integers(arr.shape[0])) if self.offset_from_rng else 0
        prob = arr[(start + np.arange(n)) % arr.shape[0]]
        return AcceptanceDraw(
            u=rng.random(n), prob=prob, confidence=_confidence(rng, prob, self.confidence_noise)
        )


@dataclass(frozen=True)
class DistributionAcceptance:
    """Acceptance derived from pairs of next-token distributions with specsim.sampling.

    Each position ``t`` uses the pair ``(target[t % m], draft[t % m])`` and its
    exact acceptance probability ``sum min(p, q)``. The confidence signal is the
    draft's own top probability, a signal a real draft model has.
    """

    target: Sequence[Sequence[float]] | FloatArray
    draft: Sequence[Sequence[float]] | FloatArray

    def __post_init__(self) -> None:
        p = sampling.check_distribution(self.target, "target")
        q = sampling.check_distribution(self.draft, "draft")
        if p.ndim != 2 or p.shape != q.shape:
            raise ValueError(
                f"target and draft: expected equal shapes (positions, V), got {p.shape} "
                f"and {q.shape}"
            )

    @cached_property
    def alphas(self) -> FloatArray:
        """Per-position ``sum min(p, q)`` (worked out once: every sample reads it)."""
        return np.asarray(sampling.acceptance_rate(np.asarray(self.target), np.asarray(self.draft)))

    @cached_property
    def _top(self) -> FloatArray:
        return np.asarray(self.draft, dtype=float).max(axis=-1)

    @property
    def mean(self) -> float:
        return float(np.mean(self.alphas))

    def sample(self, rng: np.random.Generator, n: int) -> AcceptanceDraw:
        n = _check_n(n)
        alphas = self.alphas
        idx = np.arange(n) % alphas.shape[0]
        return AcceptanceDraw(u=rng.random(n), prob=alphas[idx], confidence=self._top[idx])
