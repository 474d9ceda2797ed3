"""A disaggregated run from TOML: a serving config with a ``[disaggregation]`` table.

The file is a serving config (``mode = "serving"``, :mod:`specsim.sim.config`) on cards
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

The top-level ``max_batch``, ``kv_capacity_tokens`` and ``router`` are the decode pool's.
Chunked prefill and paged KV (``token_budget``, ``kv_block_tokens``) are not modelled for
the pools: an error names them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.cards import read_toml
from specsim.sim.config import config_from_dict
from specsim.sim.config_compose import Slo
from specsim.sim.costs import CardCost
from specsim.sim.disagg.config import DisaggConfig
from specsim.sim.disagg.link import card_link
from specsim.sim.serving.config import ServingConfig
from specsim.sim.source import check_whole

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
)
_POOLS_LACK = ("replicas", "token_budget", "kv_block_tokens", "preemption")


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
            f"disaggregation.prefill_replicas and decode_replicas, and chunked prefill and "
            f"paged KV are not modelled on them"
        )
    spec = config_from_dict(
        {k: v for k, v in data.items() if k != "disaggregation"}, where=where, base=base
    )
    serving = spec.config
    if not isinstance(serving, ServingConfig) or not isinstance(serving.cost, CardCost):
        raise ValueError(
            f"{where}: [disaggregation] needs a chain serving run on cards (mode = 'serving', "
            f"[cost] kind = 'cards' or a [deployment]), got {type(serving).__name__}"
        )
    key = f"{where} disaggregation"
    link = card_link(
        serving.cost.hardware,
        table.get("link", "interconnect"),
        network_bandwidth=table.get("network_bandwidth"),
        network_latency_s=table.get("network_latency_s"),
        where=f"{key}.link",
    )
    config = DisaggConfig(
        workload=serving.workload,
        prefill_cost=_prefill_pool(serving.cost, table.get("prefill_tensor_parallel"), key),
        decode_cost=serving.cost,
        acceptance=serving.acceptance,
        policy=serving.policy,
        link=link,
        prefill_replicas=table.get("prefill_replicas", 1),
        decode_replicas=table.get("decode_replicas", 1),
        max_batch=serving.max_batch,
        prefill_max_batch=table.get("prefill_max_batch"),
        kv_capacity_tokens=serving.kv_capacity_tokens,
        prefill_kv_capacity_tokens=table.get("prefill_kv_capacity_tokens"),
        max_gamma=serving.max_gamma,
        plain_twin=serving.plain_twin,
        router=serving.router,
        prefill_router=table.get("prefill_router"),
    )
    return DisaggSpec(config=config, seed=spec.seed, slo=spec.slo)


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
