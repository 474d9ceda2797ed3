"""Figures a reader can read (issue 13): every study figure, ``cost --plot-v`` and the report's
validation plot.

For every figure: the entries of each legend differ pairwise in style, and never in colour
alone (a marker, line style, fill or hatch differs too, so grey-scale printing keeps them
apart); every axes has an x and a y label, with a unit in brackets where the quantity has
one; the figure has a title; alt text is attached. The studies run in shrunken fast forms.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from matplotlib.artist import Artist
from matplotlib.collections import Collection
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, cost_coefficient_frame, verification_frame
from specsim.plots.cost import plot_calibration, plot_cost_coefficient, plot_verification_factor
from specsim.plots.figures import (
    STYLE_CYCLE,
    alt_text,
    describe,
    figure,
    plot_validation_z,
    set_alt_text,
    style_map,
)
from specsim.report.studies import STUDY_NAMES, run_study

# Shrunken fast forms: every figure and every series kind, in a few seconds each.
TINY: dict[str, dict[str, object]] = {
    "paper": {"alphas": (0.6, 0.8), "speedup_max_gamma": 4, "table2": False, "fast_tokens": 2000},
    "table2": {"heterogeneity": (0.0, 0.5), "persistence": (0.5,), "tokens": 2000},
    "bill": {"alphas": (0.0, 0.5, 0.8), "gammas": (1, 5), "fast_tokens": 2000},
    "lookahead": {"fast_streams": 2, "search_max_gamma": 3, "tokens": 256},
    "energy": {"batches": (1, 16, 256), "serving_batches": (16,), "fast_serving_batches": (16,)},
    "shift": {
        "temperatures": (0.0, 1.0),
        "shifted_alpha": (0.8, 0.3),
        "foreign_fractions": (0.0, 0.5),
        "max_gamma": 4,
        "fast_tokens": 2000,
        "positions": 64,
        "vocab": 256,
    },
    "engine": {
        "fast_requests": 240,
        "replicas": 2,
        "token_budgets": (512,),
        "routers": ("round-robin", "join-shortest-queue"),
    },
    "proposers": {"hardware": ("a100-80gb",), "batches": (1, 8, 64), "fast_budget": 8},
    "frontier": {
        "batches": (1, 16, 256),
        "mtp_depths": (1, 3),
        "long_contexts": (4096, 128000),
        "disagg_requests": 100,
        "disagg_prefill_replicas": (1,),
    },
    "crossover": {
        "deployments": ("h100-sxm",),
        "targets": ("vicuna-7b-v1.3",),
        "drafts": ("llama-68m",),
        "draft_alphas": (0.6,),
        "tensor_parallel": (1,),
        "fast_gammas": (2,),
        "output": 64,
        "fast_rate_requests": 16,
    },
    "capacity": {
        "requests": 400,
        "fast_max_requests": 400,
        "precision": 0.3,
        "crossover_precision": 0.3,
        "rate_max": 8.0,
    },
}
# Quantities with a unit: their axis label must name it in brackets or parentheses.
UNITFUL = re.compile(
    r"\b(time|latency|TPOT|TTFT|energy|joules?|J|throughput|tokens/s|requests/s|rate|seconds?)\b",
    re.IGNORECASE,
)


def _dashes(line: Line2D) -> tuple[Any, ...]:
    # get_linestyle() says "--" for every custom dash pattern; the pattern tells them apart.
    pattern = getattr(line, "_unscaled_dash_pattern", (None, None))
    return (line.get_linestyle(), str(pattern))


def _style(handle: Any) -> tuple[str, tuple[Any, ...]]:
    """(colour, the other cues) of a legend entry's original artist."""
    if isinstance(handle, Line2D):
        hollow = str(handle.get_markerfacecolor()).lower() == "none"
        return to_hex(handle.get_color()), (
            "line",
            str(handle.get_marker()),
            *_dashes(handle),
            hollow,
        )
    if isinstance(handle, ErrorbarContainer):
        data_line, _, bars = handle.lines
        colour = to_hex(np.asarray(bars[0].get_color())[0]) if bars else "none"
        cues = ("errorbar",) if data_line is None else ("errorbar", *_style(data_line)[1])
        return colour, cues
    if isinstance(handle, BarContainer):
        return _style(handle.patches[0])
    if isinstance(handle, Patch):
        return to_hex(handle.get_facecolor()), ("patch", handle.get_hatch() or "")
    if isinstance(handle, tuple):  # after the containers, which are tuples too
        parts = [_style(h) for h in handle]
        return "+".join(c for c, _ in parts), tuple(x for _, o in parts for x in o)
    if isinstance(handle, Collection):
        return to_hex(np.asarray(handle.get_facecolor())[0]), ("collection",)
    raise AssertionError(f"unexpected legend handle {handle!r}")


