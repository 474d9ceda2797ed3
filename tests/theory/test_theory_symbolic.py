"""The sympy derivations: every claim proven, every twin equal to its expression, docs fresh."""

from __future__ import annotations

import functools
import importlib
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mpmath as mp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from specsim import sampling, theory
from specsim.theory import derivations
from specsim.theory.results import derive_all, get_result
from specsim.theory.symbolic import (
    Claim,
    Reference,
    SymbolicResult,
    alpha,
    c,
    closed_forms,
    gamma,
    k,
    prove,
)

ALPHA_GRID = (0.0, 1e-300, 0.5, 1 - 1e-6, 1.0)
GAMMA_GRID = tuple(range(0, 21))
C_GRID = (0.0, 0.01, 0.5)
V_GRID = (1.0, 1.5)
RTOL = 1e-13  # the twins are accurate to a few ulps
REF_DIGITS = 400
ATOL = float(np.finfo(np.float64).tiny)  # below the normal range no float keeps 1e-13
BAND = 16 * float(np.finfo(np.float64).eps)  # a few ulps of the twins, around a tie threshold


# --- every result is complete and proven ----------------------------------------------------


def test_every_result_is_proven_and_documented() -> None:
    results = derive_all()
    names = [r.name for r in results]
    assert len(set(names)) == len(names)
    assert len(theory.RESULTS) == len(results) and theory.RESULTS[0] is results[0]
    assert list(theory.RESULTS) == list(results)
    for r in results:
        failing = [(cl.statement, cl.residual) for cl in r.claims if not cl.holds]
        assert r.proved and not failing, (r.name, failing)
        assert r.statement and r.assumptions and r.steps and r.latex
        assert all(step.latex for step in r.steps)
        # Leviathan et al., Chen et al. (chains), Sequoia (trees, Chen et al. 2024), and for
        # MoE targets Mixtral (Jiang et al. 2024) and EAGLE (Li et al. 2024)
        known = {"2211.17192", "2302.01318", "2402.12374", "2401.04088", "2401.15077"}
        assert all(ref.arxiv in known for ref in r.references)
        if r.twin is not None:
            module, _, func = r.twin.rpartition(".")
            assert callable(getattr(importlib.import_module(module), func)), r.twin
        if r.name in closed_forms():
            assert r.expr == closed_forms()[r.name]


def test_references_point_at_the_right_sections() -> None:
    def where(name: str) -> tuple[str, str]:
        ref = get_result(name).references[0]
        return ref.section, ref.item

    assert where("expected_tokens") == ("3.1", "Definition 3.1 and Equation (1)")
    assert where("walltime_speedup") == ("3.3", "Definition 3.7 and Theorem 3.8")
    assert where("gamma1_lower_bound") == ("3.3", "Corollary 3.9")
    assert where("ops_factor") == ("3.4", "Definition 3.10 and Theorem 3.11")
    assert where("optimal_gamma")[0] == "3.5"
    assert where("oracle_speedup_bound")[0] == "3.5"
    section, item = where("overlap_identity_v2")
    assert section == "3.2" and "Corollary 3.6" in item
    chen = get_result("overlap_identity_v3").references[1]
    assert chen.arxiv == "2302.01318" and chen.section == "4.2"


def test_the_mean_is_derived_not_typed_in() -> None:
    # Independently of the Piecewise handling: for each concrete gamma, sum the pmf.
    pmf = closed_forms()["tokens_pmf"]
    for g in range(0, 7):
        probs = [pmf.subs({gamma: g, k: kk}) for kk in range(1, g + 2)]
        assert sp.cancel(sum(probs) - 1) == 0
        mean = sum(kk * p for kk, p in zip(range(1, g + 2), probs, strict=True))
        assert sp.cancel(mean - closed_forms()["expected_tokens"].subs(gamma, g)) == 0
        var = sum((kk - mean) ** 2 * p for kk, p in zip(range(1, g + 2), probs, strict=True))
        assert sp.cancel(var - closed_forms()["tokens_variance"].subs(gamma, g)) == 0
    assert sp.limit(closed_forms()["expected_tokens"], alpha, 1) == gamma + 1


def test_corollary_3_9_at_gamma_one() -> None:
    bound = closed_forms()["gamma1_lower_bound"]
    w1 = closed_forms()["walltime_speedup"].subs({gamma: 1, sp.Symbol("v", positive=True): 1})
    assert sp.simplify(w1 - bound) == 0
    # (1 + alpha)/(1 + c) > 1  <=>  alpha > c, solved by sympy for a few c (alpha real here).
    x = sp.Symbol("x", real=True)
    for c0 in (sp.Integer(0), sp.Rational(1, 10), sp.Rational(1, 2)):
        region = sp.solve_univariate_inequality(
            bound.subs({c: c0, alpha: x}) > 1, x, relational=False
        )
        assert region == sp.Interval.open(c0, sp.oo)


