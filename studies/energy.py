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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from specsim.cards import load_hardware, load_model
from specsim.plots.figures import describe, figure, legend_outside, plot_lines, style_map

from ._common import check_positive_int, check_probability, md_table
from ._energy_model import auto_tp, model_rows, serving_check

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
    tensor_parallel: int = field(
        default=0,
        metadata={
            "doc": "devices per model replica (0: per batch, the smallest power of two that "
            "holds the target, the draft and that batch's KV cache)",
            "unit": "devices",
        },
    )
    serving_batches: tuple[int, ...] = field(
        default=(1, 8, 32, 128),
        metadata={
            "doc": "batch sizes of the serving simulation that checks the batch model (those "
            "among batches run)",
            "unit": "sequences",
        },
    )
    fast_serving_batches: tuple[int, ...] = field(
        default=(16,),
        metadata={
            "doc": "batch sizes of the serving simulation in the fast form (--fast; those "
            "among batches run)",
            "unit": "sequences",
        },
    )
    serving_output_tokens: int = field(
        default=512,
        metadata={"doc": "output tokens per request in the serving simulation", "unit": "tokens"},
    )

    def __post_init__(self) -> None:
        if len(self.drafts) != len(self.alphas):
            raise ValueError(f"drafts {self.drafts} and alphas {self.alphas} differ in length")
        check_probability(self.alphas, "alphas")
        if not self.batches:
            raise ValueError("batches must list at least one batch size, got ()")
        # The serving batches may be empty, and those not among ``batches`` do not run (the
        # summary says which ran), so neither mode's list is checked against ``batches``.
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


def run(config: Config, rng: np.random.Generator, *, fast: bool = False) -> pd.DataFrame:
    """Rows per (hardware, draft, batch, policy): ``method`` is "batch model" or "serving sim".

    The serving simulation runs at the chosen mode's serving batches that are among
    ``batches``, on the batch model's deployment of that batch."""
    cfg = config
    sb = [b for b in (cfg.fast_serving_batches if fast else cfg.serving_batches)]
    sb = [int(b) for b in dict.fromkeys(sb) if b in set(cfg.batches)]
    target = load_model(cfg.target)
    frames = []
    for hw_name in cfg.hardware:
        hw = load_hardware(hw_name)
        for d_name, alpha in zip(cfg.drafts, cfg.alphas, strict=True):
            draft = load_model(d_name)
            common = dict(target=cfg.target, hardware=hw_name, draft=d_name, alpha=float(alpha))
            rows = model_rows(
                target,
                draft,
                hw,
                alpha=float(alpha),
                batches=cfg.batches,
                context=int(cfg.context),
                gamma=int(cfg.gamma),
                max_gamma=int(cfg.max_gamma),
                fixed_tp=int(cfg.tensor_parallel),
            )
            frames.append(rows.assign(method="batch model", **common))
            for b in sb:
                sv = serving_check(
                    target,
                    draft,
                    hw,
                    alpha=float(alpha),
                    batch=b,
                    context=int(cfg.context),
                    gamma=int(cfg.gamma),
                    max_gamma=int(cfg.max_gamma),
                    output=int(cfg.serving_output_tokens),
                    fixed_tp=int(cfg.tensor_parallel),
                    rng=rng,
                )
                frames.append(sv.assign(method="serving sim", batch=b, **common))
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
        tps = " or ".join(str(int(t)) for t in sorted(set(d["tensor_parallel"])))
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
            f"and plain decoding in grey, one line per tensor parallelism (each batch on the "
            f"fewest devices that hold it); large hollow markers are the serving simulation, "
            f"whose throughput and energy include the prefill of every prompt, which the batch "
            f"model leaves out, and which may run on more devices (its memory model counts the "
            f"draft whole on each device); the summary gives the gap term by term.",
        )
    sp = bm[bm["policy"] != "plain"].copy()
    sp["series"] = [f"{dr} draft, {hw}" for dr, hw in zip(sp["draft"], sp["hardware"], strict=True)]
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
            f"- {draft} on {_tp_text(d, str(hw))} (alpha = "
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
    return "\n".join(lines + _serving_summary(df)) + "\n"


def _tp_text(d: pd.DataFrame, hw: str) -> str:
    """``2 x h200`` or, where the batch needs more devices, ``2 x h200 to batch 64, 4 from
    batch 128``: the tensor parallelism of each batch of one (hardware, draft)."""
    tp = d.drop_duplicates("batch").set_index("batch")["tensor_parallel"].sort_index()
    first = f"{int(tp.iloc[0])} x {hw}"
    steps = tp[tp.diff().fillna(0) != 0]
    if steps.empty:
        return first
    before = tp.index[tp.index < steps.index[0]].max()
    return f"{first} to batch {int(before)}, " + ", ".join(
        f"{int(v)} from batch {int(b)}" for b, v in steps.items()
    )


def _serving_summary(df: pd.DataFrame) -> list[str]:
    """The serving simulation beside the batch model, and the gap between them term by term:
    the prefill of every prompt (which the batch model leaves out), then the rest."""
    sv = df[(df["method"] == "serving sim") & (df["policy"] != "plain")]
    if sv.empty:
        return ["", "No serving simulation ran: none of the serving batches is among `batches`."]
    t = pd.DataFrame(
        {
            "hardware": sv["hardware"].to_numpy(),
            "draft": sv["draft"].to_numpy(),
            "batch": sv["batch"].to_numpy(),
            "TP": sv["tensor_parallel"].to_numpy(),
            "mean batch": sv["mean_batch"].to_numpy(),
            "prefill time": sv["prefill_time_share"].to_numpy(),
            "tokens/s sim": sv["tokens_per_s"].to_numpy(),
            "tokens/s sim, no prefill": sv["decode_tokens_per_s"].to_numpy(),
            "tokens/s model": sv["model_tokens_per_s"].to_numpy(),
            "J/token sim": sv["j_per_token"].to_numpy(),
            "J/token sim, no prefill": sv["decode_j_per_token"].to_numpy(),
            "J/token model": sv["model_j_per_token"].to_numpy(),
        }
    )
    gap = 1.0 - t["tokens/s sim"] / t["tokens/s model"]
    rest = 1.0 - t["tokens/s sim, no prefill"] / t["tokens/s model"]
    egap = t["J/token sim"] / t["J/token model"] - 1.0
    erest = t["J/token sim, no prefill"] / t["J/token model"] - 1.0
    fill = 1.0 - t["mean batch"] / t["batch"]

    def span(x: pd.Series) -> str:
        return (
            f"{x.min():.0%}"
            if np.isclose(x.min(), x.max(), atol=5e-3)
            else (f"{x.min():.0%} to {x.max():.0%}")
        )

    share = t["prefill time"]
    t["prefill time"] = [f"{x:.0%}" for x in share]
    return [
        "",
        "Serving simulation (prefill and continuous batching included) against the batch "
        "model on the same deployment (TP: the serving simulation counts the draft's weights "
        "whole on each device, so it may need more devices than the batch model's line):",
        "",
        md_table(t),
        "",
        f"- The simulation's tokens/s is {span(gap)} below the batch model's and its J/token "
        f"{span(egap)} above. The prefill of every prompt, which the batch model leaves out, "
        f"takes {span(share)} of the simulated time; without its time and energy the gap is "
        f"{span(rest)} in tokens/s and {span(erest)} in J/token. The rest is the batch filling "
        f"and draining at the start and end of the run (mean batch {span(fill)} below the "
        "maximum), decode contexts spread around the batch model's single context, and the "
        "Monte Carlo noise of a short run (3 x batch requests).",
    ]
