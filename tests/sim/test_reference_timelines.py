"""Slow references: every engine's timeline recomputed pass by pass in plain Python.

On small workloads (a few requests, a few dozen iterations) each test replays a run from
the public cost model (:func:`specsim.cost.pass_cost` on the cards) and what the run
recorded (accepted counts, nodes and drafted tokens per iteration, admissions), and
compares every iteration's start and end, every request's first token and finish, to
1e-9. The replay never reads the simulator's state: only its tables.

What the tables do not record limits what can be replayed. Per-sequence accepted counts
are not in the serving tables, so a batch's contexts are known only through their sum:
that fixes every pass of a static tree, and every chain pass in which all sequences draft
the same gamma; a chain pass whose gammas differ (cut at requests' ends) or a per-pass
tree (EAGLE-2) in a batch of several is replayed at batch 1 only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance import IIDAcceptance
from specsim.cards import ModelCard, load_hardware, load_model
from specsim.cost import PassShape, pass_aggregates_cost, pass_cost
from specsim.policies import FixedGamma, HeuristicPlusTwoMinusOne
from specsim.proposers import DraftModel, RankAcceptance
from specsim.sim import CardCost, ServingConfig, StreamConfig, simulate_serving, simulate_stream
from specsim.sim.arrivals import TraceWorkload
from specsim.sim.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.tree_serving_dynamic import (
    DynamicTreeServingConfig,
    simulate_dynamic_tree_serving,
)
from specsim.trees import kary_tree

pytestmark = pytest.mark.slow

TARGET, SMALL, HW = load_model("llama-2-7b"), load_model("llama-68m"), load_hardware("a100-80gb")
ACC = RankAcceptance(accept=((0.75, 0.35, 0.2), (0.7, 0.3, 0.15), (0.65, 0.3)))  # illustrative
DRAFT = DraftModel(card=SMALL, acceptance=ACC)
REL = 1e-9


def close(x: float, y: float) -> bool:
    return abs(x - y) <= REL * max(abs(x), abs(y), 1e-12)


def step_s(model: ModelCard, *, context: int, new: int = 1) -> float:
    """One pass of ``model`` computing ``new`` chain positions after ``context`` tokens."""
    return pass_cost(model, HW, PassShape.chain(context=context, new=new)).time_s


def prefill_s(prompts: Sequence[int], models: Sequence[ModelCard]) -> float:
    """The admitted prompts prefilled in one pass of each model."""
    shape = PassShape.prefill(list(prompts))
    return sum(pass_cost(m, HW, shape).time_s for m in models)


def own_pairs(parents: Sequence[int]) -> int:
    """Pairs among one tree's root and nodes: each attends to itself and its ancestors."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    return 1 + sum(d + 1 for d in depth)


# The single stream.


@pytest.mark.parametrize("overlap", [False, True], ids=["serialized", "overlapped"])
@pytest.mark.parametrize("policy", [FixedGamma(gamma=3), HeuristicPlusTwoMinusOne(initial=2)])
@pytest.mark.parametrize("engine", ["fast", "events"])
def test_stream(overlap: bool, policy: object, engine: str) -> None:
    """Block k starts at the tokens emitted so far; its gamma draft steps are priced at the
    block's starting context (the stream's model), its pass verifies gamma + 1 positions.
    Serialized, drafting starts when the previous pass ends; overlapped, right after the
    previous block's drafting when that block was fully accepted (which then emits gamma
    tokens, the bonus dropped), else when its pass ends; a pass starts when its block is
    drafted and the target is free."""
    prompt, tokens = 300, 160
    cost = CardCost(target=TARGET, draft=SMALL, hardware=HW, draft_hardware=HW if overlap else None)
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=IIDAcceptance(alpha=0.75),
        policy=policy,  # type: ignore[arg-type]
        cost=cost,
        prompt=prompt,
        max_gamma=8,
    )
    b = simulate_stream(cfg, np.random.default_rng(5), engine=engine).blocks  # type: ignore[arg-type]
    pos, prev_de, prev_ve, prev_full = 0, 0.0, 0.0, False
    for k in range(len(b.start)):
        assert b.start[k] == pos
        g, a, c = int(b.gamma[k]), int(b.accepted[k]), prompt + pos
        full = g > 0 and a == g
        assert b.emitted[k] == (g if overlap and full else a + 1)
        ds = prev_de if overlap and prev_full else prev_ve
        de = ds + g * step_s(SMALL, context=c)
        ve = max(prev_ve, de) + step_s(TARGET, context=c, new=g + 1)
        assert close(b.draft_start[k], ds) and close(b.draft_end[k], de)
        assert close(b.verify_end[k], ve)
        pos, prev_de, prev_ve, prev_full = pos + int(b.emitted[k]), de, ve, full
    assert pos >= tokens and pos - int(b.emitted[-1]) < tokens


