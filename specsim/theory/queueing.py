r"""Queueing theory for the serving simulator: mean waiting times in queue, in closed form.

The serving simulator with one sequence per batch (``max_batch = 1``), no
speculation and Poisson arrivals is a single-server FCFS queue, so its mean
wait must match these formulas (``specsim.validate.queueing`` checks it). All
waits are in the queue only (arrival to start of service), in the time unit of
the arguments; ``arrival_rate`` is :math:`\lambda`, ``mean_service`` is
:math:`E[S]`, the load :math:`\rho = \lambda E[S]` (per server
:math:`\lambda E[S] / k`) must be < 1 (a ValueError otherwise: there is no
steady state).

- :func:`mg1_mean_wait`: Pollaczek-Khinchine, M/G/1;
- :func:`md1_mean_wait`: its deterministic case, M/D/1;
- :func:`erlang_c` and :func:`mmk_mean_wait`: M/M/k with one central queue;
- :func:`jsq_mean_wait`: join-the-shortest-queue over k exponential servers,
  each with its own queue, numerically exact from the stationary law of its
  Markov chain (:func:`jsq_stationary`); :func:`jsq_mean_wait_bounds`:
  closed-form bounds on it.

:func:`pk_mean_wait_expr` and :func:`mm1_mean_wait_expr` are the sympy forms
beside the numeric twins (``tests/theory/test_theory_queueing.py`` makes them agree).

>>> round(md1_mean_wait(arrival_rate=0.5, service=1.0), 12)  # rho / (2 mu (1 - rho))
0.5
>>> round(mmk_mean_wait(arrival_rate=0.5, mean_service=1.0, servers=1), 12)  # M/M/1
1.0
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import sympy

__all__ = [
    "JSQ_TOLERANCE",
    "MAX_STATES",
    "erlang_c",
    "jsq_mean_wait",
    "jsq_mean_wait_bounds",
    "jsq_stationary",
    "md1_mean_wait",
    "mg1_mean_wait",
    "mm1_mean_wait_expr",
    "mmk_mean_wait",
    "pk_mean_wait_expr",
]


def _positive(value: float, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where}: {name} must be a real number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{where}: {name} must be a finite number > 0, got {value!r}")
    return float(value)


def _servers(k: int, where: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{where}: servers must be an integer >= 1, got {k!r}")
    return k


def _stable(rho: float, where: str) -> None:
    if rho >= 1:
        raise ValueError(
            f"{where}: the load per server rho = {rho:g} must be < 1 (no steady state otherwise)"
        )


def mg1_mean_wait(*, arrival_rate: float, mean_service: float, second_moment: float) -> float:
    r"""Mean wait in queue of the M/G/1 FCFS queue (Pollaczek-Khinchine):

    .. math:: W_q = \frac{\lambda E[S^2]}{2 (1 - \rho)}, \quad \rho = \lambda E[S].

    Assumptions: Poisson arrivals, i.i.d. service times independent of the
    arrivals, one server, first come first served, :math:`\rho < 1`.
    Source: Kleinrock, *Queueing Systems, Vol. 1: Theory* (Wiley, 1975),
    Ch. 5 (the M/G/1 queue: the Pollaczek-Khinchine mean-value formula); Pollaczek
    (1930), Khinchine (1932).
    """
    where = "mg1_mean_wait"
    lam = _positive(arrival_rate, "arrival_rate", where)
    es = _positive(mean_service, "mean_service", where)
    es2 = _positive(second_moment, "second_moment", where)
    if es2 < es * es * (1 - 1e-12):
        raise ValueError(
            f"{where}: second_moment {es2!r} is below mean_service^2 = {es * es!r} "
            "(a variance cannot be negative)"
        )
    rho = lam * es
    _stable(rho, where)
    return lam * es2 / (2.0 * (1.0 - rho))


def md1_mean_wait(*, arrival_rate: float, service: float) -> float:
    r"""Mean wait in queue of the M/D/1 queue: service always takes ``service``, so
    :math:`E[S^2] = s^2` in :func:`mg1_mean_wait`:

    .. math:: W_q = \frac{\rho s}{2 (1 - \rho)}, \quad \rho = \lambda s.

    Assumptions and source as :func:`mg1_mean_wait` (Kleinrock 1975, Sec. 5.6,
    its deterministic case).
    """
    s = _positive(service, "service", "md1_mean_wait")
    return mg1_mean_wait(arrival_rate=arrival_rate, mean_service=s, second_moment=s * s)


def erlang_c(*, servers: int, offered_load: float) -> float:
    r"""Probability that an arrival waits in M/M/k (Erlang's C formula), with offered load
    :math:`a = \lambda E[S]` (in Erlangs) and :math:`\rho = a / k < 1`:

    .. math:: C(k, a) = \frac{\frac{a^k}{k!} \frac{k}{k - a}}
              {\sum_{n=0}^{k-1} \frac{a^n}{n!} + \frac{a^k}{k!} \frac{k}{k - a}}.

    Assumptions: Poisson arrivals, exponential service, k identical servers fed
    by one FCFS queue. Source: Kleinrock 1975, Sec. 3.5 (M/M/m). Evaluated by
    the Erlang B recursion :math:`B_n = a B_{n-1} / (n + a B_{n-1})`,
    :math:`C = k B_k / (k - a (1 - B_k))`, which never forms :math:`a^k / k!`.
    """
    where = "erlang_c"
    k = _servers(servers, where)
    a = _positive(offered_load, "offered_load", where)
    _stable(a / k, where)
    b = 1.0
    for n in range(1, k + 1):
        b = a * b / (n + a * b)
    return k * b / (k - a * (1.0 - b))


def mmk_mean_wait(*, arrival_rate: float, mean_service: float, servers: int) -> float:
    r"""Mean wait in queue of M/M/k (one central FCFS queue, k identical exponential servers):

    .. math:: W_q = \frac{C(k, a)}{k \mu - \lambda}, \quad \mu = 1 / E[S], \; a = \lambda / \mu.

    ``servers = 1`` is M/M/1, :math:`W_q = \rho / (\mu - \lambda)`. Assumptions as
    :func:`erlang_c`. Source: Kleinrock 1975, Sec. 3.5 (M/M/m).
    """
    where = "mmk_mean_wait"
    lam = _positive(arrival_rate, "arrival_rate", where)
    es = _positive(mean_service, "mean_service", where)
    k = _servers(servers, where)
    c = erlang_c(servers=k, offered_load=lam * es)
    return c / (k / es - lam)


def jsq_mean_wait_bounds(
    *, arrival_rate: float, mean_service: float, servers: int
) -> tuple[float, float]:
    r"""Lower and upper bounds on the mean wait under join-the-shortest-queue (JSQ):
    Poisson arrivals routed on arrival to the server with the fewest requests, k identical
    exponential servers each with its own FCFS queue.

    - lower: M/M/k (:func:`mmk_mean_wait`). One central queue never leaves a server
      idle while a request waits: with n requests present it serves at rate
      :math:`\mu \min(n, k)`, the most any placement of n requests on k exponential
      servers can, so coupling the two systems on the same arrivals and service
      completions keeps its count, hence (Little's law) its mean wait, the smaller.
    - upper: k independent M/M/1 queues at rate :math:`\lambda / k`, what routing each
      request to a random server gives: :math:`W_q = \rho / (\mu (1 - \rho))`. JSQ
      does at least as well (Winston, "Optimality of the shortest line discipline",
      J. Appl. Prob. 14, 1977: JSQ is optimal among rules that see only the queue
      lengths, random routing among them).

    These are bounds, not an approximation: Nelson and Philips (SIGMETRICS 1989)
    give an approximation within 0.5% for k <= 8 that this module does not use.
    For k = 1 both bounds equal M/M/1.
    """
    where = "jsq_mean_wait_bounds"
    lam = _positive(arrival_rate, "arrival_rate", where)
    es = _positive(mean_service, "mean_service", where)
    k = _servers(servers, where)
    low = mmk_mean_wait(arrival_rate=lam, mean_service=es, servers=k)
    high = mmk_mean_wait(arrival_rate=lam / k, mean_service=es, servers=1)
    return low, high


JSQ_TOLERANCE = 1e-12
"""Default bound on the stationary probability that the truncated JSQ chain is full."""
MAX_STATES = 1_000_000
"""Default cap on the truncated JSQ chain's states (about 13 s to solve on one core)."""


def jsq_mean_wait(
    *,
    arrival_rate: float,
    mean_service: float,
    servers: int,
    tolerance: float = JSQ_TOLERANCE,
    max_states: int = MAX_STATES,
) -> float:
    r"""Mean wait in queue under join-the-shortest-queue (JSQ), numerically exact: Poisson
    arrivals at rate :math:`\lambda`, k identical exponential servers (rate
    :math:`\mu = 1 / E[S]`), each with its own FCFS queue; an arrival joins a queue with the
    fewest requests (the one in service included), ties broken by any rule that does not look
    at service times (uniformly at random, or the lowest index: the law of the sorted queue
    lengths is the same, the servers being exchangeable).

    From the stationary law :math:`\pi` of the sorted queue lengths truncated at ``top``
    requests in all (:func:`jsq_stationary`), by PASTA: an admitted arrival joins a queue of
    :math:`\min_j n_j` requests and waits their exponential services (the one in service
    included, by memorylessness):

    .. math:: W_q = \frac{1}{\mu} \frac{\sum_{|n| < top} \pi(n) \min_j n_j}
              {\sum_{|n| < top} \pi(n)}.

    At the default ``tolerance`` the mean moves by less than 3e-11 relative when the
    tolerance goes to 1e-14 (k = 2 to 4, loads 0.7 to 0.8); ``servers = 1`` is M/M/1.
    It lies between :func:`jsq_mean_wait_bounds`, strictly for k >= 2.

    Assumptions: stationarity (:math:`\rho = \lambda E[S] / k < 1`), service times
    independent of the routing. Sources: the two-server chain and its exact solution,
    Haight, "Two queues in parallel", Biometrika 45 (1958); Flatto and McKean, "Two
    queues in parallel", Comm. Pure Appl. Math. 30 (1977); Adan, Wessels and Zijm,
    "Analysis of the symmetric shortest queue problem", Stochastic Models 6 (1990)
    (compensation approach: the two-server law as a series of product forms); PASTA,
    Wolff, "Poisson arrivals see time averages", Oper. Res. 30 (1982). The mean agrees
    with Little's law :math:`E[N] = \lambda_{admitted} (W_q + E[S])` on the same chain
    (``tests/theory/test_theory_queueing.py``).
    """
    es = _positive(mean_service, "mean_service", "jsq_mean_wait")
    states, pi = jsq_stationary(
        arrival_rate=arrival_rate,
        mean_service=es,
        servers=servers,
        tolerance=tolerance,
        max_states=max_states,
    )
    total = states.sum(axis=1)
    admitted = total < total.max()
    return float(pi[admitted] @ states[admitted, -1] / pi[admitted].sum() * es)


def jsq_stationary(
    *,
    arrival_rate: float,
    mean_service: float,
    servers: int,
    tolerance: float = JSQ_TOLERANCE,
    max_states: int = MAX_STATES,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    r"""The stationary law of join-the-shortest-queue's sorted queue lengths (the model of
    :func:`jsq_mean_wait`): ``(states, pi)``, one row per state :math:`n_1 \ge \dots \ge
    n_k` (requests at each server, the one in service included) with at most ``top``
    requests in all, and its probability.

    The sorted lengths form a continuous-time Markov chain: an arrival adds one to the
    first of the shortest queues (rate :math:`\lambda`; arrivals are turned away when
    ``top`` are present), and each nonempty queue loses one at rate :math:`\mu` (sorted,
    the last of the queues of equal length, at :math:`\mu` times their number). Solved
    with ``scipy.sparse`` (a sparse LU of the balance equations). ``top`` starts where an
    M/M/k-like tail :math:`\rho^{top}` would be below ``tolerance`` and grows by a quarter
    until the stationary probability of the full states (:math:`|n| = top`) is below
    ``tolerance``; a ValueError naming ``arrival_rate`` and ``servers`` when that takes
    more than ``max_states`` states (a load too close to 1 for that many servers: at the
    default tolerance, per-server load 0.8 with k = 4 takes 550,968 states and about 7 s,
    load 0.9 with k = 4 more than a million). Sources as :func:`jsq_mean_wait`.
    """
    where = "jsq_stationary"
    lam = _positive(arrival_rate, "arrival_rate", where)
    es = _positive(mean_service, "mean_service", where)
    k = _servers(servers, where)
    tol = _positive(tolerance, "tolerance", where)
    if tol >= 1:
        raise ValueError(f"{where}: tolerance must be < 1, got {tolerance!r}")
    if isinstance(max_states, bool) or not isinstance(max_states, int) or max_states < 1:
        raise ValueError(f"{where}: max_states must be an integer >= 1, got {max_states!r}")
    rho = lam * es / k
    _stable(rho, where)
    top = k + max(1, math.ceil(math.log(tol) / math.log(rho)))
    while True:
        needed = _partitions_up_to(k, top)
        if needed > max_states:
            raise ValueError(
                f"{where}: arrival_rate {lam:g} over servers {k} (load per server rho = "
                f"{rho:g}) needs the JSQ chain truncated at {top} requests, {needed} states, "
                f"more than max_states = {max_states}; lower the load or the servers, or "
                "raise tolerance or max_states"
            )
        states, pi = _jsq_chain(lam, 1.0 / es, k, top)
        if pi[states.sum(axis=1) == top].sum() < tol:
            return states, pi
        top += max(1, top // 4)


def _partitions_up_to(k: int, top: int) -> int:
    """How many sorted states :func:`_sorted_states` makes: the partitions of 0 .. ``top``
    into at most ``k`` parts, by p(n, k) = p(n, k - 1) + p(n - k, k)."""
    count = [1] + [0] * top  # p(n, 0)
    for parts in range(1, k + 1):
        for n in range(parts, top + 1):
            count[n] += count[n - parts]
    return sum(count)


def _sorted_states(k: int, top: int) -> NDArray[np.int64]:
    """Every queue-length vector sorted in descending order with at most ``top`` requests in
    all, one row each, in increasing lexicographic order."""
    rows = np.arange(top + 1, dtype=np.int64)[:, None]  # the longest queue
    for _ in range(k - 1):
        # The next queue holds at most the previous one and at most what is left of top.
        reps = np.minimum(rows[:, -1], top - rows.sum(axis=1)) + 1
        parent = np.repeat(np.arange(rows.shape[0]), reps)
        child = np.arange(parent.shape[0]) - np.repeat(np.cumsum(reps) - reps, reps)
        rows = np.column_stack([rows[parent], child])
    return rows


def _jsq_chain(
    lam: float, mu: float, k: int, top: int
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The sorted states with at most ``top`` requests and their stationary probabilities."""
    from scipy import sparse  # start-up: scipy.sparse costs a second; only the JSQ chain needs it
    from scipy.sparse.linalg import splu

    states = _sorted_states(k, top)
    weights = (top + 1) ** np.arange(k - 1, -1, -1, dtype=np.int64)
    keys = states @ weights  # increasing: the rows are in lexicographic order
    src, dst, rates = [], [], []
    # An arrival joins a shortest queue: sorted, the first one equal to the last.
    rows = np.flatnonzero(states.sum(axis=1) < top)
    to = states[rows]
    to[np.arange(rows.shape[0]), np.argmax(to == to[:, -1:], axis=1)] += 1
    src.append(rows)
    dst.append(to @ weights)
    rates.append(np.full(rows.shape[0], lam))
    for j in range(k):
        # The c queues holding n_j > 0 each complete at rate mu; sorted, the last of them
        # (position j, where the next is shorter) loses one.
        last = states[:, j] > 0
        if j < k - 1:
            last &= states[:, j + 1] < states[:, j]
        rows = np.flatnonzero(last)
        to = states[rows]
        to[:, j] -= 1
        ties = (states[rows] == states[rows, j : j + 1]).sum(axis=1)
        src.append(rows)
        dst.append(to @ weights)
        rates.append(mu * ties)
    i, d = np.concatenate(src), np.searchsorted(keys, np.concatenate(dst))
    n = states.shape[0]
    q = sparse.csr_matrix((np.concatenate(rates), (i, d)), shape=(n, n))
    q = (q - sparse.diags(np.asarray(q.sum(axis=1)).ravel())).tocsc()
    # pi Q = 0 with pi(empty) = 1 first (the empty state is row 0), normalized after. A
    # speed trick: the states' own (lexicographic) order keeps the LU factors sparse, where
    # SuperLU's default (COLAMD) ordering fills them in: 60 times slower at k = 3, load 0.8.
    lu = splu(q[1:, 1:].T.tocsc(), permc_spec="NATURAL")
    rest = lu.solve(-q[0, 1:].toarray().ravel())
    pi = np.concatenate([[1.0], rest])
    return states, pi / pi.sum()


def pk_mean_wait_expr() -> sympy.Expr:
    r"""The Pollaczek-Khinchine mean wait as a sympy expression in ``lambda_``, ``ES``,
    ``ES2`` (:func:`mg1_mean_wait` is its numeric twin)."""
    import sympy  # start-up: sympy costs about a second to import; only the symbolic forms need it

    lam, es, es2 = sympy.symbols("lambda_ ES ES2", positive=True)
    return lam * es2 / (2 * (1 - lam * es))


def mm1_mean_wait_expr() -> sympy.Expr:
    r"""The M/M/1 mean wait :math:`\rho / (\mu - \lambda)` in ``lambda_`` and ``mu``: the
    Pollaczek-Khinchine form with :math:`E[S] = 1/\mu`, :math:`E[S^2] = 2/\mu^2`."""
    import sympy  # start-up: sympy costs about a second to import; only the symbolic forms need it

    lam, mu = sympy.symbols("lambda_ mu", positive=True)
    return (lam / mu) / (mu - lam)
