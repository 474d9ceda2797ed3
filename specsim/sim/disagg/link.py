"""The KV hand-over between the pools: which link, and how long a prompt's cache takes.

A prefilled request's KV cache moves from its prefill replica to a decode replica over
one link (NVIDIA Dynamo: NIXL copies it "directly from the VRAM of the prefill engine to
the VRAM of the decode engine", non-blocking, so the prefill engine keeps serving; vLLM's
NixlConnector and SGLang's Mooncake/NIXL backends do the same). The time of one
hand-over of ``n`` prompt tokens is the alpha-beta cost of one message
(:mod:`specsim.cost.collectives`, Thakur, Rabenseifner & Gropp 2005, section 4):

    t = n * kv_bytes_per_token / bandwidth + latency

``kv_bytes_per_token``: the target's KV bytes per token *per device* from the cost
model's footprint (:func:`specsim.cost.footprint`; a tensor-parallel replica's devices
each send their own shard over their own link, in parallel). The link:

- ``"interconnect"``: the hardware card's scale-up link, ``interconnect_bandwidth`` (bytes/s
  per direction) and ``interconnect_latency_s``, with the card's sources: NVLink between
  GPUs of one node (one NVLink domain). Both pools must then sit in that domain;
- ``"network"``: a scale-out link between nodes (RDMA over InfiniBand or RoCE). The
  shipped hardware cards state no network link, so its ``network_bandwidth`` (bytes/s
  per device, per direction) and ``network_latency_s`` are given with the
  configuration (a card that gains those two fields is read instead).

Transfers leaving one prefill replica share its link: they go one after another, first
prefilled first sent (:func:`hand_over`). The decode side's receiving link is not a
second queue (each decode device receives at the rate its prefill peer sends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["LINKS", "KVLink", "card_link", "hand_over", "target_kv_bytes_per_token"]

LINKS: tuple[str, ...] = ("interconnect", "network")


@dataclass(frozen=True, kw_only=True)
class KVLink:
    """One device's link for the KV hand-over: bandwidth (bytes/s, one direction; ``inf``
    for an ideal link) and the fixed latency of one transfer (s); ``name`` says which link
    (:data:`LINKS`)."""

    bandwidth: float
    latency_s: float
    name: str = "interconnect"

    def __post_init__(self) -> None:
        b, lat = self.bandwidth, self.latency_s
        if isinstance(b, bool) or not isinstance(b, int | float) or not b > 0:  # inf: ideal
            raise ValueError(f"link bandwidth: expected bytes/s > 0, got {b!r}")
        bad = isinstance(lat, bool) or not isinstance(lat, int | float)
        if bad or not (math.isfinite(lat) and lat >= 0):
            raise ValueError(f"link latency_s: expected seconds >= 0, got {lat!r}")
        if self.name not in LINKS:
            raise ValueError(f"link: expected one of {list(LINKS)}, got {self.name!r}")

    def transfer_s(
        self, tokens: NDArray[np.int64], *, bytes_per_token: float
    ) -> NDArray[np.float64]:
        """Each request's hand-over time: its tokens' KV bytes over the bandwidth, plus the
        latency."""
        return tokens.astype(np.float64) * float(bytes_per_token) / self.bandwidth + self.latency_s


def card_link(
    hardware: Any,
    link: object,
    *,
    network_bandwidth: float | None = None,
    network_latency_s: float | None = None,
    where: str = "disaggregation.link",
) -> KVLink:
    """The :class:`KVLink` named ``link`` on ``hardware`` (a hardware card); a ValueError
    naming ``where`` for an unknown link or one the card lacks (a network link with neither
    the card's nor the given ``network_bandwidth``)."""
    if link not in LINKS:
        raise ValueError(f"{where}: expected one of {list(LINKS)}, got {link!r}")
    slug = getattr(hardware, "slug", type(hardware).__name__)
    if link == "interconnect":
        bw = getattr(hardware, "interconnect_bandwidth", None)
        lat = getattr(hardware, "interconnect_latency_s", None)
        if bw is None or lat is None:
            raise ValueError(f"{where}: hardware {slug!r} states no interconnect link")
        return KVLink(bandwidth=float(bw), latency_s=float(lat), name="interconnect")
    bw = (
        getattr(hardware, "network_bandwidth", None)
        if network_bandwidth is None
        else network_bandwidth
    )
    lat = (
        getattr(hardware, "network_latency_s", None)
        if network_latency_s is None
        else network_latency_s
    )
    if bw is None or lat is None:
        raise ValueError(
            f"{where}: hardware card {slug!r} states no network link (only its interconnect); "
            f"give disaggregation.network_bandwidth (bytes/s per device) and "
            f"disaggregation.network_latency_s, or use link = 'interconnect'"
        )
    return KVLink(bandwidth=bw, latency_s=lat, name="network")


def target_kv_bytes_per_token(cost: Any, *, where: str = "prefill cost") -> float:
    """The target's KV bytes per token per device on ``cost``: its footprint's (a card cost,
    draft excluded) or its ``kv_bytes_per_token()``; a TypeError naming ``where`` else."""
    footprints = getattr(cost, "footprints", None)
    if footprints is not None:
        return float(footprints()[0].kv_bytes_per_token)
    per_token = getattr(cost, "kv_bytes_per_token", None)
    if per_token is None:
        raise TypeError(
            f"{where}: {type(cost).__name__} states no KV bytes per token, so the KV "
            f"hand-over cannot be priced"
        )
    return float(per_token())


def hand_over(
    ready_s: NDArray[np.float64], replica: NDArray[np.int64], transfer_s: NDArray[np.float64]
) -> NDArray[np.float64]:
    """When each request's KV cache has arrived: transfers from one prefill replica go one
    at a time over its link, in the order their prefills ended (ties: request order)."""
    arrive = np.empty_like(ready_s)
    for k in np.unique(replica).tolist():
        rows = np.flatnonzero(replica == k)
        rows = rows[np.argsort(ready_s[rows], kind="stable")]
        free = -math.inf
        for i in rows.tolist():
            free = max(free, float(ready_s[i])) + float(transfer_s[i])
            arrive[i] = free
    return arrive
