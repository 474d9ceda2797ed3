"""Mixture-of-experts targets in the cost model: touched experts, expert parallelism.

A pass over ``T`` tokens (batch x positions) through an MoE layer reads the weights every
token uses once (attention, norms, router, shared experts) and the routed experts its
tokens touch, ``E_touched(T) = E (1 - (1 - k/E)^T)`` under uniform routing
(:func:`specsim.theory.moe.experts_touched`, the numeric twin of the sympy result); its
flops count ``k`` routed experts per token. Dense layers (DeepSeek's first three) are read
like a dense model's. A pass's collectives (:func:`pass_collectives`) are a dense
model's all-reduces or an MoE model's dispatch and combine.

**Expert parallelism** (``expert_parallel`` = EP, beside tensor parallelism TP over the
same ``tp`` devices, as vLLM's ``--enable-expert-parallel`` and SGLang's ``--ep-size``):
attention and dense layers stay tensor-parallel over ``tp``; each MoE layer's experts are
split into ``ep`` groups of ``E / ep`` experts, each group tensor-parallel over ``tp / ep``
devices (MoE TPxEP; ``ep = tp`` is pure EP, DeepSeek-V3's deployment, technical report
Section 3.4). Each device then holds, and expects to read, the same bytes of experts as
under pure TP (``E / ep`` experts at ``ep / tp`` of each), so EP changes the collectives,
not the weight traffic in expectation: an MoE layer replaces its MLP all-reduce over
``tp`` by an all-to-all **dispatch** of each token to its ``k`` experts and an all-to-all
**combine** back over the ``ep`` groups (:func:`specsim.cost.collectives.alltoall_time`),
plus an all-reduce over the ``tp / ep`` devices of a group when there are several. Each
device dispatches ``T / ep`` of the pass's tokens (the tokens are replicated over the
attention TP group, and the dispatch splits them), ``k`` copies each of ``d_model``
activations. Load imbalance between the groups is not modelled: the collectives and the
expert groups' compute are priced at the mean load.

**Routing skew.** A card's ``moe.routing`` (:class:`specsim.cards.experts.MoE`) says how
tokens spread over the experts: ``"uniform"`` (the formula above), one share per expert,
or a measured profile (:mod:`specsim.cards.routing`), which :func:`routing_load` turns into
shares with :func:`specsim.theory.moe_skew.lognormal_load` at the coefficient of variation
of the published per-expert counts (:func:`specsim.theory.moe_skew.count_cv`). The experts
a pass reads are then ``sum_e 1 - (1 - k p_e)^T``
(:func:`specsim.theory.moe_skew.experts_touched_load`): fewer than uniform, so skew makes
verification cheaper per pass (the hot experts are shared by more of the pass's tokens).

>>> from specsim.cards import load_model
>>> round(moe_routed_fraction(load_model("mixtral-8x7b")), 3)
0.884
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile
from specsim.cards.routing import load_routing_profile
from specsim.checks import check_int
from specsim.cost.collectives import (
    allreduce_bandwidth_factor,
    allreduce_steps,
    alltoall_bandwidth_factor,
    alltoall_steps,
)
from specsim.cost.formats import Formats
from specsim.theory.moe import experts_touched
from specsim.theory.moe_skew import count_cv, experts_touched_load, lognormal_load

__all__ = [
    "Collectives",
    "check_expert_parallel",
    "moe_collectives",
    "moe_routed_fraction",
    "pass_collectives",
    "allreduce_card",
    "routing_load",
    "touched_experts",
    "expert_kernel",
]


def check_expert_parallel(
    model: ModelCard, expert_parallel: object, *, tensor_parallel: int, name: str
) -> int:
    """``expert_parallel`` as an int when it splits ``model``'s experts within the
    ``tensor_parallel`` devices; else a ValueError naming the value, the experts and the
    devices. ``1`` (no expert parallelism) is valid for every model."""
    ep = check_int(expert_parallel, name=name, minimum=1)
    if ep == 1:
        return 1
    moe = model.moe_spec
    if moe is None:
        raise ValueError(f"{name}: {ep} needs an MoE target; {model.slug} has no experts")
    if moe.experts % ep:
        raise ValueError(
            f"{name}: {ep} does not divide the {moe.experts} routed experts of {model.slug}"
        )
    if tensor_parallel % ep:
        raise ValueError(
            f"{name}: {ep} does not divide tensor_parallel = {tensor_parallel} (the expert "
            "groups split the same devices)"
        )
    return ep


@functools.cache
def _profile_load(name: str, experts: int) -> np.ndarray:
    profile = load_routing_profile(name)
    cv = count_cv(mean=profile.mean_tokens, std=profile.std_tokens)
    load = lognormal_load(experts, cv=cv)
    load.setflags(write=False)  # shared by every call: never written
    return load


def routing_load(model: ModelCard) -> np.ndarray | None:
    """The share of routed token-slots each expert of ``model`` receives, or None for
    uniform routing (and for a dense model): the card's list as given, or a profile's
    log-normal shares at its published spread (module docstring)."""
    moe = model.moe_spec
    if moe is None or moe.routing == "uniform":
        return None
    if isinstance(moe.routing, str):
        return _profile_load(moe.routing, moe.experts)
    return np.asarray(moe.routing, dtype=np.float64)


def touched_experts(model: ModelCard, T: Any) -> Any:
    """Expected distinct routed experts per MoE layer that a pass of ``T`` tokens reads
    (numbers or arrays; 0 for a dense model), under the card's routing."""
    moe = model.moe_spec
    if moe is None:
        return 0.0 * T
    load = routing_load(model)
    if load is not None:
        return experts_touched_load(T, load=load, top_k=moe.top_k)
    return experts_touched(T, experts=moe.experts, top_k=moe.top_k)


