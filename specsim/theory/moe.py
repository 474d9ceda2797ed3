r"""Mixture-of-experts verification: the distinct experts a pass touches, and v(gamma).

A pass over ``n`` tokens through one MoE layer of ``E`` routed experts, each token
routed to ``k`` of them, reads the weights of every *distinct* expert its tokens chose.
Under uniform routing (each token's ``k`` experts a uniform draw without replacement,
tokens independent) expert ``e`` is missed by one token with probability
``C(E-1, k) / C(E, k) = 1 - k/E``, by all ``n`` with ``(1 - k/E)^n``, so by linearity of
expectation

.. math:: E_\mathrm{touched}(n) = E \left(1 - (1 - k/E)^n\right)

(:func:`experts_touched`): ``k`` at ``n = 1``, ``E`` as ``n`` grows. A memory-bound
verification pass of ``gamma + 1`` positions at batch 1 reads the weights every token
uses (attention, norms, router, shared experts, dense layers, LM head) once and
``E_touched(gamma + 1)`` routed experts per MoE layer, so with ``f`` the routed experts'
share of a one-token decode's weight bytes

.. math:: v(\gamma) = 1 - f + f \, \frac{E_\mathrm{touched}(\gamma + 1)}{k}

(:func:`moe_verification_factor`). A dense model (``f = 0``) verifies for free in this
regime (``v = 1``); an MoE one pays up to ``1 - f + f (gamma + 1)`` (every token its own
experts, ``E -> infinity``). This is why EAGLE (Li et al., ICML 2024, arXiv:2401.15077,
Section 4) reports 1.5x on Mixtral 8x7B where 7B dense targets get about 3x.

With a non-uniform routing distribution (``p_e`` the share of routed token-slots expert
``e`` receives) the count is ``sum_e 1 - (1 - k p_e)^n``
(:func:`specsim.theory.moe_skew.experts_touched_load`, exact for independent tokens), and
``moe_verification_factor(..., load=p)`` uses it.

>>> experts_touched(1, experts=8, top_k=2), experts_touched(2, experts=8, top_k=2)
(2.0, 3.5)
>>> round(moe_verification_factor(4, experts=8, top_k=2, routed_fraction=0.96), 3)
2.969
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from specsim.theory._checks import FloatArray, as_real, check_count, scalar_or_array
from specsim.theory.moe_skew import experts_touched_load

if TYPE_CHECKING:
    from specsim.theory.symbolic import SymbolicResult

__all__ = [
    "experts_touched",
    "moe_verification_factor",
    "check_experts",
    "derive",
]


def check_experts(experts: object, top_k: object, *, where: str) -> tuple[int, int]:
    """``(experts, top_k)`` as ints when ``1 <= top_k <= experts``; else an error naming them."""
    for name, value in (("experts", experts), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{where}: {name} must be an integer >= 1, got {value!r}")
    if int(top_k) > int(experts):  # type: ignore[call-overload]
        raise ValueError(f"{where}: top_k = {top_k} exceeds experts = {experts}")
    return int(experts), int(top_k)  # type: ignore[call-overload]


def experts_touched(n: ArrayLike, *, experts: int, top_k: int) -> FloatArray | float:
    """Expected distinct experts ``E (1 - (1 - k/E)^n)`` that ``n`` tokens route to.

    Assumptions: uniform routing, each token's ``top_k`` experts drawn without
    replacement, tokens independent (see the module docstring). ``n`` (tokens in the
    pass, batch x positions) may be an array; real ``n >= 0`` is allowed (the serving
    simulator's mean batches), ``n = 0`` touches none.
    """
    where = "experts_touched"
    E, k = check_experts(experts, top_k, where=where)
    x = as_real(n, "n", where)
    if np.any(x < 0) or not np.all(np.isfinite(x)):
        raise ValueError(f"{where}: n must be finite and >= 0, got {np.asarray(n).tolist()!r}")
    p = k / E
    # 1 - (1 - p)^n directly where n p >= 0.01 (it cancels at most ~100 ulps there, and is
    # exact at n = 1 for dyadic p); expm1/log1p where (1 - p)^n is close to 1 (E >> k n).
    with np.errstate(divide="ignore"):
        small = -np.expm1(x * np.log1p(-p)) if k < E else np.where(x > 0, 1.0, 0.0)
    miss = np.where(x * p >= 0.01, 1.0 - np.power(1.0 - p, x), small)
    return scalar_or_array(np.asarray(E * miss, dtype=np.float64))


def moe_verification_factor(
    gamma: ArrayLike,
    *,
    experts: int,
    top_k: int,
    routed_fraction: float,
    load: ArrayLike | None = None,
) -> FloatArray | float:
    """``v(gamma) = 1 - f + f E_touched(gamma + 1) / k`` at batch 1, memory-bound.

    ``routed_fraction`` ``f`` is the routed experts' share of the bytes a one-token
    decode reads (:func:`specsim.cost.moe_routed_fraction` computes it from a card).
    ``load`` (one share per expert, ``experts`` of them) replaces uniform routing by
    :func:`specsim.theory.moe_skew.experts_touched_load`. Assumptions: weight reads
    dominate (no KV, activation or compute term), tokens route independently, every MoE
    layer alike.
    """
    where = "moe_verification_factor"
    E, k = check_experts(experts, top_k, where=where)
    f = float(routed_fraction)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"{where}: routed_fraction must be in [0, 1], got {routed_fraction!r}")
    g = check_count(gamma, "gamma", where)
    if load is None:
        touched = np.asarray(experts_touched(g + 1.0, experts=E, top_k=k))
    else:
        size = np.asarray(load).size
        if size != E:
            raise ValueError(f"{where}: load lists {size} experts, the model has {E}")
        touched = np.asarray(experts_touched_load(g + 1.0, load=load, top_k=k))
    return scalar_or_array(1.0 - f + f * touched / k)


def derive() -> tuple[SymbolicResult, ...]:
    """The distinct-expert count and the MoE verification factor, proven with sympy."""
    from specsim.theory.moe_symbolic import derive_moe  # start-up: sympy on first use

    return derive_moe()
