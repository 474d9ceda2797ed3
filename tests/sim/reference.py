"""The slow references' shared parts: the cards, exact comparison, passes priced by
:func:`specsim.cost.pass_cost`, and a plain replay of first-come first-served continuous
batching from a run's tables (:func:`replay`).

What the tables do not record limits what can be replayed. Per-sequence accepted counts
are not in the serving tables, so a batch's contexts are known only through their sum:
that fixes every pass of a static tree, and every chain pass in which all sequences draft
the same gamma; a chain pass whose gammas differ (cut at requests' ends) is taken from the
table and counted, and a per-pass tree (EAGLE-2) is replayed at batch 1 only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import pandas as pd

from specsim.cards import ModelCard, load_hardware, load_model
from specsim.cost import PassShape, pass_cost
from specsim.proposers import DraftModel, RankAcceptance
from specsim.sim.workload.arrivals import TraceWorkload

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


def replay(
    req: pd.DataFrame,
    it: pd.DataFrame,
    *,
    cap: int,
    models: Sequence[ModelCard],
    kv: tuple[int, int] | None,
    decode: object,
) -> int:
    """Replay the run: admissions (first come, first served, at most ``cap`` sequences;
    ``kv`` = (capacity, lookahead): while reservations of prompt + output + lookahead
    fit), one prefill pass of ``models`` for the admitted prompts, then ``decode(row, b,
    ctx_sum)`` (the decoding pass's verify and draft seconds; None where the pass cannot
    be recomputed from the tables, whose recorded end is then taken). A sequence's context
    is what its KV cache holds: its prompt and emitted tokens less the last one emitted,
    which the next pass writes (chains and trees alike: docs/design.md, "The context of a
    pass"). Which sequences finish comes from their tokens while alone, else from the
    request table's finish times. Returns the passes taken from the table."""
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
                    ctx_sum += prompt[i]  # the first token is not cached yet
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
                ctx_sum -= prompt[i] + out[i] - 1
                used -= 0 if kv is None else prompt[i] + out[i] + kv[1]
                del running[i]
        assert close(row.end_s, t)
    assert not running and not waiting and nxt == n
    np.testing.assert_allclose(req["first_token_s"], first, rtol=REL)
    np.testing.assert_allclose(req["finish_s"], finish, rtol=REL)
    return taken


def finish_at(req: pd.DataFrame, i: int, end_s: float) -> bool:
    return bool(req.loc[i, "finish_s"] == end_s)


SPACED = TraceWorkload(
    arrival_s=(0.0, 2.0, 4.0), prompt_tokens=(120, 40, 300), output_tokens=(12, 1, 20)
)
TOGETHER = TraceWorkload(
    arrival_s=(0.0, 0.0, 0.01, 0.02, 0.5),
    prompt_tokens=(50, 200, 90, 30, 64),
    output_tokens=(15, 9, 1, 22, 12),
)
