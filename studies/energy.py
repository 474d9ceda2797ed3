"""Energy and throughput, not latency alone: J/token, tokens/s and latency against batch.

A Llama-3.1-70B target with Llama-3.1-8B and Llama-3.2-1B drafts on H100-SXM
and H200 (tensor parallel as needed to hold the weights and the KV cache of the
largest batch). At batch ``B`` every sequence drafts ``gamma`` tokens (``gamma``
draft passes at batch ``B``) and the target verifies ``gamma + 1`` positions of
each in one pass (:func:`specsim.cost.step_cost_grid`: time, energy, and whether
the pass is compute-bound). With ``E = (1 - alpha^(gamma+1)) / (1 - alpha)``
tokens per sequence and pass (Leviathan et al. 2023, Section 3.1, i.i.d.
acceptance):

- tokens/s = ``B E / (gamma t_draft + t_verify)``; latency per output token
  (TPOT) = ``(gamma t_draft + t_verify) / E``;
- J/token = ``(gamma e_draft + e_verify) / (B E)``; of which discarded work is
  ``((gamma + 1 - E) / (gamma + 1)) e_verify + (gamma + 1 - E) e_draft`` per
  ``B E`` tokens (positions verified but not emitted, draft tokens rejected).

Both at the configured gamma and at the best gamma for throughput at each
batch (0 means plain decoding). As ``B (gamma + 1)`` passes the accelerator's
ridge point the verification pass turns compute-bound and speculation stops
paying. A serving simulation (:func:`specsim.sim.simulate_serving`, prefill and
continuous batching included) checks the batch model at a few batch sizes; its
throughput includes the prefill of every prompt, which the batch model leaves out.
Assumptions: every sequence at the same context; the draft shares the target's
devices; the alphas are assumed, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.planner import smallest_tp
from specsim.cards import HardwareCard, ModelCard, load_hardware, load_model
from specsim.cost import step_cost_grid
from specsim.plots.figures import describe, figure, legend_outside, plot_lines, style_map
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, PoissonWorkload, ServingConfig, simulate_serving
from specsim.theory import expected_tokens

from ._common import check_positive_int, check_probability, md_table

__all__ = ["Config", "run", "figures", "summary", "auto_tp"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study energy --list-keys``); checked on construction."""

    target: str = "llama-3.1-70b"
    drafts: tuple[str, ...] = ("llama-3.1-8b", "llama-3.2-1b")
    alphas: tuple[float, ...] = (0.8, 0.7)
    hardware: tuple[str, ...] = ("h100-sxm", "h200")
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    context: int = 1024
    gamma: int = 4
    max_gamma: int = 8
    tensor_parallel: int = 0
    serving_batches: tuple[int, ...] = (1, 8, 32, 128)
    fast_serving_batches: tuple[int, ...] = (16,)
    serving_output_tokens: int = 512

    def __post_init__(self) -> None:
        if len(self.drafts) != len(self.alphas):
            raise ValueError(f"drafts {self.drafts} and alphas {self.alphas} differ in length")
        check_probability(self.alphas, "alphas")
        for key in (
            "batches",
            "context",
            "gamma",
            "max_gamma",
            "serving_output_tokens",
            "serving_batches",
            "fast_serving_batches",
        ):
            check_positive_int(getattr(self, key), key)
        check_positive_int(self.tensor_parallel, "tensor_parallel", minimum=0)
        if self.gamma > self.max_gamma:
            raise ValueError(f"gamma {self.gamma} exceeds max_gamma {self.max_gamma}")
        for key in ("serving_batches", "fast_serving_batches"):
            outside = sorted(set(getattr(self, key)) - set(self.batches))
            if outside:  # the summary sets each simulated batch beside the batch model's value
                raise ValueError(f"{key}: {outside} not among batches {tuple(self.batches)}")


