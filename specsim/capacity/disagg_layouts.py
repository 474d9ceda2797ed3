"""Disaggregated against colocated serving on the same GPUs: :func:`compare_layouts`.

A fleet of ``replicas`` replicas of one deployment serves a workload either *colocated*
(every replica prefills and decodes, the serving engine behind its router,
:func:`specsim.sim.simulate_serving`, or the tree engine under a tree plan) or split into
``P`` prefill and ``D = replicas - P`` decode replicas (:func:`specsim.sim.disagg.
simulate_disaggregated`: the prefill pool without the draft, the KV cache over the link,
the decode pool's first step). Each layout runs at each rate with speculation (the
configuration's policy or tree plan) and without (gamma 0), from ``default_rng(seed)``:
common random numbers, so that every layout and mode serves the same requests.

What is compared is what the engines report: TTFT (arrival to first token; for the
split, arrival at the prefill pool to the decode pool's first step) and TPOT p50 and p99,
output throughput and the run's stability (:func:`specsim.sim.results.stability.stability`; for
the split, both pools' too). The split frees the decode replicas of prefills (so TPOT
falls: no prompt stalls a decode batch) and gives the prompts fewer replicas (so TTFT
rises once the prefill pool queues), which is vLLM's "Disaggregated prefill DOES NOT
improve throughput" (https://docs.vllm.ai/en/latest/features/disagg_prefill/): it trades
TTFT against TPOT.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsim.capacity.disagg import plain_pools
from specsim.checks import check_int
from specsim.sim.disagg import DisaggConfig, simulate_disaggregated
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.serving.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    simulate_dynamic_tree_serving,
)

__all__ = ["LAYOUT_METRICS", "colocated_run", "compare_layouts"]

LAYOUT_METRICS: tuple[str, ...] = (
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "throughput_tokens_per_s",
    "stable",
)
"""The metrics record's keys each row of :func:`compare_layouts` carries."""


def colocated_run(config: DisaggConfig, *, replicas: int, seed: int = 0) -> dict[str, Any]:
    """The metrics record of ``replicas`` colocated replicas of ``config``'s decode
    deployment (its policy and proposer, or its tree plan; its batch, memory and router)
    serving ``config``'s workload from ``default_rng(seed)``, no plain twin: the requests
    (and, for chains, the acceptance draws) :func:`~specsim.sim.disagg.simulate_disaggregated`
    serves from the same seed."""
    rng = np.random.default_rng(seed)
    engine: dict[str, Any] = {
        "workload": config.workload,
        "max_batch": config.max_batch,
        "kv_capacity_tokens": config.kv_capacity_tokens,
        "kv_block_tokens": config.kv_block_tokens,
        "preemption": config.preemption,
        "replicas": replicas,
        "router": config.router,
        "plain_twin": False,
    }
    tree = config.tree
    if isinstance(tree, TreeServingConfig):
        return simulate_tree_serving(dataclasses.replace(tree, **engine), rng).metrics()
    if isinstance(tree, DynamicTreeServingConfig):
        return simulate_dynamic_tree_serving(dataclasses.replace(tree, **engine), rng).metrics()
    assert config.policy is not None and config.acceptance is not None  # DisaggConfig checks
    serving = ServingConfig(
        cost=config.decode_cost,
        acceptance=config.acceptance,
        policy=config.policy,
        proposer=config.proposer,
        max_gamma=config.max_gamma,
        **engine,
    )
    return simulate_serving(serving, rng).metrics()


def compare_layouts(
    config: DisaggConfig,
    *,
    replicas: int,
    rates_per_s: Sequence[float],
    requests: int,
    prefill_replicas: Sequence[int] | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """A row per (rate, mode, layout): ``rate_per_s``, ``mode`` (``speculative`` or
    ``plain``), ``layout`` (``colocated`` or ``P+D``), ``prefill_replicas`` and
    ``decode_replicas`` (0 and ``replicas`` colocated), ``gpus`` (replicas times each
    pool's tensor-parallel size) and :data:`LAYOUT_METRICS` (module docstring).
    ``prefill_replicas``: the splits' P (default every P from 1 to ``replicas - 1``); the
    workload is ``config.workload`` at each rate with ``requests`` requests."""
    check_int(
        replicas, name="replicas", minimum=2, why="a split needs a prefill and a decode replica"
    )
    check_int(requests, name="requests", minimum=2, why="percentiles need requests")
    splits = list(range(1, replicas)) if prefill_replicas is None else list(prefill_replicas)
    for p in splits:
        check_int(p, name="prefill_replicas", minimum=1, why="a split has a prefill pool")
        if p >= replicas:
            raise ValueError(
                f"prefill_replicas: {p} leaves no decode replica of the {replicas} replicas"
            )
    if not rates_per_s:
        raise ValueError("rates_per_s: expected at least one rate")
    with_rate = getattr(config.workload, "with_rate", None)
    if with_rate is None or not hasattr(config.workload, "requests"):
        raise TypeError(
            f"workload: the comparison varies the rate and the request count; "
            f"{type(config.workload).__name__} has no with_rate or requests"
        )
    tp_p = int(getattr(config.prefill_cost, "tensor_parallel", 1))
    tp_d = int(getattr(config.decode_cost, "tensor_parallel", 1))
    rows = []
    for rate in rates_per_s:
        workload = dataclasses.replace(with_rate(float(rate)), requests=requests)
        spec = dataclasses.replace(config, workload=workload, plain_twin=False)
        for mode, run in (("speculative", spec), ("plain", plain_pools(spec))):
            common = {"rate_per_s": float(rate), "mode": mode}
            m = colocated_run(run, replicas=replicas, seed=seed)
            colocated = {"layout": "colocated", "prefill_replicas": 0, "decode_replicas": replicas}
            rows.append({**common, **colocated, "gpus": replicas * tp_d, **_pick(m)})
            for p in splits:
                pools = dataclasses.replace(run, prefill_replicas=p, decode_replicas=replicas - p)
                res = simulate_disaggregated(pools, np.random.default_rng(seed))
                split = {"layout": f"{p}+{replicas - p}", "prefill_replicas": p}
                split["decode_replicas"] = replicas - p
                gpus = p * tp_p + (replicas - p) * tp_d
                rows.append({**common, **split, "gpus": gpus, **_pick(res.metrics())})
    return pd.DataFrame(rows)


def _pick(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: metrics[k] for k in LAYOUT_METRICS}
