"""The bulk paths of paged and chunked serving (specsim.sim.serving.drain,
specsim.sim.serving.chunk_drain) give the tables of the engine stepped iteration by iteration,
bit for bit."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

import specsim.sim.serving.loop as serving
from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, PlainCost, PoissonWorkload, ServingConfig, simulate_serving
from specsim.sim.serving.batch import Batch, Requests, draw_requests
from specsim.sim.serving.chunk_drain import chunk_cost
from specsim.sim.serving.walks import iteration_sums, trajectories


class Stepped(CardCost):
    """A card without the bulk paths: no drain, and chunks priced by composing two
    ``verify`` passes and two prefills (what the engine did before the closed form)."""

    uniform_iterations = None
    chunk_costs = None


class SteppedPlain(PlainCost):
    uniform_iterations = None


@pytest.fixture(scope="module")
def cards() -> tuple[CardCost, CardCost]:
    parts = dict(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )
    return CardCost(**parts), Stepped(**parts)


def test_closed_form_chunks_are_the_composed_passes(cards) -> None:
    """CardCost.chunk_costs against the passes it stands for, on random batches (some
    empty), gammas (one for all or one each) and chunks: the same floats."""
    card, stepped = cards
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(1, 20))
        table = pd.DataFrame(
            {
                "arrival_s": np.zeros(n),
                "prompt_tokens": rng.integers(10, 900, n),
                "output_tokens": rng.integers(5, 300, n),
            }
        )
        draws = draw_requests(
            IIDAcceptance(alpha=0.6), table["output_tokens"].to_numpy(), max_gamma=5, rng=rng
        )
        req = Requests.build(table, draws, max_gamma=5)
        batch = Batch(64)
        if rng.random() < 0.8:
            batch.add(np.arange(n), req)
        gam = int(rng.integers(0, 5))
        g = None if rng.random() < 0.5 or not batch.size else rng.integers(0, gam + 1, n)
        k = int(rng.integers(1, 4))
        sizes, offsets = rng.integers(1, 600, k).tolist(), rng.integers(0, 800, k).tolist()
        for draft in (False, True):
            closed = chunk_cost(card, gam, g, batch, sizes, offsets, draft=draft)
            composed = chunk_cost(stepped, gam, g, batch, sizes, offsets, draft=draft)
            assert closed == composed


def config(cost, **kw):
    base = dict(
        workload=PoissonWorkload(
            rate_per_s=40.0, requests=80, prompt_tokens=(16, 600), output_tokens=(1, 90)
        ),
        cost=cost,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=4),
        max_batch=12,
        max_gamma=5,
    )
    base.update(kw)
    return ServingConfig(**base)


RUNS = {
    "chunked": {"token_budget": 128},
    "chunked, tight budget": {"token_budget": 72},  # 12 x (4 + 1) = 60: no shrinking
    "chunked, plain": {"token_budget": 128, "policy": FixedGamma(gamma=0)},
    "paged + chunked": {"token_budget": 128, "kv_block_tokens": 16},
    "paged + chunked, preempting": {
        "token_budget": 128,
        "kv_block_tokens": 16,
        "kv_capacity_tokens": 3000,
    },
    "paged + chunked, 3 replicas, join-shortest-queue": {
        "token_budget": 128,
        "kv_block_tokens": 8,
        "replicas": 3,
        "router": "join-shortest-queue",
    },
    "paged": {"kv_block_tokens": 16},
    "paged, preempting, gamma 1": {
        "kv_block_tokens": 16,
        "kv_capacity_tokens": 2000,
        "policy": FixedGamma(gamma=1),
    },
    "paged, the theory's costs, preempting": {
        "kv_block_tokens": 16,
        "kv_capacity_tokens": 2000,
        "cost": "plain",
    },
    "paged, 3 replicas, least-outstanding, plain": {
        "kv_block_tokens": 4,
        "replicas": 3,
        "router": "least-outstanding",
        "policy": FixedGamma(gamma=0),
    },
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_drains_give_the_stepped_engines_tables(cards, name, monkeypatch) -> None:
    """Every table of the run and its plain twin, bit for bit; the drain did run (every
    replica, spec and plain), and where memory binds the run did preempt before it."""
    card, stepped = cards
    kw = dict(RUNS[name])
    if kw.pop("cost", None) == "plain":  # no chunk_costs: paged runs drain, chunked do not
        card, stepped = (
            PlainCost(c=0.1, v=1.1, step_s=0.02),
            SteppedPlain(c=0.1, v=1.1, step_s=0.02),
        )
    drained: list[int] = []
    for fn in ("drain", "drain_chunked"):
        real = getattr(serving, fn)

        def counted(*args, _real=real, **kw):
            out = _real(*args, **kw)
            drained.append(out[0].shape[0])
            return out

        monkeypatch.setattr(serving, fn, counted)
    fast_cfg = config(card, **kw)
    fast = simulate_serving(fast_cfg, np.random.default_rng(3))
    serves = 1 if fast_cfg.policy == FixedGamma(gamma=0) else 2  # gamma 0: its own twin
    assert len(drained) == serves * fast_cfg.replicas and sum(drained) > 0
    slow = simulate_serving(dataclasses.replace(fast_cfg, cost=stepped), np.random.default_rng(3))
    assert len(drained) == serves * fast_cfg.replicas  # the stepped engine never drains
    for a, b in (
        (fast.requests_spec, slow.requests_spec),
        (fast.requests_plain, slow.requests_plain),
        (fast.iterations_spec, slow.iterations_spec),
        (fast.iterations_plain, slow.iterations_plain),
    ):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    if "preempting" in name:
        assert fast.iterations_spec["preempted"].sum() > 0


@pytest.mark.parametrize("gamma", [0, 1, 3])
def test_iteration_sums_against_counting_each_iteration(gamma) -> None:
    """drain.iteration_sums (gamma 0: from joins and leaves; otherwise over every (sequence,
    iteration) pair) against a loop over iterations and the sequences running in each."""
    rng = np.random.default_rng(gamma)
    cols, block = 30, 16
    run1 = rng.integers(1, 6, 4000)  # accepted run plus one at each flat position
    first = np.sort(rng.choice(3500, cols, replace=False))
    end = np.minimum(first + rng.integers(1, 120, cols), 3999)
    off = rng.integers(1, 700, cols) - first
    pos, steps = trajectories(None if gamma == 0 else run1, first, end, gamma + 1)
    if gamma == 0:
        pos_all = first[None, :] + np.arange(steps.max() + 1)[:, None]
        pos_all = np.minimum(pos_all, end)
    else:
        pos_all = pos
    joined = rng.integers(0, 200, cols)
    it = int((joined + steps).max())
    sums = iteration_sums(pos, steps, joined, off, end, gamma, it, block=block)
    for t in range(it):
        run = [c for c in range(cols) if joined[c] <= t < joined[c] + steps[c]]
        here = np.array([pos_all[t - joined[c], c] for c in run], dtype=np.int64)
        nxt = np.array([pos_all[t - joined[c] + 1, c] for c in run], dtype=np.int64)
        ctx, left = off[run] + here, end[run] - here
        g = np.minimum(gamma, left - 1)
        assert sums.batch[t] == len(run) and sums.ctx_sum[t] == ctx.sum()
        assert sums.emitted[t] == (nxt - here).sum() and sums.drafted[t] == g.sum()
        assert (sums.counts[t] == np.bincount(g, minlength=gamma + 1)).all()
        assert (sums.csum[t] == np.bincount(g, weights=ctx, minlength=gamma + 1)).all()
        assert sums.blocks[t] == (-(-(ctx + g) // block)).sum()
        assert sums.pairs[t] == ((g + 1) * ctx + (g + 1) * (g + 2) // 2).sum()
