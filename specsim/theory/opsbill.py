r"""The operations bill (Leviathan et al. 2023, Section 3.4, Theorem 3.11): the arithmetic
speculative decoding performs per emitted token, over plain decoding's.

Derived with sympy from tokens per pass :math:`E` (:mod:`specsim.theory.tokens`): a pass
runs :math:`\gamma` draft steps of :math:`\hat{c}\,\hat{T}` operations each and the
target's work on :math:`\gamma + 1` positions, accepted or not.
"""

from __future__ import annotations

import sympy as sp

from specsim.theory.speedup import IID
from specsim.theory.symbolic import (
    LEVIATHAN,
    Reference,
    Step,
    SymbolicResult,
    alpha,
    c_hat,
    closed_forms,
    gamma,
    prove,
)

__all__ = ["derive"]


def _ops() -> SymbolicResult:
    that = sp.Symbol("That", positive=True)  # target ops per token
    e = closed_forms()["expected_tokens"]
    form = closed_forms()["ops_factor"]
    per_pass = that * c_hat * gamma + that * (gamma + 1)
    factor = per_pass / e / that
    example = {alpha: sp.Rational(1, 5), gamma: 5, c_hat: 0}
    ops_ex = form.subs(example)
    calls_ex = closed_forms()["target_calls_per_token"].subs(example)
    steps = _ops_steps(per_pass=per_pass, factor=factor, ops_ex=ops_ex, calls_ex=calls_ex)
    claims = (
        prove("(ops per pass)/(E T-hat) equals Theorem 3.11", factor, form),
        prove("ops factor = (gamma c_hat + gamma + 1)/E", form, (gamma * c_hat + gamma + 1) / e),
        prove(
            "ops factor -> (gamma c_hat + gamma + 1)/(gamma + 1) as alpha -> 1",
            sp.limit(form, alpha, 1),
            (gamma * c_hat + gamma + 1) / (gamma + 1),
        ),
        prove("worked example: 3125/651 = 4.8003...", ops_ex, sp.Rational(3125, 651)),
        prove("worked example: 1/E = 3125/3906 < 1", calls_ex, sp.Rational(3125, 3906)),
    )
    return SymbolicResult(
        name="ops_factor",
        title="The operations bill (Theorem 3.11)",
        statement=(
            "Per emitted token, speculative decoding performs (1 - alpha)(gamma c_hat + gamma + "
            "1)/(1 - alpha^(gamma+1)) times the arithmetic of plain decoding: at alpha = 0.2, "
            "gamma = 5 and a free draft that is 4.8x, while target calls per token fall to 0.8."
        ),
        lhs=r"\text{ops factor}",
        expr=form,
        symbols=(alpha, gamma, c_hat),
        assumptions=(
            IID,
            "The target does the work of gamma + 1 tokens per pass, accepted or not; "
            "c_hat >= 0 is the draft's ops per token over the target's.",
        ),
        steps=steps,
        claims=claims,
        references=(
            Reference(
                paper=LEVIATHAN,
                arxiv="2211.17192",
                section="3.4",
                item="Definition 3.10 and Theorem 3.11",
            ),
        ),
        twin="specsim.theory.ops_factor",
    )


def _ops_steps(
    *, per_pass: sp.Expr, factor: sp.Expr, ops_ex: sp.Expr, calls_ex: sp.Expr
) -> tuple[Step, ...]:
    """The operations of a pass, per token over the baseline, and the worked example."""
    return (
        Step(
            description="operations of one pass: gamma draft runs and gamma + 1 target positions",
            lhs=r"\text{ops per pass}",
            rhs=per_pass,
        ),
        Step(
            description="divide by E tokens per pass and by the baseline's T-hat per token",
            lhs=r"\text{ops factor}",
            rhs=sp.simplify(factor),
        ),
        Step(
            description="worked example: five guesses, free draft, alpha = 1/5 (exact)",
            lhs=r"\text{ops factor}",
            rhs=ops_ex,
        ),
        Step(
            description="while serial target calls per token still drop below 1 (exact)",
            lhs=r"1/\mathbb{E}[T]",
            rhs=calls_ex,
        ),
    )


def derive() -> tuple[SymbolicResult, ...]:
    """The operations bill, as the one result of this module."""
    return (_ops(),)
