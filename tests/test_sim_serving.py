import numpy as np
import pytest

from specsim.acceptance import IIDAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import step_cost
from specsim.policies import FixedGamma, LoadAdaptive
from specsim.sim import (
    CardCost,
    PlainCost,
    PoissonWorkload,
    ServingConfig,
    TraceWorkload,
    simulate_serving,
)


@pytest.fixture(scope="module")
def card() -> CardCost:
    return CardCost(target=load_model("llama-2-7b"), draft=load_model("llama-68m"),
                    hardware=load_hardware("a100-80gb"))  # fmt: skip


def config(cost, **kw):
    base = dict(
        workload=PoissonWorkload(rate_per_s=8.0, requests=60, prompt_tokens=(64, 256),
                                 output_tokens=(16, 64)),
        cost=cost, acceptance=IIDAcceptance(alpha=0.7), policy=FixedGamma(gamma=3),
        max_batch=16, max_gamma=8,
    )  # fmt: skip
    base.update(kw)
    return ServingConfig(**base)


def test_every_request_finishes_with_sane_latencies(card: CardCost) -> None:
    r = simulate_serving(config(card), np.random.default_rng(0))
    req = r.requests()
    assert req["finish_s"].notna().all()
    assert (req["first_token_s"] >= req["arrival_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    m = r.metrics()
    assert m["tokens"] == int(req["output_tokens"].sum())
    assert m["ttft_p50"] <= m["ttft_p90"] <= m["ttft_p99"]
    assert 0 < m["utilization"] <= 1.0 + 1e-9
    assert m["energy_j_per_token"] > 0 and m["plain_energy_j_per_token"] > 0
    assert m["tpot_speedup"] > 1.0  # alpha 0.7, a tiny draft, light load


def test_deterministic(card: CardCost) -> None:
    a = simulate_serving(config(card), np.random.default_rng(4)).metrics()
    b = simulate_serving(config(card), np.random.default_rng(4)).metrics()
    assert a == b


@pytest.mark.parametrize("g", [np.array([0, 3, 4, 2]), np.array([3, 3, 3, 3])])
def test_iteration_cost_equals_step_cost(card: CardCost, g: np.ndarray) -> None:
    ctx = np.array([100, 200, 300, 50])
    t, _, d = card.iteration(g, ctx)
    verify = step_cost(card.target, card.hardware, batch=4, context=ctx, new_tokens=g + 1).time_s
    drafts = sum(
        step_cost(card.draft, card.hardware, batch=int((g > j).sum()), context=ctx[g > j] + j,
                  new_tokens=1).time_s
        for j in range(int(g.max()))
    )  # fmt: skip
    assert d == pytest.approx(drafts, rel=1e-12)
    assert t == pytest.approx(verify + drafts, rel=1e-12)


def test_kv_limit_makes_requests_wait_and_too_small_is_an_error() -> None:
    work = TraceWorkload(arrival_s=(0.0,) * 8, prompt_tokens=(100,) * 8, output_tokens=(50,) * 8)
    cost = PlainCost(c=0.1, step_s=0.01)
    roomy = simulate_serving(config(cost, workload=work), np.random.default_rng(0))
    tight = simulate_serving(
        config(cost, workload=work, kv_capacity_tokens=2 * (100 + 50 + 9)),
        np.random.default_rng(0),
    )
    assert tight.events()["batch"].max() <= 2 < roomy.events()["batch"].max()
    assert tight.metrics()["ttft_p99"] > roomy.metrics()["ttft_p99"]
    with pytest.raises(ValueError, match="cannot hold request"):
        simulate_serving(config(cost, workload=work, kv_capacity_tokens=100),
                         np.random.default_rng(0))  # fmt: skip


def test_load_adaptive_shortens_lookahead_at_large_batch(card: CardCost) -> None:
    policy = LoadAdaptive(alpha=0.7, max_gamma=8)
    small = np.full(1, 512)
    big = np.full(256, 512)

    def best(ctx):
        from specsim.policies import PolicyContext

        def pass_time(gam):
            return card.iteration(np.full(ctx.shape[0], gam), ctx)[0]

        return policy.choose(PolicyContext(position=0, draw=None, last_gamma=None,
                                           last_accepted=None, batch=ctx.shape[0],
                                           pass_time=pass_time))  # fmt: skip

    assert best(small) > best(big)


def test_bad_serving_configs() -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        PoissonWorkload(rate_per_s=0, requests=1, prompt_tokens=1, output_tokens=1)
    with pytest.raises(ValueError, match="prompt_tokens"):
        PoissonWorkload(rate_per_s=1, requests=1, prompt_tokens=(5, 2), output_tokens=1)
    with pytest.raises(ValueError, match="non-decreasing"):
        TraceWorkload(arrival_s=(1.0, 0.5), prompt_tokens=(1, 1), output_tokens=(1, 1))
    with pytest.raises(ValueError, match="overlapped"):
        config(PlainCost(c=0.1, overlap=True))


def test_uniform_iteration_times_equal_iteration(card: CardCost) -> None:
    ctx = np.array([100, 400, 900])
    table = card.uniform_iteration_times(ctx, 6)
    for g in range(7):
        assert table[g] == pytest.approx(card.iteration(np.full(3, g), ctx)[0], rel=1e-12)
    plain = PlainCost(c=0.1, v=1.2, step_s=0.5)
    assert plain.uniform_iteration_times(ctx, 3).tolist() == pytest.approx(
        [plain.iteration(np.full(3, g), ctx)[0] for g in range(4)]
    )
