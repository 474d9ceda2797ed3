r"""Tokens per target pass: the capped geometric law, its mean, its variance, calls per token.

Derived with sympy from one assumption (Leviathan et al. 2023, Section 3.1): the
acceptances of successive draft tokens are i.i.d. with mean :math:`\alpha`. A pass
accepts :math:`N` drafts, a geometric count capped at :math:`\gamma`, and emits
:math:`T = N + 1` tokens (the correction token after a rejection, or the bonus
token when all :math:`\gamma` are accepted).
"""

from __future__ import annotations

import sympy as sp

from specsim.theory.symbolic import (
    LEVIATHAN,
    Reference,
    Step,
    SymbolicResult,
    alpha,
    closed_forms,
    gamma,
    generic_branch,
    k,
    prove,
)

__all__ = ["derive"]

_IID = (
    "The acceptances of successive draft tokens are i.i.d. Bernoulli with mean alpha "
    "(the paper's simplifying assumption; real acceptances are correlated)."
)
_PASS = (
    "One pass drafts gamma tokens, verifies gamma + 1 positions in one target call, "
    "keeps the drafts up to the first rejection and adds one target token."
)
_RANGES = "0 <= alpha <= 1 (sympy: alpha > 0, alpha = 1 by a limit); gamma integer >= 0."

_SEC31 = Reference(
    paper=LEVIATHAN, arxiv="2211.17192", section="3.1", item="Definition 3.1 and Equation (1)"
)


def _pmf() -> SymbolicResult:
    j = sp.Symbol("j", integer=True, nonnegative=True)
    pmf = closed_forms()["tokens_pmf"]
    at_least = alpha**j  # P(N >= j): the first j drafts were all accepted
    exactly = sp.factor(at_least - at_least.subs(j, j + 1))
    body = exactly.subs(j, k - 1)
    total = sp.summation(body, (k, 1, gamma)) + alpha**gamma
    steps = (
        Step(
            description="j drafts are all accepted with probability",
            lhs=r"P(N \ge j)",
            rhs=at_least,
        ),
        Step(
            description="P(N = j) = P(N >= j) - P(N >= j+1) for j < gamma (sympy factor)",
            lhs=r"P(N = j)",
            rhs=exactly,
        ),
        Step(
            description="T = N + 1, and N = gamma when every draft is accepted",
            lhs=r"P(T = k)",
            rhs=pmf,
        ),
        Step(description="total probability (sympy summation)", lhs=r"\sum_k P(T = k)", rhs=total),
    )
    claims = (
        prove("the pmf sums to 1", generic_branch(total), sp.Integer(1)),
        prove("the body of the pmf is P(N = k-1)", pmf.args[0][0], body, method="expand"),
    )
    return SymbolicResult(
        name="tokens_pmf",
        title="Tokens per pass: the capped geometric law",
        statement=(
            "A pass emits k tokens with probability alpha^(k-1) (1 - alpha) for 1 <= k <= gamma "
            "and alpha^gamma for k = gamma + 1."
        ),
        lhs=r"P(T = k)",
        expr=pmf,
        symbols=(alpha, gamma, k),
        assumptions=(_IID, _PASS, _RANGES),
        steps=steps,
        claims=claims,
        references=(_SEC31,),
        twin="specsim.theory.tokens_pmf",
    )


def _moments() -> tuple[sp.Expr, sp.Expr]:
    # The constant factor (1 - alpha) of the pmf's body is taken out of the sums: sympy
    # sums k^m alpha^(k-1) twenty times faster than with the factor inside.
    def moment(m: int) -> sp.Expr:
        body_sum = generic_branch(sp.summation(k**m * alpha ** (k - 1), (k, 1, gamma)))
        return (1 - alpha) * body_sum + (gamma + 1) ** m * alpha**gamma

    return moment(1), moment(2)


def _expected(first: sp.Expr) -> SymbolicResult:
    published = closed_forms()["expected_tokens"]
    j = sp.Symbol("j", integer=True, nonnegative=True)
    tail = generic_branch(sp.summation(alpha**j, (j, 0, gamma)))
    steps = (
        Step(
            description="E[T] = sum_k k P(T = k), summed by sympy (branch alpha != 1)",
            lhs=r"\mathbb{E}[T]",
            rhs=first,
        ),
        Step(description="simplified by sympy", lhs=r"\mathbb{E}[T]", rhs=sp.simplify(first)),
        Step(
            description="the same mean from the tail sum E[T] = sum_{j=0}^{gamma} P(N >= j)",
            lhs=r"\mathbb{E}[T]",
            rhs=tail,
        ),
        Step(
            description="limit alpha -> 1 (sympy limit)",
            lhs=r"\lim_{\alpha\to 1}\mathbb{E}[T]",
            rhs=sp.limit(published, alpha, 1),
        ),
    )
    claims = (
        prove("the summed mean equals Equation (1)", first, published),
        prove("the tail sum equals Equation (1)", tail, published),
        prove("E -> gamma + 1 as alpha -> 1", sp.limit(published, alpha, 1), gamma + 1),
        prove("E = 1 at alpha = 0", published.subs(alpha, 0), sp.Integer(1)),
        prove("E = 1 at gamma = 0", published.subs(gamma, 0), sp.Integer(1)),
    )
    return SymbolicResult(
        name="expected_tokens",
        title="Expected tokens per pass (Equation 1)",
        statement=(
            "A pass emits (1 - alpha^(gamma+1)) / (1 - alpha) tokens on average; gamma + 1 at "
            "alpha = 1. It is also the factor by which serial target calls are cut."
        ),
        lhs=r"\mathbb{E}[T]",
        expr=published,
        symbols=(alpha, gamma),
        assumptions=(_IID, _PASS, _RANGES),
        steps=steps,
        claims=claims,
        references=(_SEC31,),
        twin="specsim.theory.expected_tokens",
    )