def test_worked_examples_are_exact() -> None:
    ops = get_result("ops_factor")
    assert any(cl.rhs == sp.Rational(3125, 651) and cl.holds for cl in ops.claims)
    assert float(sp.Rational(3125, 651)) == pytest.approx(4.8003, abs=5e-5)
    wall = get_result("walltime_speedup")
    assert any(cl.rhs == sp.Rational(156, 125) and cl.holds for cl in wall.claims)


def test_overlap_identity_proofs_cover_every_case() -> None:
    for n in (2, 3):
        r = theory.overlap_identity(n)
        cases = [cl for cl in r.claims if cl.statement.startswith("case")]
        assert len(cases) == 2**n and r.proved
    with pytest.raises(ValueError, match="vocab_size must be in 2..6, got 1"):
        theory.overlap_identity(1)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        theory.overlap_identity(2.0)  # type: ignore[arg-type]


def test_overlap_matches_sampling_acceptance_rate(rng: np.random.Generator) -> None:
    for vocab in (2, 3, 5, 64, 32000):
        p = rng.dirichlet(np.full(vocab, 0.3), size=8)
        q = rng.dirichlet(np.full(vocab, 0.3), size=8)
        tv = 0.5 * np.abs(p - q).sum(axis=-1)
        np.testing.assert_allclose(sampling.acceptance_rate(p, q), 1.0 - tv, rtol=0, atol=1e-12)
    for n in (2, 3):
        r = get_result(f"overlap_identity_v{n}")
        lhs = sp.lambdify(r.symbols, r.expr.lhs, "numpy")
        rhs = sp.lambdify(r.symbols, r.expr.rhs, "numpy")
        for _ in range(50):
            p, q = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
            args = (*p[:-1], *q[:-1])
            alpha_num = sampling.acceptance_rate(p, q)
            assert lhs(*args) == pytest.approx(alpha_num, abs=1e-12)
            assert rhs(*args) == pytest.approx(alpha_num, abs=1e-12)
    same = np.array([0.2, 0.3, 0.5])
    assert sampling.acceptance_rate(same, same) == pytest.approx(1.0)
    assert sampling.acceptance_rate([1.0, 0.0], [0.0, 1.0]) == 0.0


def test_building_blocks_validate() -> None:
    with pytest.raises(ValueError, match="field 'section' must not be empty"):
        Reference(paper="p", arxiv="1", section=" ", item="i")
    with pytest.raises(ValueError, match="nothing was proved"):
        SymbolicResult(
            name="x",
            title="t",
            statement="s",
            lhs="",
            expr=alpha,
            symbols=(alpha,),
            assumptions=(),
            steps=(),
            claims=(),
            references=(Reference(paper="p", arxiv="1", section="1", item="i"),),
            twin=None,
        )
    with pytest.raises(ValueError, match="method must be"):
        prove("x", alpha, alpha, method="guess")
    wrong: Claim = prove("a false identity", alpha**2, alpha)
    assert not wrong.holds
    with pytest.raises(KeyError, match="no symbolic result named 'nope'"):
        get_result("nope")


# --- every twin against its sympy expression -------------------------------------------------

TWINS: dict[str, Callable[..., object]] = {
    "tokens_pmf": theory.tokens_pmf,
    "expected_tokens": theory.expected_tokens,
    "tokens_variance": theory.tokens_variance,
    "walltime_speedup": theory.walltime_speedup,
    "ops_factor": theory.ops_factor,
    "target_calls_per_token": theory.target_calls_per_token,
    "draft_calls_per_token": theory.draft_calls_per_token,
    "oracle_speedup_bound": theory.oracle_speedup_bound,
    "gamma1_lower_bound": theory.gamma1_lower_bound,
}


