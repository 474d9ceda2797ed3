"""The paged KV cache (specsim.sim.serving.paged): the reservation model's tables when memory never
binds, bounded blocks, preemption latest arrival first, recomputed tokens counted."""

import dataclasses
from functools import partial

import numpy as np
import pandas as pd
import pytest
from serving_cases import card_cost, serving_config

from specsim.acceptance.processes import IIDAcceptance
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma, HeuristicPlusTwoMinusOne, LoadAdaptive
from specsim.sim import CardCost, PoissonWorkload, simulate_serving
from specsim.sim.results.records import ITERATION_COLUMNS
from specsim.sim.serving.batch import Batch, Requests, draw_requests
from specsim.sim.serving.paged import EXTRA_COLUMNS, Paging


@pytest.fixture(scope="module")
def card() -> CardCost:
    return card_cost()


config = partial(serving_config, rate_per_s=30.0)


POLICIES = {
    "fixed": FixedGamma(gamma=3),  # the fast path and, reserved, the drain
    "heuristic": HeuristicPlusTwoMinusOne(initial=3, max_gamma=8),  # per sequence
    "load-adaptive": LoadAdaptive(alpha=0.7, max_gamma=8),  # batch-wide
}


@pytest.mark.parametrize("capacity", [None, 20_000], ids=["card-memory", "never-binding"])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_paging_that_never_binds_is_the_reservation_model(card, name, capacity) -> None:
    """With room for every request at once (60 x at most 256 + 64 + 9 tokens < 20,000; the
    card holds 123,470), every column of the reservation model's request and iteration
    tables, of the run and of its plain twin, is equal bit for bit; the paged run's own
    columns say nothing was preempted, recomputed or swapped."""
    reserved = config(card, policy=POLICIES[name], kv_capacity_tokens=capacity)
    paged = dataclasses.replace(reserved, kv_block_tokens=16)
    a = simulate_serving(reserved, np.random.default_rng(5))
    b = simulate_serving(paged, np.random.default_rng(5))
    for mine, theirs in (
        (a.iterations_spec, b.iterations_spec),
        (a.iterations_plain, b.iterations_plain),
    ):
        assert list(mine.columns) == ITERATION_COLUMNS
        assert list(theirs.columns) == ITERATION_COLUMNS + list(EXTRA_COLUMNS)
        pd.testing.assert_frame_equal(mine, theirs[ITERATION_COLUMNS])
        assert (theirs[["preempted", "recomputed_tokens", "swap_s"]] == 0).all().all()
    for mine, theirs in ((a.requests_spec, b.requests_spec), (a.requests_plain, b.requests_plain)):
        pd.testing.assert_frame_equal(mine, theirs[list(mine.columns)])
        assert (theirs["preemptions"] == 0).all() and (theirs["recomputed_tokens"] == 0).all()
    assert a.metrics() == b.metrics()


@pytest.fixture(scope="module")
def tight(card):
    """A cache of 50 blocks of 16 tokens at 30 requests/s: preemption is routine."""
    cfg = config(card, kv_block_tokens=16, kv_capacity_tokens=800)
    return cfg, simulate_serving(cfg, np.random.default_rng(1))


def test_blocks_never_exceed_the_cache_and_every_request_finishes(tight) -> None:
    cfg, r = tight
    for req, it in ((r.requests_spec, r.iterations_spec), (r.requests_plain, r.iterations_plain)):
        assert it["kv_blocks"].max() <= 800 // 16
        assert req["finish_s"].notna().all()
        assert (req["finish_s"] >= req["first_token_s"]).all()
        # Tokens are conserved: each request's first token from its prefill, the rest from
        # the passes, however often it was preempted.
        assert int(it["emitted"].sum()) == int((req["output_tokens"] - 1).sum())
        # Every prompt is prefilled once, and every recomputed token once more.
        assert (
            it["prefill_tokens"].sum()
            == req["prompt_tokens"].sum() + req["recomputed_tokens"].sum()
        )


def test_preemptions_and_recomputed_tokens_are_recorded_as_discarded_work(tight) -> None:
    cfg, r = tight
    req, it = r.requests_spec, r.iterations_spec
    assert it["preempted"].sum() > 0  # the test is about something
    assert it["preempted"].sum() == req["preemptions"].sum()
    assert it["recomputed_tokens"].sum() == req["recomputed_tokens"].sum()
    # A preempted sequence had its prompt cached at least: at least that much is recomputed.
    hit = req["preemptions"] > 0
    assert (req.loc[hit, "recomputed_tokens"] >= req.loc[hit, "prompt_tokens"]).all()
    assert (req.loc[~hit, "recomputed_tokens"] == 0).all()
    assert (it["swap_s"] == 0).all()


def test_what_preemption_costs_against_memory_that_never_binds(card, tight) -> None:
    """The difference the limit makes, the same seed: the recomputing prefills cost time, and
    the latency of the requests is no better than with memory to spare."""
    cfg, r = tight
    free = simulate_serving(
        dataclasses.replace(cfg, kv_capacity_tokens=None), np.random.default_rng(1)
    )
    assert r.iterations_spec["prefill_s"].sum() > free.iterations_spec["prefill_s"].sum()
    assert r.metrics()["e2e_p99_s"] >= free.metrics()["e2e_p99_s"]
    assert r.metrics()["mean_batch"] < free.metrics()["mean_batch"]