def auto_tp(
    target: ModelCard,
    draft: ModelCard,
    hw: HardwareCard,
    *,
    batch: int,
    context: int,
    max_gamma: int,
) -> int:
    """Smallest power-of-two tensor parallelism holding both models and the largest batch."""

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


def _batch_model(
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


def _serving(
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
    wl = PoissonWorkload(
        rate_per_s=1e4,
        requests=3 * batch,
        prompt_tokens=max(1, context - output // 2),
        output_tokens=output,
    )
    cfg = ServingConfig(
        workload=wl,
        cost=cost,
        acceptance=IIDAcceptance(alpha=alpha),
        policy=FixedGamma(gamma=gamma),
        max_batch=batch,
        max_gamma=gamma,
    )
    m = simulate_serving(cfg, rng).metrics()
    return {
        "tokens_per_s": m["throughput_tokens_per_s"],
        "tpot_s": m["tpot_p50_s"],
        "j_per_token": m["energy_j_per_token"],
        "mean_batch": m["mean_batch"],
        "plain_tokens_per_s": m["plain_throughput_tokens_per_s"],
        "plain_j_per_token": m["plain_energy_j_per_token"],
    }


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Rows per (hardware, draft, batch, policy): ``method`` is "batch model" or "serving sim"."""
    cfg = config
    drafts, alphas = tuple(cfg.drafts), tuple(float(a) for a in cfg.alphas)
    sb = tuple(cfg.fast_serving_batches if fast else cfg.serving_batches)
    gamma, gmax, ctx = int(cfg.gamma), int(cfg.max_gamma), int(cfg.context)
    batches = np.asarray(sorted({int(b) for b in cfg.batches}), dtype=np.int64)
    target = load_model(cfg.target)
    frames = []
    for hw_name in cfg.hardware:
        hw = load_hardware(hw_name)
        for d_name, alpha in zip(drafts, alphas, strict=True):
            draft = load_model(d_name)
            tp = int(cfg.tensor_parallel) or auto_tp(
                target, draft, hw, batch=int(batches.max()), context=ctx, max_gamma=gmax
            )
            grid = _batch_model(
                target, draft, hw, tp=tp, alpha=alpha, batches=batches, context=ctx, max_gamma=gmax
            )
            plain = grid[grid["gamma"] == 0].set_index("batch")
            best = grid.loc[grid.groupby("batch")["tokens_per_s"].idxmax()].assign(
                policy="best gamma"
            )
            fixed = grid[grid["gamma"] == gamma].assign(policy=f"gamma = {gamma}")
            rows = pd.concat([plain.reset_index().assign(policy="plain"), fixed, best])
            rows["speedup"] = (
                rows["tokens_per_s"].to_numpy()
                / plain.loc[rows["batch"], "tokens_per_s"].to_numpy()
            )
            rows["energy_ratio"] = (
                rows["j_per_token"].to_numpy() / plain.loc[rows["batch"], "j_per_token"].to_numpy()
            )
            rows = rows.assign(
                target=cfg.target,
                hardware=hw_name,
                tensor_parallel=tp,
                draft=d_name,
                alpha=alpha,
                method="batch model",
            )
            frames.append(rows)
            cost = CardCost(target=target, draft=draft, hardware=hw, tensor_parallel=tp)
            for b in sb:
                s = _serving(
                    cost,
                    alpha=alpha,
                    gamma=gamma,
                    batch=int(b),
                    context=ctx,
                    output=int(cfg.serving_output_tokens),
                    rng=rng,
                )
                common = {
                    "hardware": hw_name,
                    "tensor_parallel": tp,
                    "draft": d_name,
                    "alpha": alpha,
                    "batch": int(b),
                    "method": "serving sim",
                }
                frames.append(
                    pd.DataFrame(
                        [
                            {
                                **common,
                                "policy": f"gamma = {gamma}",
                                "gamma": gamma,
                                "tokens_per_s": s["tokens_per_s"],
                                "tpot_s": s["tpot_s"],
                                "j_per_token": s["j_per_token"],
                                "mean_batch": s["mean_batch"],
                                "speedup": s["tokens_per_s"] / s["plain_tokens_per_s"],
                                "energy_ratio": s["j_per_token"] / s["plain_j_per_token"],
                            },
                            {
                                **common,
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
                )
    return pd.concat(frames, ignore_index=True)


_PANELS = (
    ("j_per_token", "energy per token (J)"),
    ("tokens_per_s", "throughput (tokens/s)"),
    ("tpot_s", "latency per output token (s)"),
)
_PLAIN = (("0.2", ":", ""), ("0.55", (0, (6, 2)), "|"))  # colour, line style, marker


def _panel(ax: Axes, d: pd.DataFrame, sv: pd.DataFrame, metric: str) -> None:
    """One metric against batch: a line per draft and policy, plain decoding in grey,
    the serving simulation as large hollow markers in the draft's colour and shape."""
    spec = d[d["policy"] != "plain"]
    plot_lines(
        ax,
        spec,
        x="batch",
        y=metric,
        hue="draft",
        style="policy",
        markersize=4,
        label=lambda dr, pol: f"{dr} draft, {pol}",
    )
    plain = d[d["policy"] == "plain"].drop_duplicates(["tensor_parallel", "batch"])
    for k, (tp, g) in enumerate(plain.groupby("tensor_parallel", sort=False)):
        color, ls, marker = _PLAIN[k % len(_PLAIN)]
        g = g.sort_values("batch")
        ax.plot(
            g["batch"],
            g[metric],
            color=color,
            linestyle=ls,
            marker=marker,
            linewidth=1.6,
            label=f"plain decoding ({int(tp)} x {g['hardware'].iloc[0]})",
        )
    styles = style_map(spec["draft"])
    s = sv[sv["policy"] != "plain"].dropna(subset=[metric])
    for draft, g in s.groupby("draft", sort=False):
        st = styles.get(draft)
        if st is None:
            continue
        ax.plot(
            g["batch"],
            g[metric],
            linestyle="none",
            marker=st.marker,
            markersize=10,
            markerfacecolor="none",
            markeredgewidth=1.6,
            color=st.color,
            zorder=5,
            label=f"{draft} draft, {g['policy'].iloc[0]}, serving simulation",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences)")


def figures(df: pd.DataFrame) -> dict[str, Figure]:
    """J/token, tokens/s and TPOT against batch per card (batch model; large hollow markers:
    serving simulation), and the speedup over plain decoding against batch."""
    bm = df[df["method"] == "batch model"]
    sv = df[df["method"] == "serving sim"]
    out: dict[str, Figure] = {}
    for hw, d in bm.groupby("hardware", sort=False):
        fig, axes = figure(3, width=4.6, height=4.0)
        for ax, (metric, label) in zip(axes, _PANELS, strict=True):
            _panel(ax, d, sv[sv["hardware"] == hw], metric)
            ax.set_ylabel(label)
        legend_outside(fig, ncols=3)
        tps = " or ".join(str(int(t)) for t in dict.fromkeys(d["tensor_parallel"]))
        target = d["target"].iloc[0]
        drafts = ", ".join(dict.fromkeys(d["draft"]))
        out[f"energy_{hw}"] = describe(
            fig,
            title=f"Energy, throughput and latency per token against batch: {target} on "
            f"{tps} x {hw}, drafts {drafts} against plain decoding",
            alt=f"Three line charts, log-log, against batch 1 to {int(d['batch'].max())}: "
            f"energy per token in joules, throughput in tokens per second and latency per "
            f"output token in seconds, for {target} on {tps} x {hw} with the drafts {drafts} "
            f"(one colour and marker each; solid: fixed gamma, dashed: best gamma per batch) "
            f"and plain decoding in grey; large hollow markers are the serving simulation.",
        )
    sp = bm[bm["policy"] != "plain"].copy()
    sp["series"] = [
        f"{dr} draft, {int(tp)} x {hw}"
        for dr, tp, hw in zip(sp["draft"], sp["tensor_parallel"], sp["hardware"], strict=True)
    ]
    fig, (ax,) = figure(1, width=7.5)
    plot_lines(ax, sp, x="batch", y="speedup", hue="series", style="policy")
    ax.axhline(1.0, color="0.3", linewidth=1, linestyle=(0, (1, 2)), label="plain decoding")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("throughput over plain decoding (ratio)")
    legend_outside(fig, ncols=2)
    series = "; ".join(dict.fromkeys(sp["series"]))
    out["energy_speedup"] = describe(
        fig,
        title="Where speculation stops paying: speedup over plain decoding against batch "
        "(batch model)",
        alt=f"Line chart of the throughput of speculative decoding over plain decoding against "
        f"batch on a log-2 axis, one colour and marker per draft and card ({series}), solid "
        "for a fixed gamma and dashed for the best gamma per batch; a dotted line at 1 marks "
        "plain decoding, below which speculation loses.",
    )
    return out


def summary(df: pd.DataFrame) -> str:
    """Per hardware and draft: batch-1 gains, where speculation stops paying, wasted energy."""
    bm = df[df["method"] == "batch model"]
    lines = ["### Energy and throughput against batch", ""]
    for (hw, draft), d in bm.groupby(["hardware", "draft"], sort=False):
        fx = d[d["policy"].str.startswith("gamma")].set_index("batch")
        best = d[d["policy"] == "best gamma"].set_index("batch")
        b1, bn = int(fx.index.min()), int(fx.index.max())
        losing = fx.index[fx["speedup"] < 1.0]
        zero = best.index[best["gamma"] == 0]
        cb = fx.index[fx["compute_bound"].astype(bool)]
        stop = f"from batch {int(losing.min())}" if len(losing) else f"at no batch up to {bn}"
        lines.append(
            f"- {draft} on {int(d['tensor_parallel'].iloc[0])} x {hw} (alpha = "
            f"{d['alpha'].iloc[0]:g}): at batch {b1}, gamma = {int(fx['gamma'].iloc[0])} gives "
            f"{fx.loc[b1, 'speedup']:.2f}x the tokens/s at {fx.loc[b1, 'energy_ratio']:.2f}x the "
            f"J/token, {fx.loc[b1, 'j_wasted_per_token'] / fx.loc[b1, 'j_per_token']:.0%} of it on "
            f"discarded work; it loses to plain decoding {stop}"
            + (
                f"; the verification pass is compute-bound from batch {int(cb.min())}"
                if len(cb)
                else ""
            )
            + (
                f"; the best gamma is 0 from batch {int(zero.min())}."
                if len(zero)
                else f"; the best gamma at batch {bn} is still {int(best.loc[bn, 'gamma'])}."
            )
        )
    sv = df[(df["method"] == "serving sim") & (df["policy"] != "plain")]
    if not sv.empty:
        ref = bm[bm["policy"].str.startswith("gamma")].set_index(["hardware", "draft", "batch"])
        rows = []
        for r in sv.itertuples(index=False):
            key = (r.hardware, r.draft, r.batch)
            m = ref.loc[key]  # every serving batch is among ``batches`` (Config checks)
            rows.append(
                {
                    "hardware": r.hardware,
                    "draft": r.draft,
                    "batch": r.batch,
                    "mean batch": r.mean_batch,
                    "tokens/s (sim)": r.tokens_per_s,
                    "tokens/s (model)": m["tokens_per_s"],
                    "J/token (sim)": r.j_per_token,
                    "J/token (model)": m["j_per_token"],
                }
            )
        lines += [
            "",
            "Serving simulation (prefill and batching included) against the batch model:",
            "",
            md_table(pd.DataFrame(rows)),
        ]
    return "\n".join(lines) + "\n"