# Tree serving: a plain replay of first-come first-served continuous batching.


def replay(
    req: pd.DataFrame,
    it: pd.DataFrame,
    *,
    cap: int,
    models: Sequence[ModelCard],
    kv: tuple[int, int] | None,
    decode: object,
    lag: int,
) -> int:
    """Replay the run: admissions (first come, first served, at most ``cap`` sequences;
    ``kv`` = (capacity, lookahead): while reservations of prompt + output + lookahead
    fit), one prefill pass of ``models`` for the admitted prompts, then ``decode(row, b,
    ctx_sum)`` (the decoding pass's verify and draft seconds; None where the pass cannot
    be recomputed from the tables, whose recorded end is then taken). A sequence's context
    is its prompt and emitted tokens less ``lag`` (1 for trees: the root is computed in the
    pass; 0 for chains). Which sequences finish comes from their tokens while alone, else
    from the request table's finish times. Returns the passes taken from the table."""
    arrival = req["arrival_s"].to_list()
    prompt = req["prompt_tokens"].to_list()
    out = req["output_tokens"].to_list()
    n, t, nxt, used, ctx_sum = len(req), 0.0, 0, 0, 0
    waiting: deque[int] = deque()
    running: dict[int, int] = {}  # request: tokens emitted (0: not known)
    first, finish = [np.nan] * n, [np.nan] * n
    taken = 0
    for row in it.itertuples():
        if not running and not waiting:
            t = max(t, arrival[nxt])
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        assert close(row.start_s, t)
        admitted: list[int] = []
        while waiting and len(running) + len(admitted) < cap:
            need = 0 if kv is None else prompt[waiting[0]] + out[waiting[0]] + kv[1]
            if kv is not None and used + need > kv[0]:
                break
            used += need
            admitted.append(waiting.popleft())
        assert row.admitted == len(admitted)
        if admitted:
            t += prefill_s([prompt[i] for i in admitted], models)
            for i in admitted:
                first[i] = t
                if out[i] == 1:
                    finish[i] = t
                    used -= 0 if kv is None else prompt[i] + out[i] + kv[1]
                else:
                    running[i] = 1
                    ctx_sum += prompt[i] + 1 - lag
        b = len(running)
        assert row.batch == b
        if b:
            cost = decode(row, b, ctx_sum)  # type: ignore[operator]
            if cost is None:
                taken, t = taken + 1, row.end_s
            else:
                assert close(row.draft_s, cost[1])
                t += cost[0] + cost[1]
            ctx_sum += row.emitted
            if b == 1 and running[next(iter(running))] > 0:  # alone since its admission
                (i,) = running
                running[i] += row.emitted
                leaving = [i] if running[i] == out[i] else []
            else:  # its own tokens are not recorded: its finish time says when it leaves
                running = dict.fromkeys(running, 0)
                leaving = [i for i in running if finish_at(req, i, row.end_s)]
            for i in leaving:
                finish[i] = t
                ctx_sum -= prompt[i] + out[i] - lag
                used -= 0 if kv is None else prompt[i] + out[i] + kv[1]
                del running[i]
        assert close(row.end_s, t)
    assert not running and not waiting and nxt == n
    np.testing.assert_allclose(req["first_token_s"], first, rtol=REL)
    np.testing.assert_allclose(req["finish_s"], finish, rtol=REL)
    return taken


def finish_at(req: pd.DataFrame, i: int, end_s: float) -> bool:
    return bool(req.loc[i, "finish_s"] == end_s)


