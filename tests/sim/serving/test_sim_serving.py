import dataclasses
from functools import partial

import numpy as np
import pandas as pd
import pytest
from serving_cases import card_cost, serving_config

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, step_cost
from specsim.policies.lookahead import FixedGamma, LoadAdaptive
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
    return card_cost()


config = partial(serving_config, rate_per_s=8.0)


def test_every_request_finishes_with_sane_latencies(card: CardCost) -> None:
    r = simulate_serving(config(card), np.random.default_rng(0))
    req = r.requests()
    assert req["finish_s"].notna().all()
    assert (req["first_token_s"] >= req["arrival_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    m = r.metrics()
    assert m["tokens"] == int(req["output_tokens"].sum())
    assert m["ttft_p50_s"] <= m["ttft_p90_s"] <= m["ttft_p99_s"]
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
        step_cost(
            card.draft,
            card.hardware,
            batch=int((g > j).sum()),
            context=ctx[g > j] + j,
            new_tokens=1,
        ).time_s
        for j in range(int(g.max()))
    )
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
    assert tight.metrics()["ttft_p99_s"] > roomy.metrics()["ttft_p99_s"]
    with pytest.raises(ValueError, match="cannot hold request"):
        simulate_serving(
            config(cost, workload=work, kv_capacity_tokens=100), np.random.default_rng(0)
        )


def test_load_adaptive_shortens_lookahead_at_large_batch(card: CardCost) -> None:
    policy = LoadAdaptive(alpha=0.7, max_gamma=8)
    small = np.full(1, 512)
    big = np.full(256, 512)

    def best(ctx):
        from specsim.policies.lookahead import PolicyContext

        def pass_time(gam):
            return card.iteration(np.full(ctx.shape[0], gam), ctx)[0]

        return policy.choose(
            PolicyContext(
                position=0,
                draw=None,
                last_gamma=None,
                last_accepted=None,
                batch=ctx.shape[0],
                pass_time=pass_time,
            )
        )

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


def _card_sources() -> list[CardCost]:
    a100, h100 = load_hardware("a100-80gb"), load_hardware("h100-sxm")
    return [
        CardCost(
            deployment=Deployment(target=load_model("llama-2-7b"), hardware=a100),
            draft=load_model("llama-68m"),
        ),
        CardCost(
            deployment=Deployment(
                target=load_model("llama-2-70b"), hardware=h100, tensor_parallel=2
            ),
            draft=load_model("llama-2-7b"),
        ),
        CardCost(
            deployment=Deployment(target=load_model("t5-xxl"), hardware=load_hardware("tpu-v4")),
            draft=load_model("t5-small"),
        ),
        CardCost(
            deployment=Deployment(
                target=load_model("llama-2-7b"),
                hardware=dataclasses.replace(
                    a100, energy_per_flop_j=1e-12, energy_per_byte_j=1e-11
                ),
            ),
            draft=load_model("llama-68m"),
        ),
    ]


@pytest.mark.parametrize("cost", _card_sources(), ids=["a100", "tp2", "t5", "per-op-energy"])
@pytest.mark.parametrize("gamma", [0, 1, 5])
def test_uniform_iteration_equals_step_cost(cost: CardCost, gamma: int) -> None:
    ctx = np.array([10, 700, 64])
    t, e, d = cost.uniform_iteration(batch=3, context_sum=int(ctx.sum()), gamma=gamma)
    tp = cost.tensor_parallel
    ver = step_cost(
        cost.target, cost.hardware, batch=3, context=ctx, new_tokens=gamma + 1, tensor_parallel=tp
    )
    assert cost.draft is not None
    drafts = [
        step_cost(
            cost.draft, cost.hardware, batch=3, context=ctx + j, new_tokens=1, tensor_parallel=tp
        )
        for j in range(gamma)
    ]
    assert d == pytest.approx(sum(x.time_s for x in drafts), rel=1e-12, abs=0)
    assert t == pytest.approx(ver.time_s + d, rel=1e-12)
    assert e == pytest.approx(ver.energy_j + sum(x.energy_j for x in drafts), rel=1e-12)
    assert (t, e, d) == cost.iteration(np.full(3, gamma), ctx)


@pytest.mark.parametrize("cost", _card_sources(), ids=["a100", "tp2", "t5", "per-op-energy"])
@pytest.mark.parametrize("draft", [False, True])
def test_prefill_equals_step_cost_at_context_zero(cost: CardCost, draft: bool) -> None:
    prompts = np.array([5, 300, 17])
    got = cost.prefill(prompts, draft=draft)
    models = [cost.target] + ([cost.draft] if draft and cost.draft is not None else [])
    want = [
        step_cost(
            m,
            cost.hardware,
            batch=3,
            context=0,
            new_tokens=prompts,
            tensor_parallel=cost.tensor_parallel,
        )
        for m in models
    ]
    for name in ("time_s", "flops", "bytes", "energy_j"):
        assert getattr(got, name) == pytest.approx(sum(getattr(w, name) for w in want), rel=1e-12)


def test_plain_uniform_iteration_equals_iteration() -> None:
    for cost in (PlainCost(c=0.1, v=1.2, step_s=0.5), PlainCost(c=0.05, v=(1.0, 1.1, 1.3))):
        for g in range(5):
            got = cost.uniform_iteration(batch=4, context_sum=100, gamma=g)
            assert got == cost.iteration(np.array([g, 0, g, 1]) * 0 + g, np.zeros(4, np.int64))
            assert got[0] == pytest.approx(g * cost.c * cost.step_s + cost.v_of(g) * cost.step_s)


@dataclasses.dataclass(frozen=True)
class _SameGammaPerToken:
    """FixedGamma's rule as a duck-typed policy: the simulator takes its per-sequence path."""

    gamma: int

    def choose(self, ctx: object) -> int:
        return self.gamma


# At gamma 0 on cards the two differ on purpose: only a declared gamma 0 skips the draft's
# prefill; PlainCost's prefill has no draft part.
@pytest.mark.parametrize(
    ("cost_name", "gamma"), [("card", 1), ("card", 4), ("plain", 0), ("plain", 1), ("plain", 4)]
)
def test_the_fast_path_equals_the_per_sequence_path(
    card: CardCost, cost_name: str, gamma: int
) -> None:
    # FixedGamma runs the vectorized fast path (one gamma for the batch, aggregates kept as
    # numbers; once every request has arrived, specsim.sim.serving.drain: no simpy, costs in bulk);
    # an equivalent duck-typed policy runs the per-sequence reference path, one simpy
    # timeout and one cost evaluation per iteration. Bit for bit the same tables.
    cost = card if cost_name == "card" else PlainCost(c=0.1, v=1.1, step_s=0.02)
    work = PoissonWorkload(
        rate_per_s=40.0, requests=120, prompt_tokens=(16, 300), output_tokens=(1, 90)
    )
    kw = dict(
        workload=work,
        cost=cost,
        max_batch=12,
        max_gamma=5,
        kv_capacity_tokens=2500,
        acceptance=IIDAcceptance(alpha=0.75),
    )
    fast = simulate_serving(
        ServingConfig(policy=FixedGamma(gamma=gamma), **kw), np.random.default_rng(3)
    )
    slow = simulate_serving(
        ServingConfig(policy=_SameGammaPerToken(gamma=gamma), **kw), np.random.default_rng(3)
    )
    assert fast.iterations_spec["batch"].max() == 12  # the batch and the KV limit both bind
    pd.testing.assert_frame_equal(fast.requests_spec, slow.requests_spec, check_exact=True)
    pd.testing.assert_frame_equal(fast.iterations_spec, slow.iterations_spec, check_exact=True)


def test_costs_in_bulk_equal_one_iteration_at_a_time(card: CardCost) -> None:
    # The drain costs runs of iterations with uniform_iterations and mixed iterations with
    # iterations(): element for element the floats of one call each.
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 65, 40)
    sums = sizes * rng.integers(1, 4000, 40)
    for cost in (card, PlainCost(c=0.1, v=(1.0, 1.2, 1.5), step_s=0.02)):
        for g in (0, 1, 4):
            bulk = cost.uniform_iterations(batch=sizes, context_sum=sums, gamma=g)
            for i in range(40):
                one = cost.uniform_iteration(batch=int(sizes[i]), context_sum=int(sums[i]), gamma=g)
                assert (bulk.time_s[i], bulk.energy_j[i], bulk.draft_s[i]) == tuple(one)
        gammas = [rng.integers(0, 6, int(b)) for b in sizes]
        gammas = [g for g in gammas if g.min() != g.max()]
        ctxs = [rng.integers(1, 4000, g.shape[0]) for g in gammas]
        count = np.array([np.bincount(g, minlength=6) for g in gammas])
        csum = np.array(
            [np.bincount(g, weights=c, minlength=6) for g, c in zip(gammas, ctxs, strict=True)]
        )
        bulk = cost.iterations(count, csum)
        for i, (g, c) in enumerate(zip(gammas, ctxs, strict=True)):
            one = cost.iteration(g, c)
            assert (bulk.time_s[i], bulk.energy_j[i], bulk.draft_s[i]) == tuple(one)


