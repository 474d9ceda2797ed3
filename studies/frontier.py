"""The frontier: MoE targets, DeepSeek-V3's MTP over expert parallelism, long context, and
disaggregated serving.

Three parts, every number a closed-form pass price on the cards
(:func:`specsim.policies.tree_optimizer.evaluate_tree`: the target's verification of a chain
plus the proposer's drafting on one :class:`~specsim.cost.deployment.Deployment`, expected
tokens from Sequoia's positional model), batch 1 to 256:

- **MoE against dense** (``moe_vs_dense``): Qwen3-30B-A3B (``moe_target``) against its
  *dense twin*, the same card with its ``top_k`` routed experts merged into one dense FFN
  of ``top_k x expert_ffn`` (:func:`dense_twin`): the same attention, layers and active
  parameters per token (3.03B; all but the router's 0.4%), so the only difference is
  routing. No card in
  ``models/lm/`` has about its active parameters (the nearest dense ones are llama-3.2-1b,
  1.2B, and qwen2.5-7b, 7.1B), hence the twin. Both draft with n-gram lookup (no
  accelerator work; acceptance measured on the committed corpora, the same for both), a
  chain of ``gamma``. Verifying ``gamma + 1`` positions of ``batch`` sequences reads the
  distinct experts they route to (:func:`specsim.cost.moe.touched_experts`), so the MoE
  verification factor (verification over a plain step) is larger and its speedup smaller.
- **MTP depth** (``mtp_depth``): DeepSeek-V3 on ``mtp_devices`` GPUs of ``mtp_hardware``
  with tensor and expert parallelism over all of them, drafting with its MTP module
  (``models/heads/mtp-deepseek-v3.toml``: depth 1 from the technical report, deeper depths
  assumed, as the card says) reused for depths 1 to 5.
- **Long context** (``long_context``): Llama-3.1-8B on ``long_devices`` GPUs at 4k, 32k and
  128k tokens of context, drafting for itself with a streaming KV budget of ``kv_budget``
  tokens (:class:`specsim.proposers.StreamingSelfSpec`, MagicDec's StreamingLLM
  self-speculation) at the per-token acceptance MagicDec measured at each context
  (``long_card``, ``models/proposers/magicdec-llama-3.1-8b-streaming-512.toml``; the same rate
  at every depth, assumed), or at a what-if ``long_alpha`` (``long_what_if``). At long
  context a step is KV-bound, so verification costs about one plain step at every batch while
  the budgeted draft stays cheap: the speedup rises with batch (MagicDec, arXiv:2408.11049,
  Section 4).

- **Disaggregated against colocated** (``disagg``, :mod:`studies._frontier_disagg`): the
  serving simulator, not a closed form. ``disagg_replicas`` GPUs of ``disagg_hardware``
  (one replica each of ``disagg_target`` with ``disagg_draft`` drafting chains) serve a
  Poisson workload colocated or split into prefill and decode replicas
  (``disagg_prefill_replicas``), at each of ``disagg_rates``, with and without speculation:
  TTFT p99, TPOT p99 and throughput (:func:`specsim.capacity.disagg_layouts.compare_layouts`).
  The acceptance ``disagg_alpha`` is an assumed i.i.d. rate (the example config's).

A (part, series, batch) whose KV cache does not fit on the devices is kept with
``fits = False`` and no speedup (the figures leave it out and the summary says where each
curve stops).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specsim.cards import ModelCard, load_head, load_model
from specsim.cards.files import packaged_root
from specsim.checks import check_size
from specsim.cost.deployment import Deployment
from specsim.cost.shape import chain_sums
from specsim.plots.figures import describe, figure, legend_outside, plot_lines
from specsim.policies.tree_optimizer import chain_tree, evaluate_tree
from specsim.proposers import (
    Heads,
    NGram,
    Proposer,
    RankAcceptance,
    StreamingSelfSpec,
    load_acceptance,
)

from ._common import check_positive, check_positive_int, check_probability, md_table, setting
from ._frontier_disagg import PART, disagg_figure, disagg_rows, disagg_summary

__all__ = ["Config", "run", "figures", "summary", "dense_twin"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study frontier --list-keys``); checked on construction."""

    hardware: str = setting("h200", "accelerator of every part")
    stack: str = setting(
        "sglang",
        "serving stack of the closed-form parts (models/stacks/: its fitted host costs and "
        "the device part's kernel terms) of the MoE and MTP parts; 'none' prices the bare cards",
    )
    long_stack: str = setting(
        "gpt-fast-stack",
        "serving stack of the long-context part (MagicDec's engine is torch.compile decoding "
        "on gpt-fast's checkpoint layout); 'none' prices the bare card",
    )
    batches: tuple[int, ...] = setting(
        (1, 2, 4, 8, 16, 32, 64, 128, 256),
        "batch sizes compared (fast: every other one)",
        "sequences",
    )
    moe_target: str = setting("qwen3-30b-a3b", "MoE target compared with its dense twin")
    gamma: int = setting(4, "drafted chain length of the MoE-against-dense part", "tokens")
    ngram_acceptance: str = setting(
        "measured/ngram/corpora-test/accept-corpora-test.toml",
        "acceptance by depth and rank of n-gram lookup (a file under models/)",
    )
    context: int = setting(2048, "tokens cached per sequence (MoE and MTP parts)", "tokens")
    mtp_target: str = setting("deepseek-v3", "target model card of the MTP part (slug)")
    mtp_card: str = setting("mtp-deepseek-v3", "MTP head card (models/heads/)")
    mtp_hardware: str = setting("h200", "accelerator of the MTP part")
    mtp_devices: int = setting(8, "GPUs of the MTP part (tensor = expert parallel)", "GPUs")
    mtp_depths: tuple[int, ...] = setting((1, 2, 3, 4, 5), "MTP draft depths compared", "tokens")
    long_target: str = setting("llama-3.1-8b", "target model card of the long-context part (slug)")
    long_devices: int = setting(8, "GPUs of the long-context part (tensor parallel)", "GPUs")
    long_contexts: tuple[int, ...] = setting(
        (4096, 32768, 128000), "contexts of the long-context part", "tokens"
    )
    kv_budget: int = setting(512, "KV budget of the streaming self-speculation draft", "tokens")
    long_card: str = setting(
        "magicdec-llama-3.1-8b-streaming-512",
        "streaming self-speculation card whose measured acceptance by context the "
        "long-context part reads (its budget must be kv_budget)",
    )
    long_what_if: bool = setting(
        False, "draft at long_alpha per depth instead of the card's measured acceptance"
    )
    long_alpha: float = setting(
        0.8, "the what-if acceptance per depth (with long_what_if)", "probability"
    )
    long_gamma: int = setting(3, "drafted chain length of the long-context part", "tokens")
    disagg_target: str = setting("llama-3.1-8b", "target of the disaggregation part (slug)")
    disagg_draft: str = setting("llama-3.2-1b", "draft model of the disaggregation part")
    disagg_hardware: str = setting("h100-sxm", "accelerator of the disaggregation part")
    disagg_alpha: float = setting(
        0.7, "assumed i.i.d. acceptance of the disaggregation part's draft", "probability"
    )
    disagg_gamma: int = setting(3, "drafted chain length of the disaggregation part", "tokens")
    disagg_replicas: int = setting(4, "GPUs (one replica each) of every layout compared", "GPUs")
    disagg_prefill_replicas: tuple[int, ...] = setting(
        (1, 2), "prefill replicas of each split (the rest decode)", "replicas"
    )
    disagg_rates: tuple[float, ...] = setting(
        (6.0, 12.0, 18.0), "arrival rates compared (fast: the first and last)", "requests/s"
    )
    disagg_requests: int = setting(300, "requests per run of the disaggregation part", "requests")
    disagg_prompt_tokens: tuple[int, int] = setting(
        (512, 4096), "prompt lengths, uniform", "tokens"
    )
    disagg_output_tokens: tuple[int, int] = setting((64, 512), "output lengths, uniform", "tokens")
    disagg_max_batch: int = setting(32, "decode batch of a replica at most", "sequences")
    disagg_prefill_max_batch: int = setting(8, "prompts a prefill pass takes at most", "prompts")
    disagg_seed: int = setting(0, "seed of the disaggregation part's requests and draws")

    def __post_init__(self) -> None:
        check_probability(self.long_alpha, "long_alpha")
        check_probability(self.disagg_alpha, "disagg_alpha")
        for key in ("disagg_gamma", "disagg_replicas", "disagg_prefill_replicas"):
            check_positive_int(getattr(self, key), key)
        for key in ("disagg_requests", "disagg_prompt_tokens", "disagg_output_tokens"):
            check_positive_int(getattr(self, key), key)
        check_positive_int(self.disagg_max_batch, "disagg_max_batch")
        check_positive(self.disagg_rates, "disagg_rates")
        check_positive_int(self.disagg_prefill_max_batch, "disagg_prefill_max_batch")
        if max(self.disagg_prefill_replicas) >= self.disagg_replicas:
            raise ValueError(
                f"disagg_prefill_replicas {self.disagg_prefill_replicas}: a split of "
                f"{self.disagg_replicas} replicas needs a decode replica"
            )
        for key in ("batches", "gamma", "context", "mtp_devices", "mtp_depths"):
            check_positive_int(getattr(self, key), key)
        for key in ("long_devices", "long_contexts", "kv_budget", "long_gamma"):
            check_positive_int(getattr(self, key), key)
        # Sizes within specsim.checks.LIMITS before any work: a chain of g drafted tokens is a
        # g-node tree, and each part prices every batch.
        for key in ("gamma", "mtp_depths", "long_gamma"):
            for v in np.atleast_1d(getattr(self, key)):
                check_size(int(v), name=key, limit="tree_nodes")
        for key in ("batches", "disagg_max_batch", "disagg_prefill_max_batch"):
            for v in np.atleast_1d(getattr(self, key)):
                check_size(int(v), name=key, limit="batch")
        check_size(self.disagg_requests, name="disagg_requests", limit="requests")
        short = [c for c in self.long_contexts if c < self.kv_budget]
        if short:
            raise ValueError(
                f"kv_budget {self.kv_budget} is larger than the long_contexts {short}: a KV "
                "budget must be at most the context"
            )


