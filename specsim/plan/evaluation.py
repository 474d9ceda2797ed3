"""Each option of a plan evaluated at the load: its best tree, then its row of numbers.

For every option the tree optimizer (:func:`specsim.policies.tree_optimizer.optimize_tree`,
what ``specsim tree`` runs) picks the tree (a chain of ``k`` is the one-rank case) with the
most tokens per second at the load's batch on the deployment. Then:

- a closed batch (``--batch N``): the row is that plan's closed form (its expected tokens
  per pass, the pass and drafting times and energies on the cards); no queue, no TTFT;
- a request rate (``--rate R``): the same requests are served on the one serving engine
  (:func:`specsim.sim.config.config_compose.simulate_run`, what ``specsim simulate`` runs for a
  composed config), first without speculation (whose mean running batch is the batch the
  trees are chosen for), then with each option's tree, with common random numbers (the same
  seed, so the same arrivals and lengths). Percentiles carry the order-statistic interval of
  :func:`specsim.stats.quantile_interval` (batched, for a queue's correlated
  latencies); throughput, energy per token and cost per token the ratio-estimator interval of
  :func:`specsim.stats.ratio_interval` over blocks of consecutive iterations; the mean
  accepted length its own standard error.

The KV cache holds what the device's memory leaves after the weights
(:meth:`specsim.sim.CardCost.kv_capacity_tokens`). Every interval is 95%.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specsim.plan.options import Option, PlanRequest
from specsim.policies.tree_optimizer import TreeOptimum, TreePlan, evaluate_tree, optimize_tree
from specsim.proposers import Proposer
from specsim.sim.config.config_compose import simulate_run
from specsim.sim.results.records import ServingResult, goodput
from specsim.sim.serving.tree_serving import TreeServingConfig
from specsim.stats import quantile_interval, ratio_interval

__all__ = ["BLOCKS", "Estimate", "Row", "closed_row", "plan_name", "serve", "served_row"]

BLOCKS = 10
"""Blocks of consecutive iterations (and requests) the intervals are computed over."""
BUDGET = 32
"""The most tree nodes an option may verify per sequence (``specsim tree``'s default)."""


@dataclass(frozen=True)
class Estimate:
    """A value and its 95% interval (``low == high == value`` for a closed form; ``high``
    infinite where the sample is too small to bound a far percentile from above; both NaN
    where the sample is too small for any interval that holds the value: :attr:`bounded`)."""

    value: float
    low: float
    high: float

    @classmethod
    def exact(cls, value: float) -> Estimate:
        return cls(value, value, value)

    @classmethod
    def unbounded(cls, value: float) -> Estimate:
        """The value alone: too few observations for an interval."""
        return cls(value, math.nan, math.nan)

    @property
    def bounded(self) -> bool:
        """Whether the value has an interval (a closed form's is the value itself)."""
        return not (math.isnan(self.low) or math.isnan(self.high))

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.value * factor, self.low * factor, self.high * factor)

    def as_dict(self) -> dict[str, float | None]:
        names = ("value", "low", "high")
        return {k: (v if math.isfinite(v) else None) for k, v in zip(names, self, strict=True)}

    def __iter__(self) -> Any:
        return iter((self.value, self.low, self.high))


@dataclass(frozen=True, kw_only=True)
class Row:
    """One option's numbers at the load (module docstring). ``tree``: the verified tree's
    parents (empty: no speculation); ``goodput_requests_per_s``: requests per second meeting
    both latency targets (None without an SLO); ``cost_per_mtok``: dollars per million output
    tokens (None without a price); ``stable``: the engine's verdict on the queue (None in a
    closed batch)."""

    label: str
    kind: str
    tree: tuple[int, ...]
    plan: str
    tpot_p50_s: Estimate
    tpot_p99_s: Estimate
    ttft_p50_s: Estimate | None
    ttft_p99_s: Estimate | None
    throughput_tokens_per_s: Estimate
    energy_per_token_j: Estimate | None
    accepted_length: Estimate
    goodput_requests_per_s: float | None
    cost_per_mtok: Estimate | None
    stable: bool | None
    stability_reason: str
    acceptance_source: str
    measured: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if isinstance(value, Estimate):
                value = value.as_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


def plan_name(tree: tuple[int, ...]) -> str:
    """``"none"``, ``"chain k = 4"`` or ``"tree of 12 nodes, depth 5"``."""
    if not tree:
        return "none"
    depth, depths = 0, [0] * len(tree)
    for i, p in enumerate(tree):
        depths[i] = 1 if p < 0 else depths[p] + 1
        depth = max(depth, depths[i])
    if depth == len(tree):
        return f"chain k = {depth}"
    return f"tree of {len(tree)} nodes, depth {depth}"


