"""The sympy side of :mod:`specsim.theory.token_trees`: the tree polynomial in the
``p_{d,r}`` and :func:`derive`, which proves the chain and the star as its special cases.
sympy is imported only when a symbolic form is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specsim.theory.tree_shape import tree_depths_ranks, tree_draft_positions

if TYPE_CHECKING:
    import sympy as sp

    from specsim.theory.symbolic import Claim, SymbolicResult

__all__ = ["accept_symbol", "tree_polynomial", "derive", "SEQUOIA"]


def accept_symbol(depth: int, rank: int) -> sp.Symbol:
    """The sympy symbol ``p_{depth,rank}`` (depth from 1, rank from 0), in [0, 1]."""
    import sympy as sp  # start-up: sympy loads only when a symbolic form is asked for

    return sp.Symbol(f"p_{depth}_{rank}", nonnegative=True)


def tree_polynomial(parents: Sequence[int]) -> sp.Expr:
    r""":func:`expected_tokens_tree` as a sympy polynomial in the ``p_{d,r}``.

    >>> tree_polynomial([-1, -1])
    p_1_0 + p_1_1*(1 - p_1_0) + 1
    """
    import sympy as sp  # start-up: sympy loads only when a symbolic form is asked for

    depths, ranks = tree_depths_ranks(parents)
    reach: list[sp.Expr] = []
    for p, d, r in zip(parents, depths, ranks, strict=True):
        edge = accept_symbol(d, r) * sp.Mul(*(1 - accept_symbol(d, s) for s in range(r)))
        reach.append(edge if p < 0 else reach[p] * edge)
    return sp.Integer(1) + sp.Add(*reach)


def derive() -> tuple[SymbolicResult, ...]:
    """The tree result, proven with sympy: the chain and the star as special cases.

    Claims: the chain's tail sum ``sum_{j<=gamma} alpha^j`` (symbolic ``gamma``) is
    Leviathan et al.'s Equation (1); :func:`tree_polynomial` of every chain of 0..6 nodes
    with ``p_{d,0} = alpha`` is that form; a star of ``k`` children is ``2 - prod(1 - p)``;
    and the tree's operations bill of a chain is Theorem 3.11.
    """
    import sympy as sp  # start-up: sympy loads only when a symbolic form is asked for

    from specsim.theory.symbolic import (  # start-up: as above
        alpha,
        closed_forms,
        gamma,
        generic_branch,
        prove,
    )

    eq1, ops = closed_forms()["expected_tokens"], closed_forms()["ops_factor"]
    j = sp.Symbol("j", integer=True, nonnegative=True)
    tail = generic_branch(sp.summation(alpha**j, (j, 0, gamma)))
    claims = [prove("a chain: 1 + sum_{j=1..gamma} alpha^j equals Equation (1)", tail, eq1)]
    claims += _chain_claims(eq1, ops)
    claims += _star_claims()
    return (_tree_result(tail, claims),)


def _tree_result(tail: sp.Expr, claims: list[Claim]) -> SymbolicResult:
    """The tree result, shown for the tree ``[-1, -1, 0, 0, 1]``, with the chain's tail sum
    ``tail`` among its steps and ``claims`` proven."""
    from specsim.theory.symbolic import (  # start-up: sympy loads only when asked for
        LEVIATHAN,
        Reference,
        Step,
        SymbolicResult,
    )

    example = [-1, -1, 0, 0, 1]
    expr = tree_polynomial(example)
    sequoia = Reference(
        paper=SEQUOIA,
        arxiv="2402.12374",
        section="3",
        item="the positional acceptance assumption; expected tokens of a tree",
    )
    return SymbolicResult(
        name="expected_tokens_tree",
        title="Expected tokens per pass of a token tree",
        statement=(
            "A tree pass emits 1 + sum over nodes v of prod over the path to v of "
            "p_{d,r} prod_{s<r} (1 - p_{d,s}) tokens on average; shown for the tree "
            f"parents = {example}. A chain gives Equation (1), a star 2 - prod(1 - p)."
        ),
        lhs=r"\mathbb{E}[T]",
        expr=expr,
        symbols=tuple(sorted(expr.free_symbols, key=str)),
        assumptions=(
            "Positional acceptance: the rank-r candidate at depth d is accepted with "
            "probability p_{d,r} given that ranks 0..r-1 at its node were rejected, "
            "independently of the tokens (Sequoia's assumption).",
            "The pass emits the accepted path and one token from the target.",
        ),
        steps=(
            Step(
                description="a node's reach: the product along its path",
                lhs=r"P(v \text{ accepted})",
                rhs=tree_polynomial([-1, -1, 0]) - 1,
            ),
            Step(
                description="the chain's tail sum (sympy summation)",
                lhs=r"\mathbb{E}[T_{\text{chain}}]",
                rhs=tail,
            ),
        ),
        claims=tuple(claims),
        references=(
            sequoia,
            Reference(
                paper=LEVIATHAN,
                arxiv="2211.17192",
                section="3.1 and 3.4",
                item="Equation (1) and Theorem 3.11",
            ),
        ),
        twin="specsim.theory.expected_tokens_tree",
    )


def _chain_claims(eq1: sp.Expr, ops: sp.Expr) -> list[Claim]:
    """Every chain of 0..6 nodes with ``p_{d,0} = alpha`` is Equation (1) ``eq1`` at its
    length, and its operations bill is Theorem 3.11 ``ops``."""
    from specsim.theory.symbolic import alpha, c_hat, gamma, prove  # start-up: as in derive

    claims: list[Claim] = []
    for g in range(7):
        chain = [-1, *range(g - 1)] if g else []
        poly = tree_polynomial(chain).subs({accept_symbol(d, 0): alpha for d in range(1, g + 1)})
        claims.append(
            prove(
                f"the chain of {g} nodes is Equation (1) at gamma = {g}",
                poly,
                eq1.subs(gamma, g),
                method="cancel",
            )
        )
        if g:
            bill = (c_hat * tree_draft_positions(chain) + g + 1) / poly
            claims.append(
                prove(
                    f"its operations bill is Theorem 3.11 at gamma = {g}",
                    bill,
                    ops.subs(gamma, g),
                    method="cancel",
                )
            )
    return claims


def _star_claims() -> list[Claim]:
    """A star of 1..4 children is ``2 - prod(1 - p_{1,r})``."""
    import sympy as sp  # start-up: sympy loads only when a symbolic form is asked for

    from specsim.theory.symbolic import prove  # start-up: as in derive

    claims: list[Claim] = []
    for k in range(1, 5):
        star = 2 - sp.Mul(*(1 - accept_symbol(1, r) for r in range(k)))
        claims.append(
            prove(
                f"a star of {k} children is 2 - prod(1 - p_1_r)",
                tree_polynomial([-1] * k),
                star,
                method="expand",
            )
        )
    return claims


SEQUOIA = (
    "Chen, May, Svirschevski, Huang, Ryabinin, Jia & Chen, Sequoia: Scalable, Robust, and "
    "Hardware-aware Speculative Decoding, 2024"
)
