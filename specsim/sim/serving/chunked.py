"""One iteration under a token budget: chunked prefill (Sarathi-Serve), the scheduler that
packs the running batch's verification positions and chunks of waiting prompts into
``token_budget`` tokens (:mod:`specsim.sim.serving.paged`), for the serving engine (what it reads
of the engine: :class:`~specsim.sim.serving.plans.Iterating`).
"""

from __future__ import annotations

import simpy

from specsim.sim.serving import prefill
from specsim.sim.serving.chunk_drain import chunk_cost
from specsim.sim.serving.plans import Decoded, Iterating, Plan
from specsim.sim.serving.router import Replica

__all__ = ["chunked_iteration"]


def _budget_plan(engine: Iterating, rep: Replica) -> tuple[Plan, int, tuple[int, int, float, int]]:
    """A chunked iteration's plan: the lookahead shrunk to the token budget, the prompts
    started in the room left, the batch fitted to the blocks (paged); the plan, the
    requests started and the preemption tuple (:meth:`specsim.sim.serving.paged.Paging.fit`)."""
    budget, batch, paging = engine.budget, rep.batch, rep.paging
    admission, prefills = rep.admission, rep.prefills
    assert budget is not None and prefills is not None
    gam, chosen, g = engine.choose(batch) if batch.size else (0, None, None)
    if batch.size:
        gam, chosen, g = prefill.shrink_to_budget(batch, gam, chosen, g, budget)
    pre = (0, 0, 0.0, 0)
    if paging is not None and admission.waiting:
        admission.used = paging.held(batch) + sum(prefills.holds)
    room = budget - (batch.size + (gam * batch.size if g is None else int(g.sum())))
    started = prefill.start_prefills(prefills, admission, batch, paging, engine.req, room)
    admission.check_progress(batch.size + len(prefills))
    if paging is not None and batch.size:
        chosen, g, pre = paging.fit(batch, gam, chosen, g, prefills, admission)
    return (gam, chosen, g), started, pre


def chunked_iteration(
    engine: Iterating, rep: Replica, start: float
) -> simpy.events.ProcessGenerator:
    """One iteration under a token budget (chunked prefill, :mod:`specsim.sim.serving.paged`)."""
    budget, batch, paging, prefills = engine.budget, rep.batch, rep.paging, rep.prefills
    assert budget is not None and prefills is not None
    (gam, chosen, g), started, pre = _budget_plan(engine, rep)
    b = batch.size
    tree = None
    if b and engine.tree is not None:  # the trees first: the chunks get what they leave
        tree = engine.tree_step(rep, budget)
        g = tree.nodes  # priced beside the chunks as chains of as many positions
    room = budget - (b + (gam * b if g is None else int(g.sum())))
    rows_, sizes, offsets = prefills.plan(room)
    chunk_s, chunk_e = chunk_cost(
        engine.cost, gam, g, batch, sizes, offsets, draft=engine.draft_prefill
    )
    decoded: Decoded = (0.0, 0.0, 0.0, 0, 0)
    if tree is not None:
        decoded = engine.decode_trees(rep, tree)
    elif b:
        decoded = engine.decode(rep, gam, chosen, g)
    elif engine.tree is not None:  # nothing decoded: the plan's columns are blank
        rep.plan_rows.append((0.0,) * (2 + len(engine.tree.columns)))
    prefill_s = chunk_s + pre[2]
    yield engine.env.timeout(prefill_s + decoded[0])
    now = engine.env.now
    rep.rows.append(
        engine.row(
            start, prefill_s=prefill_s, decoded=decoded, b=b, admitted=started, energy=chunk_e
        )
    )
    held = pre[3] if paging is not None and b else None
    if held is None:
        held = 0 if paging is None else paging.held(batch) + sum(prefills.holds)
    rep.extras.append((held, pre[0], pre[1], pre[2], sum(sizes)))
    if b:
        rep.retire(gam, now)
    rep.done += prefill.join_prefilled(
        prefills.advance(rows_, sizes),
        batch=batch,
        admission=rep.admission,
        paging=paging,
        req=engine.req,
        now=now,
        first_tok=engine.first_tok,
        finish=engine.finish,
    )
