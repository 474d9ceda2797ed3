"""The energy study's library half: the batch model and the serving check beside it.

:func:`batch_model` prices one decoding iteration at each batch and gamma from the cost
model's passes (:func:`specsim.cost.step_cost_grid`) and Eq. 1's ``E`` (Leviathan et al.
2023, Section 3.1, i.i.d. acceptance); :func:`model_rows` puts each batch on its own
tensor parallelism (:func:`deployment_tp`, independent of the other batches);
:func:`serving_check` runs the serving simulator (:func:`specsim.sim.simulate_serving`,
prefill and continuous batching included) at one batch and measures what the batch model
leaves out: the time and energy of the prompts' prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.planner import smallest_tp
from specsim.cards import HardwareCard, ModelCard
from specsim.cost import Deployment, step_cost_grid
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, PoissonWorkload, ServingConfig, simulate_serving
from specsim.theory import expected_tokens

__all__ = [
    "auto_tp",
    "serving_tp",
    "deployment_tp",
    "batch_model",
    "model_rows",
    "serving_run",
    "serving_check",
]


def auto_tp(
    target: ModelCard,
    draft: ModelCard,
    hw: HardwareCard,
    *,
    batch: int,
    context: int,
    max_gamma: int,
) -> int:
    """Smallest power-of-two tensor parallelism holding both models (each split over the
    devices) and the KV cache of ``batch`` sequences; it depends on this batch alone."""

    def fits(tp: int) -> bool:
        kw: dict[str, Any] = {
            "batch": batch,
            "context": context + max_gamma + 1,
            "new_tokens": 1,
            "tensor_parallel": tp,
            "check_memory": False,
        }
        need = step_cost_grid(target, hw, **kw).resident_bytes
        need = need + step_cost_grid(draft, hw, **kw).resident_bytes
        return float(need) <= hw.mem_capacity

    return smallest_tp(
        fits, where="study 'energy'", what=f"{target.slug} + {draft.slug}", hardware=hw.slug
    )


def on_devices(cost: CardCost, tp: int) -> CardCost:
    """``cost`` with its deployment over ``tp`` devices (the draft follows, as placed)."""
    return replace(cost, deployment=replace(cost.deployment, tensor_parallel=tp))


def serving_tp(cost: CardCost, *, tokens: int) -> int:
    """The smallest power-of-two tensor parallelism, from ``cost``'s, at which the serving
    simulation's memory model (:meth:`specsim.sim.CardCost.kv_capacity_tokens`: the draft
    counted whole on each device, which the batch model splits) holds ``tokens`` of KV
    cache: the serving check's deployment, which may be larger than the batch model's."""

    def fits(tp: int) -> bool:
        if tp < cost.tensor_parallel:
            return False
        try:
            return on_devices(cost, tp).kv_capacity_tokens() >= tokens
        except ValueError:  # the weights alone overflow a device at this tp
            return False

    what = f"{cost.target.slug} + {getattr(cost.draft, 'slug', 'no draft')} and {tokens} KV tokens"
    return smallest_tp(fits, where="study 'energy'", what=what, hardware=cost.hardware.slug)


def batch_model(
    target: ModelCard,
    draft: ModelCard,
    hw: HardwareCard,
    *,
    tp: int,
    alpha: float,
    batches: np.ndarray,
    context: int,
    max_gamma: int,
) -> pd.DataFrame:
    b = batches[:, None]
    g = np.arange(max_gamma + 1)[None, :]
    kw: dict[str, Any] = {"context": context, "tensor_parallel": tp}
    ver = step_cost_grid(target, hw, batch=b, new_tokens=g + 1, **kw)
    dra = step_cost_grid(draft, hw, batch=b, new_tokens=1, **kw)
    e = np.asarray(expected_tokens(alpha, g))
    t_iter = g * dra.time_s + ver.time_s
    j_iter = g * dra.energy_j + ver.energy_j
    wasted = (g + 1 - e) / (g + 1) * ver.energy_j + (g + 1 - e) * dra.energy_j
    B, G = np.broadcast_arrays(b, g)
    return pd.DataFrame(
        {
            "batch": B.ravel(),
            "gamma": G.ravel(),
            "tokens_per_s": (b * e / t_iter).ravel(),
            "tpot_s": (t_iter / e).ravel(),
            "j_per_token": (j_iter / (b * e)).ravel(),
            "j_wasted_per_token": (wasted / (b * e)).ravel(),
            "compute_bound": np.broadcast_to(ver.compute_bound, t_iter.shape).ravel(),
        }
    )


def serving_run(
    cost: CardCost,
    *,
    alpha: float,
    gamma: int,
    batch: int,
    context: int,
    output: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    # Arrivals far faster than service: the batch stays full (a closed-loop load).
    # Prompts of context - output / 2 tokens: the mean decode context is the batch model's.
    prompt = max(1, context - output // 2)
    wl = PoissonWorkload(
        rate_per_s=1e4, requests=3 * batch, prompt_tokens=prompt, output_tokens=output
    )
    cfg = ServingConfig(
        workload=wl,
        cost=cost,
        acceptance=IIDAcceptance(alpha=alpha),
        policy=FixedGamma(gamma=gamma),
        max_batch=batch,
        max_gamma=gamma,
    )
    res = simulate_serving(cfg, rng)
    m = res.metrics()
    # The prefill the batch model leaves out: its time from the iteration table, its energy
    # from the same cost the simulator charged (every prompt has ``prompt`` tokens).
    it = res.iterations_spec
    admitted = it.loc[it["admitted"] > 0, "admitted"].astype(int)
    pre_j = sum(cost.prefill(np.full(n, prompt), draft=True).energy_j for n in admitted)
    pre_s = float(it["prefill_s"].sum())
    return {
        "tokens_per_s": m["throughput_tokens_per_s"],
        "tpot_s": m["tpot_p50_s"],
        "j_per_token": m["energy_j_per_token"],
        "mean_batch": m["mean_batch"],
        "prefill_time_share": pre_s / m["time_s"],
        "decode_tokens_per_s": m["tokens"] / (m["time_s"] - pre_s),
        "decode_j_per_token": (m["energy_j"] - pre_j) / m["tokens"],
        "plain_tokens_per_s": m["plain_throughput_tokens_per_s"],
        "plain_j_per_token": m["plain_energy_j_per_token"],
    }


def deployment_tp(
    target: ModelCard,
    draft: ModelCard,
    hw: HardwareCard,
    *,
    batch: int,
    context: int,
    max_gamma: int,
    fixed: int = 0,
) -> int:
    """A row's own tensor parallelism: ``fixed`` when not 0, else :func:`auto_tp` of
    ``batch`` alone, so that it does not depend on the other batches of the grid."""
    if fixed:
        return int(fixed)
    return auto_tp(target, draft, hw, batch=batch, context=context, max_gamma=max_gamma)


def model_rows(
    target: ModelCard,
    draft: ModelCard,
    hw: HardwareCard,
    *,
    alpha: float,
    batches: Sequence[int],
    context: int,
    gamma: int,
    max_gamma: int,
    fixed_tp: int = 0,
) -> pd.DataFrame:
    """The batch model's rows of one (hardware, draft): plain, ``gamma`` and the best gamma
    up to ``max_gamma`` per batch, each batch on its own :func:`deployment_tp`."""
    batches = sorted({int(b) for b in batches})
    kw = dict(context=context, max_gamma=max_gamma, fixed=fixed_tp)
    tps = {b: deployment_tp(target, draft, hw, batch=b, **kw) for b in batches}
    grid = pd.concat(
        [
            batch_model(
                target,
                draft,
                hw,
                tp=tp,
                alpha=alpha,
                batches=np.asarray([b for b in batches if tps[b] == tp], dtype=np.int64),
                context=context,
                max_gamma=max_gamma,
            ).assign(tensor_parallel=tp)
            for tp in dict.fromkeys(tps.values())
        ],
        ignore_index=True,
    )
    plain = grid[grid["gamma"] == 0].set_index("batch")
    best = grid.loc[grid.groupby("batch")["tokens_per_s"].idxmax()].assign(policy="best gamma")
    fixed = grid[grid["gamma"] == gamma].assign(policy=f"gamma = {gamma}")
    parts = (plain.reset_index().assign(policy="plain"), fixed, best)
    rows = pd.concat([x.sort_values("batch", kind="stable") for x in parts])
    base = plain.loc[rows["batch"]]
    rows["speedup"] = rows["tokens_per_s"].to_numpy() / base["tokens_per_s"].to_numpy()
    rows["energy_ratio"] = rows["j_per_token"].to_numpy() / base["j_per_token"].to_numpy()
    return rows.reset_index(drop=True)


def serving_check(
    target: ModelCard,
    draft: ModelCard,
    hw: HardwareCard,
    *,
    alpha: float,
    batch: int,
    context: int,
    gamma: int,
    max_gamma: int,
    output: int,
    fixed_tp: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """The serving simulation at ``batch`` (:func:`serving_run`) on the fewest devices its
    memory model allows (at least the batch model's :func:`deployment_tp`; ``fixed_tp`` when
    not 0), with the batch model's own values on that deployment beside it."""
    first = deployment_tp(
        target, draft, hw, batch=batch, context=context, max_gamma=max_gamma, fixed=fixed_tp
    )
    cost = CardCost(
        deployment=Deployment(target=target, hardware=hw, tensor_parallel=first), draft=draft
    )
    need = batch * (context + output - output // 2 + max_gamma + 1)
    tp = int(fixed_tp) or serving_tp(cost, tokens=need)
    s = serving_run(
        on_devices(cost, tp),
        alpha=alpha,
        gamma=gamma,
        batch=batch,
        context=context,
        output=output,
        rng=rng,
    )
    twin = batch_model(
        target,
        draft,
        hw,
        tp=tp,
        alpha=alpha,
        batches=np.asarray([batch], dtype=np.int64),
        context=context,
        max_gamma=gamma,
    ).iloc[-1]  # the last gamma of the grid: the serving policy's
    s["model_tokens_per_s"] = float(twin["tokens_per_s"])
    s["model_j_per_token"] = float(twin["j_per_token"])
    return _serving_rows(s, gamma=gamma).assign(tensor_parallel=tp)


def _serving_rows(s: dict[str, float], *, gamma: int) -> pd.DataFrame:
    """The speculative run and its plain twin, as rows beside the batch model's."""
    return pd.DataFrame(
        [
            {
                "policy": f"gamma = {gamma}",
                "gamma": gamma,
                "tokens_per_s": s["tokens_per_s"],
                "tpot_s": s["tpot_s"],
                "j_per_token": s["j_per_token"],
                "mean_batch": s["mean_batch"],
                "prefill_time_share": s["prefill_time_share"],
                "decode_tokens_per_s": s["decode_tokens_per_s"],
                "decode_j_per_token": s["decode_j_per_token"],
                "model_tokens_per_s": s["model_tokens_per_s"],
                "model_j_per_token": s["model_j_per_token"],
                "speedup": s["tokens_per_s"] / s["plain_tokens_per_s"],
                "energy_ratio": s["j_per_token"] / s["plain_j_per_token"],
            },
            {
                "policy": "plain",
                "gamma": 0,
                "tokens_per_s": s["plain_tokens_per_s"],
                "j_per_token": s["plain_j_per_token"],
                "mean_batch": s["mean_batch"],
                "speedup": 1.0,
                "energy_ratio": 1.0,
            },
        ]
    )