def _streaming_draft(cfg: Config, *, context: int) -> StreamingSelfSpec:
    """The long-context part's proposer at ``context``: the card's measured acceptance there,
    or ``long_alpha`` at every depth with ``long_what_if``."""
    if not cfg.long_what_if:
        draft = StreamingSelfSpec.from_card(cfg.long_card, context=context)
        if draft.budget != cfg.kv_budget:
            raise ValueError(
                f"long_card {cfg.long_card!r}: its acceptance was measured at a KV budget of "
                f"{draft.budget}, not kv_budget = {cfg.kv_budget}; set long_what_if for a "
                "what-if at another budget"
            )
        return draft
    acc = RankAcceptance(
        accept=((cfg.long_alpha,),) * cfg.long_gamma,
        source=f"assumed {cfg.long_alpha} per depth (study frontier, long_alpha)",
    )
    return StreamingSelfSpec(target=cfg.long_target, budget=cfg.kv_budget, acceptance=acc)


def dense_twin(card: ModelCard) -> ModelCard:
    """``card`` (an MoE card) with its ``top_k`` routed (and its shared) experts merged into
    one dense FFN of ``(top_k + shared) x expert_ffn``: the same attention, layers and
    active parameters per token but the router's, every layer dense."""
    moe = card.moe_spec
    if moe is None:
        raise ValueError(f"dense_twin: {card.slug!r} has no experts")
    width = (moe.top_k + moe.shared_experts) * moe.expert_ffn
    loose = dataclasses.replace(card, moe=None, d_ff=width, params_tolerance=1e9)
    return dataclasses.replace(
        loose,
        slug=f"{card.slug}-dense-twin",
        name=f"{card.name}, dense twin (d_ff {width})",
        params=loose.shape_params,
        params_tolerance=card.params_tolerance,
        source_path=None,
    )


