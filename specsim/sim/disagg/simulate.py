"""The disaggregated run: :func:`simulate_disaggregated`, prefill pool, hand-over, decode pool.

1. The **prefill pool** serves every request as a one-token request (its prompt's pass,
   target only, no speculation) on the serving engine: its own FCFS batching under its
   batch and KV limits, its replicas behind its router. The pass's end is when the
   prompt's KV cache is ready.
2. The **hand-over** (:mod:`specsim.sim.disagg.link`): the cache crosses the link,
   transfers from one prefill replica one after another.
3. The **decode pool** serves the requests as they arrive there (the cache's arrival), on
   the same engine with the run's lookahead policy (chains, drafted by the cost source's
   draft model or the run's proposer) or its tree plan (static or dynamic token trees,
   their walks drawn from ``rng`` during the run), on
   :class:`~specsim.sim.disagg.first_step.AfterTransfer`: its admission pass is the first
   decode step (and the draft's prefill), which emits the first token; a request
   preempted there (paged KV) recomputes its cache there.

A request's TTFT is from its arrival at the prefill pool to the end of that first decode
step (the engines stream tokens from the decode worker); its TPOT is the decode pool's.
The acceptance draws are the same for the run and its plain twin (common random numbers),
and the prefill pool and the link are served once for both: neither speculates.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from specsim.policies.lookahead import FixedGamma, deepest_gamma, fixed_gamma
from specsim.sim.costs.source import check_positions_fit
from specsim.sim.disagg.config import DecodeTrees, DisaggConfig
from specsim.sim.disagg.link import hand_over, target_kv_bytes_per_token
from specsim.sim.disagg.result import DisaggResult
from specsim.sim.results.records import ServingResult
from specsim.sim.results.stability import plain_work_s
from specsim.sim.serving.batch import Requests, draw_requests
from specsim.sim.serving.config import ServingConfig
from specsim.sim.serving.drafting import ProposerDrafts, target_deployment
from specsim.sim.serving.loop import serve
from specsim.sim.serving.plans import TreePlan

__all__ = ["simulate_disaggregated"]

Frames = tuple[pd.DataFrame, pd.DataFrame]
Ints = NDArray[np.int64]


def _check_positions(
    config: DisaggConfig, plan: TreePlan | None, *, prompt: np.ndarray, out: np.ndarray
) -> None:
    """Refuse a run whose requests' last passes would reach past a card's ``max_position``:
    the deepest position verified past a request's last token (a tree's depth, a chain's
    deepest lookahead); the draft reaches one less."""
    if plan is not None:
        reach = plan.reach
    else:
        assert config.policy is not None  # checked by DisaggConfig
        reach = deepest_gamma(config.policy, config.max_gamma)
    check_positions_fit(
        config.decode_cost,
        context=prompt,
        new_tokens=out + reach,
        draft_new_tokens=out + max(reach - 1, 0),
        name="workload",
    )


def simulate_disaggregated(config: DisaggConfig, rng: np.random.Generator) -> DisaggResult:
    """Serve the workload on the prefill pool, hand each prompt's KV cache over the link,
    and decode on the decode pool with speculation and (``config.plain_twin``) without."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    table = config.workload.sample(rng).reset_index(drop=True)
    prompt = table["prompt_tokens"].to_numpy().astype(np.int64)
    out = table["output_tokens"].to_numpy().astype(np.int64)
    plan = None if config.tree is None else config.tree_plan()
    ahead = 0 if plan is None else plan.lookahead  # the KV reservation
    _check_positions(config, plan, prompt=prompt, out=out)
    draws = None
    if plan is None:
        assert config.acceptance is not None  # checked by DisaggConfig
        draws = draw_requests(config.acceptance, out, max_gamma=config.max_gamma, rng=rng)
    pre_req = Requests.undrawn(table.assign(output_tokens=1), lookahead=1)
    pre_tab, pre_its = serve(config.prefill_serving(), pre_req, FixedGamma(gamma=0))
    ready = pre_tab["first_token_s"].to_numpy()
    where = pre_tab["replica"].to_numpy() if "replica" in pre_tab else np.zeros(len(table), int)
    per_token = target_kv_bytes_per_token(config.prefill_cost)
    transfer = config.link.transfer_s(prompt, bytes_per_token=per_token)
    arrive = hand_over(ready, where.astype(np.int64), transfer)
    order = np.argsort(arrive, kind="stable")  # the decode pool's arrival order
    dec_table = pd.DataFrame(
        {"arrival_s": arrive[order], "prompt_tokens": prompt[order], "output_tokens": out[order]}
    )
    if draws is None:
        dec_req = Requests.undrawn(dec_table, lookahead=ahead)
    else:
        dec_req = Requests.build(dec_table, [draws[i] for i in order], max_gamma=config.max_gamma)
    spec, plain = _decode(config, dec_req, plan, rng)
    handed = pd.DataFrame(
        {"prefill_end_s": ready, "transfer_s": transfer, "kv_ready_s": arrive}, index=table.index
    )
    if "replica" in pre_tab:
        handed["prefill_replica"] = where
    dec_cfg = config.decode_engine()
    return DisaggResult(
        requests_spec=_merge(table, handed, spec[0], order),
        requests_plain=None if plain is None else _merge(table, handed, plain[0], order),
        prefill=ServingResult(
            requests_spec=pre_tab,
            iterations_spec=pre_its,
            work_s=_work(config.prefill_serving(), prompt, np.ones_like(out)),
        ),
        decode=ServingResult(
            requests_spec=spec[0],
            iterations_spec=spec[1],
            requests_plain=None if plain is None else plain[0],
            iterations_plain=None if plain is None else plain[1],
            work_s=_work(dec_cfg, prompt, out),
        ),
        kv_bytes_per_token=per_token,
    )