def test_one_token_requests_finish_at_their_first_token() -> None:
    work = TraceWorkload(
        arrival_s=(0.0, 0.0, 5.0), prompt_tokens=(8, 8, 8), output_tokens=(1, 6, 1)
    )
    r = simulate_serving(
        config(PlainCost(c=0.1, step_s=0.01), workload=work), np.random.default_rng(0)
    )
    req, it = r.requests(), r.events()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    one = req["output_tokens"] == 1
    assert (req.loc[one, "finish_s"] == req.loc[one, "first_token_s"]).all()
    assert it["emitted"].sum() == 5  # decode passes emit all but the prefill's first tokens
    assert it.iloc[-1]["batch"] == 0 and it.iloc[-1]["positions"] == 0  # a prefill-only pass
    assert r.metrics()["tokens"] == 8
    names = [str(e.get("name")) for e in r.chrome_trace()["traceEvents"]]
    assert sum(x.startswith("verify") for x in names) == int((it["positions"] > 0).sum())


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_batch", 2.5, r"max_batch: expected an integer >= 1, got 2\.5"),
        ("max_gamma", 8.0, r"max_gamma: expected an integer >= 0, got 8\.0"),
        ("kv_capacity_tokens", True, r"kv_capacity_tokens: expected an integer >= 1, got True"),
        ("kv_capacity_tokens", 500.5, r"kv_capacity_tokens: expected an integer >= 1, got 500\.5"),
        ("kv_capacity_tokens", 10**12, r"kv_capacity_tokens: 1000000000000 tokens do not fit"),
    ],
)
def test_counts_are_whole_numbers_that_fit(
    card: CardCost, field: str, value: object, message: str
) -> None:
    whole = isinstance(value, int) and not isinstance(value, bool)
    with pytest.raises(ValueError if whole else TypeError, match=message):
        config(card, **{field: value})