def static_decode(parents: tuple[int, ...]) -> object:
    """A static tree's pass over b sequences whose contexts sum to ``ctx_sum``: the target
    verifies the root and the nodes of each (pairs: the context per position, and the
    tree's own); the draft model steps once per depth at the batch's mean context."""
    n1, own = len(parents) + 1, own_pairs(parents)

    def decode(row: object, b: int, ctx_sum: int) -> tuple[float, float]:
        assert row.nodes == len(parents)  # type: ignore[attr-defined]
        ver = pass_aggregates_cost(
            TARGET,
            HW,
            batch=b,
            tokens=b * n1,
            context_tokens=ctx_sum,
            pairs=n1 * ctx_sum + b * own,
        )
        c = int(round(ctx_sum / b))
        draft = 0.0
        depth: list[int] = []
        for p in parents:
            depth.append(1 if p < 0 else depth[p] + 1)
        widths = [0] * max(depth)
        for node in set(parents):
            widths[0 if node < 0 else depth[node]] += 1
        for d, w in enumerate(widths, start=1):
            shape = PassShape.tree(context=c + d - 1, parents=[-1] * w, batch=b)
            draft += pass_cost(SMALL, HW, shape).time_s
        return ver.time_s, draft

    return decode


TREE = kary_tree(2, 6)
SPACED = TraceWorkload(
    arrival_s=(0.0, 2.0, 4.0), prompt_tokens=(120, 40, 300), output_tokens=(12, 1, 20)
)
TOGETHER = TraceWorkload(
    arrival_s=(0.0, 0.0, 0.01, 0.02, 0.5),
    prompt_tokens=(50, 200, 90, 30, 64),
    output_tokens=(15, 9, 1, 22, 12),
)


@pytest.mark.parametrize(
    ("workload", "kv"),
    [(SPACED, None), (TOGETHER, None), (TOGETHER, (200 + 9 + 7) + (50 + 15 + 7))],
)
def test_static_tree_serving(workload: TraceWorkload, kv: int | None) -> None:
    cfg = TreeServingConfig(
        workload=workload,
        parents=TREE,
        proposer=DRAFT,
        target=TARGET,
        hardware=HW,
        max_batch=3,
        kv_capacity_tokens=kv,
        plain_twin=False,
    )
    res = simulate_tree_serving(cfg, np.random.default_rng(2))
    look = None if kv is None else (kv, len(TREE) + 1)
    taken = replay(
        res.requests,
        res.iterations,
        cap=3,
        models=(TARGET, SMALL),
        kv=look,
        decode=static_decode(TREE),
        lag=1,
    )
    assert taken == 0


def test_dynamic_tree_serving_at_batch_one() -> None:
    """Trees one level deep (``max_depth=1``): a tree of k nodes is the root's k children,
    so the recorded nodes fix its pairs (1 + 2k); the draft steps once at the context."""
    cfg = DynamicTreeServingConfig(
        workload=SPACED,
        policy=ConfidenceTree(budget=4, max_depth=1),
        world=NodeConfidence(concentration=2.0),
        proposer=DRAFT,
        target=TARGET,
        hardware=HW,
        plain_twin=False,
    )
    res = simulate_dynamic_tree_serving(cfg, np.random.default_rng(4))

    def decode(row: object, b: int, ctx_sum: int) -> tuple[float, float]:
        k, c = int(row.draft_tokens), ctx_sum  # type: ignore[attr-defined]
        ver = pass_aggregates_cost(
            TARGET, HW, batch=1, tokens=k + 1, context_tokens=c, pairs=(k + 1) * c + 1 + 2 * k
        )
        drafted = int(row.draft_positions)  # type: ignore[attr-defined]
        return ver.time_s, step_s(SMALL, context=c) * drafted

    assert (res.iterations["draft_tokens"] > 1).any()
    taken = replay(
        res.requests, res.iterations, cap=64, models=(TARGET, SMALL), kv=None, decode=decode, lag=1
    )
    assert taken == 0


# Chain serving.


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
        cost=CardCost(target=TARGET, draft=SMALL, hardware=HW),
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
    taken = replay(req, it, cap=3, models=(TARGET, SMALL), kv=look, decode=chain_decode(3), lag=0)
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
        taken = replay(
            mine, rows, cap=3, models=(TARGET, SMALL), kv=None, decode=chain_decode(3), lag=0
        )
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
                ctx_sum -= prompt[i] + out[i]
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
                    ctx_sum += prompt[i] + 1
        prefilling = [p for p in prefilling if p[1] > 0]
    assert not running and not prefilling and nxt == n
    assert taken <= 0.25 * len(it)
    np.testing.assert_allclose(req["first_token_s"], first, rtol=REL)
    np.testing.assert_allclose(req["finish_s"], finish, rtol=REL)