def _fits(dep: Deployment, proposer: Proposer, *, batch: int, context: int, new: int) -> bool:
    """Whether the verification pass of ``new`` positions per sequence, with the proposer's
    weights beside the target, fits in each device's memory."""
    tokens, pairs, cached = chain_sums(batch, batch * context, new)
    terms = dep.aggregates_cost(batch=batch, tokens=tokens, context_tokens=cached, pairs=pairs)
    resident = float(terms.resident_bytes) + proposer.memory_bytes(dep)
    return resident <= dep.hardware.mem_capacity


def _rows(
    dep: Deployment, proposer: Proposer, *, depth: int, batches: tuple[int, ...], context: int
) -> list[dict[str, Any]]:
    """Per batch: the chain of ``depth`` against no speculation, or ``fits = False``."""
    out: list[dict[str, Any]] = []
    for b in batches:
        row: dict[str, Any] = {"batch": int(b), "context": context, "depth": depth}
        if not _fits(dep, proposer, batch=int(b), context=context, new=depth + 1):
            out.append({**row, "fits": False, "speedup": np.nan})
            continue
        common: dict[str, Any] = {"proposer": proposer, "deployment": dep, "context": context}
        spec = evaluate_tree(chain_tree(depth), batch=int(b), **common)
        plain = evaluate_tree((), batch=int(b), **common)
        out.append(
            {
                **row,
                "fits": True,
                "speedup": spec.tokens_per_s / plain.tokens_per_s,
                "tokens_per_s": spec.tokens_per_s,
                "tokens_per_pass": spec.tokens_per_pass,
                "verify_factor": spec.verify_s / plain.verify_s,
                "draft_share": spec.draft_s / spec.time_s,
            }
        )
    return out


