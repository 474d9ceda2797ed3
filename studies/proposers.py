"""Proposers and token trees across the batch: which drafting pays, on which machine, and when.

One target (Vicuna-7B v1.3, the target of the published Medusa heads) on two
accelerators, batch 1 to 64, every sequence at one context. Each proposer's
chain and its best tree (:func:`specsim.policies.tree_optimizer.optimize_tree`: Sequoia's dynamic
program, Chen et al. 2024, Section 3.2, priced on the cards at each batch) are
compared with plain decoding:

- **Medusa heads** (``models/heads/medusa-vicuna-7b-v1.3.toml``): five heads,
  one evaluation per pass costing 3.65 target layers; acceptance by depth and
  rank from the published top-k accuracies (Cai et al. 2024);
- **the EAGLE head** (``models/heads/eagle-vicuna-7b-v1.3.toml``): one decoder
  layer and a 2d-to-d projection, stepped once per depth, each step 1.81 target
  layers with the shared LM head; acceptance of the top candidate by depth from
  EAGLE's published n-alpha (Li et al. 2024; depths 3 and 4 interpolated, an
  assumption the card states); no rank beyond the first is published, so it
  drafts chains only;
- **n-gram lookup**: no model, a measured host search per pass
  (:mod:`specsim.proposers.lookup`); acceptance measured on the committed text
  corpora's test split (``models/measured/ngram/corpora-test/``, word tokens);
- **a draft model** (llama-68m, SpecInfer's and Sequoia's draft for 7B
  targets): a chain at an *assumed* acceptance ``draft_alpha`` (no per-rank
  measurement of this pair exists here, so no tree is claimed for it).

Per (accelerator, batch, series): tokens/s over the batch, energy per emitted
token, the share of verified positions discarded (off the accepted path), the
tree's size and depth; the winner (most tokens/s) is marked per batch. As the
batch grows verification stops being free and the best tree shrinks towards a
chain and then to no speculation. The expected tokens per pass are
:func:`specsim.theory.expected_tokens_tree` (Sequoia's positional model);
``tests/sim/stream/test_sim_trees.py`` checks them against the tree simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.cards import load_hardware, load_head, load_model
from specsim.cards.files import packaged_root
from specsim.cost.deployment import Deployment
from specsim.plots.figures import describe, figure, legend_outside, plot_lines
from specsim.policies.tree_optimizer import TreePlan, best_trees, optimize_tree
from specsim.proposers import (
    DraftModel,
    Heads,
    NGram,
    Proposer,
    RankAcceptance,
    load_acceptance,
)

from ._common import check_positive_int, check_probability, md_table, setting

__all__ = ["Config", "run", "figures", "summary"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study proposers --list-keys``); checked on construction."""

    target: str = "vicuna-7b-v1.3"
    draft: str = "llama-68m"
    draft_alpha: float = setting(
        0.6, "assumed acceptance of the draft model (a what-if, labelled as such)", "probability"
    )
    heads: str = setting(
        "medusa-vicuna-7b-v1.3", "prediction-head card drafting trees (models/heads/, Medusa)"
    )
    eagle: str = setting(
        "eagle-vicuna-7b-v1.3", "autoregressive head card drafting chains (models/heads/, EAGLE)"
    )
    ngram_acceptance: str = setting(
        "measured/ngram/corpora-test/accept-corpora-test.toml",
        "acceptance by depth and rank of n-gram lookup (a file under models/)",
    )
    hardware: tuple[str, ...] = ("a100-80gb", "h100-sxm")
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    context: int = 512
    budget: int = setting(32, "most tree nodes a pass may verify", "nodes")
    max_depth: int = setting(8, "deepest tree considered", "tokens")
    fast_budget: int = 12

    def __post_init__(self) -> None:
        check_probability(self.draft_alpha, "draft_alpha")
        for key in ("batches", "context", "budget", "max_depth", "fast_budget"):
            check_positive_int(getattr(self, key), key)
        if not self.hardware:
            raise ValueError("hardware must name at least one accelerator card")


SERIES = (
    "no speculation",
    "draft model, chain (assumed alpha)",
    "Medusa heads, chain",
    "Medusa heads, best tree",
    "EAGLE head, chain",
    "n-gram, chain",
    "n-gram, best tree",
)


