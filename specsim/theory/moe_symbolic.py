"""The sympy side of :mod:`specsim.theory.moe`: distinct experts and the MoE v(gamma).

Symbols: ``E`` routed experts per layer, ``k_e`` experts per token (top-k), ``n`` tokens
in the pass, ``f`` the routed experts' share of a one-token decode's weight bytes,
``gamma`` the draft length. Imported only when a symbolic result is asked for.
"""

from __future__ import annotations

import sympy as sp

from specsim.theory.symbolic import (
    LEVIATHAN,
    Claim,
    Reference,
    Step,
    SymbolicResult,
    gamma,
    prove,
)

__all__ = ["E", "K_E", "N", "F", "LOAD", "derive_moe"]

E = sp.Symbol("E", integer=True, positive=True)
K_E = sp.Symbol("k_e", integer=True, positive=True)
N = sp.Symbol("n", integer=True, nonnegative=True)
F = sp.Symbol("f", nonnegative=True)
LOAD = sp.IndexedBase("p")  # p_e: expert e's share of the routed token-slots
_e = sp.Symbol("e", integer=True, positive=True)

EAGLE = (
    "Li, Wei, Zhang & Zhang, EAGLE: Speculative Sampling Requires Rethinking Feature "
    "Uncertainty, ICML 2024"
)
MIXTRAL = "Jiang et al., Mixtral of Experts, 2024"
TOP_K_GATING = Reference(
    paper=MIXTRAL,
    arxiv="2401.04088",
    section="2.1",
    item="Sparse Mixture of Experts (top-k gating, Equation (2))",
)


def _touched() -> SymbolicResult:
    miss_one = sp.binomial(E - 1, K_E) / sp.binomial(E, K_E)
    touched = E * (1 - (1 - K_E / E) ** N)
    claims = (
        prove(
            "one token misses a given expert: C(E-1, k)/C(E, k) = 1 - k/E",
            sp.combsimp(miss_one),
            1 - K_E / E,
        ),
        prove("one token touches exactly k experts", touched.subs(N, 1), K_E),
        prove("no token touches none", touched.subs(N, 0), 0),
        prove(
            "k = E: every expert from the first token on (n >= 1)",
            touched.subs({K_E: E, N: N + 1}),
            E,
        ),
        prove(
            "two tokens: k + k (E - k)/E (the second token's new experts)",
            touched.subs(N, 2),
            K_E + K_E * (E - K_E) / E,
            method="cancel",
        ),
    )
    return SymbolicResult(
        name="moe_experts_touched",
        title="Distinct experts touched by a pass (uniform routing)",
        statement=(
            "n tokens, each routed to k of E experts drawn uniformly without replacement and "
            "independently of the other tokens, touch E (1 - (1 - k/E)^n) distinct experts "
            "on average."
        ),
        lhs=r"E_\mathrm{touched}(n)",
        expr=touched,
        symbols=(N, E, K_E),
        assumptions=(
            "Uniform routing: each token's k experts are a uniform k-subset of the E experts.",
            "Tokens route independently (no capacity limit, no expert groups).",
            "Every MoE layer routes alike; a layer reads each touched expert's weights once.",
        ),
        steps=(
            Step(
                description="a token misses expert e: the k-subsets without e over all",
                lhs=r"P(e \notin S)",
                rhs=miss_one,
            ),
            Step(
                description="independent tokens: all n miss e; linearity over the E experts",
                lhs=r"E_\mathrm{touched}(n)",
                rhs=E * (1 - sp.combsimp(miss_one) ** N),
            ),
        ),
        claims=claims,
        references=(TOP_K_GATING,),
        twin="specsim.theory.moe.experts_touched",
    )


def _touched_load(uniform: sp.Expr) -> SymbolicResult:
    term = 1 - (1 - K_E * LOAD[_e]) ** N
    touched = sp.Sum(term, (_e, 1, E))
    at_uniform = sp.Sum(term.subs(LOAD[_e], 1 / E), (_e, 1, E)).doit()
    claims = _touched_load_claims(term, at_uniform=at_uniform, uniform=uniform)
    return SymbolicResult(
        name="moe_experts_touched_load",
        title="Distinct experts touched by a pass (skewed routing)",
        statement=(
            "n tokens, each routed to k distinct experts, expert e among a token's k with "
            "probability pi_e = k p_e (p_e its share of the routed token-slots), tokens "
            "independent, touch sum_e 1 - (1 - k p_e)^n distinct experts on average; uniform "
            "shares give E (1 - (1 - k/E)^n) and any skew touches fewer (Jensen)."
        ),
        lhs=r"E_\mathrm{distinct}(n)",
        expr=touched,
        symbols=(N, E, K_E, LOAD),
        assumptions=(
            "Each token routes to exactly k distinct experts, so sum_e pi_e = k and "
            "pi_e = k p_e; only these marginals enter the mean (any top-k router).",
            "Tokens route independently of each other (no temporal correlation).",
            "One share vector for every MoE layer (a per-layer load would sum per layer).",
        ),
        steps=(
            Step(
                description="expert e is missed by all n independent tokens",
                lhs=r"P(e \notin S_1 \cup \dots \cup S_n)",
                rhs=(1 - K_E * LOAD[_e]) ** N,
            ),
            Step(
                description="linearity of expectation over the E experts",
                lhs=r"E_\mathrm{distinct}(n)",
                rhs=touched,
            ),
            Step(
                description="at uniform shares p_e = 1/E",
                lhs=r"E_\mathrm{distinct}(n)\big|_{p_e = 1/E}",
                rhs=at_uniform,
            ),
        ),
        claims=claims,
        references=(TOP_K_GATING,),
        twin="specsim.theory.moe_skew.experts_touched_load",
    )


