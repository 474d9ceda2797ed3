r"""What a pass costs: walltime improvement, the best lookahead and its bounds (the operations
bill is :mod:`specsim.theory.opsbill`).

Derived with sympy from tokens per pass :math:`E` (:mod:`specsim.theory.tokens`)
and the costs of one pass: :math:`\gamma` draft steps of time :math:`cT` and one
target verification of :math:`\gamma + 1` tokens of time :math:`vT` (Leviathan
et al. 2023, Sections 3.3 to 3.5, with :math:`v = 1`).
"""

from __future__ import annotations

import sympy as sp

from specsim.theory.symbolic import (
    LEVIATHAN,
    V_NEXT,
    V_NOW,
    Reference,
    Step,
    SymbolicResult,
    alpha,
    c,
    closed_forms,
    gamma,
    generic_branch,
    prove,
    v,
)

__all__ = ["derive"]

IID = "Acceptances i.i.d. with mean alpha (Leviathan et al. 2023, Section 3.1)."
"""The i.i.d. assumption every result here (and the operations bill) states first."""
_LONG = "Long generations: time per token is (time per pass) / (tokens per pass)."
_RANGES = "0 <= alpha <= 1, gamma integer >= 0, c >= 0, v > 0."
_COMPUTE = (
    "Enough compute to verify gamma + 1 tokens at once; v(gamma) is that verification's time "
    "in target steps (v = 1: memory-bound, the paper's assumption)."
)


def _ref(section: str, item: str) -> Reference:
    return Reference(paper=LEVIATHAN, arxiv="2211.17192", section=section, item=item)


def _walltime() -> SymbolicResult:
    t = sp.Symbol("T", positive=True)  # time of one target step
    e = closed_forms()["expected_tokens"]
    form = closed_forms()["walltime_speedup"]
    per_pass = gamma * c * t + v * t
    per_token = per_pass / e
    improvement = t / per_token
    theorem = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
    bigram = form.subs({alpha: sp.Rational(1, 5), gamma: 3, c: 0, v: 1})
    steps = _walltime_steps(
        per_pass=per_pass,
        per_token=per_token,
        improvement=improvement,
        theorem=theorem,
        form=form,
        bigram=bigram,
    )
    claims = (
        prove("T / (time per token) = E / (gamma c + v)", improvement, form),
        prove("at v = 1 this is Theorem 3.8", form.subs(v, 1), theorem),
        prove("W = 1 / v at gamma = 0", form.subs(gamma, 0), 1 / v),
        prove("bigram example: 1.248, printed as 1.25X", bigram, sp.Rational(156, 125)),
    )
    return SymbolicResult(
        name="walltime_speedup",
        title="Walltime improvement (Theorem 3.8, and its v generalization)",
        statement=(
            "Speculative decoding is E / (gamma c + v) times faster than plain decoding; with "
            "v = 1 this is (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))."
        ),
        lhs=r"W(\gamma)",
        expr=form,
        symbols=(alpha, gamma, c, v),
        assumptions=(IID, _LONG, _COMPUTE, _RANGES),
        steps=steps,
        claims=claims,
        references=(
            _ref("3.3", "Definition 3.7 and Theorem 3.8"),
            _ref("3.6 and 4.2", "the bigram example (alpha = 0.2, gamma = 3, 1.25X)"),
        ),
        twin="specsim.theory.walltime_speedup",
    )


def _walltime_steps(
    *,
    per_pass: sp.Expr,
    per_token: sp.Expr,
    improvement: sp.Expr,
    theorem: sp.Expr,
    form: sp.Expr,
    bigram: sp.Expr,
) -> tuple[Step, ...]:
    """Per pass, per token, the improvement, Theorem 3.8 at v = 1, alpha -> 1, the bigram draft."""
    return (
        Step(
            description="time of one pass: gamma draft steps and one verification",
            lhs=r"\text{time per pass}",
            rhs=per_pass,
        ),
        Step(
            description="time per emitted token (divide by E)",
            lhs=r"\text{time per token}",
            rhs=sp.simplify(per_token),
        ),
        Step(
            description="improvement = T / (time per token), simplified",
            lhs=r"W(\gamma)",
            rhs=sp.simplify(improvement),
        ),
        Step(description="v = 1 gives Theorem 3.8", lhs=r"W(\gamma)\big|_{v=1}", rhs=theorem),
        Step(
            description="limit alpha -> 1",
            lhs=r"\lim_{\alpha\to 1} W",
            rhs=sp.factor(sp.limit(form, alpha, 1)),
        ),
        Step(
            description="the bigram draft of Section 3.6 (alpha = 1/5, gamma = 3, c = 0), exactly",
            lhs=r"W",
            rhs=bigram,
        ),
    )


