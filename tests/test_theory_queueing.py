"""Queueing closed forms: known answers, the sympy forms against their numeric twins, bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.theory.queueing import (
    erlang_c,
    jsq_mean_wait_bounds,
    md1_mean_wait,
    mg1_mean_wait,
    mm1_mean_wait_expr,
    mmk_mean_wait,
    pk_mean_wait_expr,
)


def _erlang_c_by_factorials(k: int, a: float) -> float:
    """Erlang C written out with factorials (Kleinrock 1975, Sec. 3.5), for small k."""
    top = a**k / math.factorial(k) * k / (k - a)
    return top / (sum(a**n / math.factorial(n) for n in range(k)) + top)


def test_known_answers() -> None:
    assert md1_mean_wait(arrival_rate=0.5, service=1.0) == pytest.approx(0.5)
    assert md1_mean_wait(arrival_rate=0.8, service=1.0) == pytest.approx(2.0)
    assert md1_mean_wait(arrival_rate=1.0, service=0.5) == pytest.approx(0.25)  # time scales
    # M/M/1: rho / (mu - lambda); the P-K formula with E[S^2] = 2 E[S]^2 gives the same.
    assert mmk_mean_wait(arrival_rate=0.5, mean_service=1.0, servers=1) == pytest.approx(1.0)
    pk = mg1_mean_wait(arrival_rate=0.5, mean_service=1.0, second_moment=2.0)
    assert pk == pytest.approx(1.0)
    # Erlang C: one server waits with probability rho; two servers at a = 1 with 1/3.
    assert erlang_c(servers=1, offered_load=0.7) == pytest.approx(0.7)
    assert erlang_c(servers=2, offered_load=1.0) == pytest.approx(1 / 3)


@pytest.mark.parametrize("k, a", [(1, 0.3), (2, 1.5), (4, 3.2), (8, 7.5), (12, 2.0)])
def test_erlang_c_recursion_equals_the_formula(k: int, a: float) -> None:
    assert erlang_c(servers=k, offered_load=a) == pytest.approx(_erlang_c_by_factorials(k, a))


def test_erlang_c_large_k_has_no_overflow() -> None:
    c = erlang_c(servers=500, offered_load=480.0)
    assert 0 < c < 1


@given(lam=st.floats(0.01, 0.95), es=st.floats(0.1, 5.0), scv=st.floats(0.0, 4.0))
def test_pk_symbolic_equals_numeric(lam: float, es: float, scv: float) -> None:
    import sympy

    lam = lam / es  # rho = lam * es < 0.95
    es2 = (1 + scv) * es * es
    expr = pk_mean_wait_expr()
    sym = {s.name: s for s in expr.free_symbols}
    value = float(expr.subs({sym["lambda_"]: lam, sym["ES"]: es, sym["ES2"]: es2}))
    assert value == pytest.approx(
        mg1_mean_wait(arrival_rate=lam, mean_service=es, second_moment=es2), rel=1e-12
    )
    mm1 = mm1_mean_wait_expr()
    s = {x.name: x for x in mm1.free_symbols}
    assert float(mm1.subs({s["lambda_"]: lam, s["mu"]: 1 / es})) == pytest.approx(
        mmk_mean_wait(arrival_rate=lam, mean_service=es, servers=1), rel=1e-12
    )
    # The M/M/1 form is the P-K form at E[S^2] = 2 E[S]^2.
    lam_, es_, es2_ = sym["lambda_"], sym["ES"], sym["ES2"]
    mu = s["mu"]
    pk_exp = expr.subs({es_: 1 / mu, es2_: 2 / mu**2}).subs(lam_, s["lambda_"])
    assert sympy.simplify(pk_exp - mm1) == 0


@given(lam=st.floats(0.05, 0.95), k=st.integers(1, 6))
def test_mmk_wait_falls_with_more_servers_at_the_same_load(lam: float, k: int) -> None:
    # Same load per server: pooling more servers waits less (economies of scale).
    w_k = mmk_mean_wait(arrival_rate=lam * k, mean_service=1.0, servers=k)
    w_k1 = mmk_mean_wait(arrival_rate=lam * (k + 1), mean_service=1.0, servers=k + 1)
    assert w_k1 < w_k


def test_jsq_bounds() -> None:
    low, high = jsq_mean_wait_bounds(arrival_rate=0.6, mean_service=1.0, servers=1)
    assert low == pytest.approx(high) == pytest.approx(1.5)  # M/M/1 at rho 0.6
    low, high = jsq_mean_wait_bounds(arrival_rate=1.4, mean_service=1.0, servers=2)
    assert low == pytest.approx(mmk_mean_wait(arrival_rate=1.4, mean_service=1.0, servers=2))
    assert high == pytest.approx(0.7 / 0.3) and low < high


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: md1_mean_wait(arrival_rate=1.0, service=1.0), "rho = 1 must be < 1"),
        (lambda: md1_mean_wait(arrival_rate=-1.0, service=1.0), "arrival_rate"),
        (lambda: mg1_mean_wait(arrival_rate=0.1, mean_service=2.0, second_moment=1.0),
         "second_moment"),
        (lambda: mmk_mean_wait(arrival_rate=3.0, mean_service=1.0, servers=2), "rho = 1.5"),
        (lambda: mmk_mean_wait(arrival_rate=0.5, mean_service=1.0, servers=0), "servers"),
        (lambda: erlang_c(servers=2, offered_load=math.nan), "offered_load"),
    ],
)  # fmt: skip
def test_bad_input_is_refused(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]
