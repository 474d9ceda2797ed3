r"""The closed forms of speculative decoding, derived and proven with sympy.

Each result is a :class:`SymbolicResult`: its sympy expression, a statement in
words, its assumptions, LaTeX, the derivation steps sympy performed, the claims
sympy proved (each with the residual it reduced to 0) and the reference (paper,
section, item). The derivations live in :mod:`specsim.theory.tokens`,
:mod:`specsim.theory.speedup` and :mod:`specsim.theory.overlap`; this module holds
the vocabulary they share and the published forms they are proven equal to
(:func:`closed_forms`). :func:`specsim.theory.results.derive_all` runs them all
once per process (a few seconds of sympy; nothing runs at import).

Symbols: ``alpha`` (mean acceptance, declared positive: alpha = 0 follows by
continuity and alpha = 1 by a limit), ``gamma`` (draft length, integer >= 0),
``c`` (draft step time / target step time, >= 0), ``c_hat`` (draft ops per token /
target ops per token, >= 0), ``v`` (target time to verify gamma + 1 tokens / time
for one token, > 0) and ``k`` (tokens emitted by one pass).

Example (derive_all takes seconds, so the doctest only reads the published forms):

>>> closed_forms()["expected_tokens"]
(1 - alpha**(gamma + 1))/(1 - alpha)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import sympy as sp

__all__ = [
    "alpha",
    "gamma",
    "c",
    "c_hat",
    "v",
    "k",
    "V_NOW",
    "V_NEXT",
    "Reference",
    "Step",
    "Claim",
    "SymbolicResult",
    "LEVIATHAN",
    "CHEN",
    "closed_forms",
    "latex",
    "prove",
    "generic_branch",
]

alpha = sp.Symbol("alpha", positive=True)
gamma = sp.Symbol("gamma", integer=True, nonnegative=True)
c = sp.Symbol("c", nonnegative=True)
c_hat = sp.Symbol("c_hat", nonnegative=True)
v = sp.Symbol("v", positive=True)
k = sp.Symbol("k", integer=True)
V_NOW = sp.Symbol("v_now", positive=True)  # v(gamma), where v is a free function of gamma
V_NEXT = sp.Symbol("v_next", positive=True)  # v(gamma + 1)

_LATEX_NAMES = {c_hat: r"\hat{c}", V_NOW: r"v(\gamma)", V_NEXT: r"v(\gamma+1)"}

LEVIATHAN = (
    "Leviathan, Kalman & Matias, Fast Inference from Transformers via Speculative "
    "Decoding, ICML 2023"
)
CHEN = (
    "Chen, Borgeaud, Irving, Lespiau, Sifre & Jumper, Accelerating Large Language "
    "Model Decoding with Speculative Sampling, 2023"
)


def latex(expr: sp.Basic) -> str:
    """LaTeX of a sympy expression with this package's symbol names (``c_hat`` as ``\\hat{c}``)."""
    return str(sp.latex(expr, symbol_names=_LATEX_NAMES))