def moe_routed_fraction(model: ModelCard) -> float:
    """The routed experts' share ``f`` of the weights a one-token decode reads (LM head
    included): the ``f`` of :func:`specsim.theory.moe.moe_verification_factor`."""
    moe = model.moe_spec
    if moe is None:
        return 0.0
    routed = model.moe_layers * moe.top_k * model.routed_expert_params
    return routed / model.decode_params


@dataclass(frozen=True, slots=True)
class Collectives:
    """Seconds per token and fixed seconds of a pass's collectives on one device."""

    per_token_s: float
    fixed_s: float


def _allreduce(hw: HardwareCard, p: float, *, n: float, nbytes: float) -> Collectives:
    if p <= 1 or n == 0:
        return Collectives(0.0, 0.0)
    alg = hw.collective_algorithm
    ring = n * allreduce_bandwidth_factor(p, alg) * nbytes / hw.interconnect_bandwidth
    return Collectives(ring, n * allreduce_steps(p, alg) * hw.interconnect_latency_s)


def _alltoall(hw: HardwareCard, p: float, *, n: float, nbytes: float) -> Collectives:
    if p <= 1 or n == 0:
        return Collectives(0.0, 0.0)
    alg = hw.collective_algorithm
    per_token = n * alltoall_bandwidth_factor(p, alg) * nbytes / hw.interconnect_bandwidth
    return Collectives(per_token, n * alltoall_steps(p, alg) * hw.interconnect_latency_s)


def moe_collectives(
    model: ModelCard,
    hw: HardwareCard,
    *,
    tp: float,
    ep: int,
    act_bytes: float,
    allreduce: HardwareCard | None = None,
) -> Collectives:
    """The collectives of one pass of ``model`` on ``tp`` devices with ``ep`` expert groups.

    Without EP: ``2`` all-reduces of ``d_model`` activations per layer (attention and MLP,
    Megatron-LM), over ``tp``. With EP (module docstring): ``L`` attention all-reduces and
    one per dense layer over ``tp``; per MoE layer a dispatch and a combine all-to-all over
    ``ep`` in which a device holds ``k * d_model / ep`` activations per token of the pass,
    and an all-reduce over ``tp / ep`` when that is above 1. The card's per-device
    overhead ``collective_overhead_s * (tp - 1)`` is paid once either way. ``allreduce``: the
    card whose link numbers price the all-reduces (:func:`allreduce_card`; default ``hw``).
    """
    ar = allreduce or hw
    d = model.d_model * act_bytes
    L = model.layers
    overhead = hw.collective_overhead_s * (tp - 1.0) if tp > 1 else 0.0
    moe = model.moe_spec
    if ep == 1 or moe is None:
        base = _allreduce(ar, tp, n=2.0 * L, nbytes=d)
        return Collectives(base.per_token_s, base.fixed_s + overhead)
    parts = (
        _allreduce(ar, tp, n=float(L + moe.dense_layers), nbytes=d),
        _allreduce(ar, tp / ep, n=float(model.moe_layers), nbytes=d),
        _alltoall(hw, float(ep), n=2.0 * model.moe_layers, nbytes=moe.top_k * d / ep),
    )
    return Collectives(sum(c.per_token_s for c in parts), sum(c.fixed_s for c in parts) + overhead)


