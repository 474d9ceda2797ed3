"""Where speculation stops paying: the batch and the request rate at which each proposer's
speedup crosses 1, on several cards, stacks and model pairs.

For every deployment (a card, optionally ``card@stack`` with a runtime profile of
``models/runtime/`` or, after the stack profiles land, a stack slug: passed through as
``Deployment.runtime``, never read here) and every target with its proposers:

- **a draft model** (Vicuna-7B drafted by llama-68m, Llama-3.1-70B by Llama-3.2-1B) at an
  *assumed* acceptance (``draft_alphas``: no per-rank measurement of these pairs exists here);
- **heads** (``heads``: head cards of ``models/heads/``, by default the Medusa heads
  ``medusa-vicuna-7b-v1.3``; each with the target it was trained for, which must be one of
  ``targets``, and labelled by its kind: "Medusa heads", "EAGLE head", "MTP module"): chains
  and the best tree of ``tree_budget`` nodes at batch 1
  (:func:`specsim.policies.tree_optimizer.optimize_tree`, Sequoia's dynamic program);
- **n-gram lookup**, acceptance measured on the committed corpora
  (``models/measured/ngram/corpora-test/``);

each at every lookahead of ``gammas`` (chains: width-1 trees) is served by the one serving engine
(:func:`specsim.sim.serving.tree_serving.simulate_tree_serving`, with its plain twin):

1. **batch axis**: a closed batch of ``B`` requests (all arriving at once, ``max_batch = B``,
   ``prompt`` tokens in and ``output`` out), so that every pass runs ``B`` sequences;
   ``speedup`` is the engine's throughput over the twin's (prefill included) and
   ``tpot_speedup`` the twin's median TPOT over the run's;
2. **rate axis**: Poisson arrivals at ``rate_fractions`` of plain decoding's capacity (the
   twin's tokens/s in the largest closed batch up to ``rate_max_batch``, over ``output``),
   served with
   ``max_batch = rate_max_batch``, ``rate_requests`` requests, the
   candidate best at batch 1 (what a user tuned at low load would deploy). Below saturation the
   throughput is the arrival rate for both, so its speedup sits at 1 there by conservation;
   the TPOT speedup is the one that crosses.

Each point is ``replicates`` independent runs (common seeds along the axis and across the
candidates and rules, so their differences are paired); per batch the
proposer's curve is its best candidate there (the envelope), and the crossing of 1, with its
interval from the standard errors, is :func:`specsim.capacity.crossover.crossing` (log-linear
between the bracketing points). The summary names the best candidate on each side. Assumed:
the draft alphas; everything else is cards and measured tables. The intervals are the sampling
error only; the interpolation between grid points is not in them (a finer ``batches`` grid
narrows it). A rate sweep capped at ``rate_max_batch`` below every batch crossing cannot cross:
the service never runs a batch where speculation loses. At the default cap, 64 sequences
with 128 requests a run (enough for the queue to reach the cap near capacity), the candidates
tuned at batch 1 reach batches where they lose on the A100, so the default run shows rate
crossings there; ``studies/README.md`` states what it shows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.capacity.crossover import closed_batch, crossing, replicate, summarize
from specsim.cards import load_model
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import optimize_tree
from specsim.proposers import DraftModel, Heads, NGram, Proposer, RankAcceptance
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
from specsim.sim.workload.arrivals import PoissonWorkload

from ._common import md_table
from ._crossover_config import Config, deployment_of, heads_of
from ._crossover_figures import card_figure
from ._crossover_policies import card_cost, policy_figure, policy_rows
from .proposers import _acceptance_file

__all__ = ["Config", "run", "figures", "summary", "crossings"]

METRICS = ("speedup", "tpot_speedup")


def _proposers(cfg: Config, i: int, dep: Deployment) -> dict[str, Proposer]:
    """Each proposer of target ``i`` with its candidates (chains, and the heads' best tree)."""
    t = dep.target
    alpha = float(cfg.draft_alphas[i])
    assumed = RankAcceptance(accept=((alpha,),), source=f"assumed {alpha}")
    out: dict[str, Proposer] = {
        "draft model": DraftModel(card=load_model(cfg.drafts[i]), acceptance=assumed),
        "n-gram": NGram(acceptance=_acceptance_file(cfg.ngram_acceptance)),
    }
    return {**out, **heads_of(cfg).get(t.slug, {})}


def _chain(gamma: int) -> tuple[int, ...]:
    return tuple(range(-1, gamma - 1))


def _candidates(cfg: Config, proposer: Proposer, dep: Deployment, fast: bool) -> dict[str, tuple]:
    gammas = cfg.fast_gammas if fast else cfg.gammas
    out = {f"chain {g}": _chain(int(g)) for g in gammas}
    if isinstance(proposer, Heads):
        best = optimize_tree(
            proposer=proposer,
            deployment=dep,
            batch=1,
            budget=int(cfg.tree_budget),
            context=cfg.prompt,
        ).best
        out[f"tree {best.nodes}"] = tuple(best.parents)
    return out


def _serve(
    proposer: Proposer, dep: Deployment, parents: tuple, workload: Any, max_batch: int
) -> TreeServingConfig:
    return TreeServingConfig(
        workload=workload, proposer=proposer, deployment=dep, max_batch=max_batch, parents=parents
    )


def _metrics(config: TreeServingConfig, rng: np.random.Generator) -> dict[str, float]:
    m = simulate_tree_serving(config, rng).metrics()
    return {
        "speedup": float(m["speedup"]),
        "tpot_speedup": float(m["tpot_speedup"]),
        "plain_tokens_per_s": float(m["plain_throughput_tokens_per_s"]),
    }


def _one_proposer(
    cfg: Config, *, dep: Deployment, proposer: Proposer, fast: bool, rng: np.random.Generator
) -> pd.DataFrame:
    """Both sweeps of one proposer on one deployment: rows tagged ``axis``."""
    batches = cfg.fast_batches if fast else cfg.batches
    reps = int(cfg.fast_replicates if fast else cfg.replicates)
    frames = []
    cands = _candidates(cfg, proposer, dep, fast)
    seed = int(rng.integers(2**63 - 1))  # the same draws for every candidate: paired
    for name, parents in cands.items():

        def at_batch(b: float, r: np.random.Generator, parents: tuple = parents) -> dict:
            wl = closed_batch(int(b), prompt=cfg.prompt, output=cfg.output)
            return _metrics(_serve(proposer, dep, parents, wl, int(b)), r)

        d = replicate(at_batch, list(batches), replicates=reps, rng=np.random.default_rng(seed))
        frames.append(d.assign(axis="batch", candidate=name))
    closed = pd.concat(frames, ignore_index=True)
    # Plain capacity at the largest closed batch within the rate sweep's cap.
    top = closed[closed["x"] == max(b for b in batches if b <= cfg.rate_max_batch)]
    capacity = float(top["plain_tokens_per_s"].mean()) / cfg.output  # requests/s, plain
    first = closed[closed["x"] == min(batches)].groupby("candidate", sort=False)["speedup"].mean()
    pick = str(first.idxmax())
    fractions = cfg.fast_rate_fractions if fast else cfg.rate_fractions
    n_req = int(cfg.fast_rate_requests if fast else cfg.rate_requests)

    def at_rate(rate: float, r: np.random.Generator) -> dict:
        wl = PoissonWorkload(
            rate_per_s=rate,
            requests=n_req,
            prompt_tokens=(cfg.prompt, cfg.prompt),
            output_tokens=(cfg.output, cfg.output),
        )
        return _metrics(_serve(proposer, dep, cands[pick], wl, int(cfg.rate_max_batch)), r)

    rates = [capacity * float(f) for f in fractions]
    swept = replicate(at_rate, rates, replicates=reps, rng=rng)
    return pd.concat([closed, swept.assign(axis="rate", candidate=pick)], ignore_index=True)


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """One row per (deployment, target, proposer, candidate, axis, x, replicate)."""
    cfg, frames = config, []
    for spec in cfg.deployments:
        for i, target in enumerate(cfg.targets):
            dep = deployment_of(spec, target=target, tensor_parallel=int(cfg.tensor_parallel[i]))
            for name, proposer in _proposers(cfg, i, dep).items():
                d = _one_proposer(cfg, dep=dep, proposer=proposer, fast=fast, rng=rng)
                card, _, stack = spec.partition("@")
                frames.append(
                    d.assign(
                        deployment=spec,
                        card=card,
                        stack=stack or "card default",
                        target=target,
                        proposer=name,
                    )
                )
    frames.append(_policies(cfg, rng, fast))
    return pd.concat(frames, ignore_index=True)


def _policies(cfg: Config, rng: np.random.Generator, fast: bool) -> pd.DataFrame:
    """The engine rules on the first deployment: rows tagged ``axis = "policy"``."""
    spec = cfg.deployments[0]
    card, _, stack = spec.partition("@")
    target, draft = cfg.policy_pair
    d = policy_rows(
        cost=card_cost(target=target, draft=draft, hardware=card, runtime=stack or None),
        alpha=float(cfg.policy_alpha),
        gamma=int(cfg.policy_gamma),
        off_batch=int(cfg.policy_off_batch),
        batches=tuple(cfg.fast_batches if fast else cfg.batches),
        prompt=cfg.prompt,
        output=cfg.output,
        replicates=int(cfg.fast_replicates if fast else cfg.replicates),
        rng=rng,
    )
    return d.assign(
        axis="policy",
        deployment=spec,
        card=card,
        stack=stack or "card default",
        target=target,
        proposer="draft model",
        candidate=d["rule"],
    )


KEYS = ["deployment", "card", "stack", "target", "proposer", "axis"]


def envelope(df: pd.DataFrame) -> pd.DataFrame:
    """Per (deployment, target, proposer, axis, x) and metric: the candidate with the highest
    mean there, its mean and standard error (columns ``metric``, ``mean``, ``se``, ``best``)."""
    agg = summarize(df[df["axis"] != "policy"], by=[*KEYS, "candidate", "x"], metrics=METRICS)
    rows = []
    for m in METRICS:
        i = agg.groupby([*KEYS, "x"], sort=False)[m].idxmax()
        best = agg.loc[i, [*KEYS, "x", "candidate", m, f"{m}_se"]]
        best = best.rename(columns={m: "mean", f"{m}_se": "se", "candidate": "best"})
        rows.append(best.assign(metric=m))
    return pd.concat(rows, ignore_index=True)


def crossings(df: pd.DataFrame) -> pd.DataFrame:
    """Per (deployment, target, proposer, axis, metric): where the envelope crosses 1, its
    interval, and the best candidate on each side (none where that side is empty)."""
    env, rows = envelope(df), []
    for key, g in env.groupby([*KEYS, "metric"], sort=False):
        g = g.sort_values("x")
        c = crossing(g["x"].to_numpy(), g["mean"].to_numpy(), g["se"].to_numpy())
        below, above = g[g["x"] < c.at], g[g["x"] > c.at]
        rows.append(
            {
                **dict(zip([*KEYS, "metric"], key, strict=True)),
                "kind": c.kind,
                "at": c.at,
                "low": c.low,
                "high": c.high,
                "best_below": below["best"].iloc[-1] if len(below) else "none",
                "best_above": above["best"].iloc[0] if len(above) else "none",
            }
        )
    return pd.DataFrame(rows)


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """One figure per card: per (target, stack) the envelope speedups against batch (top) and
    arrival rate (bottom), a 1x line and each crossing's interval on it."""
    env, cross = envelope(df), crossings(df)
    out = {
        f"crossover_{card}": card_figure(env[env["card"] == card], cross[cross["card"] == card])
        for card in dict.fromkeys(env["card"])
    }
    pol = df[df["axis"] == "policy"]
    r0 = pol.iloc[0]
    out["crossover_policies"] = policy_figure(
        pol,
        title=f"Engine lookahead rules against the batch: {r0['target']} on {r0['deployment']}",
    )
    return out


def _where(r: pd.Series, unit: str) -> str:
    if r["kind"] == "crosses":
        return f"crosses 1 at {r['at']:.3g} {unit} (95% interval {r['low']:.3g} to {r['high']:.3g})"
    return "stays above 1" if r["kind"] == "never" else "is below 1 from the first point"


def summary(df: pd.DataFrame) -> str:
    """The crossings per proposer and metric, on each axis, with their intervals and the best
    candidate on each side."""
    cross = crossings(df)
    lines = ["### Where speculation stops paying", ""]
    pol = df[df["axis"] == "policy"]
    rules = pol.pivot_table(index="rule", columns="x", values="speedup", aggfunc="mean", sort=False)
    rules.columns = [f"batch {int(c)}" for c in rules.columns]
    cols = ["deployment", "target", "proposer", "axis", "metric", "kind", "at", "low", "high"]
    best = cross["best_below"] + " | " + cross["best_above"]
    lines += [md_table(cross[cols].assign(best_below_above=best)), ""]
    for (dep, target, proposer), g in cross.groupby(
        ["deployment", "target", "proposer"], sort=False
    ):
        at = g.set_index(["axis", "metric"])
        tput, tpot = at.loc[("batch", "speedup")], at.loc[("batch", "tpot_speedup")]
        rate = at.loc[("rate", "tpot_speedup")]
        lines.append(
            f"- {dep}, {target}, {proposer}: against the batch the throughput speedup "
            f"{_where(tput, 'sequences')} and the TPOT speedup {_where(tpot, 'sequences')}; "
            f"against the arrival rate the TPOT speedup {_where(rate, 'requests/s')}; best "
            f"{tput['best_below']} below the throughput crossing, {tput['best_above']} above."
        )
    r0 = pol.iloc[0]
    lines += [
        "",
        f"Engine rules, throughput speedup by batch ({r0['target']} on {r0['deployment']}):",
        "",
        md_table(rules.reset_index()),
    ]
    return "\n".join(lines) + "\n"