def _acceptance_file(path: str) -> RankAcceptance:
    root = packaged_root()
    candidate = root / path if root is not None else None
    return load_acceptance(candidate if candidate is not None and candidate.is_file() else path)


def _row(plan: TreePlan, **key: Any) -> dict[str, Any]:
    return {
        **key,
        "nodes": plan.nodes,
        "depth": plan.depth,
        "parents": str(list(plan.parents)),
        "tokens_per_pass": plan.tokens_per_pass,
        "tokens_per_s": plan.tokens_per_s,
        "energy_per_token_mj": plan.energy_per_token_j * 1e3,
        "discarded_share": plan.discarded_share,
        "draft_share": plan.draft_s / plan.time_s,
    }


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """One row per (accelerator, batch, series); ``rng`` is unused (no sampling here: the
    tree simulator's check lives in the tests)."""
    del rng
    cfg = config
    target = load_model(cfg.target)
    budget = cfg.fast_budget if fast else cfg.budget
    batches = cfg.batches[::2] if fast else cfg.batches
    assumed = RankAcceptance(accept=((cfg.draft_alpha,),), source=f"assumed {cfg.draft_alpha}")
    draft = DraftModel(card=load_model(cfg.draft), acceptance=assumed)
    heads = Heads(card=load_head(cfg.heads))
    eagle = Heads(card=load_head(cfg.eagle))
    eagle.check_target(target)
    ngram = NGram(acceptance=_acceptance_file(cfg.ngram_acceptance))
    proposers: dict[str, Proposer] = {"Medusa heads": heads, "n-gram": ngram}
    depth = {"Medusa heads": min(cfg.max_depth, heads.card.max_depth), "n-gram": cfg.max_depth}
    trees = {
        name: best_trees(p.acceptance, budget=budget, max_depth=depth[name])
        for name, p in proposers.items()
    }
    rows: list[dict[str, Any]] = []
    for slug in cfg.hardware:
        hw = load_hardware(slug)
        for b in batches:
            key = {"hardware": slug, "batch": int(b)}
            common: dict[str, Any] = {
                "deployment": Deployment(target=target, hardware=hw),
                "batch": int(b),
                "context": cfg.context,
            }
            d = optimize_tree(
                proposer=draft, budget=budget, max_depth=cfg.max_depth, candidates=[()], **common
            )
            rows.append(_row(d.none, series="no speculation", **key))
            rows.append(_row(d.chain, series="draft model, chain (assumed alpha)", **key))
            # The EAGLE card publishes rank 0 only: its best tree is a chain.
            e = optimize_tree(
                proposer=eagle, budget=budget, max_depth=cfg.max_depth, candidates=[()], **common
            )
            rows.append(_row(e.chain, series="EAGLE head, chain", **key))
            for name, p in proposers.items():
                o = optimize_tree(
                    proposer=p,
                    budget=budget,
                    max_depth=depth[name],
                    candidates=trees[name],
                    **common,
                )
                rows.append(_row(o.chain, series=f"{name}, chain", **key))
                rows.append(_row(o.best, series=f"{name}, best tree", **key))
    df = pd.DataFrame(rows)
    df.insert(0, "target", cfg.target)
    best = df.groupby(["hardware", "batch"])["tokens_per_s"].transform("max")
    df["winner"] = np.isclose(df["tokens_per_s"], best, rtol=1e-12, atol=0.0)
    plain = df[df["series"] == "no speculation"].set_index(["hardware", "batch"])["tokens_per_s"]
    df["speedup"] = (
        df["tokens_per_s"]
        / plain.loc[list(zip(df["hardware"], df["batch"], strict=True))].to_numpy()
    )
    return df