def test_victims_are_the_latest_arrivals() -> None:
    table = pd.DataFrame(
        {"arrival_s": [0.0, 1.0, 2.0, 3.0], "prompt_tokens": [32] * 4, "output_tokens": [40] * 4}
    )
    draws = draw_requests(
        IIDAcceptance(alpha=0.5),
        table["output_tokens"].to_numpy(),
        max_gamma=4,
        rng=np.random.default_rng(0),
    )
    req = Requests.build(table, draws, max_gamma=4)
    paging = Paging.build(req, block=16, capacity=16 * 12, max_gamma=4, swap=None)
    batch = Batch(4)
    batch.add(np.array([2, 0, 3, 1]), req)  # contexts 33: 3 blocks each for a pass of 4 drafts
    gamma = np.full(4, 4)
    rows, pre, total = paging.victims(batch, gamma, None)
    assert (paging.pass_blocks(batch, gamma) == 3).all() and total == 12 and rows.size == 0
    paging.capacity = 7  # room for two: the two latest arrivals (requests 3 and 2) go
    rows, pre, total = paging.victims(batch, gamma, None)
    assert sorted(batch.rid[rows].tolist()) == [2, 3] and pre == [] and total == 6
    paging.capacity = 1  # the earliest arrival always stays (it fits alone, checked at build)
    rows, _, _ = paging.victims(batch, gamma, None)
    assert sorted(batch.rid[rows].tolist()) == [1, 2, 3]


class HostLinkCost(CardCost):
    """A card with a host link, for the swap path: 64 GB/s a direction, PCIe 5.0 x16's
    rate (PCI-SIG, PCI Express Base Specification 5.0, 32 GT/s a lane)."""

    host_link_bandwidth: float = 64e9


def test_swap_needs_a_host_link_and_then_recomputes_nothing(card) -> None:
    with pytest.raises(ValueError, match="preemption: 'swap'.*host_link_bandwidth"):
        config(card, kv_block_tokens=16, kv_capacity_tokens=800, preemption="swap")
    linked = HostLinkCost(
        deployment=Deployment(target=card.target, hardware=card.hardware), draft=card.draft
    )
    cfg = config(linked, kv_block_tokens=16, kv_capacity_tokens=800, preemption="swap")
    r = simulate_serving(cfg, np.random.default_rng(1))
    it, req = r.iterations_spec, r.requests_spec
    assert it["preempted"].sum() > 0 and it["swap_s"].sum() > 0
    assert it["recomputed_tokens"].sum() == 0 and req["recomputed_tokens"].sum() == 0
    assert req["finish_s"].notna().all() and it["kv_blocks"].max() <= 50
    assert int(it["emitted"].sum()) == int((req["output_tokens"] - 1).sum())
    with pytest.raises(ValueError, match="'swap' with a token_budget is not modelled"):
        dataclasses.replace(cfg, token_budget=64)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(kv_block_tokens=0), r"kv_block_tokens: expected an integer >= 1, got 0"),
        (dict(kv_block_tokens=True), r"kv_block_tokens: expected an integer >= 1, got True"),
        (dict(kv_block_tokens=16, preemption="drop"), r"preemption: expected one of"),
    ],
)
def test_bad_paging_configs_name_the_field(card, kw, message) -> None:
    with pytest.raises(TypeError if kw["kv_block_tokens"] is True else ValueError, match=message):
        config(card, **kw)


def test_a_cache_that_can_never_admit_or_hold_a_request_says_so(card) -> None:
    never = config(card, kv_block_tokens=16, kv_capacity_tokens=256)  # < 256 prompt + 9
    with pytest.raises(ValueError, match=r"can never admit request \d+"):
        simulate_serving(never, np.random.default_rng(1))
    long = config(
        card,
        kv_block_tokens=16,
        kv_capacity_tokens=288,
        workload=PoissonWorkload(rate_per_s=1.0, requests=3, prompt_tokens=200, output_tokens=200),
    )
    with pytest.raises(ValueError, match=r"grows to 399 tokens.*preemption cannot make room"):
        simulate_serving(long, np.random.default_rng(1))


def test_a_swapped_request_pays_the_link_out_and_back_in(card) -> None:
    # Under swap preemption nothing is recomputed, so with every prompt P tokens long an
    # iteration's prefill time is its fresh prompts' prefill pass (target and draft) plus
    # the host-link copies: each preempted request's cache goes out (the swap_s column)
    # and, before it runs again, the same tokens come back in, so over a run where every
    # request finishes the copies take twice the swap-out time.
    P = 128
    linked = HostLinkCost(
        deployment=Deployment(target=card.target, hardware=card.hardware), draft=card.draft
    )
    cfg = config(
        linked,
        prompt_tokens=(P, P),
        kv_block_tokens=16,
        kv_capacity_tokens=800,
        preemption="swap",
    )
    r = simulate_serving(cfg, np.random.default_rng(1))
    it, req = r.iterations_spec, r.requests_spec
    assert req["finish_s"].notna().all() and it["preempted"].sum() > 0
    assert set(it["prefill_tokens"].unique()) <= {P * k for k in range(cfg.max_batch + 1)}
    fresh = 0.0
    for tokens in it["prefill_tokens"].tolist():
        if tokens:
            prompts = np.full(tokens // P, P, dtype=np.int64)
            fresh += linked.prefill(prompts, draft=True).time_s
    want = fresh + 2.0 * float(it["swap_s"].sum())
    assert float(it["prefill_s"].sum()) == pytest.approx(want, rel=1e-9)
