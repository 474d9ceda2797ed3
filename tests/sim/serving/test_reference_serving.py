"""Slow references: chain serving's timelines recomputed pass by pass (reservation,
KV-limited admission, two replicas behind round-robin, chunked prefill), as
:mod:`.test_reference_timelines` does for the stream and tree serving."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment, pass_aggregates_cost
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.workload.arrivals import TraceWorkload

from ..reference import (
    HW,
    REL,
    SMALL,
    SPACED,
    TARGET,
    TOGETHER,
    close,
    finish_at,
    prefill_s,
    replay,
)

pytestmark = pytest.mark.slow


def chain_decode(gamma: int) -> object:
    """A chain pass: every sequence verifies gamma + 1 positions after its context; draft
    step j (j < gamma) runs one position per sequence after its context and j drafted
    tokens. From the contexts' sum, so only where every sequence drafts the same gamma
    (at batch 1: the gamma it drafted); None elsewhere."""

    def decode(row: object, b: int, ctx_sum: int) -> tuple[float, float] | None:
        drafted = int(row.draft_tokens)  # type: ignore[attr-defined]
        g = drafted if b == 1 else gamma
        if drafted != b * g:
            return None
        n = g + 1
        ver = pass_aggregates_cost(
            TARGET,
            HW,
            batch=b,
            tokens=b * n,
            context_tokens=ctx_sum,
            pairs=n * ctx_sum + b * n * (n + 1) // 2,
        )
        draft = 0.0
        for j in range(g):
            c = ctx_sum + j * b
            draft += pass_aggregates_cost(
                SMALL, HW, batch=b, tokens=b, context_tokens=c, pairs=c + b
            ).time_s
        return ver.time_s, draft

    return decode


def chain_config(workload: TraceWorkload, **kw: object) -> ServingConfig:
    base: dict[str, object] = dict(
        workload=workload,
        cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=SMALL),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_batch=3,
        max_gamma=3,
        plain_twin=False,
    )
    base.update(kw)
    return ServingConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("workload", "kv"),
    [(SPACED, None), (TOGETHER, None), (TOGETHER, (200 + 9 + 4) + (50 + 15 + 4))],
)
def test_chain_serving_with_reservation(workload: TraceWorkload, kv: int | None) -> None:
    res = simulate_serving(chain_config(workload, kv_capacity_tokens=kv), np.random.default_rng(8))
    req, it = res.requests_spec, res.iterations_spec
    look = None if kv is None else (kv, 3 + 1)
    taken = replay(req, it, cap=3, models=(TARGET, SMALL), kv=look, decode=chain_decode(3))
    assert taken <= 0.25 * len(it)  # passes with gammas cut at requests' ends


def test_chain_serving_two_replicas_round_robin() -> None:
    """Request i goes to replica i mod 2; each replica is the one-replica engine."""
    w = TraceWorkload(
        arrival_s=(0.0, 0.0, 1.0, 1.5, 3.0, 3.0),
        prompt_tokens=(64, 128, 32, 256, 100, 80),
        output_tokens=(10, 18, 1, 25, 14, 9),
    )
    res = simulate_serving(chain_config(w, replicas=2), np.random.default_rng(9))
    req, it = res.requests_spec, res.iterations_spec
    np.testing.assert_array_equal(req["replica"], np.arange(len(req)) % 2)
    for k in (0, 1):
        mine = req[req["replica"] == k].reset_index(drop=True)
        rows = it[it["replica"] == k].reset_index(drop=True)
        taken = replay(mine, rows, cap=3, models=(TARGET, SMALL), kv=None, decode=chain_decode(3))
        assert taken == 0  # at most one sequence at a time on each replica


def decode_sums(b: int, drafted: int, ctx_sum: int, gamma: int) -> tuple[int, int, int] | None:
    """A chain pass's positions and causal pairs (and its gamma) where every sequence drafts
    ``gamma`` (at batch 1: what it drafted); None where the gammas may differ."""
    if b == 0:
        return 0, 0, 0
    g = drafted if b == 1 else gamma
    if drafted != b * g:
        return None
    n = g + 1
    return b * n, n * ctx_sum + b * n * (n + 1) // 2, g


def chunk_s(
    b: int, sums: tuple[int, int, int], ctx_sum: int, sizes: list[int], at: list[int]
) -> float:
    """Prefill chunks in the decoding pass: the target's pass with them less the pass without
    (the pass alone when nobody decodes), and the draft's prefill of each chunk."""
    if not sizes:
        return 0.0
    T, P, _ = sums
    pairs = P + sum(s * o + s * (s + 1) // 2 for s, o in zip(sizes, at, strict=True))
    both = pass_aggregates_cost(
        TARGET,
        HW,
        batch=b + len(sizes),
        tokens=T + sum(sizes),
        context_tokens=ctx_sum + sum(at),
        pairs=pairs,
    ).time_s
    alone = 0.0
    if b:
        alone = pass_aggregates_cost(
            TARGET, HW, batch=b, tokens=T, context_tokens=ctx_sum, pairs=P
        ).time_s
    return max(both - alone, 0.0) + prefill_s(sizes, (SMALL,))


def test_chain_serving_with_chunked_prefill() -> None:
    """A token budget per iteration: the decoding sequences' positions first, then prompt
    chunks first come first served (a request starts prefilling while the budget has room
    after the prompts already in prefill); a prompt's last chunk gives its first token."""
    budget, gamma, cap = 48, 3, 3
    w = TraceWorkload(
        arrival_s=(0.0, 0.045, 0.07, 0.1),
        prompt_tokens=(150, 40, 70, 20),
        output_tokens=(12, 8, 1, 10),
    )
    res = simulate_serving(chain_config(w, token_budget=budget), np.random.default_rng(3))
    req, it = res.requests_spec, res.iterations_spec
    arrival, prompt = req["arrival_s"].to_list(), req["prompt_tokens"].to_list()
    out, n = req["output_tokens"].to_list(), len(req)
    t, nxt, ctx_sum, taken = 0.0, 0, 0, 0
    waiting: deque[int] = deque()
    prefilling: list[list[int]] = []  # request, tokens left, tokens done
    running: dict[int, int] = {}
    first, finish = [np.nan] * n, [np.nan] * n
    for row in it.itertuples():
        if not running and not waiting and not prefilling:
            t = max(t, arrival[nxt])
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        assert close(row.start_s, t)
        b, drafted = len(running), int(row.draft_tokens)
        assert row.batch == b and drafted <= b * gamma
        room = budget - (b + drafted)
        free, started = room - sum(p[1] for p in prefilling), 0
        while free > 0 and waiting and b + len(prefilling) < cap:
            i = waiting.popleft()
            prefilling.append([i, prompt[i], 0])
            free, started = free - prompt[i], started + 1
        assert row.admitted == started
        sizes, at = [], []
        for p in prefilling:
            if room <= 0:
                break
            sizes.append(min(p[1], room))
            at.append(p[2])
            room -= sizes[-1]
        assert row.prefill_tokens == sum(sizes)
        sums = decode_sums(b, drafted, ctx_sum, gamma)
        if sums is None:
            taken, t = taken + 1, row.end_s
        else:
            assert close(row.prefill_s, chunk_s(b, sums, ctx_sum, sizes, at))
            cost = chain_decode(gamma)(row, b, ctx_sum) if b else (0.0, 0.0)
            assert cost is not None and close(row.draft_s, cost[1])
            t += row.prefill_s + cost[0] + cost[1]
        assert close(row.end_s, t)
        ctx_sum += row.emitted
        alone = b == 1 and running[next(iter(running))] > 0
        if not alone:
            running = dict.fromkeys(running, 0)
        for i in list(running):
            if (alone and running[i] + row.emitted == out[i]) or (
                not alone and finish_at(req, i, row.end_s)
            ):
                finish[i] = t
                ctx_sum -= prompt[i] + out[i] - 1  # the cached tokens
                del running[i]
            elif alone:
                running[i] += row.emitted
        for p, s in zip(prefilling, sizes, strict=False):
            p[1], p[2] = p[1] - s, p[2] + s
        for i, left, _ in prefilling:
            if left == 0:
                first[i] = t
                if out[i] == 1:
                    finish[i] = t
                else:
                    running[i] = 1
                    ctx_sum += prompt[i]  # its first token is not cached yet
        prefilling = [p for p in prefilling if p[1] > 0]
    assert not running and not prefilling and nxt == n
    assert taken <= 0.25 * len(it)
    np.testing.assert_allclose(req["first_token_s"], first, rtol=REL)
    np.testing.assert_allclose(req["finish_s"], finish, rtol=REL)
