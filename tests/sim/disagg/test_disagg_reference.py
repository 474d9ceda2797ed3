"""Slow reference: a disaggregated run's timeline recomputed pass by pass in plain Python
(the prefill pool's FCFS passes, the link's queue, the decode pool's first steps and
speculative passes), as :mod:`.test_reference_serving` does for a colocated run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment, PassShape, pass_cost
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost
from specsim.sim.disagg import DisaggConfig, KVLink, simulate_disaggregated
from specsim.sim.workload.arrivals import TraceWorkload

from ..reference import HW, REL, SMALL, TARGET

WORKLOAD = TraceWorkload(
    arrival_s=(0.0, 0.004, 0.006, 0.3),
    prompt_tokens=(300, 120, 200, 64),
    output_tokens=(9, 5, 12, 7),
)
LINK = KVLink(bandwidth=25e9, latency_s=5e-6, name="network")  # illustrative numbers
GAMMA = 2
# Llama-2-7B's KV per token: 2 (keys, values) x layers x kv_heads x head_dim x 2 bytes.
KV_PER_TOKEN = 2 * TARGET.layers * TARGET.kv_heads * TARGET.head_dim * 2


def config(**kw: object) -> DisaggConfig:
    base: dict[str, object] = dict(
        workload=WORKLOAD,
        prefill_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW)),
        decode_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=SMALL),
        acceptance=IIDAcceptance(alpha=1.0),  # every draft accepted: known emitted counts
        policy=FixedGamma(gamma=GAMMA),
        link=LINK,
        max_batch=3,
        max_gamma=GAMMA,
        plain_twin=False,
    )
    base.update(kw)
    return DisaggConfig(**base)  # type: ignore[arg-type]


def t_of(model: object, shape: PassShape) -> float:
    return pass_cost(model, HW, shape).time_s  # type: ignore[arg-type]


def prefill_pool(arrival: Sequence[float], prompts: Sequence[int], most: int) -> list[float]:
    """FCFS on one replica: each pass prefills every prompt waiting at its start (at most
    ``most``); returns when each prompt's pass ends."""
    n, t, i, end = len(arrival), 0.0, 0, [0.0] * len(arrival)
    while i < n:
        t = max(t, arrival[i])
        batch = [j for j in range(i, n) if arrival[j] <= t][:most]
        t += t_of(TARGET, PassShape.prefill([prompts[j] for j in batch]))
        for j in batch:
            end[j] = t
        i += len(batch)
    return end


def link_queue(ready: Sequence[float], prompts: Sequence[int], *, hop: bool) -> list[float]:
    """Transfers one at a time over the link in the order prefills ended."""
    free, out = 0.0, [0.0] * len(ready)
    for j in sorted(range(len(ready)), key=lambda j: ready[j]):
        cost = prompts[j] * KV_PER_TOKEN / LINK.bandwidth + LINK.latency_s if hop else 0.0
        free = max(free, ready[j]) + cost
        out[j] = free
    return out


def first_step(prompts: list[int]) -> float:
    """One target position after each prompt, and the draft's prefill of the prompts."""
    return t_of(TARGET, PassShape.chain(context=prompts, new=1)) + t_of(
        SMALL, PassShape.prefill(prompts)
    )


def decode_pass(ctx: list[int], gam: list[int]) -> float:
    """Draft step j over the sequences drafting more than j, then the verification pass."""
    t = t_of(TARGET, PassShape.chain(context=ctx, new=[g + 1 for g in gam]))
    for j in range(max(gam)):
        t += t_of(
            SMALL,
            PassShape.chain(context=[c + j for c, g in zip(ctx, gam, strict=True) if g > j], new=1),
        )
    return t


def decode_pool(
    arrive: Sequence[float], prompts: Sequence[int], outs: Sequence[int], *, step: bool
) -> tuple[list[float], list[float]]:
    """One decode replica, max_batch 3, every draft accepted: (first token, finish)."""
    n = len(arrive)
    order = sorted(range(n), key=lambda j: arrive[j])
    first, finish = [0.0] * n, [0.0] * n
    t, running, k = 0.0, [], 0  # running: [request, cached context, tokens left]
    while k < n or running:
        if not running:
            t = max(t, arrive[order[k]])
        admitted = []
        while k < n and arrive[order[k]] <= t and len(running) + len(admitted) < 3:
            admitted.append(order[k])
            k += 1
        pre = first_step([prompts[j] for j in admitted]) if admitted and step else 0.0
        for j in admitted:
            first[j] = t + pre
            running.append([j, prompts[j], outs[j] - 1])  # cached: the first token is not
        gam = [min(GAMMA, left - 1) for _, _, left in running]
        t += pre + decode_pass([c for _, c, _ in running], gam)
        for seq, g in zip(running, gam, strict=True):
            seq[1] += g + 1
            seq[2] -= g + 1
            if seq[2] == 0:
                finish[seq[0]] = t
        running = [s for s in running if s[2] > 0]
    return first, finish


