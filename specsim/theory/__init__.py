r"""The closed forms of speculative decoding: derived in sympy, served as fast numeric twins.

Numeric twins (imported eagerly; numpy only): :func:`expected_tokens`,
:func:`tokens_variance`, :func:`tokens_pmf`, :func:`walltime_speedup`,
:func:`ops_factor`, :func:`optimal_gamma`, :func:`oracle_speedup_bound`,
:func:`target_calls_per_token`, :func:`draft_calls_per_token` and
:func:`gamma1_lower_bound`. They broadcast, return floats for scalars, are exact at
alpha = 1 and raise ValueError naming the parameter for out-of-range input.
:func:`best_gamma` gives the best lookahead of one (alpha, c) as a
:class:`GammaOptimum`, saying when no finite gamma is optimal (``unbounded``).
Beyond the i.i.d. assumption, :func:`markov_tokens_per_pass` (and
:func:`block_start_law`) solve bursty, hidden-Markov acceptance exactly
(:mod:`specsim.theory.markov`). Token trees (:mod:`specsim.theory.token_trees`):
:func:`expected_tokens_tree` from per-depth, per-rank acceptance (Sequoia's model;
:func:`tree_polynomial` is its sympy form), :func:`tree_ops_factor` and
:func:`tree_positions_per_token` (Theorem 3.11 for trees). Several drafts
(:mod:`specsim.theory.multidraft`): :func:`kseq_acceptance`, :func:`mss_acceptance`,
:func:`rrs_acceptance` and the bound :func:`optimal_multidraft_acceptance`.
:data:`CLOSED_FORMS` holds the published forms as text and LaTeX, for printing without
sympy.

Symbolic side (sympy, imported on first use): :data:`RESULTS` (every
:class:`SymbolicResult`, derived on first access), :func:`derive_all`,
:func:`get_result`, :func:`closed_forms` and :func:`overlap_identity`.
``python -m specsim.theory.derivations`` renders them to ``docs/derivations.md``.

>>> from specsim.theory import expected_tokens, walltime_speedup
>>> expected_tokens(0.0, 4), expected_tokens(1.0, 4)
(1.0, 5.0)
>>> round(walltime_speedup(0.8, 5, 0.0), 2)  # Table 1 of Leviathan et al. 2023
3.69

Reference: Leviathan, Kalman & Matias, ICML 2023 (arXiv:2211.17192), Section 3;
Chen et al. 2023 (arXiv:2302.01318), Section 4.2.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

from specsim.theory.forms import CLOSED_FORMS, ClosedForm
from specsim.theory.markov import block_start_law, markov_tokens_per_pass
from specsim.theory.moe import experts_touched, moe_verification_factor
from specsim.theory.moe_skew import count_cv, experts_touched_load, lognormal_load
from specsim.theory.multidraft import (
    kseq_acceptance,
    kseq_rho_star,
    mss_acceptance,
    multidraft_acceptance_by_k,
    optimal_multidraft_acceptance,
    rrs_acceptance,
)
from specsim.theory.numeric import (
    TIE_RTOL,
    draft_calls_per_token,
    expected_tokens,
    gamma1_lower_bound,
    ops_factor,
    optimal_gamma,
    oracle_speedup_bound,
    target_calls_per_token,
    tokens_pmf,
    tokens_variance,
    walltime_speedup,
)
from specsim.theory.optimum import GammaOptimum, best_gamma
from specsim.theory.token_trees import (
    accept_from_marginal,
    accept_symbol,
    expected_tokens_tree,
    expected_tokens_tree_array,
    tree_depths_ranks,
    tree_draft_positions,
    tree_ops_factor,
    tree_polynomial,
    tree_positions_per_token,
    tree_reach,
)

if TYPE_CHECKING:
    from specsim.theory.overlap import overlap_identity
    from specsim.theory.results import derive_all, get_result
    from specsim.theory.symbolic import (
        Claim,
        Reference,
        Step,
        SymbolicResult,
        closed_forms,
    )

__all__ = [
    "TIE_RTOL",
    "expected_tokens",
    "tokens_variance",
    "tokens_pmf",
    "walltime_speedup",
    "ops_factor",
    "optimal_gamma",
    "oracle_speedup_bound",
    "target_calls_per_token",
    "draft_calls_per_token",
    "gamma1_lower_bound",
    "best_gamma",
    "GammaOptimum",
    "experts_touched",
    "experts_touched_load",
    "lognormal_load",
    "count_cv",
    "moe_verification_factor",
    "markov_tokens_per_pass",
    "block_start_law",
    "expected_tokens_tree",
    "expected_tokens_tree_array",
    "tree_reach",
    "accept_from_marginal",
    "tree_depths_ranks",
    "tree_draft_positions",
    "tree_positions_per_token",
    "tree_ops_factor",
    "tree_polynomial",
    "accept_symbol",
    "optimal_multidraft_acceptance",
    "kseq_rho_star",
    "kseq_acceptance",
    "mss_acceptance",
    "rrs_acceptance",
    "multidraft_acceptance_by_k",
    "CLOSED_FORMS",
    "ClosedForm",
    "RESULTS",
    "Claim",
    "Reference",
    "Step",
    "SymbolicResult",
    "closed_forms",
    "derive_all",
    "get_result",
    "overlap_identity",
]

# start-up: the symbolic names load sympy (about a second of CPU) only when first touched.
_LAZY = {
    "Claim": "specsim.theory.symbolic",
    "Reference": "specsim.theory.symbolic",
    "Step": "specsim.theory.symbolic",
    "SymbolicResult": "specsim.theory.symbolic",
    "closed_forms": "specsim.theory.symbolic",
    "derive_all": "specsim.theory.results",
    "get_result": "specsim.theory.results",
    "overlap_identity": "specsim.theory.overlap",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specsim.theory' has no attribute {name!r}")


class _Results(Sequence["SymbolicResult"]):
    """Every derived :class:`SymbolicResult`, in reading order; derived on first access."""

    def _items(self) -> tuple[SymbolicResult, ...]:
        from specsim.theory.results import derive_all  # start-up: sympy only when read

        return derive_all()

    @overload
    def __getitem__(self, index: int) -> SymbolicResult: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SymbolicResult]: ...

    def __getitem__(self, index: int | slice) -> SymbolicResult | Sequence[SymbolicResult]:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[SymbolicResult]:
        return iter(self._items())

    def __repr__(self) -> str:
        return "specsim.theory.RESULTS (the derived closed forms; see derive_all())"


RESULTS: Sequence[SymbolicResult] = _Results()
"""Every derived result (sympy runs on first access, a few seconds, once per process)."""