def _variance(first: sp.Expr, second: sp.Expr) -> SymbolicResult:
    closed = closed_forms()["tokens_variance"]
    raw = second - first**2
    steps = (
        Step(
            description="E[T^2] = sum_k k^2 P(T = k), summed by sympy (branch alpha != 1)",
            lhs=r"\mathbb{E}[T^2]",
            rhs=second,
        ),
        Step(
            description="Var = E[T^2] - E[T]^2, simplified by sympy",
            lhs=r"\mathrm{Var}[T]",
            rhs=sp.factor(sp.simplify(raw)),
        ),
        Step(
            description="limit alpha -> 1 (sympy limit)",
            lhs=r"\lim_{\alpha\to 1}\mathrm{Var}[T]",
            rhs=sp.limit(closed, alpha, 1),
        ),
    )
    claims = (
        prove("E[T^2] - E[T]^2 equals the closed form", raw, closed),
        prove("Var -> 0 as alpha -> 1", sp.limit(closed, alpha, 1), sp.Integer(0)),
        prove("Var = 0 at alpha = 0", closed.subs(alpha, 0), sp.Integer(0)),
        prove("Var = 0 at gamma = 0", closed.subs(gamma, 0), sp.Integer(0)),
        prove(
            "Var = alpha (1 - alpha) at gamma = 1 (a Bernoulli count)",
            closed.subs(gamma, 1),
            alpha * (1 - alpha),
        ),
    )
    return SymbolicResult(
        name="tokens_variance",
        title="Variance of tokens per pass",
        statement=(
            "The tokens a pass emits have variance (alpha - (2 gamma + 1)(1 - alpha) "
            "alpha^(gamma+1) - alpha^(2 gamma + 2)) / (1 - alpha)^2: 0 at alpha = 0, at "
            "alpha = 1 and at gamma = 0."
        ),
        lhs=r"\mathrm{Var}[T]",
        expr=closed,
        symbols=(alpha, gamma),
        assumptions=(_IID, _PASS, _RANGES),
        steps=steps,
        claims=claims,
        references=(
            Reference(
                paper=LEVIATHAN,
                arxiv="2211.17192",
                section="3.1",
                item="the capped geometric law (the variance itself is not in the paper)",
            ),
        ),
        twin="specsim.theory.tokens_variance",
    )


def _calls(name: str, per_pass: sp.Expr, what: str) -> SymbolicResult:
    e = closed_forms()["expected_tokens"]
    form = closed_forms()[name]
    ratio = per_pass / e
    steps = (
        Step(description=f"{what} per pass", lhs=r"\text{calls per pass}", rhs=per_pass),
        Step(
            description="renewal-reward: (calls per pass) / (tokens per pass), simplified",
            lhs=r"\text{calls per token}",
            rhs=sp.simplify(ratio),
        ),
        Step(
            description="limit alpha -> 1",
            lhs=r"\lim_{\alpha\to 1}\text{calls per token}",
            rhs=sp.factor(sp.limit(form, alpha, 1)),
        ),
    )
    claims = (
        prove(f"{what} per token = {sp.sstr(per_pass)} / E", ratio, form),
        prove("limit alpha -> 1", sp.limit(form, alpha, 1), per_pass / (gamma + 1)),
        prove("value at alpha = 0", form.subs(alpha, 0), per_pass),
    )
    ref = Reference(
        paper=LEVIATHAN,
        arxiv="2211.17192",
        section="3.1 and 3.3",
        item="Equation (1) and the proof of Theorem 3.8",
    )
    return SymbolicResult(
        name=name,
        title=f"Expected {what} per emitted token",
        statement=(
            f"Over a long generation, speculative decoding makes {sp.sstr(per_pass)} / E "
            f"{what} per emitted token (plain decoding makes 1 target call)."
        ),
        lhs=r"\text{" + what + r" per token}",
        expr=form,
        symbols=(alpha, gamma),
        assumptions=(_IID, _PASS, _RANGES, "Long generations (renewal-reward average)."),
        steps=steps,
        claims=claims,
        references=(ref,),
        twin=f"specsim.theory.{name}",
    )


def derive() -> tuple[SymbolicResult, ...]:
    """The results of this module, in reading order."""
    first, second = _moments()
    return (
        _pmf(),
        _expected(first),
        _variance(first, second),
        _calls("target_calls_per_token", sp.Integer(1), "serial target calls"),
        _calls("draft_calls_per_token", gamma, "draft calls"),
    )