def _allreduces(hw: HardwareCard, tp: float, *, n: float, nbytes: float) -> tuple[float, float]:
    """``(seconds per token, fixed seconds)`` of ``n`` all-reduces of ``nbytes`` per token on
    ``tp`` devices (:mod:`specsim.cost.collectives`); nothing on one device."""
    if tp <= 1:
        return 0.0, 0.0
    alg = hw.collective_algorithm
    ring = n * allreduce_bandwidth_factor(tp, alg) * nbytes / hw.interconnect_bandwidth
    latency = n * allreduce_steps(tp, alg) * hw.interconnect_latency_s
    return ring, latency + hw.collective_overhead_s * (tp - 1.0)


def allreduce_card(
    hw: HardwareCard, latency_s: float | None, bandwidth: float | None
) -> HardwareCard:
    """``hw`` with the all-reduce numbers a stack's kernel reaches on it (a device part's
    ``allreduce_latency_s`` and ``allreduce_bandwidth``, in the ``per-allreduce`` form), or
    ``hw`` itself when they are None."""
    if latency_s is None or bandwidth is None:
        return hw
    return replace(
        hw,
        interconnect_latency_s=latency_s,
        interconnect_bandwidth=bandwidth,
        collective_algorithm="per-allreduce",
    )


def pass_collectives(
    model: ModelCard,
    hw: HardwareCard,
    *,
    act_bytes: float,
    tp: float,
    ep: int,
    allreduce: HardwareCard | None = None,
) -> tuple[float, float]:
    """``(seconds per token, fixed seconds)`` of a pass's collectives: ``2`` (``3`` with
    cross-attention) all-reduces per layer, or an MoE model's (:func:`moe_collectives`);
    the all-reduces on ``allreduce``'s link numbers (default ``hw``'s)."""
    ab = act_bytes
    if model.moe_spec is None:
        n_allreduce = float(model.layers * (3 if model.architecture == "encoder-decoder" else 2))
        return _allreduces(allreduce or hw, tp, n=n_allreduce, nbytes=model.d_model * ab)
    coll = moe_collectives(model, hw, tp=tp, ep=ep, act_bytes=ab, allreduce=allreduce)
    return coll.per_token_s, coll.fixed_s


def expert_kernel(
    model: ModelCard,
    hw: HardwareCard,
    formats: Formats,
    rt: RuntimeProfile,
    expert_bytes: float,
    *,
    bandwidth: float,
) -> dict[str, float]:
    """The seconds of one touched expert's weights (``expert_weights_s``), at the runtime's
    MoE bandwidth fraction for the experts' format where its device part measured one, else
    at ``bandwidth``; and the expert kernel's fixed cost over the MoE layers of a pass
    (``moe_floor_s``: ``moe_layers * moe_fixed_s[format]``, 0 where none was measured)."""
    if model.moe_spec is None:
        return {"expert_weights_s": expert_bytes / bandwidth, "moe_floor_s": 0.0}
    fmt = formats.expert_format or formats.weight_format
    eff = (rt.moe_memory_efficiency or {}).get(fmt)
    W = bandwidth if eff is None else hw.mem_bandwidth * eff
    floor = model.moe_layers * (rt.moe_fixed_s or {}).get(fmt, 0.0)
    return {"expert_weights_s": expert_bytes / W, "moe_floor_s": floor}