def reference(*, hop: bool = True, step: bool = True) -> dict[str, list[float]]:
    arrival, prompts = list(WORKLOAD.arrival_s), list(WORKLOAD.prompt_tokens)
    ready = prefill_pool(arrival, prompts, most=3)
    arrive = link_queue(ready, prompts, hop=hop)
    first, finish = decode_pool(arrive, prompts, list(WORKLOAD.output_tokens), step=step)
    return {
        "prefill_end_s": ready,
        "kv_ready_s": arrive,
        "first_token_s": first,
        "finish_s": finish,
    }


@pytest.mark.slow
def test_disaggregated_timeline_equals_the_hand_recomputation() -> None:
    req = simulate_disaggregated(config(), np.random.default_rng(3)).requests()
    want = reference()
    for name, values in want.items():
        np.testing.assert_allclose(req[name].to_numpy(), values, rtol=REL, err_msg=name)
    # The queue on the link binds: two prompts prefilled together leave one after the other.
    assert want["kv_ready_s"][2] > want["prefill_end_s"][2] + req["transfer_s"][2] * (1 + 1e-6)


@pytest.mark.slow
def test_the_transfer_and_the_first_step_are_both_in_the_timeline() -> None:
    """The recomputation without either term misses the engine's timeline (this test
    fails if the simulator drops the transfer or the first decode step)."""
    req = simulate_disaggregated(config(), np.random.default_rng(3)).requests()
    got = req["first_token_s"].to_numpy()
    for kw in ({"hop": False}, {"step": False}):
        other = np.array(reference(**kw)["first_token_s"])
        assert np.all(got > other * (1 + 1e-6)), kw


MANY = TraceWorkload(
    arrival_s=(0.0, 0.002, 0.003, 0.004, 0.02, 0.021, 0.3),
    prompt_tokens=(300, 120, 200, 64, 410, 90, 150),
    output_tokens=(9, 5, 12, 7, 3, 10, 6),
)


def two_by_two() -> dict[str, list[float]]:
    """Round-robin on both pools, two replicas each: request i prefills on replica i mod 2
    (arrival order), queues on that replica's link, and decodes on replica j mod 2, j its
    place in the order the caches arrive."""
    arrival, prompts = list(MANY.arrival_s), list(MANY.prompt_tokens)
    outs, n = list(MANY.output_tokens), len(MANY.arrival_s)
    ready, arrive = [0.0] * n, [0.0] * n
    for k in range(2):
        mine = [i for i in range(n) if i % 2 == k]
        ends = prefill_pool([arrival[i] for i in mine], [prompts[i] for i in mine], most=3)
        got = link_queue(ends, [prompts[i] for i in mine], hop=True)
        for i, e, a in zip(mine, ends, got, strict=True):
            ready[i], arrive[i] = e, a
    order = sorted(range(n), key=lambda i: arrive[i])
    first, finish = [0.0] * n, [0.0] * n
    for k in range(2):
        mine = [i for j, i in enumerate(order) if j % 2 == k]
        f, e = decode_pool(
            [arrive[i] for i in mine],
            [prompts[i] for i in mine],
            [outs[i] for i in mine],
            step=True,
        )
        for i, a, b in zip(mine, f, e, strict=True):
            first[i], finish[i] = a, b
    return {
        "prefill_end_s": ready,
        "kv_ready_s": arrive,
        "first_token_s": first,
        "finish_s": finish,
    }


@pytest.mark.slow
def test_two_replicas_a_pool_behind_round_robin_equal_the_hand_recomputation() -> None:
    cfg = config(workload=MANY, prefill_replicas=2, decode_replicas=2)
    req = simulate_disaggregated(cfg, np.random.default_rng(5)).requests()
    for name, values in two_by_two().items():
        np.testing.assert_allclose(req[name].to_numpy(), values, rtol=REL, err_msg=name)
    assert set(req["prefill_replica"]) == {0, 1} and set(req["decode_replica"]) == {0, 1}
