"""Chunked prefill under a token budget (Sarathi-Serve; specsim.sim.serving.paged)."""

import dataclasses
import itertools
from functools import partial

import numpy as np
import pytest
from serving_cases import card_cost, serving_config

from specsim.cost import PassShape
from specsim.policies.lookahead import HeuristicPlusTwoMinusOne
from specsim.sim import CardCost, PoissonWorkload, simulate_serving
from specsim.sim.serving.chunk_drain import chunk_sums
from specsim.sim.serving.prefill import budget_cap


@pytest.fixture(scope="module")
def card() -> CardCost:
    return card_cost()


config = partial(
    serving_config,
    rate_per_s=20.0,
    requests=50,
    prompt_tokens=(64, 1024),
    gamma=4,
    token_budget=128,
)


def test_budget_cap_is_the_largest_common_cap_that_fits() -> None:
    """Against enumeration of every cap, on every gamma vector of up to 4 sequences."""
    for b in range(1, 5):
        for gam in itertools.product(range(5), repeat=b):
            g = np.array(gam, dtype=np.int64)
            for budget in range(b, 4 * b + 6):
                fits = [t for t in range(max(gam) + 1) if int(np.minimum(g, t).sum()) + b <= budget]
                assert budget_cap(g, budget) == max(fits)


RUNS = {
    "fixed": {},
    "heuristic": {"policy": HeuristicPlusTwoMinusOne(initial=3, max_gamma=8)},
    "paged": {"kv_block_tokens": 16, "kv_capacity_tokens": 1600},
    "tight": {"token_budget": 16, "requests": 25},
}


@pytest.fixture(scope="module")
def runs(card):
    out = {}
    for name, kw in RUNS.items():
        kw = dict(kw)
        if "requests" in kw:
            kw["workload"] = dataclasses.replace(config(card).workload, requests=kw.pop("requests"))
        cfg = config(card, **kw)
        out[name] = cfg, simulate_serving(cfg, np.random.default_rng(2))
    return out


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_budget_holds_and_every_token_is_accounted_for(runs, name) -> None:
    cfg, r = runs[name]
    for req, it in ((r.requests_spec, r.iterations_spec), (r.requests_plain, r.iterations_plain)):
        # Verification positions (gamma + 1 a sequence) and prefill chunks share the budget.
        assert (it["positions"] + it["prefill_tokens"] <= cfg.token_budget).all()
        assert req["finish_s"].notna().all()
        assert (req["first_token_s"] > req["arrival_s"]).all()
        # Every prompt token is prefilled once, plus what preemption threw away.
        recomputed = it["recomputed_tokens"].sum()
        assert it["prefill_tokens"].sum() == req["prompt_tokens"].sum() + recomputed
        assert int(it["emitted"].sum()) == int((req["output_tokens"] - 1).sum())
        if "kv_blocks" in it and cfg.kv_capacity_tokens:
            assert it["kv_blocks"].max() <= cfg.kv_capacity_tokens // 16


def test_a_binding_budget_shrinks_the_lookahead(runs) -> None:
    """Budget 16 at a batch of up to 16: gamma 4 would need 5 positions a sequence; the
    water-filling cap gives each floor(16 / batch) - 1."""
    _, r = runs["tight"]
    it = r.iterations_spec
    decoding = it[it["batch"] > 0]
    cap = np.minimum(4, 16 // decoding["batch"] - 1)
    assert (decoding["draft_tokens"] <= cap * decoding["batch"]).all()
    assert (decoding["draft_tokens"] < 4 * decoding["batch"]).any()


def test_chunks_stop_long_prompts_from_stalling_the_decodes(card) -> None:
    """Sarathi-Serve's point: whole-prompt prefills of up to 1,900 tokens (the draft's limit
    is 2,048) stall every running sequence, so the slowest iteration a decoding sequence
    sits through is shorter with a budget, and so is the tail of the time per output
    token."""
    long = PoissonWorkload(
        rate_per_s=6.0, requests=40, prompt_tokens=(1024, 1900), output_tokens=(32, 128)
    )
    whole = config(card, workload=long, token_budget=None, plain_twin=False)
    chunked = dataclasses.replace(whole, token_budget=512)
    a = simulate_serving(whole, np.random.default_rng(3))
    b = simulate_serving(chunked, np.random.default_rng(3))
    stall = lambda it: float((it["end_s"] - it["start_s"])[it["batch"] > 0].max())  # noqa: E731
    assert stall(b.iterations_spec) < stall(a.iterations_spec) / 2
    assert b.metrics()["tpot_p99_s"] < a.metrics()["tpot_p99_s"]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            dict(token_budget=8),
            r"token_budget: 8 tokens are fewer than one sequence's "
            r"verification pass \(max_gamma \+ 1 = 9\)",
        ),
        (dict(token_budget=12), r"token_budget: 12 tokens are fewer than max_batch \(16\)"),
        (dict(token_budget=0), r"token_budget: expected an integer >= 1, got 0"),
        (dict(token_budget=64.0), r"token_budget: expected an integer >= 1, got 64\.0"),
    ],
)
def test_bad_budgets_name_the_field(card, kw, message) -> None:
    with pytest.raises(TypeError if kw["token_budget"] == 64.0 else ValueError, match=message):
        config(card, **kw)


def test_the_chunk_sums_are_those_of_their_chain_passes() -> None:
    """What a source's closed-form chunk cost reads of the chunks: tokens, pairs at their
    offsets, offsets' sum, count and pairs at offset 0, as the chunks' pass shapes sum."""
    sizes, offsets = [5, 1, 12], [0, 30, 7]
    shape = PassShape.chain(context=np.array(offsets), new=np.array(sizes))
    at0 = PassShape.chain(context=np.zeros(3, dtype=np.int64), new=np.array(sizes))
    tokens, pairs, cached = shape.sums()
    assert chunk_sums(sizes, offsets) == (tokens, pairs, cached, 3, at0.sums().pairs)