def _ngram(path: str) -> NGram:
    root = packaged_root()
    candidate = root / path if root is not None else None
    found = candidate if candidate is not None and candidate.is_file() else path
    return NGram(acceptance=load_acceptance(found))


def _runtime(stack: str) -> str | None:
    """A stack setting as a deployment's runtime: ``none`` prices the bare cards."""
    return None if stack == "none" else stack


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """One row per (part, series, batch), and per (rate, mode, layout) for the
    disaggregation part; ``rng`` is unused (closed-form prices, and the disaggregation
    part's runs seeded by ``disagg_seed``). ``fast`` keeps every other batch, and the first
    and last rate."""
    del rng
    cfg = config
    batches = cfg.batches[::2] if fast else cfg.batches
    rows: list[dict[str, Any]] = []
    moe = load_model(cfg.moe_target)
    ngram = _ngram(cfg.ngram_acceptance)
    runtime = _runtime(cfg.stack)
    for label, card in ((f"{moe.slug} (MoE)", moe), ("dense twin", dense_twin(moe))):
        dep = Deployment(target=card, hardware=cfg.hardware, runtime=runtime)
        for r in _rows(dep, ngram, depth=cfg.gamma, batches=batches, context=cfg.context):
            rows.append({"part": "moe_vs_dense", "series": label, "stack": cfg.stack, **r})
    dep = Deployment(
        target=cfg.mtp_target,
        hardware=cfg.mtp_hardware,
        runtime=runtime,
        tensor_parallel=cfg.mtp_devices,
        expert_parallel=cfg.mtp_devices,
    )
    mtp = Heads(card=load_head(cfg.mtp_card))
    for d in cfg.mtp_depths:
        for r in _rows(dep, mtp, depth=d, batches=batches, context=cfg.context):
            rows.append({"part": "mtp_depth", "series": f"MTP depth {d}", "stack": cfg.stack, **r})
    long_dep = Deployment(
        target=cfg.long_target,
        hardware=cfg.hardware,
        runtime=_runtime(cfg.long_stack),
        tensor_parallel=cfg.long_devices,
    )
    for c in cfg.long_contexts:
        self_spec = _streaming_draft(cfg, context=c)
        for r in _rows(long_dep, self_spec, depth=cfg.long_gamma, batches=batches, context=c):
            rows.append(
                {
                    "part": "long_context",
                    "series": f"context {c // 1000}k",
                    "stack": cfg.long_stack,
                    **r,
                }
            )
    rows += disagg_rows(cfg, fast=fast)
    return pd.DataFrame(rows)