def _legends(fig: Figure) -> list[Legend]:
    axes = [ax.get_legend() for ax in fig.axes]
    return [*fig.legends, *(lg for lg in axes if lg is not None)]


def _originals(fig: Figure) -> dict[str, Any]:
    """Label -> the artist or container it names, over every axes (tuples when several)."""
    found: dict[str, list[Any]] = {}
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, []).append(h)
    return {k: v[0] if len(v) == 1 else v for k, v in found.items()}


def figure_problems(fig: Figure, name: str) -> list[str]:
    """Everything that keeps a reader from reading ``fig`` (empty when it is readable)."""
    problems: list[str] = []
    originals = _originals(fig)
    for legend in _legends(fig):
        labels = [t.get_text() for t in legend.get_texts()]
        styles: dict[str, tuple[str, tuple[Any, ...]]] = {}
        for i, label in enumerate(labels):
            h = originals.get(label)
            if h is None:  # a legend built from handles drawn nowhere: use the legend's own
                h = legend.legend_handles[i]
            elif isinstance(h, list):
                kinds = {type(x) for x in h}
                h = h[0] if len(kinds) == 1 else tuple(dict((type(x), x) for x in h).values())
            styles[label] = _style(h)
        items = list(styles.items())
        for i, (a, (ca, oa)) in enumerate(items):
            for b, (cb, ob) in items[i + 1 :]:
                if (ca, oa) == (cb, ob):
                    problems.append(f"{name}: legend entries {a!r} and {b!r} look identical")
                elif oa == ob:
                    problems.append(f"{name}: legend entries {a!r} and {b!r} differ in colour only")
    for k, ax in enumerate(fig.axes):
        for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
            if not label.strip():
                problems.append(f"{name}: axes {k} has no {axis} label")
            elif UNITFUL.search(label) and not re.search(r"[(\[].+[)\]]", label):
                problems.append(f"{name}: axes {k} {axis} label {label!r} names no unit")
    titles = [fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)]
    if not any(t.strip() for t in titles):
        problems.append(f"{name}: no title says what is compared")
    text = alt_text(fig)
    if not text or len(text) < 40:
        problems.append(f"{name}: no alt text (got {text!r})")
    return problems


@pytest.fixture(scope="module")
def study_figures() -> dict[str, Figure]:
    figs: dict[str, Figure] = {}
    for name in STUDY_NAMES:
        out = run_study(name, overrides=TINY[name], seed=3, fast=True)
        figs.update({f"{name}/{key}": fig for key, fig in out.figures.items()})
    return figs


def test_every_study_figure_is_readable(study_figures: dict[str, Figure]) -> None:
    expected = {
        "paper/paper_figure3",
        "paper/paper_speedup_vs_gamma",
        "paper/paper_table1",
        "table2/table2_predicted",
        "bill/bill",
        "lookahead/lookahead",
        "energy/energy_h100-sxm",
        "energy/energy_h200",
        "energy/energy_speedup",
        "shift/shift_temperature",
        "shift/shift_domain_shift",
        "shift/shift_language_shift",
        "shift/shift_measured_alpha",
        "shift/shift_measured_speedup",
        "capacity/capacity",
        "proposers/proposers_throughput",
        "proposers/proposers_energy",
        "proposers/proposers_discarded",
        "proposers/proposers_tree_size",
        "engine/engine_latency",
        "engine/engine_goodput",
        "frontier/frontier_speedup",
        "frontier/frontier_verify_factor",
        "frontier/frontier_disagg",
        "crossover/crossover_h100-sxm",
        "crossover/crossover_policies",
    }
    assert expected <= set(study_figures)
    problems = [p for name, fig in study_figures.items() for p in figure_problems(fig, name)]
    assert not problems, "\n".join(problems)


