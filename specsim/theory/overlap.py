r"""Acceptance = overlap: :math:`\sum_x \min(p, q) = 1 - \mathrm{TV}(p, q)`, proven by cases.

For a vocabulary of ``V`` tokens with symbolic probabilities (the last of each
distribution fixed by normalization), every one of the :math:`2^V` orderings of
:math:`p_i` against :math:`q_i` turns each ``min`` and ``|.|`` into a polynomial,
and sympy reduces the identity to 0 in each case. That is a complete proof for that
``V``; the general case is the same argument token by token (Leviathan et al. 2023,
Lemma 3.3), and the numeric check for any ``V`` is against
:func:`specsim.sampling.acceptance_rate` in the tests.
"""

from __future__ import annotations

import itertools

import sympy as sp

from specsim.theory.symbolic import (
    CHEN,
    LEVIATHAN,
    Claim,
    Reference,
    Step,
    SymbolicResult,
    prove,
)

__all__ = ["overlap_identity"]

_MAX_VOCAB = 6  # 2**V cases: beyond a handful the proof says nothing new and costs time

_REFERENCES = (
    Reference(
        paper=LEVIATHAN,
        arxiv="2211.17192",
        section="3.2",
        item="Definition 3.2, Lemma 3.3, Theorem 3.5 and Corollary 3.6",
    ),
    Reference(
        paper=CHEN,
        arxiv="2302.01318",
        section="4.2",
        item="Modified Rejection Sampling (Algorithm 2; Theorem 1 in the Supplementary Materials)",
    ),
)


def overlap_identity(vocab_size: int) -> SymbolicResult:
    """Prove ``sum min(p, q) = 1 - 1/2 sum |p - q|`` for ``vocab_size`` symbolic tokens."""
    _check_vocab(vocab_size)
    n = vocab_size
    p_free = sp.symbols(f"p_1:{n}", nonnegative=True)
    q_free = sp.symbols(f"q_1:{n}", nonnegative=True)
    p = (*p_free, 1 - sum(p_free))
    q = (*q_free, 1 - sum(q_free))
    overlap = sum(sp.Min(pi, qi) for pi, qi in zip(p, q, strict=True))
    tv = sp.Rational(1, 2) * sum(sp.Abs(pi - qi) for pi, qi in zip(p, q, strict=True))
    identity = sp.Eq(overlap, 1 - tv, evaluate=False)

    x, y = sp.symbols("x y", real=True)
    pointwise = prove(
        "min(x, y) = (x + y - |x - y|)/2 (sympy rewrite)",
        sp.Min(x, y).rewrite(sp.Abs),
        (x + y - sp.Abs(x - y)) / 2,
    )
    cases = _ordering_cases(p, q)
    steps = (
        Step(
            description=f"a {n}-token vocabulary: the last probability is fixed by normalization",
            lhs=r"(p_V, q_V)",
            rhs=sp.Tuple(p[-1], q[-1]),
        ),
        Step(
            description="pointwise, min is half the sum minus half the gap (sympy rewrite)",
            lhs=r"\min(x, y)",
            rhs=sp.Min(x, y).rewrite(sp.Abs),
        ),
        Step(
            description=f"each of the {2**n} orderings makes the identity polynomial; sympy "
            "expands every case to 0",
            lhs="",
            rhs=identity,
        ),
    )
    return SymbolicResult(
        name=f"overlap_identity_v{n}",
        title=f"Acceptance = overlap = 1 - TV ({n}-token vocabulary)",
        statement=(
            "The probability that speculative sampling accepts a draft token is the overlap "
            "sum_x min(p(x), q(x)), which equals 1 - TV(p, q) = 1 - 1/2 sum_x |p(x) - q(x)|."
        ),
        lhs="",
        expr=identity,
        symbols=(*p_free, *q_free),
        assumptions=(
            "p (target) and q (draft) are probability distributions on the same vocabulary.",
            "A draft token x ~ q is accepted with probability min(1, p(x)/q(x)).",
        ),
        steps=steps,
        claims=(pointwise, *cases),
        references=_REFERENCES,
        twin="specsim.sampling.acceptance_rate",
    )


def _check_vocab(vocab_size: int) -> None:
    """A TypeError or ValueError unless ``vocab_size`` is an int in 2..:data:`_MAX_VOCAB`."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"overlap_identity: vocab_size must be an int, got {vocab_size!r}")
    if not 2 <= vocab_size <= _MAX_VOCAB:
        raise ValueError(
            f"overlap_identity: vocab_size must be in 2..{_MAX_VOCAB}, got {vocab_size}"
        )


def _ordering_cases(p: tuple[sp.Expr, ...], q: tuple[sp.Expr, ...]) -> list[Claim]:
    """One claim for each of the 2^V orderings of p_i against q_i: there every min and |.|
    is a polynomial, and the identity expands to 0."""
    cases: list[Claim] = []
    for below in itertools.product((True, False), repeat=len(p)):
        # below[i]: p_i <= q_i, so min = p_i and |p_i - q_i| = q_i - p_i; else the mirror.
        mins = [pi if b else qi for pi, qi, b in zip(p, q, below, strict=True)]
        gaps = [qi - pi if b else pi - qi for pi, qi, b in zip(p, q, below, strict=True)]
        label = ", ".join(f"p{i + 1} {'<=' if b else '>'} q{i + 1}" for i, b in enumerate(below))
        cases.append(
            prove(f"case {label}", sum(mins), 1 - sp.Rational(1, 2) * sum(gaps), method="expand")
        )
    return cases