def best_plan(option: Option, request: PlanRequest, *, batch: int, context: int) -> TreeOptimum:
    """The option's best tree at ``batch`` sequences of ``context`` cached tokens: its fixed
    tree (:attr:`Option.fixed <specsim.plan.options.Option.fixed>`) when the user gave one,
    whether or not it beats no speculation, else the tree optimizer's."""
    if option.proposer is None:
        raise ValueError("no speculation has no tree to choose")
    if option.fixed is not None:
        kw: dict[str, Any] = {"proposer": option.proposer, "deployment": request.deployment}
        kw["batch"] = batch
        tree = evaluate_tree(option.fixed, kind="fixed", context=context, **kw)
        none = evaluate_tree((), kind="no speculation", context=context, **kw)
        return TreeOptimum(best=tree, chain=tree, kary=tree, none=none)
    return optimize_tree(
        proposer=option.proposer,
        deployment=request.deployment,
        batch=batch,
        budget=BUDGET,
        context=context,
    )


def devices(option: Option, request: PlanRequest) -> int:
    """The accelerators an option runs on, each billed: the target's tensor-parallel group,
    plus a draft model's own devices where it is placed off them (``own-device``)."""
    dep = request.deployment
    p = option.proposer
    if option.kind != "draft" or dep.draft_placement == "shared" or p is None:
        return dep.tensor_parallel
    own = getattr(p, "deployment", None)  # a draft model says where it runs
    return dep.tensor_parallel + (own(dep).tensor_parallel if callable(own) else 1)


def _cost(request: PlanRequest, throughput: Estimate, *, gpus: int) -> Estimate | None:
    """Dollars per million tokens: the option's GPU-hours over its output tokens."""
    if request.price_per_gpu_hour is None:
        return None
    per_s = request.price_per_gpu_hour * gpus / 3600.0
    if not throughput.bounded:
        v = throughput.value
        return Estimate.unbounded(per_s * 1e6 / v if v > 0 else math.inf)
    v, lo, hi = throughput
    inv = (per_s * 1e6 / x if x > 0 else math.inf for x in (v, hi, lo))
    return Estimate(*inv)


def closed_row(option: Option, plan: TreePlan, request: PlanRequest) -> Row:
    """A closed batch's row from the plan's closed form (no queue: no TTFT; a TTFT target is
    not checked, and the weak assumptions say so)."""
    tpot = Estimate.exact(plan.time_s / plan.tokens_per_pass)
    thr = Estimate.exact(plan.tokens_per_s)
    good = None  # requests per second finishing within the TPOT target: all, or none
    if request.slo_tpot_p99_s is not None or request.slo_ttft_p99_s is not None:
        ok = request.slo_tpot_p99_s is None or tpot.value <= request.slo_tpot_p99_s
        good = thr.value / request.load.mean_output_tokens if ok else 0.0
    return Row(
        label=option.label,
        kind=option.kind,
        tree=plan.parents,
        plan=plan_name(plan.parents),
        tpot_p50_s=tpot,
        tpot_p99_s=tpot,
        ttft_p50_s=None,
        ttft_p99_s=None,
        throughput_tokens_per_s=thr,
        energy_per_token_j=Estimate.exact(plan.energy_per_token_j),
        accepted_length=Estimate.exact(plan.tokens_per_pass),
        goodput_requests_per_s=good,
        cost_per_mtok=_cost(request, thr, gpus=devices(option, request)),
        stable=None,
        stability_reason="a closed batch: no arrivals, no queue",
        acceptance_source=option.acceptance_source,
        measured=option.measured,
    )


def serving_config(
    request: PlanRequest, proposer: Proposer, tree: tuple[int, ...]
) -> TreeServingConfig:
    """The serving run of ``tree`` drafted by ``proposer`` at the request's rate, its KV
    cache what the weights leave on one device."""
    base = TreeServingConfig(
        workload=request.load.served(requests=request.requests),
        proposer=proposer,
        deployment=request.deployment,
        parents=tree,
        max_batch=request.served_max_batch,
        plain_twin=False,
    )
    try:
        kv = base.card_cost().kv_capacity_tokens()
    except ValueError as exc:
        dep = request.deployment
        raise ValueError(
            f"{dep.target.slug} on {dep.hardware.slug}: {exc}; add --tensor-parallel or "
            "smaller --weights"
        ) from None
    return dataclasses.replace(base, kv_capacity_tokens=kv)