def _gamma1() -> SymbolicResult:
    j = sp.Symbol("j", integer=True, positive=True)
    e = closed_forms()["expected_tokens"]
    form = closed_forms()["gamma1_lower_bound"]
    at_one = closed_forms()["walltime_speedup"].subs({gamma: 1, v: 1})
    excess = sp.together(form - 1)
    gain_sum = generic_branch(sp.summation(alpha**j - c, (j, 1, gamma)))
    steps = (
        Step(
            description="Theorem 3.8 at gamma = 1, simplified", lhs=r"W(1)", rhs=sp.simplify(at_one)
        ),
        Step(
            description="its excess over plain decoding (sympy factor)", lhs=r"W(1) - 1", rhs=excess
        ),
        Step(
            description="since 1 + c > 0, W(1) > 1 exactly when alpha > c",
            lhs="",
            rhs=sp.Equivalent(sp.StrictGreaterThan(form, 1), sp.StrictGreaterThan(alpha, c)),
        ),
        Step(
            description="converse: the gain of any gamma is a sum of alpha^j - c (sympy sum)",
            lhs=r"\mathbb{E}[T] - (1 + \gamma c)",
            rhs=gain_sum,
        ),
        Step(
            description="each alpha^j <= alpha, so the gain is at most gamma (alpha - c): "
            "no gamma improves when alpha <= c",
            lhs="",
            rhs=sp.LessThan(sp.Symbol(r"\mathbb{E}[T] - (1 + \gamma c)"), gamma * (alpha - c)),
        ),
    )
    claims = (
        prove("W(gamma = 1, v = 1) = (1 + alpha)/(1 + c)", at_one, form),
        prove("(1 + alpha)/(1 + c) - 1 = (alpha - c)/(1 + c)", form - 1, (alpha - c) / (1 + c)),
        prove("E - (1 + gamma c) = sum_{j=1}^{gamma} (alpha^j - c)", gain_sum, e - 1 - gamma * c),
    )
    return SymbolicResult(
        name="gamma1_lower_bound",
        title="When speculation pays (Corollary 3.9)",
        statement=(
            "If alpha > c some gamma improves walltime, and the best gamma gives at least "
            "(1 + alpha)/(1 + c), the improvement at gamma = 1. If alpha <= c no gamma does "
            "(v = 1)."
        ),
        lhs=r"W(1)",
        expr=form,
        symbols=(alpha, c),
        assumptions=(IID, _LONG, "v = 1 (Theorem 3.8).", _RANGES),
        steps=steps,
        claims=claims,
        references=(_ref("3.3", "Corollary 3.9"),),
        twin="specsim.theory.gamma1_lower_bound",
    )


def _optimal() -> SymbolicResult:
    e = closed_forms()["expected_tokens"]
    form = closed_forms()["optimal_gamma"]
    v0, v1 = V_NOW, V_NEXT
    w = closed_forms()["walltime_speedup"]
    diff = w.subs({gamma: gamma + 1, v: 1}) - w.subs(v, 1)
    scaled = sp.simplify(diff * (1 + gamma * c) * (1 + (gamma + 1) * c))
    general = e.subs(gamma, gamma + 1) * (gamma * c + v0) - e * ((gamma + 1) * c + v1)
    general_form = alpha ** (gamma + 1) * (gamma * c + v0) - e * (c + v1 - v0)
    # Delta > 0 exactly when g < 0 (divide by alpha^(gamma+1) > 0); g never decreases.
    g = c * e / alpha ** (gamma + 1) - (1 + gamma * c)
    g_step = sp.simplify(g.subs(gamma, gamma + 1) - g)
    steps = _optimal_steps(scaled=scaled, general_form=general_form, form=form)
    claims = (
        prove(
            "sign of W(gamma+1) - W(gamma) is the sign of alpha^(gamma+1)(1 + gamma c) - c E",
            scaled,
            form,
        ),
        prove(
            "with v(gamma): E(gamma+1)(gamma c + v(gamma)) - E(gamma)((gamma+1) c + "
            "v(gamma+1)) = alpha^(gamma+1)(gamma c + v(gamma)) - E (c + v(gamma+1) - v(gamma))",
            general,
            general_form,
        ),
        prove("Delta = -alpha^(gamma+1) g", form, -(alpha ** (gamma + 1)) * g),
        prove(
            "g(gamma+1) - g(gamma) = c (alpha^-(gamma+2) - 1), >= 0 for 0 < alpha <= 1",
            g_step,
            c * (alpha ** (-gamma - 2) - 1),
        ),
        prove("c = 0: Delta = alpha^(gamma+1) > 0", form.subs(c, 0), alpha ** (gamma + 1)),
        prove("alpha -> 1: Delta -> 1 - c", sp.limit(form, alpha, 1), 1 - c),
    )
    return SymbolicResult(
        name="optimal_gamma",
        title="The best lookahead: marginal gain of one more draft token",
        statement=(
            "Drafting gamma + 1 tokens instead of gamma improves walltime exactly when "
            "alpha^(gamma+1)(1 + gamma c) > c E(gamma) (v = 1); W rises to one peak and falls "
            "after it, so the optimal integer gamma, which maximizes E/(gamma c + v(gamma)), is "
            "the first where this fails. With c = 0 < alpha, or alpha = 1 > c, it never fails: W "
            "rises at every gamma and no finite gamma is optimal (unbounded)."
        ),
        lhs=r"\Delta(\gamma)",
        expr=form,
        symbols=(alpha, gamma, c),
        assumptions=(IID, _LONG, _COMPUTE, _RANGES),
        steps=steps,
        claims=claims,
        references=(_ref("3.5", "Choosing gamma, Figure 3"),),
        twin="specsim.theory.optimal_gamma",
    )


