"""The load-adaptive policy's speed paths give the tables of the path without them, bit for bit.

The fast path: :class:`specsim.policies.lookahead.LoadAdaptive` forms ``E`` once and reads the
pass-time table whole; :class:`specsim.sim.costs.source.BatchWide` remembers a batch-wide choice
by the batch and its context sum where the source's ``uniform_times`` depends on those
alone; :class:`specsim.sim.CardCost` remembers uniform iterations and time tables
(:class:`specsim.sim.costs.source.Remembers`). The slow path, by construction: the policy as it
was (``E`` every call, ``pass_time`` gamma by gamma) on a card without ``uniform_times``
and without the memo, so that every iteration asks the policy with the contexts' own table.
"""

import pickle

import numpy as np
import pandas as pd
import pytest

import specsim.sim.costs.source as source
from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.planner import SLO, Search, search_capacity
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, chain_sums, time_energy, verification_positions
from specsim.policies.lookahead import LoadAdaptive, PolicyContext
from specsim.sim import CardCost, PlainCost, PoissonWorkload, ServingConfig, simulate_serving
from specsim.sim.costs.source import IterationCost, TableTimes
from specsim.theory import expected_tokens


class SlowAdaptive(LoadAdaptive):
    """LoadAdaptive as it was: E formed every call, pass_time asked gamma by gamma."""

    def choose(self, ctx: PolicyContext) -> int:
        assert ctx.pass_time is not None
        gammas = np.arange(self.max_gamma + 1)
        rate = np.asarray(expected_tokens(self.alpha, gammas)) / np.array(
            [ctx.pass_time(int(g)) for g in gammas]
        )
        return int(np.argmax(rate))


class Unremembered(CardCost):
    """A card without ``uniform_times`` (the choice is not remembered) and without the memo."""

    uniform_times = None

    def uniform_iteration(self, *, batch: int, context_sum: float, gamma: int) -> IterationCost:
        return IterationCost(*self._uniform(float(batch), float(context_sum), gamma))


PARTS = dict(
    deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
    draft=load_model("llama-68m"),
)


def config(cost, policy, **kw) -> ServingConfig:
    base = dict(
        workload=PoissonWorkload(
            rate_per_s=60.0, requests=150, prompt_tokens=(16, 900), output_tokens=(1, 120)
        ),
        cost=cost,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=policy,
        max_batch=16,
        max_gamma=6,
    )
    base.update(kw)
    return ServingConfig(**base)


def assert_same(a, b) -> None:
    for name in ("requests_spec", "iterations_spec", "requests_plain", "iterations_plain"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            pd.testing.assert_frame_equal(x, y, check_exact=True, obj=name)


RUNS = {
    "reservation": {},
    "low load": {
        "workload": PoissonWorkload(
            rate_per_s=2.0, requests=60, prompt_tokens=(16, 900), output_tokens=(1, 120)
        )
    },
    "paged, preempting": {"kv_block_tokens": 16, "kv_capacity_tokens": 3000},
    "chunked": {"token_budget": 96},
    "three replicas, join-shortest-queue": {"replicas": 3, "router": "join-shortest-queue"},
}


@pytest.mark.parametrize("name", list(RUNS))
def test_fast_adaptive_path_gives_the_slow_tables(name: str) -> None:
    """Every table of the run and its twin, fast against slow; then again on the same card,
    its memo warm from the first run."""
    policy, slow = LoadAdaptive(alpha=0.7, max_gamma=6), SlowAdaptive(alpha=0.7, max_gamma=6)
    card = CardCost(**PARTS)
    fast = simulate_serving(config(card, policy, **RUNS[name]), np.random.default_rng(3))
    ref = simulate_serving(
        config(Unremembered(**PARTS), slow, **RUNS[name]), np.random.default_rng(3)
    )
    assert_same(fast, ref)
    gammas = fast.iterations_spec["draft_tokens"] / fast.iterations_spec["batch"].clip(lower=1)
    assert gammas.nunique() > 1  # the policy did vary its choice
    warm = simulate_serving(config(card, policy, **RUNS[name]), np.random.default_rng(3))
    assert_same(warm, ref)


def test_plain_cost_table_path() -> None:
    """A source without ``uniform_times`` (PlainCost): the policy reads the table whole,
    the same floats as gamma by gamma."""
    cost = PlainCost(c=0.05)
    fast = simulate_serving(
        config(cost, LoadAdaptive(alpha=0.7, max_gamma=6)), np.random.default_rng(5)
    )
    slow = simulate_serving(
        config(cost, SlowAdaptive(alpha=0.7, max_gamma=6)), np.random.default_rng(5)
    )
    assert_same(fast, slow)


def test_capacity_search_tables_equal_the_slow_path() -> None:
    """A small capacity search with the crossover: the same rows, fast and slow."""
    search = Search(
        rate_min=2.0,
        rate_max=64.0,
        precision=0.1,
        requests=400,
        max_requests=400,
        crossover_precision=0.2,
    )
    slo = SLO(tpot_p99_s=0.012, ttft_p99_s=1.0)
    rows = {}
    for key, cost, policy in (
        ("fast", CardCost(**PARTS), LoadAdaptive(alpha=0.7, max_gamma=6)),
        ("slow", Unremembered(**PARTS), SlowAdaptive(alpha=0.7, max_gamma=6)),
    ):
        cfg = config(cost, policy, max_batch=32)
        rows[key] = pd.DataFrame(
            search_capacity(cfg, slo=slo, search=search, rate_per_s=40.0, seed=7, crossover=True)
        )
    pd.testing.assert_frame_equal(rows["fast"], rows["slow"], check_exact=True)
    assert (rows["fast"]["kind"] == "crossover").any()


def test_uniform_times_are_the_contexts_table_and_read_only() -> None:
    card = CardCost(**PARTS)
    rng = np.random.default_rng(0)
    for _ in range(30):
        ctx = rng.integers(1, 4000, int(rng.integers(1, 40)))
        n = int(rng.integers(0, 9))
        table = card.uniform_times(batch=ctx.shape[0], context_sum=int(ctx.sum()), max_gamma=n)
        assert table.tolist() == card.uniform_iteration_times(ctx, n).tolist()
        with pytest.raises(ValueError):
            table[0] = 1.0
    times = TableTimes(lambda n: np.arange(n + 1, dtype=np.float64), 3)
    assert times(2) == 2.0 and times(7) == 7.0 and times.table.shape == (8,)


def test_memo_is_bounded_and_not_pickled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "MEMO", 50)
    card = CardCost(**PARTS)
    res = simulate_serving(
        config(card, LoadAdaptive(alpha=0.7, max_gamma=6)), np.random.default_rng(1)
    )
    assert 0 < len(card._memo) <= 50
    copy = pickle.loads(pickle.dumps(card))
    assert "_memo" not in copy.__dict__ and copy == card
    again = simulate_serving(
        config(copy, LoadAdaptive(alpha=0.7, max_gamma=6)), np.random.default_rng(1)
    )
    assert_same(res, again)


