"""The engine study (studies/engine.py): paged KV, chunked prefill and replicas, with and
without speculation, on a shrunken configuration.

Known answers first: a paged cache with the card's memory gives the reservation model's
times exactly; a tight budget preempts under paging (recompute: tokens recomputed, no
swapping; swap: the reverse) and never under reservation; round-robin splits the requests
evenly. Then: every p99 lies in its interval, the verdicts follow the intervals, the
summary's numbers are the table's, and the figures pass the readability check.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
from test_figures import figure_problems

from specsim.report.studies import studies_package


def _study() -> ModuleType:
    return importlib.import_module(f"{studies_package().__name__}.engine")


TINY = {
    "fast_requests": 240,
    "replicas": 2,
    "token_budgets": (512,),
    "routers": ("round-robin", "join-shortest-queue"),
    "tight_kv_tokens": 20480,
}


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    eng = _study()
    return eng.run(eng.Config(**TINY), np.random.default_rng(5), fast=True)


def _row(df: pd.DataFrame, variant: str, mode: str) -> pd.Series:
    sel = df[(df["variant"] == variant) & (df["mode"] == mode)]
    assert len(sel) == 1, (variant, mode)
    return sel.iloc[0]


def test_every_part_variant_and_mode_is_there(df: pd.DataFrame) -> None:
    assert list(dict.fromkeys(df["part"])) == ["memory", "prefill", "replicas"]
    assert set(df["mode"]) == {"speculative", "plain"}
    assert len(df) == 2 * (5 + 2 + 2)
    assert (df["requests"] == 240).all()
    assert set(df[df["part"] == "prefill"]["workload"]) == {"azure-code-2023"}


def test_paged_with_the_cards_memory_is_the_reservation_model(df: pd.DataFrame) -> None:
    for mode in ("speculative", "plain"):
        res, paged = _row(df, "reservation", mode), _row(df, "paged", mode)
        assert paged["same_times_as_reservation"] and paged["preemptions"] == 0
        for col in ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "goodput_per_s", "mean_batch"):
            assert paged[col] == res[col], col
        assert paged["vs_ttft_p99"] == paged["vs_goodput"] == "identical"
        assert paged["kv_capacity_tokens"] > 300_000  # two H200s hold ~346k tokens after weights
        tight = _row(df, "paged, tight, recompute", mode)
        assert not tight["same_times_as_reservation"]


def test_a_tight_budget_preempts_only_under_paging(df: pd.DataFrame) -> None:
    paged = df["variant"].str.startswith("paged, tight")
    assert (df[paged]["baseline"] == "reservation, tight").all()
    assert (df[~paged].groupby(["part", "mode"])["baseline"].nunique() == 1).all()
    for mode in ("speculative", "plain"):
        res = _row(df, "reservation, tight", mode)
        rec, swap = _row(df, "paged, tight, recompute", mode), _row(df, "paged, tight, swap", mode)
        assert res["preemptions"] == 0 and res["kv_capacity_tokens"] == 20480
        assert rec["preemptions"] > 0 and rec["recomputed_tokens"] > 0 and rec["swap_s"] == 0
        assert 0 < rec["recomputed_share"] < 1
        assert swap["preemptions"] > 0 and swap["recomputed_tokens"] == 0 and swap["swap_s"] > 0
        assert swap["preemption"] == "swap" and rec["preemption"] == "recompute"


def test_round_robin_splits_evenly_and_every_request_is_served(df: pd.DataFrame) -> None:
    rr = _row(df, "round-robin", "speculative")
    assert rr["replica_requests_min"] == rr["replica_requests_max"] == 120
    jsq = _row(df, "join-shortest-queue", "speculative")
    assert jsq["replica_requests_min"] + jsq["replica_requests_max"] == 240
    assert (df["goodput_fraction"].between(0, 1)).all()


def test_each_p99_lies_in_its_interval_and_the_verdicts_follow(df: pd.DataFrame) -> None:
    for m in ("ttft", "tpot", "e2e"):
        p, lo, hi = df[f"{m}_p99_s"], df[f"{m}_p99_low_s"], df[f"{m}_p99_high_s"]
        assert ((lo <= p) & (p <= hi)).all(), m
    for (part, mode), g in df.groupby(["part", "mode"], sort=False):
        for _, r in g.iterrows():
            b = g[g["variant"] == r["baseline"]].iloc[0]
            for m in ("ttft", "tpot", "e2e"):
                v = r[f"vs_{m}_p99"]
                apart = (
                    r[f"{m}_p99_low_s"] > b[f"{m}_p99_high_s"]
                    or r[f"{m}_p99_high_s"] < b[f"{m}_p99_low_s"]
                )
                unbounded = np.isinf([r[f"{m}_p99_high_s"], b[f"{m}_p99_high_s"]]).any()
                if r[f"{m}_p99_s"] == b[f"{m}_p99_s"]:
                    assert v == "identical"
                elif not apart and unbounded:
                    assert v == "undecided (no upper bound)", (part, mode, m, v)
                else:
                    assert v.endswith("beyond noise") == apart, (part, mode, m, v)
            gap = abs(r["goodput_per_s"] - b["goodput_per_s"])
            if r["vs_goodput"] != "identical":
                se = float(np.hypot(r["goodput_se"], b["goodput_se"]))
                assert r["vs_goodput"].endswith("beyond noise") == (gap > 1.959964 * se)


def test_chunked_prefill_keeps_the_lookahead_below_the_budget(df: pd.DataFrame) -> None:
    spec = df[(df["part"] == "prefill") & (df["mode"] == "speculative")]
    assert (spec["most_positions"] <= 512).all()
    assert spec["mean_gamma"].between(0, 4).all()
    assert (df[df["mode"] == "plain"]["mean_gamma"] == 0).all()


def test_summary_states_the_tables_numbers(df: pd.DataFrame) -> None:
    text = _study().summary(df)
    assert "gives every request the same first-token and finish times" in text
    r = _row(df, "budget 512", "speculative")
    assert f"{r['goodput_per_s']:.3f} ± {1.959963984540054 * r['goodput_se']:.3f}" in text
    assert "**Replicas** (2 replicas" in text
    assert ("never cut" in text) != ("cut where the budget bound" in text)


def test_figures_are_readable(df: pd.DataFrame) -> None:
    figs = _study().figures(df)
    assert set(figs) == {"engine_latency", "engine_goodput"}
    problems = [p for k, f in figs.items() for p in figure_problems(f, k)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"routers": ("random",)}, r"routers: expected some of"),
        ({"token_budgets": ()}, r"token_budgets: expected at least one"),
        ({"code": "azure-chat"}, r"code: unknown workload 'azure-chat'"),
        ({"fast_requests": 50}, r"fast_requests: need at least 60 for batch means"),
        ({"alpha": 1.5}, r"alpha must lie in \[0, 1\]"),
        ({"tight_kv_tokens": 0}, r"tight_kv_tokens must be integers >= 1"),
        ({"replicas": 1}, r"replicas must be integers >= 2"),
    ],
)
def test_bad_settings_name_the_key(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _study().Config(**kw)