_METRICS = {
    "throughput": ("speedup", "tokens/s over plain decoding at the batch (x)", False),
    "energy": ("energy_per_token_mj", "energy per emitted token (mJ)", True),
    "discarded": ("discarded_share", "verified positions discarded (share, 0-1)", False),
    "tree_size": ("nodes", "nodes verified per sequence and pass (count)", False),
}


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Per metric, one panel per accelerator against batch: one colour, marker and line style
    per series; in the throughput figure the winner at each batch is ringed; in the tree-size
    figure each series is dodged slightly along the batch axis (equal counts would overlap)."""
    out: dict[str, Figure] = {}
    hws = list(dict.fromkeys(df["hardware"]))
    for name, (col, label, logy) in _METRICS.items():
        fig, axes = figure(len(hws), width=5.4, height=4.2)
        for ax, hw in zip(axes, hws, strict=True):
            d = df[df["hardware"] == hw]
            if name == "tree_size":
                # Node counts coincide across series: dodge each series a little along the
                # (log) batch axis so that no line hides another.
                order = {s: i for i, s in enumerate(dict.fromkeys(d["series"]))}
                shift = d["series"].map(order).astype(float) - (len(order) - 1) / 2
                d = d.assign(batch=d["batch"] * 2.0 ** (0.035 * shift))
            plot_lines(ax, d, x="batch", y=col, hue="series")
            if name == "throughput":
                w = d[d["winner"]]
                ax.plot(
                    w["batch"],
                    w[col],
                    linestyle="none",
                    marker="o",
                    markersize=14,
                    markerfacecolor="none",
                    markeredgecolor="0.1",
                    markeredgewidth=1.4,
                    label="winner at this batch",
                )
            ax.set_xscale("log", base=2)
            ticks = sorted(set(df.loc[df["hardware"] == hw, "batch"]))
            ax.set_xticks(ticks, [str(t) for t in ticks])
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel("batch (sequences per pass)")
            ax.set_ylabel(label)
            ax.set_title(hw, fontsize=10)
        legend_outside(fig, ncols=3)
        what = label.split(" (")[0]
        out[f"proposers_{name}"] = describe(
            fig,
            title=f"Proposers and token trees for {df['target'].iloc[0]}: {what} against batch",
            alt=f"Line charts, one per accelerator ({', '.join(hws)}), of the {what} against the "
            f"batch size (log scale) for each series: {', '.join(dict.fromkeys(df['series']))}. "
            "Each series has its own colour, marker and line style"
            + (
                "; a ring marks the series with the most tokens per second at each batch."
                if name == "throughput"
                else "."
            ),
        )
    return out


def summary(df: pd.DataFrame) -> str:
    """The winner per accelerator and batch, and where the tree stops paying."""
    lines = ["### Proposers and token trees", ""]
    win = df[df["winner"]][
        [
            "hardware",
            "batch",
            "series",
            "nodes",
            "depth",
            "tokens_per_s",
            "speedup",
            "energy_per_token_mj",
            "discarded_share",
        ]
    ]
    lines += [md_table(win.reset_index(drop=True)), ""]
    for hw, g in df.groupby("hardware", sort=False):
        for name in ("Medusa heads", "n-gram"):
            t = g[g["series"] == f"{name}, best tree"].sort_values("batch")
            c = g[g["series"] == f"{name}, chain"].set_index("batch")["tokens_per_s"]
            gain = t.set_index("batch")["tokens_per_s"] / c - 1.0
            lines.append(
                f"- {hw}, {name}: the best tree has {int(t['nodes'].iloc[0])} nodes at batch "
                f"{int(t['batch'].iloc[0])} and {int(t['nodes'].iloc[-1])} at batch "
                f"{int(t['batch'].iloc[-1])}; it beats the best chain by "
                f"{100 * float(gain.iloc[0]):.1f}% at the smallest batch and "
                f"{100 * float(gain.iloc[-1]):.1f}% at the largest."
            )
        e = g[g["series"] == "EAGLE head, chain"].sort_values("batch")
        if not e.empty:
            lines.append(
                f"- {hw}, EAGLE head: a chain of {int(e['nodes'].iloc[0])} at batch "
                f"{int(e['batch'].iloc[0])} ({float(e['tokens_per_pass'].iloc[0]):.2f} tokens per "
                f"pass, {float(e['speedup'].iloc[0]):.2f}x plain decoding) and of "
                f"{int(e['nodes'].iloc[-1])} at batch {int(e['batch'].iloc[-1])} "
                f"({float(e['speedup'].iloc[-1]):.2f}x)."
            )
    return "\n".join(lines) + "\n"