def _array_times(card: CardCost, b: float, sc: float, n: int) -> np.ndarray:
    """The time table as it was formed before, on arrays of gammas (two evaluations)."""
    (tl, te, _), draft = card._kernels
    new = verification_positions(np.arange(n + 1, dtype=np.float64))
    times = np.asarray(time_energy(tl, *chain_sums(b, sc, new, te))[0], dtype=np.float64)
    if n > 0 and draft is not None:
        dl, de, _ = draft
        s = sc + np.arange(n, dtype=np.float64) * b
        dra = time_energy(dl, *chain_sums(b, s, 1.0, de))[0]
        times = times + np.concatenate([[0.0], np.cumsum(dra)])
    return times


CARDS = {
    "a100": PARTS,
    "h200, tensor parallel 2": dict(
        deployment=Deployment(
            target=load_model("llama-3.1-70b"), hardware=load_hardware("h200"), tensor_parallel=2
        ),
        draft=load_model("llama-3.2-1b"),
    ),
    "int4 weights (dequantization)": {
        **PARTS,
        "deployment": Deployment(
            target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"), weights="int4"
        ),
    },
    "encoder-decoder": dict(
        deployment=Deployment(target=load_model("t5-base"), hardware=load_hardware("a100-80gb")),
        draft=load_model("t5-base"),
    ),
    "efficiencies by rows": dict(
        deployment=Deployment(
            target=load_model("llama-160m"),
            hardware=load_hardware("cpu-epyc-2vcpu"),
            runtime="cpu-epyc-eager-rows",
        ),
        draft=load_model("llama-68m"),
    ),
}


@pytest.mark.parametrize("name", list(CARDS))
def test_scalar_time_table_is_the_array_one(name: str) -> None:
    """The table on Python floats against the two array evaluations it replaced, bit for
    bit, on cards with every optional term of the roofline (encoder tokens, dequantization,
    efficiencies by rows)."""
    card = CardCost(**CARDS[name])
    rng = np.random.default_rng(1)
    for _ in range(300):
        b, sc = float(rng.integers(1, 256)), float(rng.integers(0, 200_000))
        n = int(rng.integers(0, 12))
        table = card.uniform_times(batch=int(b), context_sum=int(sc), max_gamma=n)
        assert table.tolist() == _array_times(card, b, sc, n).tolist()


@pytest.mark.parametrize("name", list(CARDS))
def test_time_tables_never_fall_as_the_context_sum_grows(name: str) -> None:
    """CardCost.monotone_times: at a fixed batch, each gamma's time is non-decreasing in
    the context sum (what lets BatchWide settle a choice over a span), on every card."""
    card = CardCost(**CARDS[name])
    assert card.monotone_times is True
    rng = np.random.default_rng(2)
    for b in (1, 7, 64, 255):
        sums = np.sort(rng.integers(0, 300_000, 200))
        tables = np.array(
            [card.uniform_times(batch=b, context_sum=int(s), max_gamma=8) for s in sums]
        )
        assert (np.diff(tables, axis=0) >= 0).all()


def test_settled_choice_holds_between_its_bounds() -> None:
    """LoadAdaptive.settled: where it names a gamma, choose gives that gamma on every table
    between the bounds (random tables drawn between them, the ends included)."""
    policy = LoadAdaptive(alpha=0.7, max_gamma=6)
    rng = np.random.default_rng(4)
    settled = unsettled = 0
    for _ in range(400):
        low = np.sort(rng.uniform(0.01, 0.05, 7)) + rng.uniform(0, 0.05)
        high = low * (1 + rng.uniform(0, 0.3, 7))
        g = policy.settled(low, high)
        if g is None:
            unsettled += 1
            continue
        settled += 1
        for t in (low, high, low + rng.uniform(0, 1, 7) * (high - low)):
            times = TableTimes(lambda n, t=t: t[: n + 1], 6)
            ctx = PolicyContext(
                position=0, draw=None, last_gamma=None, last_accepted=None, batch=8, pass_time=times
            )
            assert policy.choose(ctx) == g
    assert settled > 20 and unsettled > 20