def test_compared_series_have_a_legend(study_figures: dict[str, Figure]) -> None:
    for name, fig in study_figures.items():
        assert sum(len(lg.get_texts()) for lg in _legends(fig)) >= 2, name


def test_capacity_names_each_cards_tensor_parallel_degree(
    study_figures: dict[str, Figure],
) -> None:
    fig = study_figures["capacity/capacity"]
    labels = [t.get_text() for lg in _legends(fig) for t in lg.get_texts()]
    assert any("h100-sxm (replica of 4)" in lab for lab in labels), labels
    assert any("h200 (replica of 2)" in lab for lab in labels), labels
    assert "per accelerator" in fig.axes[0].get_xlabel()


def test_shift_panels_share_one_ascending_x_axis(study_figures: dict[str, Figure]) -> None:
    for name in ("shift/shift_temperature", "shift/shift_domain_shift"):
        fig = study_figures[name]
        ticks = [[float(t) for t in ax.get_xticks()] for ax in fig.axes]
        assert all(t == ticks[0] for t in ticks), (name, ticks)
        assert ticks[0] == sorted(ticks[0]), (name, ticks)
        lims = [ax.get_xlim() for ax in fig.axes]
        assert all(lo < hi for lo, hi in lims), (name, lims)


def test_table2_theorem_markers_are_not_hidden(study_figures: dict[str, Figure]) -> None:
    ax = study_figures["table2/table2_predicted"].axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    th, thv = lines["theorem 3.8"], lines["theorem 3.8 + v"]
    # Theorem 3.8 + v nearly equals Theorem 3.8: the larger marker is hollow, so both show.
    assert th.get_markersize() > thv.get_markersize()
    assert str(th.get_markerfacecolor()).lower() == "none"


