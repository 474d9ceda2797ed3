"""The frontier study (studies/frontier.py): MoE against its dense twin, DeepSeek-V3's MTP
over expert parallelism, long context with a KV-budget draft, and disaggregated against
colocated serving, on a shrunken config.

Known answers first: the dense twin has the MoE card's active parameters but the router's; a chain
on the dense twin at batch 1 verifies for about one plain step while the MoE target pays
for the extra experts its positions touch; then the regimes the study exists to show
(the MoE speedup rises with batch; at 32k-128k the KV-budget draft's speedup rises with
batch; the best MTP depth), the rows that do not fit, the summary's numbers against the
table, and the figures' readability.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
from test_figures import figure_problems

from specsim.cards import load_model
from specsim.cost.moe import touched_experts
from specsim.report.studies import studies_package


def _study() -> ModuleType:
    return importlib.import_module(f"{studies_package().__name__}.frontier")


TINY = {
    "batches": (1, 8, 64, 256),
    "mtp_depths": (1, 3, 5),
    "long_contexts": (4096, 32768, 128000),
    "disagg_rates": (6.0, 18.0),
    "disagg_requests": 200,
}


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    st = _study()
    return st.run(st.Config(**TINY), np.random.default_rng(3))


def _series(df: pd.DataFrame, part: str, series: str) -> pd.DataFrame:
    g = df[(df["part"] == part) & (df["series"] == series)].sort_values("batch")
    assert len(g), (part, series)
    return g.set_index("batch")


def test_the_dense_twin_has_the_moe_cards_active_parameters() -> None:
    moe = load_model("qwen3-30b-a3b")
    twin = _study().dense_twin(moe)
    assert twin.moe_spec is None and twin.layers == moe.layers
    # Every active weight but the router's (0.4% here): the routed experts' k FFNs are one.
    router = moe.moe_layers * moe.moe_spec.router_params(moe.d_model)
    assert twin.decode_params + router == moe.decode_params
    assert router / moe.decode_params < 0.005
    with pytest.raises(ValueError, match="llama-3.1-8b.*no experts"):
        _study().dense_twin(load_model("llama-3.1-8b"))


def test_verification_touches_more_experts_on_the_moe_target(df: pd.DataFrame) -> None:
    """At batch 1 the dense twin verifies gamma + 1 = 5 positions for about one plain step
    (weight-bound; the stack's verification terms, rejection and speculation bookkeeping,
    add a few per cent), while the MoE target reads the experts 5 tokens touch instead of 8:
    E(1 - (1 - k/E)^5) = 35.3 of 128 against 8, so its factor is well above 1."""
    moe = _series(df, "moe_vs_dense", "qwen3-30b-a3b (MoE)")
    twin = _series(df, "moe_vs_dense", "dense twin")
    assert twin.loc[1, "verify_factor"] < 1.10
    assert float(touched_experts(load_model("qwen3-30b-a3b"), 5)) == pytest.approx(35.3, abs=0.05)
    assert moe.loc[1, "verify_factor"] > 1.5
    # At batch 256 every expert is touched by a plain step too: the MoE factor falls back
    # near 1 and the MoE speedup exceeds the twin's (which is compute-bound there).
    assert moe.loc[256, "verify_factor"] < 1.2
    assert moe.loc[256, "speedup"] > moe.loc[1, "speedup"]
    assert moe.loc[256, "speedup"] > twin.loc[256, "speedup"]


def test_at_long_context_the_speedup_rises_with_batch(df: pd.DataFrame) -> None:
    for ctx in ("32k", "128k"):
        g = _series(df, "long_context", f"context {ctx}")
        ok = g[g["fits"]]
        assert ok["speedup"].is_monotonic_increasing, ctx
        assert ok["speedup"].iloc[-1] > 1.5 * ok["speedup"].iloc[0]
    # At 4k the budget saves little: the draft is the whole target reading its weights, so
    # it does not pay below the largest batch and stays near 1 there.
    short = _series(df, "long_context", "context 4k")
    assert (short.loc[short.index <= 64, "speedup"] < 1.0).all()
    assert short["speedup"].max() < 1.05


def test_the_long_context_part_reads_the_magicdec_card_or_a_what_if(df: pd.DataFrame) -> None:
    st = _study()
    card = st._streaming_draft(st.Config(), context=4096)
    assert card.acceptance.accept[0][0] == pytest.approx(0.8397, abs=1e-4)
    assert "magicdec" in card.acceptance.source
    what_if = st._streaming_draft(st.Config(long_what_if=True, long_alpha=0.6), context=4096)
    assert what_if.acceptance.accept[0][0] == 0.6
    with pytest.raises(ValueError, match="budget of 512, not kv_budget = 1024"):
        st._streaming_draft(st.Config(kv_budget=1024), context=4096)


def test_rows_that_do_not_fit_are_kept_without_a_speedup(df: pd.DataFrame) -> None:
    g = _series(df, "long_context", "context 128k")
    assert not g.loc[256, "fits"] and np.isnan(g.loc[256, "speedup"])
    assert g.loc[1, "fits"]


def test_mtp_depths_and_the_summary_agree_with_the_table(df: pd.DataFrame) -> None:
    st = _study()
    m = df[df["part"] == "mtp_depth"]
    assert sorted(set(m["depth"])) == [1, 3, 5] and m["fits"].all()
    # Depth 1 at batch 1: the report's acceptance over one verify and one MTP step.
    one = _series(df, "mtp_depth", "MTP depth 1")
    assert one.loc[1, "tokens_per_pass"] == pytest.approx(1.875)
    text = st.summary(df)
    for _, row in m[m["batch"] == 1].iterrows():
        got = re.search(rf"{row['series']}: ([0-9.]+)x at batch 1", text)
        assert got is not None and float(got.group(1)) == pytest.approx(row["speedup"], abs=0.006)
    assert "does not fit from batch 256" in text
    best = m.loc[m.groupby("batch")["speedup"].idxmax()]
    for _, row in best.iterrows():
        assert f"| {int(row['batch'])} | {int(row['depth'])} |" in text


def test_a_budget_larger_than_a_context_is_refused_naming_both() -> None:
    st = _study()
    with pytest.raises(ValueError, match=r"kv_budget 8192 .* long_contexts \[4096\]"):
        st.Config(kv_budget=8192)


def test_the_figures_are_readable(df: pd.DataFrame) -> None:
    figs = _study().figures(df)
    assert set(figs) == {"frontier_speedup", "frontier_verify_factor", "frontier_disagg"}
    problems = [p for k, f in figs.items() for p in figure_problems(f, k)]
    assert not problems, "\n".join(problems)


def _layouts(df: pd.DataFrame, mode: str) -> pd.DataFrame:
    d = df[(df["part"] == "disagg") & (df["mode"] == mode)]
    return d.set_index(["rate_per_s", "layout"])


def test_disaggregation_compares_layouts_of_the_same_gpus(df: pd.DataFrame) -> None:
    d = df[df["part"] == "disagg"]
    assert set(d["layout"]) == {"colocated", "1+3", "2+2"} and (d["gpus"] == 4).all()
    assert sorted(set(d["rate_per_s"])) == [6.0, 18.0]
    spec, plain = _layouts(df, "speculative"), _layouts(df, "plain")
    # Speculation shortens the decode pool's TPOT in every layout, at each rate.
    assert (plain["tpot_p99_s"] > spec["tpot_p99_s"]).all()
    # The trade the split makes under load: one prefill replica for 18 requests/s queues the
    # prompts (TTFT up) while its three decode replicas never stall on a prefill (TPOT down).
    hot = spec.loc[18.0]
    assert hot.loc["1+3", "ttft_p99_s"] > 3 * hot.loc["colocated", "ttft_p99_s"]
    assert hot.loc["1+3", "tpot_p99_s"] < hot.loc["colocated", "tpot_p99_s"]


def test_the_summary_quotes_the_layouts_table(df: pd.DataFrame) -> None:
    text = _study().summary(df)
    spec = _layouts(df, "speculative")
    for (rate, _layout), row in spec.iterrows():
        line = next(x for x in text.splitlines() if x.startswith(f"- {rate:g} requests/s"))
        assert f"{row['series']} TTFT p99 {row['ttft_p99_s']:.3f} s" in line


def test_a_split_without_a_decode_replica_is_refused() -> None:
    with pytest.raises(ValueError, match=r"disagg_prefill_replicas \(1, 4\).*needs a decode"):
        _study().Config(disagg_prefill_replicas=(1, 4))
