"""Replicas behind a router (specsim.sim.serving.router)."""

import dataclasses
from functools import partial

import numpy as np
import pandas as pd
import pytest
from serving_cases import card_cost, serving_config

from specsim.acceptance.processes import IIDAcceptance
from specsim.sim import CardCost, PoissonWorkload, TraceWorkload, simulate_serving
from specsim.sim.serving.router import ROUTERS, RoundRobin, replica_metrics, routing_rule


@pytest.fixture(scope="module")
def card() -> CardCost:
    return card_cost()


config = partial(serving_config, rate_per_s=40.0, max_batch=8)


@pytest.mark.parametrize("router", ROUTERS)
def test_one_replica_is_todays_engine_whatever_the_router(card, router) -> None:
    a = simulate_serving(config(card), np.random.default_rng(7))
    b = simulate_serving(config(card, router=router), np.random.default_rng(7))
    pd.testing.assert_frame_equal(a.requests_spec, b.requests_spec)
    pd.testing.assert_frame_equal(a.iterations_spec, b.iterations_spec)
    pd.testing.assert_frame_equal(a.iterations_plain, b.iterations_plain)


def test_round_robin_is_independent_replicas_on_every_kth_request(card) -> None:
    """Routed before the run, each replica serves its share alone: its tables are a single
    replica's on that share (acceptance 1 makes every draw the same whatever the seed)."""
    table = config(card).workload.sample(np.random.default_rng(0))
    trace = TraceWorkload(**{c: tuple(table[c].tolist()) for c in table.columns})
    full = config(card, workload=trace, acceptance=IIDAcceptance(alpha=1.0), replicas=3)
    r = simulate_serving(full, np.random.default_rng(1))
    for k in range(3):
        share = table.iloc[k::3].reset_index(drop=True)
        alone = dataclasses.replace(
            full,
            replicas=1,
            workload=TraceWorkload(**{c: tuple(share[c].tolist()) for c in share.columns}),
        )
        one = simulate_serving(alone, np.random.default_rng(1))
        mine = r.requests_spec[r.requests_spec["replica"] == k].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine.drop(columns="replica"), one.requests_spec)
        its = r.iterations_spec[r.iterations_spec["replica"] == k].reset_index(drop=True)
        pd.testing.assert_frame_equal(its.drop(columns="replica"), one.iterations_spec)


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize(
    "engine", [{}, {"kv_block_tokens": 16, "kv_capacity_tokens": 1200, "token_budget": 64}]
)
def test_every_request_is_served_once_and_the_parts_add_up(card, router, engine) -> None:
    r = simulate_serving(
        config(card, replicas=4, router=router, **engine), np.random.default_rng(3)
    )
    req, it = r.requests_spec, r.iterations_spec
    assert req["finish_s"].notna().all()
    assert set(req["replica"]) <= {0, 1, 2, 3} and set(it["replica"]) <= {0, 1, 2, 3}
    assert int(it["emitted"].sum()) == int((req["output_tokens"] - 1).sum())
    per = replica_metrics(r)
    assert per["requests"].sum() == len(req) and per["tokens"].sum() == r.metrics()["tokens"]
    # A replica never runs two iterations at once.
    for _, rows in it.groupby("replica"):
        assert (rows["start_s"].to_numpy()[1:] >= rows["end_s"].to_numpy()[:-1]).all()


def test_state_aware_routers_beat_round_robin_on_uneven_requests(card) -> None:
    """Outputs of 8 to 400 tokens: round-robin stacks long requests on a replica whatever its
    backlog; the state-aware rules send work where there is the least."""
    uneven = PoissonWorkload(
        rate_per_s=60.0, requests=120, prompt_tokens=(64, 256), output_tokens=(8, 400)
    )
    p99 = {
        router: simulate_serving(
            config(card, workload=uneven, replicas=4, router=router, max_batch=2, plain_twin=False),
            np.random.default_rng(11),
        ).metrics()["e2e_p99_s"]
        for router in ROUTERS
    }
    assert p99["least-outstanding"] < p99["round-robin"]
    assert p99["join-shortest-queue"] < p99["round-robin"]


class Load:
    def __init__(self, outstanding: int, queued: int) -> None:
        self.outstanding, self.queued = outstanding, queued


def test_the_routing_rules() -> None:
    loads = [Load(3, 1), Load(2, 2), Load(2, 0), Load(5, 0)]
    rr, lo, jsq = (routing_rule(name) for name in ROUTERS)
    assert [rr.route(i, loads) for i in range(5)] == [0, 1, 2, 3, 0]
    assert lo.route(0, loads) == 1  # ties: the lowest index
    assert jsq.route(0, loads) == 2  # fewest queued, then outstanding
    assert rr.static and not getattr(lo, "static", False)  # only round-robin routes ahead


class Alternate:
    """A user's rule, one class: even requests to replica 0, odd ones to the last, asked at
    each arrival (not static)."""

    def __init__(self) -> None:
        self.asked = 0

    def route(self, request, loads) -> int:
        self.asked += 1
        return 0 if request % 2 == 0 else len(loads) - 1


def test_a_router_is_one_class_with_route(card) -> None:
    rule = Alternate()
    r = simulate_serving(config(card, replicas=3, router=rule), np.random.default_rng(5))
    req = r.requests_spec
    assert rule.asked == 2 * len(req)  # every arrival, in the run and its plain twin
    assert (req["replica"].to_numpy() == np.where(np.arange(len(req)) % 2 == 0, 0, 2)).all()
    # The shipped rule as an instance is the rule by name, bit for bit (static: routed ahead).
    a = simulate_serving(config(card, replicas=3), np.random.default_rng(5))
    b = simulate_serving(config(card, replicas=3, router=RoundRobin()), np.random.default_rng(5))
    pd.testing.assert_frame_equal(a.requests_spec, b.requests_spec)
    pd.testing.assert_frame_equal(a.iterations_spec, b.iterations_spec)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(replicas=0), r"replicas: expected an integer >= 1, got 0 \(a router needs a replica"),
        (dict(replicas=-2), r"replicas: .*got -2"),
        (dict(replicas=2.0), r"replicas: .*got 2.0"),
        (dict(router="random"), r"router: expected one of \['round-robin'"),
        (dict(router=object()), r"router: expected one of .* or an object with route"),
    ],
)
def test_bad_replica_configs_name_the_field(card, kw, message) -> None:
    with pytest.raises(TypeError if kw.get("replicas") == 2.0 else ValueError, match=message):
        config(card, **kw)


def test_a_single_replica_run_has_no_per_replica_table(card) -> None:
    r = simulate_serving(config(card, plain_twin=False), np.random.default_rng(0))
    with pytest.raises(ValueError, match="single-replica"):
        replica_metrics(r)
