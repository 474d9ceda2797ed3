r"""Queueing theory for the serving simulator: mean waiting times in queue, in closed form.

The serving simulator with one sequence per batch (``max_batch = 1``), no
speculation and Poisson arrivals is a single-server FCFS queue, so its mean
wait must match these formulas (``specsim.validate_queueing`` checks it). All
waits are in the queue only (arrival to start of service), in the time unit of
the arguments; ``arrival_rate`` is :math:`\lambda`, ``mean_service`` is
:math:`E[S]`, the load :math:`\rho = \lambda E[S]` (per server
:math:`\lambda E[S] / k`) must be < 1 (a ValueError otherwise: there is no
steady state).

- :func:`mg1_mean_wait`: Pollaczek-Khinchine, M/G/1;
- :func:`md1_mean_wait`: its deterministic case, M/D/1;
- :func:`erlang_c` and :func:`mmk_mean_wait`: M/M/k with one central queue;
- :func:`jsq_mean_wait_bounds`: bounds for join-the-shortest-queue over k
  exponential servers, each with its own queue.

:func:`pk_mean_wait_expr` and :func:`mm1_mean_wait_expr` are the sympy forms
beside the numeric twins (``tests/test_theory_queueing.py`` makes them agree).

>>> round(md1_mean_wait(arrival_rate=0.5, service=1.0), 12)  # rho / (2 mu (1 - rho))
0.5
>>> round(mmk_mean_wait(arrival_rate=0.5, mean_service=1.0, servers=1), 12)  # M/M/1
1.0
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sympy

__all__ = [
    "erlang_c", "jsq_mean_wait_bounds", "md1_mean_wait", "mg1_mean_wait", "mm1_mean_wait_expr",
    "mmk_mean_wait", "pk_mean_wait_expr",
]  # fmt: skip


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


def jsq_mean_wait_bounds(*, arrival_rate: float, mean_service: float,
                         servers: int) -> tuple[float, float]:  # fmt: skip
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