@functools.cache
def _reference(name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """mpmath evaluations of the sympy expression, and of its limit alpha -> 1."""
    r = get_result(name)
    at_one = sp.limit(r.expr, alpha, 1, "-") if name != "tokens_pmf" else r.expr.subs(alpha, 1)
    return sp.lambdify(r.symbols, r.expr, "mpmath"), sp.lambdify(r.symbols, at_one, "mpmath")


def _check_point(name: str, args: tuple[float, ...]) -> None:
    general, at_one = _reference(name)
    # 400 digits: where the exact value is 0 (the variance at gamma = 0) the closed form
    # cancels, and its leftover (<= 1e-368 here) must stay below ATOL.
    with mp.workdps(REF_DIGITS):
        exact_args = [mp.mpf(x) for x in args]  # a float's exact binary value
        ref = at_one(*exact_args) if args[0] == 1.0 else general(*exact_args)
        got = TWINS[name](*args)
        assert isinstance(got, float), (name, args, got)
        if mp.isinf(ref):
            assert got == np.inf, (name, args)
        else:
            nearest = float(ref)  # 0.0 where the exact value underflows a float
            assert abs(got - nearest) <= RTOL * abs(nearest) + ATOL, (name, args, got, nearest)


def _grid(name: str) -> list[tuple[float, ...]]:
    symbols = [s.name for s in get_result(name).symbols]
    axes: dict[str, tuple[float, ...]] = {
        "alpha": ALPHA_GRID,
        "gamma": GAMMA_GRID,
        "c": C_GRID,
        "c_hat": C_GRID,
        "v": V_GRID,
    }
    if symbols == ["alpha", "gamma", "k"]:
        return [
            (a, g, kk)
            for a, g in itertools.product(ALPHA_GRID, GAMMA_GRID)
            for kk in range(0, g + 3)
        ]
    return list(itertools.product(*(axes[s] for s in symbols)))


@pytest.mark.parametrize("name", sorted(TWINS))
def test_twin_equals_sympy_on_dense_grid(name: str) -> None:
    for args in _grid(name):
        _check_point(name, args)


def test_optimal_gamma_equals_sympy_brute_force() -> None:
    w, _ = _reference("walltime_speedup")
    marginal = sp.lambdify((alpha, gamma, c), closed_forms()["optimal_gamma"], "mpmath")
    m = 20
    for a, cc in itertools.product(ALPHA_GRID + (0.3, 0.8, 0.95), C_GRID + (0.2, 0.3)):
        with mp.workdps(50):
            if a == 1.0:
                speeds = [mp.mpf(g + 1) / (g * mp.mpf(cc) + 1) for g in range(m + 1)]
            else:
                speeds = [w(mp.mpf(a), g, mp.mpf(cc), 1) for g in range(m + 1)]
            speeds[0] = mp.mpf(1)
            top = max(speeds)

            def first(rtol: float, speeds: list[Any] = speeds, top: Any = top) -> int:
                return next(g for g, s in enumerate(speeds) if s >= top * (1 - rtol))

            # The twins are a few ulps off the exact speeds: a speed within BAND (relative)
            # of the tie threshold may fall on either side of it.
            best = theory.optimal_gamma(a, cc, m)
            assert first(theory.TIE_RTOL + BAND) <= best <= first(theory.TIE_RTOL - BAND), (a, cc)
            if 0 < best and a < 1.0:  # one more draft token paid off on the way to best
                assert marginal(mp.mpf(a), best - 1, mp.mpf(cc)) > 0


@given(
    a=st.floats(0.0, 1.0),
    g=st.integers(0, 100),
    cc=st.floats(0.0, 2.0),
    vv=st.floats(0.1, 10.0),
)
def test_symbolic_equals_numeric_at_random_points(a: float, g: int, cc: float, vv: float) -> None:
    _check_point("expected_tokens", (a, g))
    _check_point("tokens_variance", (a, g))
    _check_point("walltime_speedup", (a, g, cc, vv))
    _check_point("ops_factor", (a, g, cc))
    _check_point("target_calls_per_token", (a, g))
    _check_point("draft_calls_per_token", (a, g))
    _check_point("tokens_pmf", (a, g, g // 2 + 1))


# --- the generated document --------------------------------------------------------------------


def test_committed_derivations_are_fresh() -> None:
    derivations.check()  # raises StaleDerivationsError: run `python -m specsim.theory.derivations`


def test_stale_or_missing_derivations_are_reported(tmp_path: Path) -> None:
    stale = tmp_path / "derivations.md"
    stale.write_text(derivations.render().replace("Theorem 3.8", "Theorem 3.7", 1))
    with pytest.raises(derivations.StaleDerivationsError, match="is stale: regenerate"):
        derivations.check(stale)
    assert derivations.main([str(stale), "--check"]) == 1
    assert derivations.main([str(stale)]) == 0
    derivations.check(stale)
    with pytest.raises(derivations.StaleDerivationsError, match="does not exist"):
        derivations.check(tmp_path / "missing.md")