def _optimal_steps(*, scaled: sp.Expr, general_form: sp.Expr, form: sp.Expr) -> tuple[Step, ...]:
    """The marginal gain Delta, with v free, its one peak, and the two unbounded cases."""
    return (
        Step(
            description="W(gamma+1) - W(gamma) times the two positive denominators (v = 1)",
            lhs=r"\Delta(\gamma)",
            rhs=scaled,
        ),
        Step(
            description="the same with v(gamma) and v(gamma + 1) free",
            lhs=r"\Delta_v(\gamma)",
            rhs=general_form,
        ),
        Step(
            description="Delta > 0 exactly when g < 0, and g grows by c(alpha^-(gamma+2) - 1) "
            ">= 0 a step: once W stops rising it never rises again (one peak, v = 1)",
            lhs=r"g(\gamma + 1) - g(\gamma)",
            rhs=c * (alpha ** (-gamma - 2) - 1),
        ),
        Step(
            description="so the best gamma is the first where Delta <= 0 (found by bisection)",
            lhs=r"\gamma^*",
            rhs=sp.Symbol(r"\min\{\gamma : \Delta(\gamma) \le 0\}"),
        ),
        Step(
            description="a free draft: Delta > 0 at every gamma, W rises towards 1/(1 - alpha) "
            "and no finite gamma is optimal (unbounded)",
            lhs=r"\Delta\big|_{c=0}",
            rhs=form.subs(c, 0),
        ),
        Step(
            description="every draft accepted: Delta = 1 - c, so for c < 1 W rises towards "
            "1/c at every gamma (unbounded too)",
            lhs=r"\lim_{\alpha\to 1}\Delta",
            rhs=sp.limit(form, alpha, 1),
        ),
    )


def _oracle() -> SymbolicResult:
    t = sp.Symbol("t", positive=True)  # alpha = exp(-t) with t > 0 encodes 0 < alpha < 1
    e = closed_forms()["expected_tokens"]
    form = closed_forms()["oracle_speedup_bound"]
    lim = sp.limit(e.subs(alpha, sp.exp(-t)), gamma, sp.oo)
    gap = sp.simplify(form - e)
    steps = (
        Step(
            description="limit gamma -> infinity with alpha = exp(-t), t > 0 (sympy limit)",
            lhs=r"\lim_{\gamma\to\infty}\mathbb{E}[T]",
            rhs=lim,
        ),
        Step(
            description="the gap to the bound, simplified: never negative",
            lhs=r"\frac{1}{1-\alpha} - \mathbb{E}[T]",
            rhs=gap,
        ),
        Step(
            description="at alpha = 1 the bound is infinite (every draft is accepted)",
            lhs=r"\lim_{\alpha\to 1^-}\frac{1}{1-\alpha}",
            rhs=sp.limit(form, alpha, 1, "-"),
        ),
    )
    claims = (
        prove("lim E = 1/(1 - alpha) for 0 < alpha < 1", lim, form.subs(alpha, sp.exp(-t))),
        prove(
            "1/(1 - alpha) - E = alpha^(gamma+1)/(1 - alpha) >= 0",
            gap,
            alpha ** (gamma + 1) / (1 - alpha),
        ),
    )
    return SymbolicResult(
        name="oracle_speedup_bound",
        title="The oracle bound on tokens per pass",
        statement=(
            "For alpha < 1 the expected tokens per pass never exceed 1/(1 - alpha), the limit "
            "as gamma grows and what an oracle choosing gamma per token would achieve; with a "
            "free draft (c = 0) it bounds the walltime improvement. Infinite at alpha = 1."
        ),
        lhs=r"\sup_\gamma \mathbb{E}[T]",
        expr=form,
        symbols=(alpha,),
        assumptions=(IID, "0 <= alpha < 1 (the bound is infinite at alpha = 1)."),
        steps=steps,
        claims=claims,
        references=(
            _ref("3.5", "the oracle for gamma, E = 1/(1 - alpha)"),
            _ref("3.6", "negligible-cost approximation models"),
        ),
        twin="specsim.theory.oracle_speedup_bound",
    )


def derive() -> tuple[SymbolicResult, ...]:
    """The results of this module, in reading order."""
    return (_walltime(), _gamma1(), _optimal(), _oracle())
