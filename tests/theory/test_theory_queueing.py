"""Queueing closed forms: known answers, the sympy forms against their numeric twins, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.theory.queueing import (
    erlang_c,
    jsq_mean_wait,
    jsq_mean_wait_bounds,
    jsq_stationary,
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


# Join-the-shortest-queue: the exact chain -------------------------------------------------
@pytest.mark.parametrize("lam", [0.05, 0.3, 0.6, 0.9])
def test_jsq_one_server_is_mm1(lam: float) -> None:
    want = mmk_mean_wait(arrival_rate=lam, mean_service=1.0, servers=1)  # rho / (mu - lambda)
    assert abs(jsq_mean_wait(arrival_rate=lam, mean_service=1.0, servers=1) - want) < 1e-9


@pytest.mark.parametrize("k, rho", [(2, 0.1), (2, 0.7), (2, 0.9), (3, 0.3), (3, 0.8), (4, 0.6)])
def test_jsq_lies_strictly_between_the_bounds(k: int, rho: float) -> None:
    low, high = jsq_mean_wait_bounds(arrival_rate=rho * k, mean_service=1.0, servers=k)
    w = jsq_mean_wait(arrival_rate=rho * k, mean_service=1.0, servers=k)
    assert low < w < high
    assert low * (1 + 1e-6) < w < high * (1 - 1e-6)  # not a rounding of either bound


def _full_vector_jsq_wait(k: int, lam: float, cap: int) -> float:
    """An independent solution: the chain of the unsorted queue lengths (each 0..cap), ties
    broken uniformly at random, built state by state, the mean wait by PASTA."""
    from scipy import sparse
    from scipy.sparse.linalg import spsolve

    shape = (cap + 1,) * k
    n = (cap + 1) ** k
    rows, cols, vals = [], [], []
    for state in itertools.product(range(cap + 1), repeat=k):
        i = np.ravel_multi_index(state, shape)
        shortest = [j for j in range(k) if state[j] == min(state)]
        for j in range(k):
            if state[j] == min(state) and state[j] < cap:
                to = list(state)
                to[j] += 1
                rows.append(i)
                cols.append(np.ravel_multi_index(to, shape))
                vals.append(lam / len(shortest))
            if state[j] > 0:
                to = list(state)
                to[j] -= 1
                rows.append(i)
                cols.append(np.ravel_multi_index(to, shape))
                vals.append(1.0)
    q = sparse.csr_matrix((vals, (rows, cols)), shape=(n, n))
    q = q - sparse.diags(np.asarray(q.sum(axis=1)).ravel())
    a = sparse.vstack([q.T.tocsr()[1:], sparse.csr_matrix(np.ones((1, n)))]).tocsc()
    b = np.zeros(n)
    b[-1] = 1.0
    pi = spsolve(a, b)
    mins = np.array([min(s) for s in itertools.product(range(cap + 1), repeat=k)])
    admitted = mins < cap
    return float(pi[admitted] @ mins[admitted] / pi[admitted].sum())


@pytest.mark.parametrize("k, rho, cap", [(2, 0.7, 60), (2, 0.9, 110), (3, 0.5, 22)])
def test_jsq_equals_the_unsorted_chain_with_random_ties(k: int, rho: float, cap: int) -> None:
    # The sorted chain (lowest-index ties) against the full vector with random ties, built
    # independently: the same mean wait, as exchangeable servers make it.
    want = _full_vector_jsq_wait(k, rho * k, cap)
    assert jsq_mean_wait(arrival_rate=rho * k, mean_service=1.0, servers=k) == pytest.approx(
        want, rel=1e-8
    )


@pytest.mark.parametrize("k, rho", [(1, 0.8), (2, 0.8), (3, 0.7), (4, 0.5)])
def test_jsq_chain_obeys_littles_law_and_scales_with_time(k: int, rho: float) -> None:
    lam = rho * k
    states, pi = jsq_stationary(arrival_rate=lam, mean_service=1.0, servers=k)
    assert pi.min() >= 0 and pi.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(states, axis=1) <= 0)  # sorted, longest queue first
    total = states.sum(axis=1)
    full = pi[total == total.max()].sum()
    assert full < 1e-12  # the truncation boundary holds less than the tolerance
    w = jsq_mean_wait(arrival_rate=lam, mean_service=1.0, servers=k)
    # Little's law on the same chain: E[N] = admitted rate x (wait + service).
    assert float(pi @ total) == pytest.approx(lam * (1 - full) * (w + 1.0), rel=1e-9)
    # Twice as slow service at half the rate: the same chain, waits twice as long.
    slow = jsq_mean_wait(arrival_rate=lam / 2, mean_service=2.0, servers=k)
    assert slow == pytest.approx(2 * w, rel=1e-9)


def test_jsq_converges_in_the_tolerance() -> None:
    # At the default tolerance the mean is settled: a hundred times tighter moves it < 1e-10.
    w = jsq_mean_wait(arrival_rate=1.6, mean_service=1.0, servers=2)
    tight = jsq_mean_wait(arrival_rate=1.6, mean_service=1.0, servers=2, tolerance=1e-14)
    assert w == pytest.approx(tight, rel=1e-10)
    loose = jsq_mean_wait(arrival_rate=1.6, mean_service=1.0, servers=2, tolerance=1e-4)
    assert abs(loose - tight) > abs(w - tight)


def test_jsq_light_load_is_the_chance_of_all_servers_busy() -> None:
    # As lambda -> 0, an arrival waits only if all k servers are busy, with one request
    # each: W ~ P(all k busy) / mu, and P(all k busy) ~ (lambda / mu)^k / k! (the k-th
    # request arrives before any of the first k - 1 leave, Erlang's light-load limit).
    for k in (2, 3):
        lam = 1e-3
        w = jsq_mean_wait(arrival_rate=lam, mean_service=1.0, servers=k)
        assert w == pytest.approx(lam**k / math.factorial(k), rel=0.01)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"arrival_rate": 2.0, "servers": 2}, "rho = 1 must be < 1"),
        ({"arrival_rate": 5.0, "servers": 2}, "rho = 2.5"),
        ({"arrival_rate": 0.5, "servers": 0}, "servers must be an integer >= 1, got 0"),
        ({"arrival_rate": 0.5, "servers": True}, "servers"),
        ({"arrival_rate": math.nan, "servers": 2}, "arrival_rate"),
        ({"arrival_rate": 0.5, "servers": 2, "mean_service": -1.0}, "mean_service"),
        ({"arrival_rate": 0.5, "servers": 2, "tolerance": 0.0}, "tolerance"),
        ({"arrival_rate": 0.5, "servers": 2, "tolerance": 1.5}, "tolerance must be < 1"),
        ({"arrival_rate": 0.5, "servers": 2, "max_states": 0}, "max_states"),
        ({"arrival_rate": 3.6, "servers": 4}, "arrival_rate 3.6 over servers 4 .*max_states"),
    ],
)
def test_jsq_bad_input_is_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"mean_service": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        jsq_mean_wait(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: md1_mean_wait(arrival_rate=1.0, service=1.0), "rho = 1 must be < 1"),
        (lambda: md1_mean_wait(arrival_rate=-1.0, service=1.0), "arrival_rate"),
        (
            lambda: mg1_mean_wait(arrival_rate=0.1, mean_service=2.0, second_moment=1.0),
            "second_moment",
        ),
        (lambda: mmk_mean_wait(arrival_rate=3.0, mean_service=1.0, servers=2), "rho = 1.5"),
        (lambda: mmk_mean_wait(arrival_rate=0.5, mean_service=1.0, servers=0), "servers"),
        (lambda: erlang_c(servers=2, offered_load=math.nan), "offered_load"),
    ],
)
def test_bad_input_is_refused(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]