def serve(
    request: PlanRequest, proposer: Proposer, tree: tuple[int, ...], *, plain: bool = False
) -> ServingResult:
    """Serve the request's workload (seeded by ``request.seed``: every option sees the same
    arrivals); ``plain``: the same requests without speculation."""
    cfg = serving_config(request, proposer, tree)
    return simulate_run(cfg, np.random.default_rng(request.seed), plain=plain)


def _blocks(values: np.ndarray, k: int) -> np.ndarray:
    n = values.shape[0] // k * k
    return values[:n].reshape(k, -1).sum(axis=1)


def _ratio(num: np.ndarray, den: np.ndarray) -> Estimate:
    """A ratio of sums of non-negative amounts, its interval clipped at 0 (a normal
    interval on few blocks can reach below; the quantity cannot); under two blocks, the
    value alone."""
    k = min(BLOCKS, num.shape[0])
    if k < 2:
        return Estimate.unbounded(float(num.sum() / den.sum()))
    v, lo, hi = ratio_interval(_blocks(num, k), _blocks(den, k)).bounds()
    return Estimate(v, max(lo, 0.0), hi)


def _quantile(x: np.ndarray, q: float) -> Estimate:
    """The sample percentile and its order-statistic interval; the value alone where the
    sample is too small for an interval bounded on either side or holding the value."""
    if x.shape[0] == 0:
        return Estimate(math.inf, math.inf, math.inf)
    b = BLOCKS if x.shape[0] >= 4 * BLOCKS else None
    lo, hi = quantile_interval(x, q / 100, batches=b)
    v = float(np.percentile(x, q))
    if not (lo <= v <= hi) or math.isinf(lo) and math.isinf(hi):
        return Estimate.unbounded(v)
    return Estimate(v, lo, hi)


def latencies(req: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-request TTFT and TPOT (multi-token requests), in arrival order, as the serving
    record defines them (:meth:`specsim.sim.results.records.ServingResult.metrics`)."""
    req = req.sort_values("arrival_s")
    done = np.isfinite(req["finish_s"].to_numpy())
    req = req[done]
    ttft = (req["first_token_s"] - req["arrival_s"]).to_numpy()
    n = req["output_tokens"].to_numpy()
    multi = n > 1
    tpot = (req["finish_s"] - req["first_token_s"]).to_numpy()[multi] / (n[multi] - 1)
    return ttft, tpot


def served_row(
    option: Option, result: ServingResult, request: PlanRequest, *, tree: tuple[int, ...]
) -> Row:
    """A serving run's row (module docstring)."""
    req, it = result.requests_spec, result.iterations_spec
    m = result.metrics()
    ttft, tpot = latencies(req)
    ends = it["end_s"].to_numpy(dtype=float)
    wall = np.diff(np.concatenate([[float(req["arrival_s"].min())], ends]))
    emitted = it["emitted"].to_numpy(dtype=float)
    thr = _ratio(emitted, wall)
    energy = it["energy_j"].to_numpy(dtype=float)
    work = it["batch"].to_numpy(dtype=float) > 0
    acc = _ratio(emitted[work], it["batch"].to_numpy(dtype=float)[work])
    good = None
    if request.slo_ttft_p99_s is not None or request.slo_tpot_p99_s is not None:
        good = goodput(
            req,
            ttft_s=request.slo_ttft_p99_s or math.inf,
            tpot_s=request.slo_tpot_p99_s or math.inf,
        )
    return Row(
        label=option.label,
        kind=option.kind,
        tree=tree,
        plan=plan_name(tree),
        tpot_p50_s=_quantile(tpot, 50),
        tpot_p99_s=_quantile(tpot, 99),
        ttft_p50_s=_quantile(ttft, 50),
        ttft_p99_s=_quantile(ttft, 99),
        throughput_tokens_per_s=thr,
        energy_per_token_j=None if np.isnan(energy).all() else _ratio(energy, emitted),
        accepted_length=acc,
        goodput_requests_per_s=good,
        cost_per_mtok=_cost(request, thr, gpus=devices(option, request)),
        stable=m["stable"],
        stability_reason=str(m["stability_reason"]),
        acceptance_source=option.acceptance_source,
        measured=option.measured,
        extra={"mean_batch": float(m["mean_batch"]), "utilization": m["utilization"]},
    )
