"""The pools' memory and schedulers: a paged decode pool whose preempted requests recompute
their caches on the decode replica, recomputed by hand pass by pass; the admission pass's
price beside the first steps; chunked prefill and paging on the prefill pool against a
colocated run of one-token requests; and the errors for what is not modelled."""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Sequence

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment, PassShape
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.disagg import AfterTransfer, DisaggConfig, KVLink, simulate_disaggregated
from specsim.sim.disagg.from_toml import disagg_from_dict
from specsim.sim.workload.arrivals import TraceWorkload

from ..reference import HW as HW_CARD
from ..reference import REL, SMALL, TARGET
from .test_disagg_reference import GAMMA, LINK, decode_pass, link_queue, prefill_pool, t_of

WORKLOAD = TraceWorkload(
    arrival_s=(0.0, 0.002, 0.004, 0.35),
    prompt_tokens=(200, 180, 160, 90),
    output_tokens=(40, 35, 30, 12),
)
BLOCK, CAPACITY = 16, 40 * 16  # 40 blocks of 16 tokens: the third request gets preempted


def config(**kw: object) -> DisaggConfig:
    base: dict[str, object] = dict(
        workload=WORKLOAD,
        prefill_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW_CARD)),
        decode_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW_CARD), draft=SMALL),
        acceptance=IIDAcceptance(alpha=1.0),  # every draft accepted: known emitted counts
        policy=FixedGamma(gamma=GAMMA),
        link=LINK,
        max_batch=3,
        max_gamma=GAMMA,
        kv_block_tokens=BLOCK,
        kv_capacity_tokens=CAPACITY,
        plain_twin=False,
    )
    base.update(kw)
    return DisaggConfig(**base)  # type: ignore[arg-type]


def blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def admission_pass(fresh: list[int], rebuilt: list[int]) -> float:
    """One target pass: a position after each fresh prompt (the first decode step) and a
    chain from an empty cache for each recomputed cache; then the draft's prefill of both."""
    new, ctx = [1] * len(fresh) + rebuilt, fresh + [0] * len(rebuilt)
    target = t_of(TARGET, PassShape.chain(context=ctx, new=new))
    return target + t_of(SMALL, PassShape.prefill(fresh + rebuilt))


def paged_decode_pool(
    arrive: Sequence[float], prompts: Sequence[int], outs: Sequence[int], *, most: int = 3
) -> tuple[dict[int, float], dict[int, float], dict[int, int]]:
    """One decode replica with a paged cache, every draft accepted, requests numbered in
    their order of arrival there: (first token, finish, recomputed tokens) by request."""
    cap = CAPACITY // BLOCK
    n = len(arrive)
    need = [blocks(p + GAMMA + 1) for p in prompts]  # a prompt and one pass at max_gamma
    waiting: deque[int] = deque()
    resume: dict[int, tuple[int, int]] = {}  # preempted: (context, tokens left)
    first: dict[int, float] = {}
    finish: dict[int, float] = {}
    recomputed = dict.fromkeys(range(n), 0)
    running: list[list[int]] = []  # [request, context (prompt + emitted), tokens left]
    t, k = 0.0, 0
    while k < n or running or waiting:
        if not running and not waiting:
            t = max(t, arrive[k])
        while k < n and arrive[k] <= t:
            waiting.append(k)
            k += 1
        admitted: list[int] = []
        used = sum(blocks(c - 1) for _, c, _ in running)
        while waiting and len(running) + len(admitted) < most and used + need[waiting[0]] <= cap:
            used += need[waiting[0]]
            admitted.append(waiting.popleft())
        fresh = [r for r in admitted if r not in resume]
        back = [r for r in admitted if r in resume]
        pre = 0.0
        if admitted:
            pre = admission_pass([prompts[r] for r in fresh], [resume[r][0] - 1 for r in back])
        for r in fresh:
            first[r] = t + pre
            running.append([r, prompts[r] + 1, outs[r] - 1])
        for r in back:
            ctx, left = resume.pop(r)
            running.append([r, ctx, left])
        gam = [min(GAMMA, left - 1) for _, _, left in running]
        excess = sum(blocks(c + g) for (_, c, _), g in zip(running, gam, strict=True)) - cap
        victims: list[int] = []  # latest arrival first, the fewest that make room
        for i in sorted(range(len(running)), key=lambda i: -running[i][0])[:-1]:
            if excess <= 0:
                break
            victims.append(i)
            excess -= blocks(running[i][1] + gam[i])
        out = []
        for i in sorted(victims, reverse=True):
            r, ctx, left = running.pop(i)
            gam.pop(i)
            resume[r], need[r] = (ctx, left), blocks(ctx)
            recomputed[r] += ctx - 1
            out.append(r)
        for r in sorted(out, reverse=True):  # back to the front, earliest arrival first
            waiting.appendleft(r)
        t += pre + decode_pass([c - 1 for _, c, _ in running], gam)  # the cached tokens
        for seq, g in zip(running, gam, strict=True):
            seq[1] += g + 1
            seq[2] -= g + 1
            if seq[2] == 0:
                finish[seq[0]] = t
        running = [s for s in running if s[2] > 0]
    return first, finish, recomputed