_PARTS = {
    "moe_vs_dense": "n-gram chain on an MoE target and its dense twin",
    "mtp_depth": "DeepSeek-V3 with its MTP module, 8 GPUs, TP = EP",
    "long_context": "Llama-3.1-8B, streaming self-speculation (KV budget)",
}


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Speedup against batch, one panel per part (one colour, marker and line style per
    series); and the verification factor of the MoE-against-dense part."""
    fig, axes = figure(3, width=5.0, height=4.2)
    for ax, (part, title) in zip(axes, _PARTS.items(), strict=True):
        d = df[(df["part"] == part) & df["fits"]]
        plot_lines(ax, d, x="batch", y="speedup", hue="series")
        ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ticks = sorted(set(df.loc[df["part"] == part, "batch"].astype(int)))
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("batch (sequences per pass)")
        ax.set_ylabel("speedup over plain decoding (x)")
        stacks = ", ".join(dict.fromkeys(d["stack"].astype(str))) if "stack" in d else ""
        ax.set_title(f"{title} ({stacks})" if stacks else title, fontsize=9)
        ax.legend(fontsize=7)
    out = {
        "frontier_speedup": describe(
            fig,
            title="Speculation at the frontier: MoE, MTP over expert parallelism, long context",
            alt="Three line charts of speedup over plain decoding against batch (log scale): "
            "an MoE target and its dense twin with an n-gram chain; DeepSeek-V3 with MTP "
            "depths 1 to 5 on 8 GPUs; Llama-3.1-8B with a streaming KV-budget draft at 4k, "
            "32k and 128k context. Each series has its own colour, marker and line style; a "
            "dotted line marks 1x; a curve ends where the batch's KV cache no longer fits.",
        )
    }
    fig, axes = figure(1, width=6.0, height=4.2)
    d = df[(df["part"] == "moe_vs_dense") & df["fits"]]
    plot_lines(axes[0], d, x="batch", y="verify_factor", hue="series")
    axes[0].set_xscale("log", base=2)
    ticks = sorted(set(d["batch"].astype(int)))
    axes[0].set_xticks(ticks, [str(t) for t in ticks])
    axes[0].set_xlabel("batch (sequences per pass)")
    axes[0].set_ylabel("verification pass / plain step (x)")
    legend_outside(fig, ncols=2)
    out["frontier_verify_factor"] = describe(
        fig,
        title="Verification over a plain step: an MoE target against its dense twin",
        alt="Line chart of the verification pass time over a plain decode step against batch "
        "(log scale), for the MoE target and its dense twin, each with its own colour, "
        "marker and line style.",
    )
    if (df["part"] == PART).any():
        out["frontier_disagg"] = disagg_figure(df)
    return out


def _stop(g: pd.DataFrame) -> str:
    miss = g[~g["fits"]]
    return f", does not fit from batch {int(miss['batch'].min())}" if len(miss) else ""


def summary(df: pd.DataFrame) -> str:
    """Per part and series: the speedup at the smallest and the largest batch that fits,
    and the best MTP depth per batch."""
    lines = ["### The frontier: MoE, MTP, long context, disaggregation", ""]
    closed = df[df["part"].isin(list(_PARTS))]
    if "stack" in closed and len(closed):
        stacks = ", ".join(f"`{s}`" for s in dict.fromkeys(closed["stack"].astype(str)))
        lines += [f"Closed-form parts priced on the stacks {stacks}.", ""]
    for part in _PARTS:
        for series, g in df[df["part"] == part].groupby("series", sort=False):
            ok = g[g["fits"]].sort_values("batch")
            if ok.empty:
                lines.append(f"- {part}, {series}: does not fit at any batch.")
                continue
            first, last = ok.iloc[0], ok.iloc[-1]
            lines.append(
                f"- {part}, {series}: {first['speedup']:.2f}x at batch {int(first['batch'])}, "
                f"{last['speedup']:.2f}x at batch {int(last['batch'])} (verification "
                f"{first['verify_factor']:.2f}x to {last['verify_factor']:.2f}x a plain step)"
                f"{_stop(g)}."
            )
    m = df[(df["part"] == "mtp_depth") & df["fits"]]
    if not m.empty:
        best = m.loc[m.groupby("batch")["speedup"].idxmax(), ["batch", "depth", "speedup"]]
        lines += ["", "Best MTP depth per batch:", "", md_table(best.reset_index(drop=True))]
    lines += disagg_summary(df)
    return "\n".join(lines) + "\n"
