"""A disaggregated run from TOML: a serving config with a ``[disaggregation]`` table.

The file is a serving config (``mode = "serving"``, :mod:`specsim.sim.config.config`) on cards
(``[cost] kind = "cards"`` or a ``[deployment]``) whose cost is the decode pool's
replica (target and draft); the prefill pool runs the same target on the same hardware
without the draft. The table::

    [disaggregation]
    prefill_replicas = 2          # P >= 1
    decode_replicas = 4           # D >= 1 (instead of the top-level ``replicas``)
    link = "interconnect"         # or "network" (then network_bandwidth, network_latency_s)
    prefill_max_batch = 16        # optional; default: max_batch
    prefill_kv_capacity_tokens = 400000  # optional; default: the card's memory
    prefill_router = "least-outstanding" # optional; default: router
    prefill_tensor_parallel = 1   # optional; default: the decode pool's tensor_parallel

    prefill_kv_block_tokens = 16  # optional: the prefill pool's paged cache
    prefill_token_budget = 2048   # optional: chunked prefill on the prefill pool

The top-level ``max_batch``, ``kv_capacity_tokens``, ``kv_block_tokens``, ``preemption``
and ``router`` are the decode pool's (a request preempted there recomputes its cache
there: :mod:`specsim.sim.disagg.first_step`). A top-level ``token_budget`` is refused with
an error naming it (the decode pool prefills nothing; chunked prefill is the prefill
pool's, ``prefill_token_budget``). A ``[proposer]`` without a ``[tree]`` drafts the decode
pool's chains; with a ``[tree]`` (static or dynamic) the decode pool verifies token trees.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.cards import read_toml
from specsim.sim.config.config import config_from_dict
from specsim.sim.config.config_compose import Slo
from specsim.sim.costs.costs import CardCost
from specsim.sim.costs.source import check_whole
from specsim.sim.disagg.config import DisaggConfig
from specsim.sim.disagg.link import card_link
from specsim.sim.serving.config import ServingConfig
from specsim.sim.serving.tree_serving import TreeServingConfig
from specsim.sim.serving.tree_serving_dynamic import DynamicTreeServingConfig

__all__ = ["TABLE_KEYS", "DisaggSpec", "disagg_from_dict", "load_disaggregated"]

TABLE_KEYS: tuple[str, ...] = (
    "prefill_replicas",
    "decode_replicas",
    "link",
    "network_bandwidth",
    "network_latency_s",
    "prefill_max_batch",
    "prefill_kv_capacity_tokens",
    "prefill_router",
    "prefill_tensor_parallel",
    "prefill_kv_block_tokens",
    "prefill_token_budget",
)
_POOLS_LACK = ("replicas", "token_budget")


@dataclass(frozen=True)
class DisaggSpec:
    """A parsed disaggregated config: the run, its seed and its latency targets."""

    config: DisaggConfig
    seed: int
    slo: Slo | None = None


def prefill_cost(decode: CardCost, *, tensor_parallel: int | None = None) -> CardCost:
    """The prefill pool's replica: the decode pool's deployment without the draft, on
    ``tensor_parallel`` devices (None: the decode pool's); the one place a CardCost is
    built here."""
    tp = decode.tensor_parallel if tensor_parallel is None else tensor_parallel
    deployment = dataclasses.replace(decode.deployment, tensor_parallel=tp)
    return CardCost(deployment=deployment)


def disagg_from_dict(
    data: Mapping[str, Any], *, where: str = "config", base: str | os.PathLike[str] = "."
) -> DisaggSpec:
    """Build a :class:`DisaggConfig` from a parsed TOML table with ``[disaggregation]``; a
    ValueError names the key (``disaggregation.decode_replicas``)."""
    table = _table(data, where)
    spec = config_from_dict(
        {k: v for k, v in data.items() if k != "disaggregation"}, where=where, base=base
    )
    run = spec.config
    if isinstance(run, TreeServingConfig | DynamicTreeServingConfig):
        cost, decode = run.card_cost(), _tree_pool(run)
    elif isinstance(run, ServingConfig) and isinstance(run.cost, CardCost):
        cost, decode = run.cost, _chain_pool(run)
    else:
        raise ValueError(
            f"{where}: [disaggregation] needs a serving run on cards (mode = 'serving', "
            f"[cost] kind = 'cards' or a [deployment]), got {type(run).__name__}"
        )
    key = f"{where} disaggregation"
    link = card_link(
        cost.hardware,
        table.get("link", "interconnect"),
        network_bandwidth=table.get("network_bandwidth"),
        network_latency_s=table.get("network_latency_s"),
        where=f"{key}.link",
    )
    config = DisaggConfig(
        workload=run.workload,
        prefill_cost=_prefill_pool(cost, table.get("prefill_tensor_parallel"), key),
        decode_cost=cost,
        link=link,
        prefill_replicas=table.get("prefill_replicas", 1),
        decode_replicas=table.get("decode_replicas", 1),
        max_batch=run.max_batch,
        prefill_max_batch=table.get("prefill_max_batch"),
        kv_capacity_tokens=run.kv_capacity_tokens,
        prefill_kv_capacity_tokens=table.get("prefill_kv_capacity_tokens"),
        kv_block_tokens=run.kv_block_tokens,
        preemption=run.preemption,
        prefill_kv_block_tokens=table.get("prefill_kv_block_tokens"),
        prefill_token_budget=table.get("prefill_token_budget"),
        plain_twin=run.plain_twin,
        router=run.router,
        prefill_router=table.get("prefill_router"),
        **decode,
    )
    return DisaggSpec(config=config, seed=spec.seed, slo=spec.slo)


def _table(data: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """The ``[disaggregation]`` table, its keys known and the top-level keys it excludes
    absent; a ValueError names what is wrong."""
    table = data.get("disaggregation")
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} [disaggregation]: expected a table, got {table!r}")
    unknown = sorted(set(table) - set(TABLE_KEYS))
    if unknown:
        raise ValueError(
            f"{where} [disaggregation]: unknown key(s) {unknown}; allowed: {list(TABLE_KEYS)}"
        )
    clash = sorted(k for k in _POOLS_LACK if k in data)
    if clash:
        raise ValueError(
            f"{where}: {clash} with [disaggregation]: the pools' sizes are "
            f"disaggregation.prefill_replicas and decode_replicas, and chunked prefill is "
            f"the prefill pool's (disaggregation.prefill_token_budget): the decode pool "
            f"prefills nothing, its admission pass is the first decode step"
        )
    return table


def _chain_pool(run: ServingConfig) -> dict[str, Any]:
    """The decode pool's chain fields of a chain serving run."""
    return {
        "acceptance": run.acceptance,
        "policy": run.policy,
        "proposer": run.proposer,
        "max_gamma": run.max_gamma,
    }


def _tree_pool(run: TreeServingConfig | DynamicTreeServingConfig) -> dict[str, Any]:
    """The decode pool's tree plan of a tree serving run."""
    return {"tree": run}


def _prefill_pool(decode: CardCost, tp: object, key: str) -> CardCost:
    """:func:`prefill_cost`, its errors naming ``disaggregation.prefill_tensor_parallel``."""
    where = f"{key}.prefill_tensor_parallel"
    devices = None if tp is None else check_whole(tp, where, minimum=1)
    try:
        return prefill_cost(decode, tensor_parallel=devices)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def load_disaggregated(path: str | os.PathLike[str]) -> DisaggSpec:
    """Read a disaggregated config file (a serving config with ``[disaggregation]``)."""
    p = Path(path)
    return disagg_from_dict(read_toml(p), where=str(p), base=p.parent)