def reference() -> dict[str, list[float]]:
    """The whole run by hand, in the workload's order."""
    arrival, prompts = list(WORKLOAD.arrival_s), list(WORKLOAD.prompt_tokens)
    outs = list(WORKLOAD.output_tokens)
    ready = prefill_pool(arrival, prompts, most=3)
    arrive = link_queue(ready, prompts, hop=True)
    order = sorted(range(len(arrive)), key=lambda j: arrive[j])
    first, finish, rec = paged_decode_pool(
        [arrive[j] for j in order], [prompts[j] for j in order], [outs[j] for j in order]
    )
    back = {j: i for i, j in enumerate(order)}
    return {
        "kv_ready_s": arrive,
        "first_token_s": [first[back[j]] for j in range(len(order))],
        "finish_s": [finish[back[j]] for j in range(len(order))],
        "recomputed_tokens": [float(rec[back[j]]) for j in range(len(order))],
    }


@pytest.mark.slow
def test_paged_decode_pool_equals_the_hand_recomputation() -> None:
    """A request preempted on the decode pool recomputes its prompt and emitted tokens
    there, in the admission pass beside the first steps; the timeline is the hand's."""
    res = simulate_disaggregated(config(), np.random.default_rng(3))
    req = res.requests()
    want = reference()
    assert sum(want["recomputed_tokens"]) > 0  # the case exercises the recompute path
    assert int(res.decode.iterations_spec["preempted"].sum()) >= 1
    for key, values in want.items():
        np.testing.assert_allclose(req[key].to_numpy(dtype=float), values, rtol=REL, err_msg=key)


def test_recompute_priced_as_a_prefill_not_as_a_first_step() -> None:
    """The admission pass with a recompute: the first steps' positions and the rebuilt
    chains in one target pass, the draft's prefill over both (to 1e-9 against the cost
    model's own passes); a rebuild priced as a first step would be far cheaper."""
    cost = AfterTransfer(config().decode_cost)
    prompts, rebuilt = np.array([200, 90]), np.array([230])
    got = cost.prefill_resumed(prompts, rebuilt, draft=True).time_s
    want = admission_pass([200, 90], [230])
    assert math.isclose(got, want, rel_tol=REL)
    as_first_step = cost.prefill(np.array([200, 90, 230]), draft=True).time_s
    assert got > as_first_step * 1.05
    no_draft = cost.prefill_resumed(prompts, rebuilt, draft=False).time_s
    assert math.isclose(
        no_draft,
        admission_pass([200, 90], [230]) - t_of(SMALL, PassShape.prefill([200, 90, 230])),
        rel_tol=REL,
    )


def test_paging_that_never_binds_changes_nothing() -> None:
    """With a cache no run fills, the paged decode pool's timeline is the reserved one's."""
    roomy = dict(kv_capacity_tokens=100_000)
    paged = simulate_disaggregated(config(**roomy), np.random.default_rng(3)).requests()
    whole = simulate_disaggregated(
        config(kv_block_tokens=None, **roomy), np.random.default_rng(3)
    ).requests()
    for key in ("first_token_s", "finish_s"):
        np.testing.assert_array_equal(paged[key], whole[key])
    assert (paged["preemptions"] == 0).all()


