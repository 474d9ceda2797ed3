"""A stack's fixed host costs fitted on published plain decode steps.

A plain decode step of ``b`` sequences on a stack, on ``L`` layers, costs the cost model's
kernel time (the roofline of its device part, collectives, graph padding: whatever
:mod:`specsim.cost` says with the host terms zeroed) plus

    ``pass_overhead_s + L * layer_overhead_s + b * sequence_overhead_s``
    ``+ L * eager_layer_overhead_s`` (off the graph path only).

Each term's coefficient in a row is read off the cost model itself (the change of the
row's modelled step for a unit of the term, as :mod:`specsim.calibrate.spec_fit` does), so
the fit attributes to the host only what the device parts leave over, and refitting after a
device part changes needs no change here. On the rows of one stack
(:func:`specsim.calibrate.plain_rows.read_plain_rows`) the terms are estimated by bounded
least squares on the relative error (each row weighted by ``1 / t_i``, so a 70B row and an
8B row count alike; every term at least 0), with standard errors
``sqrt(diag(s^2 (J^T J)^-1))``, ``J`` the weighted design and ``s^2 = RSS / (n - p)``
(Seber and Lee, *Linear Regression Analysis*, 2nd ed., 2003, Section 3.3).

Which terms: in the stack's order (:data:`ORDER`), a term is fitted when its column adds
rank to those before it (the rows identify it: a per-layer term needs two layer counts, a
per-sequence term two batch sizes, an eager term a row without graphs); the others keep the
stack's previous numbers (:data:`PRIOR`). A fit needs one degree of freedom: the last terms
are dropped until ``n - p >= 1``, and a stack with one row is a ValueError naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from specsim.calibrate.plain_rows import PlainRow, modelled_step_s
from specsim.cards.stack import StackProfile

__all__ = [
    "TERMS",
    "ORDER",
    "PRIOR",
    "PRIOR_COMMIT",
    "FixedFit",
    "with_terms",
    "prior_stack",
    "Design",
    "design",
    "fit_design",
    "fit_fixed",
    "stack_rows",
]

TERMS = ("pass_overhead_s", "layer_overhead_s", "sequence_overhead_s", "eager_layer_overhead_s")
"""The fixed host terms a plain decode step identifies."""
ORDER: Mapping[str, tuple[str, ...]] = {
    # llama.cpp's host cost was fitted per layer and no per-pass figure is published: with
    # rows of one layer count, its per-layer term is the one the rows set.
    "llama.cpp": ("layer_overhead_s", "eager_layer_overhead_s", "pass_overhead_s"),
    # TensorRT-LLM's published batch-1 steps are of one model (DeepSeek-R1, 61 layers), whose
    # gains from 67 to 89 tokens/s came from per-layer kernels under the same captured graph
    # (tech blog 1, Key Optimizations: multi-stream experts, MLA, top-k, Fuse_A_GEMM): the
    # fixed cost the rows show is charged per layer.
    "tensorrt-llm": ("layer_overhead_s", "pass_overhead_s", "sequence_overhead_s"),
}
"""Per stack, the order in which terms are tried (default: :data:`TERMS`' order)."""
PRIOR_COMMIT = "8c65b81"
PRIOR: Mapping[str, Mapping[str, float]] = {
    "gpt-fast-stack": {"pass_overhead_s": 3e-4, "layer_overhead_s": 4.45e-5},
    "hf-transformers": {"layer_overhead_s": 9.82e-4},
    "llama.cpp": {"layer_overhead_s": 8.193e-5},
    "research-cuda-graphs": {"layer_overhead_s": 4.45e-5, "eager_layer_overhead_s": 9.82e-4},
    "sglang": {"pass_overhead_s": 1.431e-3, "eager_layer_overhead_s": 5e-5},
    "tensorrt-llm": {"pass_overhead_s": 1.431e-3, "eager_layer_overhead_s": 5e-5},
    "vllm-v0": {
        "pass_overhead_s": 1.431e-3,
        "eager_layer_overhead_s": 5e-5,
        "sequence_overhead_s": 3e-5,
    },
    "vllm-v1": {"pass_overhead_s": 1.431e-3, "eager_layer_overhead_s": 5e-5},
}
"""Each stack's host terms before this fit (``models/stacks/*.toml`` at commit
:data:`PRIOR_COMMIT`; a term not named was 0): what a fit is compared against out of sample,
and what an unfitted term keeps."""
_UNIT = 1e-3  # the step of a term used to read its coefficient (exact: the terms add)
_RANK_TOL = 1e-9


@dataclass(frozen=True, kw_only=True)
class FixedFit:
    """A stack's fit: the stack with the fitted terms (the others at :data:`PRIOR`), the
    estimates and standard errors of the fitted terms, which sit at the bound 0, the rows,
    their measured and fitted step times (seconds) and the residual degrees of freedom."""

    stack: StackProfile
    estimate: dict[str, float]
    stderr: dict[str, float]
    at_bound: tuple[str, ...]
    rows: tuple[PlainRow, ...]
    measured_s: np.ndarray
    fitted_s: np.ndarray
    dof: int

    @property
    def errors(self) -> np.ndarray:
        """``fitted / measured - 1`` per row."""
        return self.fitted_s / self.measured_s - 1.0


def with_terms(stack: StackProfile, terms: Mapping[str, float]) -> StackProfile:
    """``stack`` with the host terms in ``terms`` replaced (the others kept)."""
    unknown = sorted(set(terms) - set(TERMS))
    if unknown:
        raise ValueError(f"fixed costs: unknown term(s) {unknown}; the terms are {TERMS}")
    changes: dict[str, Any] = {k: float(v) for k, v in terms.items()}
    return dataclasses.replace(stack, **changes)


def prior_stack(stack: StackProfile) -> StackProfile:
    """``stack`` with every term of :data:`TERMS` at its :data:`PRIOR` value."""
    prior = PRIOR.get(stack.slug, {})
    return with_terms(stack, {t: prior.get(t, 0.0) for t in TERMS})


@dataclass(frozen=True, kw_only=True)
class Design:
    """The rows of one stack, their measured steps ``t`` (seconds), each row's modelled step
    with the terms zeroed (``base``) and the ``(rows, TERMS)`` matrix ``X`` of each term's
    coefficient in each row (module docstring): a row's modelled step on host terms ``h`` is
    ``base + X @ h`` exactly, the terms being additive."""

    rows: tuple[PlainRow, ...]
    t: np.ndarray
    base: np.ndarray
    X: np.ndarray

    def subset(self, keep: np.ndarray) -> Design:
        """The rows where ``keep`` (a boolean mask) is true."""
        rows = tuple(r for r, k in zip(self.rows, keep, strict=True) if k)
        return Design(rows=rows, t=self.t[keep], base=self.base[keep], X=self.X[keep])

    def predict(self, stack: StackProfile) -> np.ndarray:
        """The modelled steps of the rows with ``stack``'s host terms."""
        return self.base + self.X @ np.array([getattr(stack, k) for k in TERMS])


def design(rows: Sequence[PlainRow], stack: StackProfile) -> Design:
    """The :class:`Design` of ``rows`` on ``stack``."""
    zero = with_terms(stack, dict.fromkeys(TERMS, 0.0))
    base = np.array([modelled_step_s(r, zero) for r in rows])
    cols = []
    for term in TERMS:
        unit = with_terms(zero, {term: _UNIT})
        cols.append(np.array([modelled_step_s(r, unit) for r in rows]) - base)
    t = np.array([r.step_s for r in rows])
    return Design(rows=tuple(rows), t=t, base=base, X=np.column_stack(cols) / _UNIT)


def stack_rows(rows: Sequence[PlainRow], slug: str) -> list[PlainRow]:
    """The rows priced by stack ``slug``; a ValueError naming the stack when there are none."""
    mine = [r for r in rows if r.stack == slug]
    if not mine:
        raise ValueError(f"fixed costs: no plain decode rows for stack {slug!r}")
    return mine


def _identified(X: np.ndarray, order: Sequence[str], n: int, exact: bool) -> list[str]:
    """The terms of ``order`` that add rank to the ones before (``X`` weighted), the last
    dropped until ``n - p >= 1`` (``exact``: ``n - p >= 0``)."""
    chosen: list[str] = []
    for term in order:
        trial = [TERMS.index(t) for t in (*chosen, term)]
        sv = np.linalg.svd(X[:, trial], compute_uv=False)
        if sv[-1] > _RANK_TOL * max(sv[0], 1.0):
            chosen.append(term)
    keep = n if exact else n - 1
    return chosen[: max(keep, 0)]


def fit_fixed(rows: Sequence[PlainRow], stack: StackProfile, *, exact: bool = False) -> FixedFit:
    """Fit ``stack``'s fixed host terms on ``rows`` (module docstring). ``exact`` allows a fit
    with no degree of freedom left (the leave-one-source-out refits; no standard errors).
    ValueError naming the stack for no rows, rows of another stack, or no term the rows
    identify with a degree of freedom to spare."""
    if not rows:
        raise ValueError(f"fixed costs: stack {stack.slug!r}: no rows to fit")
    other = sorted({r.stack for r in rows} - {stack.slug})
    if other:
        raise ValueError(f"fixed costs: stack {stack.slug!r}: rows of other stacks {other}")
    return fit_design(design(rows, stack), stack, exact=exact)


def fit_design(d: Design, stack: StackProfile, *, exact: bool = False) -> FixedFit:
    """:func:`fit_fixed` on rows already priced (a :class:`Design` of ``stack``)."""
    slug = stack.slug
    w = 1.0 / d.t
    order = ORDER.get(slug, TERMS)
    chosen = _identified(d.X * w[:, None], order, len(d.rows), exact)
    if not chosen:
        raise ValueError(
            f"fixed costs: stack {slug!r}: {len(d.rows)} row(s) leave no degree of freedom for "
            f"any of {', '.join(order)} (a fit needs more rows than terms)"
        )
    prior = prior_stack(stack)
    cols = [TERMS.index(k) for k in chosen]
    offset = d.predict(with_terms(prior, dict.fromkeys(chosen, 0.0)))
    J = d.X[:, cols] * w[:, None]
    coef = np.asarray(lsq_linear(J, (d.t - offset) * w, bounds=(0.0, np.inf), method="bvls").x)
    fitted = offset + d.X[:, cols] @ coef
    dof = len(d.rows) - len(chosen)
    resid = (d.t - fitted) * w
    if dof > 0:
        s2 = float(resid @ resid) / dof
        se = np.sqrt(np.diag(s2 * np.linalg.pinv(J.T @ J)))
    else:
        se = np.full(len(chosen), np.inf)
    est = {k: float(v) for k, v in zip(chosen, coef, strict=True)}
    return FixedFit(
        stack=with_terms(prior, est),
        estimate=est,
        stderr={k: float(v) for k, v in zip(chosen, se, strict=True)},
        at_bound=tuple(k for k, v in est.items() if v <= 0.0),
        rows=d.rows,
        measured_s=d.t,
        fitted_s=fitted,
        dof=dof,
    )