def test_cost_plot_v_is_readable(tmp_path: Any) -> None:
    from specsim.cli import main

    model, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    fig = plot_verification_factor(verification_frame(Deployment(target=model, hardware=hw)))
    assert not figure_problems(fig, "cost --plot-v")
    labels = [t.get_text() for lg in _legends(fig) for t in lg.get_texts()]
    assert {"gamma = 1", "gamma = 3", "gamma = 7"} <= set(labels)
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert any("ceiling gamma + 1 = 8" in n for n in notes), notes  # the dotted lines named
    out = tmp_path / "v.png"
    assert (
        main(["cost", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--plot-v", str(out)])
        == 0
    )
    assert out.stat().st_size > 1000


def test_other_library_figures_are_readable() -> None:
    model, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    cf = cost_coefficient_frame(
        [load_model("llama-68m")], Deployment(target=model, hardware=hw), contexts=(128, 512)
    )
    assert not figure_problems(plot_cost_coefficient(cf), "cost coefficient")
    rng = np.random.default_rng(0)
    t = rng.lognormal(-4.0, 1.0, 12)
    df = pd.DataFrame({"time_s": t, "predicted_s": t * 1.1, "model": ["a", "b", "c"] * 4})
    assert not figure_problems(plot_calibration(df), "calibration")


def test_validation_z_plot() -> None:
    rows = [
        {"alpha": a, "gamma": g, "c": 0.0, "quantity": q, "z": z}
        for (a, g), z0 in zip([(0.5, 1), (0.5, 3), (0.8, 1)], (0.3, -1.2, 5.0), strict=True)
        for q, z in (("tokens_per_pass", z0), ("walltime_speedup", z0), ("ops_factor", -z0))
    ]
    fig = plot_validation_z(pd.DataFrame(rows), limit=4.5)
    assert not figure_problems(fig, "validate z")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "z (standard errors)"
    assert ax.get_ylim()[1] > 5.0  # the failing check is on the plot
    assert "3 checks fall outside" in (alt_text(fig) or "")  # 5.0, 5.0 and -5.0
    assert any(str(p.get_label()).startswith("pass band") for p in ax.patches)


def test_style_cycle_differs_in_every_cue() -> None:
    for attr in ("color", "marker", "linestyle", "hatch"):
        values = [str(getattr(s, attr)) for s in STYLE_CYCLE]
        assert len(set(values)) == len(values), attr
    assert list(style_map(["b", "a", "b"])) == ["b", "a"]
    with pytest.raises(ValueError, match="distinct styles"):
        style_map(range(len(STYLE_CYCLE) + 1))


def test_alt_text_helpers() -> None:
    fig, _ = figure()
    assert alt_text(fig) is None
    set_alt_text(fig, "  a   chart\nof things ")
    assert alt_text(fig) == "a chart of things"
    with pytest.raises(ValueError, match="non-empty"):
        set_alt_text(fig, " ")
    describe(fig, title="x " * 100, alt="y")
    assert "\n" in fig.get_suptitle()  # wrapped to the figure's width


def test_the_check_catches_colour_only_legends() -> None:
    """The figures of before issue 13 (seaborn hue + style legends, no units, no alt text)
    fail the check."""
    df = pd.DataFrame(
        {
            "rate": [1, 2, 1, 2] * 2,
            "tpot": np.arange(8.0) + 1,
            "hardware": ["h100"] * 4 + ["h200"] * 4,
            "mode": ["spec", "spec", "plain", "plain"] * 2,
        }
    )
    fig, (ax,) = figure()
    sns.lineplot(data=df, x="rate", y="tpot", hue="hardware", style="mode", marker="o", ax=ax)
    ax.set_xlabel("requests per second to one replica")
    ax.set_ylabel("p99 TPOT")
    problems = figure_problems(fig, "old capacity")
    assert any("'h100' and 'h200' differ in colour only" in p for p in problems), problems
    assert any("names no unit" in p for p in problems), problems
    assert any("no title" in p for p in problems) and any("no alt text" in p for p in problems)


def test_style_of_every_handle_kind() -> None:
    fig, (ax,) = figure()
    ax.errorbar([1, 2], [1, 2], yerr=[0.1, 0.1], fmt="none", ecolor="0.2", label="e")
    ax.bar([1], [1], hatch="//", label="b")
    ax.axhspan(0, 1, color="0.9", label="band")
    ax.scatter([1], [1], label="s")
    kinds = {
        label: _style(h)[1][0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)
    }
    assert kinds == {"e": "errorbar", "b": "patch", "band": "patch", "s": "collection"}
    assert isinstance(ax.patches[0], Artist)


def test_capacity_legend_tells_plain_from_speculative(study_figures: dict[str, Figure]) -> None:
    """The title says "filled: speculative, hollow: plain", and the lines say solid against
    dashed: every plain handle, in the panels and in the legend, is hollow and dashed, every
    speculative one filled and solid, and the legend's handles are long enough to show it."""
    fig = study_figures["capacity/capacity"]
    legend = fig.legends[0]
    labels = [t.get_text() for t in legend.get_texts()]
    entries = list(zip(labels, legend.legend_handles, strict=True))
    entries += [(str(ln.get_label()), ln) for ax in fig.axes[:2] for ln in ax.get_lines()]
    modes = [(lab.rsplit(", ", 1)[-1], h) for lab, h in entries]
    modes = [(m, h) for m, h in modes if m in ("plain", "speculative")]
    assert {m for m, _ in modes} == {"plain", "speculative"}
    for mode, handle in modes:
        assert isinstance(handle, Line2D)
        plain = mode == "plain"
        assert (handle.get_markerfacecolor() == "none") == plain, (mode, handle)
        assert (handle.get_linestyle() != "-") == plain, (mode, handle)
    assert legend.handlelength >= 5.0  # two handles side by side, each 2.5 font sizes