def test_chunked_prefill_pool_equals_a_colocated_chunked_run_of_one_token_requests() -> None:
    """The prefill pool under a token budget (paged too) is the serving engine's chunked
    prefill of one-token requests: each prompt's KV is ready when its last chunk ends."""
    budget = 128
    res = simulate_disaggregated(
        config(prefill_token_budget=budget, prefill_kv_block_tokens=BLOCK),
        np.random.default_rng(3),
    )
    one = TraceWorkload(
        arrival_s=WORKLOAD.arrival_s,
        prompt_tokens=WORKLOAD.prompt_tokens,
        output_tokens=(1,) * len(WORKLOAD.arrival_s),
    )
    colocated = ServingConfig(
        workload=one,
        cost=config().prefill_cost,
        acceptance=IIDAcceptance(alpha=0.0),
        policy=FixedGamma(gamma=0),
        max_batch=3,
        max_gamma=0,
        plain_twin=False,
        token_budget=budget,
        kv_block_tokens=BLOCK,
    )
    col = simulate_serving(colocated, np.random.default_rng(0)).requests_spec
    req = res.requests()
    np.testing.assert_array_equal(req["prefill_end_s"], col["first_token_s"])
    # The chunks spread each prompt over iterations: the first prompt's KV is later than
    # its whole-prompt pass's, and every chunked iteration holds at most the budget.
    whole = simulate_disaggregated(config(), np.random.default_rng(3)).requests()
    assert req["prefill_end_s"].iloc[0] > whole["prefill_end_s"].iloc[0]
    assert int(res.prefill.iterations_spec["prefill_tokens"].max()) <= budget


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"token_budget": 512}, r"prefill_token_budget.*decode pool prefills nothing"),
        ({"replicas": 2}, r"\['replicas'\] with \[disaggregation\]"),
    ],
)
def test_toml_refuses_what_the_pools_do_not_model(change: dict[str, object], message: str) -> None:
    data = {**TOML, **change}
    with pytest.raises(ValueError, match=message):
        disagg_from_dict(data)


def test_toml_paging_and_chunking_reach_the_pools() -> None:
    data = {
        **TOML,
        "kv_block_tokens": 16,
        "preemption": "recompute",
        "disaggregation": {
            **TOML["disaggregation"],  # type: ignore[dict-item]
            "prefill_kv_block_tokens": 32,
            "prefill_token_budget": 1024,
        },
    }
    cfg = disagg_from_dict(data).config
    assert (cfg.kv_block_tokens, cfg.prefill_kv_block_tokens) == (16, 32)
    pre = cfg.prefill_serving()
    assert (pre.token_budget, pre.kv_block_tokens) == (1024, 32)
    assert cfg.decode_serving().token_budget is None


def test_a_prefill_budget_below_its_batch_names_the_pool() -> None:
    with pytest.raises(ValueError, match=r"disaggregation prefill pool: token_budget: 2 tokens"):
        config(prefill_token_budget=2)


def test_swap_on_cards_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"preemption: 'swap'"):
        config(preemption="swap")


def test_replace_keeps_the_pools_checks() -> None:
    with pytest.raises(ValueError, match="kv_block_tokens"):
        dataclasses.replace(config(), kv_block_tokens=0)


TOML = {
    "mode": "serving",
    "seed": 3,
    "max_gamma": 4,
    "max_batch": 16,
    "workload": {
        "kind": "poisson",
        "rate_per_s": 4.0,
        "requests": 20,
        "prompt_tokens": [64, 512],
        "output_tokens": [16, 64],
    },
    "acceptance": {"kind": "iid", "alpha": 0.7},
    "policy": {"kind": "fixed", "gamma": 3},
    "deployment": {"target": "llama-2-7b", "hardware": "h100-sxm"},
    "cost": {"kind": "cards", "draft": "llama-68m"},
    "disaggregation": {"prefill_replicas": 1, "decode_replicas": 2, "link": "interconnect"},
}


def test_paged_decode_pool_equals_a_colocated_paged_run_fed_at_prefill_ends() -> None:
    """Ideal link, P = D = 1: the paged decode pool, preemptions and recomputes included, is
    the colocated paged engine on the decode pool's source, its requests arriving when their
    prefills end (the same acceptance draws: the workload's sample comes first)."""
    ideal = KVLink(bandwidth=math.inf, latency_s=0.0)
    res = simulate_disaggregated(config(link=ideal), np.random.default_rng(3))
    req = res.requests()
    assert int(req["preemptions"].sum()) > 0
    order = np.argsort(req["kv_ready_s"].to_numpy(), kind="stable")
    fed = TraceWorkload(
        arrival_s=tuple(req["kv_ready_s"].to_numpy()[order].tolist()),
        prompt_tokens=tuple(req["prompt_tokens"].to_numpy()[order].tolist()),
        output_tokens=tuple(req["output_tokens"].to_numpy()[order].tolist()),
    )
    colocated = ServingConfig(
        workload=fed,
        cost=AfterTransfer(config().decode_cost),
        acceptance=IIDAcceptance(alpha=1.0),
        policy=FixedGamma(gamma=GAMMA),
        max_batch=3,
        max_gamma=GAMMA,
        plain_twin=False,
        kv_block_tokens=BLOCK,
        kv_capacity_tokens=CAPACITY,
    )
    rng = np.random.default_rng(3)
    WORKLOAD.sample(rng)
    col = simulate_serving(colocated, rng).requests_spec
    for key in ("first_token_s", "finish_s", "recomputed_tokens"):
        np.testing.assert_array_equal(req[key].to_numpy()[order], col[key].to_numpy(), key)