def _verification(touched: sp.Expr) -> SymbolicResult:
    w_f, w_x = sp.symbols("W_f W_x", positive=True)  # fixed bytes; bytes of one expert, all layers
    t_n = touched.subs(N, gamma + 1)
    ratio = (w_f + w_x * t_n) / (w_f + w_x * K_E)
    v_form = 1 - F + F * t_n / K_E
    f_of_w = w_x * K_E / (w_f + w_x * K_E)
    claims = _verification_claims(ratio=ratio, v_form=v_form, f_of_w=f_of_w)
    return SymbolicResult(
        name="moe_verification_factor",
        title="Verification factor v(gamma) of an MoE target (batch 1, memory-bound)",
        statement=(
            "A memory-bound pass over gamma + 1 positions reads the weights every token uses "
            "once and E_touched(gamma + 1) routed experts per MoE layer; over a one-token "
            "decode that is v(gamma) = 1 - f + f E_touched(gamma + 1) / k, with f the routed "
            "experts' share of the decode's weight bytes."
        ),
        lhs=r"v(\gamma)",
        expr=v_form,
        symbols=(gamma, E, K_E, F),
        assumptions=(
            "Batch 1, memory-bound: a pass's time is its weight bytes over the bandwidth "
            "(KV, activations and compute are left out).",
            "Uniform routing as in the distinct-expert count; every MoE layer alike.",
            "f = k W_x / (W_f + k W_x): W_f the bytes every token reads, W_x one routed "
            "expert's bytes summed over the MoE layers.",
        ),
        steps=(
            Step(
                description="the pass time over the one-token time, in bytes read",
                lhs=r"v(\gamma)",
                rhs=ratio,
            ),
            Step(
                description="in terms of the routed share f of the one-token bytes",
                lhs=r"v(\gamma)",
                rhs=v_form,
            ),
        ),
        claims=claims,
        references=(
            Reference(
                paper=EAGLE,
                arxiv="2401.15077",
                section="4",
                item="the Mixtral 8x7B results (1.5x, against about 3x on 7B dense targets)",
            ),
            Reference(
                paper=LEVIATHAN,
                arxiv="2211.17192",
                section="3.3",
                item="Definition 3.7 (the cost of a pass; v = 1 there)",
            ),
        ),
        twin="specsim.theory.moe.moe_verification_factor",
    )


def _touched_load_claims(
    term: sp.Expr, *, at_uniform: sp.Expr, uniform: sp.Expr
) -> tuple[Claim, ...]:
    """The skewed count's checks: uniform shares give the uniform count, four experts give
    exactly k for one token and 2k - k^2 sum p_e^2 for two, each term is concave."""
    shares = sp.symbols("p1:5", nonnegative=True)  # four experts, the last share 1 - the rest
    last = {shares[3]: 1 - shares[0] - shares[1] - shares[2]}
    four = sum((term.subs(LOAD[_e], q) for q in shares), sp.Integer(0)).subs(last)
    x = sp.Symbol("x", nonnegative=True)
    one = (1 - (1 - K_E * x) ** N).subs(N, N + 2)
    return (
        prove("uniform shares p_e = 1/E give E (1 - (1 - k/E)^n)", at_uniform, uniform),
        prove(
            "four experts, shares summing to 1: one token touches exactly k",
            four.subs(N, 1),
            K_E,
            method="expand",
        ),
        prove(
            "four experts: two tokens touch 2k - k^2 sum p_e^2 (the second token's repeats)",
            four.subs(N, 2),
            (2 * K_E - K_E**2 * sum(q**2 for q in shares)).subs(last),
            method="expand",
        ),
        prove(
            "each term is concave in its share (n + 2 tokens): -(n+2)(n+1) k^2 (1 - k p)^n <= 0",
            sp.diff(one, x, 2),
            -(N + 2) * (N + 1) * K_E**2 * (1 - K_E * x) ** N,
        ),
    )


def _verification_claims(*, ratio: sp.Expr, v_form: sp.Expr, f_of_w: sp.Expr) -> tuple[Claim, ...]:
    """The MoE v(gamma)'s checks: the byte ratio in terms of f, gamma = 0, a dense model and
    the limit of many experts."""
    limit = sp.limit(v_form, E, sp.oo)
    return (
        prove(
            "the pass-time ratio with f = k W_x / (W_f + k W_x) is 1 - f + f E_t / k",
            ratio,
            v_form.subs(F, f_of_w),
            method="cancel",
        ),
        prove("gamma = 0: one position costs one decode", v_form.subs(gamma, 0), 1),
        prove("a dense model (f = 0) verifies for free", v_form.subs(F, 0), 1),
        prove(
            "E -> infinity: every token its own experts, 1 - f + f (gamma + 1)",
            limit,
            1 - F + F * (gamma + 1),
        ),
    )


def derive_moe() -> tuple[SymbolicResult, SymbolicResult, SymbolicResult]:
    """The MoE results (uniform and skewed distinct experts, v(gamma)), each claim proven."""
    touched = _touched()
    return touched, _touched_load(touched.expr), _verification(touched.expr)