def _decode(
    config: DisaggConfig, req: Requests, plan: TreePlan | None, rng: np.random.Generator
) -> tuple[Frames, Frames | None]:
    """The decode pool's run under the policy (as simulate_serving) or the tree plan (its
    walks drawn from ``rng``), and its plain twin: the same pool decoding the same requests
    with gamma 0 (a tree plan's twin reserves the tree's lookahead, as its run does)."""
    dec_cfg = config.decode_serving()
    if plan is not None:
        spec = serve(config.decode_trees(), req, None, tree=plan, rng=rng)
    else:
        drafts = None
        if config.proposer is not None:
            drafts = ProposerDrafts(dec_cfg.cost, config.proposer, target_deployment(dec_cfg.cost))
        spec = serve(dec_cfg, req, config.policy, drafts=drafts)
    if not config.plain_twin:
        return spec, None
    if config.policy is not None and fixed_gamma(config.policy) == 0:  # plain: its own twin
        return spec, (spec[0].copy(), spec[1].copy())
    return spec, serve(dec_cfg, req, FixedGamma(gamma=0))


def _work(cfg: ServingConfig | DecodeTrees, prompt: Ints, out: Ints) -> float:
    """A request's plain work on a pool's replica
    (:func:`specsim.sim.results.stability.plain_work_s`)."""
    return plain_work_s(
        cfg.cost,
        prompt_tokens=prompt,
        output_tokens=out,
        max_batch=cfg.max_batch,
        kv_capacity_tokens=cfg.kv_capacity(),
        max_gamma=cfg.max_gamma,
    )


def _merge(
    table: pd.DataFrame, handed: pd.DataFrame, decoded: pd.DataFrame, order: Ints
) -> pd.DataFrame:
    """The whole run's request table, in the workload's order: its arrival at the prefill
    pool, the hand-over's columns, then the decode pool's (first token, finish, the
    acceptance counters, ``decode_replica``)."""
    back = np.empty_like(order)
    back[order] = np.arange(order.shape[0])
    dec = decoded.iloc[back].reset_index(drop=True)
    out = table[["arrival_s", "prompt_tokens", "output_tokens"]].copy()
    out = pd.concat([out, handed], axis=1)
    skip = {"arrival_s", "prompt_tokens", "output_tokens"}
    for name in dec.columns:
        if name not in skip:
            out["decode_replica" if name == "replica" else name] = dec[name].to_numpy()
    return out
