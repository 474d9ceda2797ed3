"""How many prefill and decode replicas a disaggregated deployment needs, with and
without speculation, for a rate and an SLO: :func:`disagg_capacity`.

For each mode (``speculative``: the run's lookahead policy or tree plan on the decode
pool; ``plain``: gamma 0, :func:`plain_pools`) the search walks the (P, D) grid's
staircase: start at the fewest prefill replicas and the most decode replicas; a pair
that holds the SLO is recorded and D drops by one, a pair that does not adds a prefill
replica. Under the premise that
adding a replica to either pool never breaks an SLO that held (monotone in P and in D),
the walk visits at most ``max_prefill + max_decode`` pairs and passes through every
pair on the frontier (the fewest decode replicas for each prefill count); a pair
left ``undecided`` is served again with twice the requests, up to ``max_requests``
(default four times ``requests``), and counts as not holding if still undecided. The
answer is the frontier pair with the fewest GPUs (replicas times each pool's
tensor-parallel size; ties: fewer prefill replicas).

Each pair is one disaggregated run (:func:`specsim.sim.disagg.simulate_disaggregated`)
of ``requests`` requests at ``rate_per_s`` from ``default_rng(seed)`` (common random
numbers across pairs and modes), judged by :func:`specsim.capacity.judge.judge` on the
whole run's requests (TTFT from the arrival at the prefill pool, TPOT from the decode
pool, the whole run's stability) and by each pool's own stability test: a pool shown
unstable fails the pair; a pool untested, or whose smaller p-value is below
:data:`~specsim.capacity.judge.SUSPECT`, makes it ``undecided``, which does not hold.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.judge import SLO, SUSPECT, judge
from specsim.capacity.statistics import FAILS, HOLDS, UNDECIDED, Outcome, combine
from specsim.policies.lookahead import FixedGamma
from specsim.sim.costs.source import check_whole
from specsim.sim.disagg import DisaggConfig, DisaggResult, simulate_disaggregated
from specsim.sim.results.stability import stability

__all__ = [
    "DISAGG_MODES",
    "disagg_capacity",
    "judge_pair",
    "plain_pools",
    "serve_pools",
    "smallest_pools",
]

DISAGG_MODES: tuple[str, ...] = ("speculative", "plain")


def plain_pools(config: DisaggConfig) -> DisaggConfig:
    """``config`` decoding without speculation: chains of gamma 0 on the decode pool, no
    proposer and no tree plan (a tree plan's pools decode plainly as chains do)."""
    acceptance = IIDAcceptance(alpha=0.0) if config.acceptance is None else config.acceptance
    return dataclasses.replace(
        config, policy=FixedGamma(gamma=0), acceptance=acceptance, proposer=None, tree=None
    )


def serve_pools(
    config: DisaggConfig, *, rate_per_s: float, requests: int, prefill: int, decode: int, seed: int
) -> DisaggResult:
    """One run of ``config`` at ``rate_per_s`` (its workload's ``with_rate``) and
    ``requests`` requests on ``prefill`` and ``decode`` replicas, no plain twin."""
    workload = config.workload
    with_rate = getattr(workload, "with_rate", None)
    if with_rate is None or not hasattr(workload, "requests"):
        raise TypeError(
            f"workload: a capacity search varies the rate and the request count; "
            f"{type(workload).__name__} has no with_rate or requests"
        )
    run = dataclasses.replace(
        config,
        workload=dataclasses.replace(with_rate(rate_per_s), requests=requests),
        prefill_replicas=prefill,
        decode_replicas=decode,
        plain_twin=False,
    )
    return simulate_disaggregated(run, np.random.default_rng(seed))


def _pool_outcome(result: DisaggResult) -> tuple[Outcome, dict[str, Any]]:
    """Each pool's stability verdict as an outcome, with the pools' columns."""
    row: dict[str, Any] = {}
    outcomes = []
    for name, pool in (("prefill", result.prefill), ("decode", result.decode)):
        steady = stability(pool.requests_spec)
        row[f"{name}_stable"] = steady.stable
        row[f"{name}_stability_p_value"] = steady.p_value
        outcomes.append(
            FAILS if steady.stable is False else UNDECIDED if steady.p_value < SUSPECT else HOLDS
        )
    return combine(outcomes), row


def judge_pair(result: DisaggResult, slo: SLO) -> dict[str, Any]:
    """The verdict on one (P, D) run: the SLO on the whole run, and both pools stable."""
    row = judge(result.requests(), slo)
    pools, cols = _pool_outcome(result)
    row.update(cols)
    row["outcome"] = combine([row["outcome"], pools])
    it = result.decode.iterations_spec
    row["mean_gamma"] = float(it["draft_tokens"].sum() / max(int(it["batch"].sum()), 1))
    row["transfer_p99_s"] = float(np.percentile(result.requests()["transfer_s"], 99))
    return row


def disagg_capacity(
    config: DisaggConfig,
    *,
    rate_per_s: float,
    slo: SLO,
    requests: int = 800,
    max_requests: int | None = None,
    seed: int = 0,
    max_prefill: int = 8,
    max_decode: int = 8,
) -> pd.DataFrame:
    """Every (mode, P, D) run the staircase walk served (module docstring), a row each:
    ``mode``, ``prefill_replicas``, ``decode_replicas``, ``gpus``, the judge's columns
    (``outcome``, the p99s and their intervals, ``stable``) and each pool's stability;
    :func:`smallest_pools` reads the answer from it."""
    check_whole(requests, "requests", minimum=2)
    most = 4 * requests if max_requests is None else max_requests
    check_whole(most, "max_requests", minimum=requests)
    check_whole(max_prefill, "max_prefill", minimum=1)
    check_whole(max_decode, "max_decode", minimum=1)
    tp_p = int(getattr(config.prefill_cost, "tensor_parallel", 1))
    tp_d = int(getattr(config.decode_cost, "tensor_parallel", 1))
    rows = []
    for mode in DISAGG_MODES:
        run = config if mode == "speculative" else plain_pools(config)
        p, d = 1, max_decode
        while p <= max_prefill and d >= 1:
            row = _decided(
                run,
                rate_per_s=rate_per_s,
                slo=slo,
                requests=(requests, most),
                pools=(p, d),
                seed=seed,
            )
            rows.append({"mode": mode, "gpus": p * tp_p + d * tp_d, **row})
            if row["outcome"] == HOLDS:
                d -= 1
            else:
                p += 1
    return pd.DataFrame(rows)


def _decided(
    config: DisaggConfig,
    *,
    rate_per_s: float,
    slo: SLO,
    requests: tuple[int, int],
    pools: tuple[int, int],
    seed: int,
) -> dict[str, Any]:
    """One pair's verdict, served again with twice the requests while undecided, up to
    ``requests[1]`` (the planner's rule, :mod:`specsim.capacity.planner`)."""
    n, most = requests
    while True:
        res = serve_pools(
            config, rate_per_s=rate_per_s, requests=n, prefill=pools[0], decode=pools[1], seed=seed
        )
        row = {"prefill_replicas": pools[0], "decode_replicas": pools[1], **judge_pair(res, slo)}
        if row["outcome"] != UNDECIDED or 2 * n > most:
            return row
        n *= 2


def smallest_pools(frame: pd.DataFrame) -> pd.DataFrame:
    """Per mode, the pair that holds with the fewest GPUs (ties: fewer prefill replicas),
    from :func:`disagg_capacity`'s rows; a mode with none that holds is left out."""
    held = frame[frame["outcome"] == HOLDS]
    best = held.sort_values(["mode", "gpus", "prefill_replicas"], kind="stable")
    return best.groupby("mode", sort=False).head(1).reset_index(drop=True)