@dataclass(frozen=True, kw_only=True)
class Reference:
    """Where a result is published: paper, arXiv id, section and numbered item."""

    paper: str
    arxiv: str
    section: str
    item: str

    def __post_init__(self) -> None:
        for name in ("paper", "arxiv", "section", "item"):
            if not getattr(self, name).strip():
                raise ValueError(f"Reference: field {name!r} must not be empty")

    def __str__(self) -> str:
        return f"{self.paper} (arXiv:{self.arxiv}), Section {self.section}, {self.item}"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One derivation step: what was done, and the equation sympy produced (``lhs = rhs``)."""

    description: str
    lhs: str
    rhs: sp.Basic

    @property
    def latex(self) -> str:
        return f"{self.lhs} = {latex(self.rhs)}" if self.lhs else latex(self.rhs)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """An identity ``lhs = rhs`` that sympy proved by reducing ``lhs - rhs`` to ``residual``.

    The claim holds when the residual is exactly 0; :func:`prove` builds these.
    """

    statement: str
    lhs: sp.Basic
    rhs: sp.Basic
    residual: sp.Basic
    method: str

    @property
    def holds(self) -> bool:
        return bool(self.residual == 0)

    @property
    def latex(self) -> str:
        return f"{latex(self.lhs)} = {latex(self.rhs)}"


@dataclass(frozen=True, kw_only=True)
class SymbolicResult:
    """A derived closed form with everything a reader needs to trust and reuse it.

    ``expr`` is the result (in the published form where there is one), ``lhs`` the
    LaTeX of the quantity it equals, ``symbols`` the twin's argument order and
    ``twin`` the dotted name of the numeric function that evaluates it.
    """

    name: str
    title: str
    statement: str
    lhs: str
    expr: sp.Basic
    symbols: tuple[sp.Symbol, ...]
    assumptions: tuple[str, ...]
    steps: tuple[Step, ...]
    claims: tuple[Claim, ...]
    references: tuple[Reference, ...]
    twin: str | None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"SymbolicResult: name must be an identifier, got {self.name!r}")
        if not self.references:
            raise ValueError(f"SymbolicResult {self.name!r}: at least one reference is required")
        if not self.claims:
            raise ValueError(f"SymbolicResult {self.name!r}: nothing was proved (no claims)")

    @property
    def latex(self) -> str:
        return f"{self.lhs} = {latex(self.expr)}" if self.lhs else latex(self.expr)

    @property
    def proved(self) -> bool:
        """True when every claim reduced to exactly 0."""
        return all(claim.holds for claim in self.claims)


def generic_branch(expr: sp.Basic) -> sp.Basic:
    """Replace each Piecewise by its last ("otherwise") branch.

    sympy's geometric sums come back as ``Piecewise((..., Eq(alpha, 1)), (..., True))``;
    the otherwise branch is the one valid for alpha != 1, which is where the
    derivations work (alpha = 1 is then taken as a limit).
    """
    return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[-1][0])


def prove(statement: str, lhs: sp.Basic, rhs: sp.Basic, *, method: str = "simplify") -> Claim:
    """Prove ``lhs == rhs`` with sympy: ``simplify`` (default), ``cancel`` or ``expand``.

    The residual is recorded, not asserted: a claim that fails shows in the docs and
    fails the tests, it does not break imports.
    """
    diff = sp.expand_power_base(sp.expand_power_exp(lhs - rhs))
    if method == "simplify":
        residual = sp.simplify(diff)
    elif method == "cancel":
        residual = sp.cancel(sp.expand(diff))
    elif method == "expand":
        residual = sp.expand(diff)
    else:
        raise ValueError(f"prove: method must be 'simplify', 'cancel' or 'expand', got {method!r}")
    return Claim(statement=statement, lhs=lhs, rhs=rhs, residual=residual, method=method)


def _expected_form(g: sp.Basic = gamma) -> sp.Expr:
    return (1 - alpha ** (g + 1)) / (1 - alpha)


@functools.cache
def _closed_forms() -> Mapping[str, sp.Basic]:
    e = _expected_form()
    forms: dict[str, sp.Basic] = {
        "tokens_pmf": sp.Piecewise(
            (alpha ** (k - 1) * (1 - alpha), (k >= 1) & (k <= gamma)),
            (alpha**gamma, sp.Eq(k, gamma + 1)),
            (0, True),
        ),
        "expected_tokens": e,
        "tokens_variance": (
            alpha - (2 * gamma + 1) * (1 - alpha) * alpha ** (gamma + 1) - alpha ** (2 * gamma + 2)
        )
        / (1 - alpha) ** 2,
        "walltime_speedup": e / (gamma * c + v),
        "ops_factor": (1 - alpha) * (gamma * c_hat + gamma + 1) / (1 - alpha ** (gamma + 1)),
        "target_calls_per_token": (1 - alpha) / (1 - alpha ** (gamma + 1)),
        "draft_calls_per_token": gamma * (1 - alpha) / (1 - alpha ** (gamma + 1)),
        "oracle_speedup_bound": 1 / (1 - alpha),
        "gamma1_lower_bound": (1 + alpha) / (1 + c),
        # Sign of W(gamma + 1) - W(gamma) for v = 1: one more draft token pays iff > 0.
        "optimal_gamma": alpha ** (gamma + 1) * (1 + gamma * c) - c * e,
    }
    return MappingProxyType(forms)


def closed_forms() -> Mapping[str, sp.Basic]:
    """The published (or, where none is published, the derived) closed form of each result.

    Cheap to build: the derivations prove their sympy results equal to these, and
    the CLI prints them without running the derivations.
    """
    return _closed_forms()
