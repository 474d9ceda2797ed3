"""Slow reference: paged serving with recompute preemption, replayed pass by pass.

The serving tables do not record each sequence's accepted tokens, so this replay makes
them known: at alpha = 0 every draft is rejected and each sequence emits exactly one token
per pass (its drafted tokens still cost). Every sequence's context is then known, and with
it the paged cache (blocks of 16 tokens): what each sequence holds, whom a pass that does
not fit preempts (the latest arrival first, as few as free enough, the earliest always
kept), what a preempted request needs to come back (its context's blocks) and rebuilds
(its context less one token, prefilled again beside the fresh prompts). Every iteration's
start and end, its preemptions, every request's first token, finish and recomputed
tokens are compared to 1e-9.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment, PassShape, pass_cost
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.workload.arrivals import TraceWorkload

from ..reference import HW, REL, SMALL, TARGET, close, prefill_s

pytestmark = pytest.mark.slow

BLOCK, GAMMA, CAP = 16, 3, 4


def blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def decode_s(ctx: list[int], g: list[int]) -> tuple[float, float]:
    """Verify gamma_i + 1 positions after each context; draft step j over the sequences
    drafting more than j, each after its context and j drafted tokens."""
    ver = pass_cost(TARGET, HW, PassShape.chain(context=ctx, new=[x + 1 for x in g])).time_s
    draft = 0.0
    for j in range(max(g)):
        c = [c + j for c, x in zip(ctx, g, strict=True) if x > j]
        draft += pass_cost(SMALL, HW, PassShape.chain(context=c, new=1)).time_s
    return ver, draft


def test_paged_serving_with_recompute_preemption() -> None:
    w = TraceWorkload(
        arrival_s=(0.0, 0.001, 0.002, 0.003, 0.3),
        prompt_tokens=(40, 60, 35, 50, 20),
        output_tokens=(30, 24, 28, 12, 16),
    )
    cfg = ServingConfig(
        workload=w,
        cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=SMALL),
        acceptance=IIDAcceptance(alpha=0.0),
        policy=FixedGamma(gamma=GAMMA),
        max_batch=CAP,
        max_gamma=GAMMA,
        kv_capacity_tokens=12 * BLOCK,
        kv_block_tokens=BLOCK,
        preemption="recompute",
        plain_twin=False,
    )
    res = simulate_serving(cfg, np.random.default_rng(1))
    req, it = res.requests_spec, res.iterations_spec
    arrival, prompt = req["arrival_s"].to_list(), req["prompt_tokens"].to_list()
    out, n = req["output_tokens"].to_list(), len(req)
    need = [blocks(p + GAMMA + 1) for p in prompt]
    ctx: dict[int, int] = {}  # running request: its context (prompt and emitted tokens)
    saved: dict[int, int] = {}  # preempted request: its context when preempted
    waiting: deque[int] = deque()
    first, finish, rebuilt = [np.nan] * n, [np.nan] * n, [0] * n
    t, nxt, preempted = 0.0, 0, 0
    for row in it.itertuples():
        if not ctx and not waiting:
            t = max(t, arrival[nxt])
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        assert close(row.start_s, t)
        admitted: list[int] = []
        if waiting and len(ctx) < CAP:
            used = sum(blocks(c - 1) for c in ctx.values())
            while waiting and len(ctx) + len(admitted) < CAP:
                if used + need[waiting[0]] > 12:
                    break
                used += need[waiting[0]]
                admitted.append(waiting.popleft())
        assert row.admitted == len(admitted)
        fresh = [i for i in admitted if i not in saved]
        back = [i for i in admitted if i in saved]
        tokens = [prompt[i] for i in fresh] + [saved[i] - 1 for i in back]
        t += prefill_s(tokens, (TARGET, SMALL)) if tokens else 0.0
        for i in fresh:
            first[i] = t
            if out[i] == 1:
                finish[i] = t
            else:
                ctx[i] = prompt[i] + 1
        for i in back:
            ctx[i] = saved.pop(i)
        if ctx:
            g = {i: min(GAMMA, out[i] - (c - prompt[i]) - 1) for i, c in ctx.items()}
            total = sum(blocks(c + g[i]) for i, c in ctx.items())
            victims: list[int] = []
            for i in sorted(ctx, reverse=True)[: len(ctx) - 1]:  # the latest arrival first
                if total <= 12:
                    break
                total -= blocks(ctx[i] + g[i])
                victims.append(i)
            assert row.preempted == len(victims)
            preempted += len(victims)
            for i in victims:
                saved[i] = ctx.pop(i)
                need[i] = blocks(saved[i])
                rebuilt[i] += saved[i] - 1
            for i in sorted(victims, reverse=True):
                waiting.appendleft(i)
            rows = sorted(ctx)
            ver, draft = decode_s([ctx[i] - 1 for i in rows], [g[i] for i in rows])  # cached
            assert row.batch == len(rows) and row.draft_tokens == sum(g[i] for i in rows)
            assert close(row.draft_s, draft)
            t += ver + draft
            for i in rows:  # alpha = 0: one token each
                ctx[i] += 1
                if ctx[i] - prompt[i] == out[i]:
                    finish[i] = t
                    del ctx[i]
        assert close(row.end_s, t)
    assert not ctx and not waiting and not saved and nxt == n
    assert preempted > 0 and (req["preemptions"] > 0).sum() >= 1
    np.testing.assert_allclose(req["first_token_s"], first, rtol=REL)
    np.testing.assert_allclose(req["finish_s"], finish, rtol=REL)
    np.testing.assert_array_equal(req["recomputed_tokens"], rebuilt)
