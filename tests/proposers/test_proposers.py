"""Proposers: head cards, their costs and targets, acceptance files, n-gram measurement."""

from __future__ import annotations

import csv
import importlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specsim.cards import HeadCard, load_hardware, load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.proposers import (
    LOOKUP_COST,
    DraftModel,
    Heads,
    NGram,
    RankAcceptance,
    frontier_widths,
    load_acceptance,
    verify_shape,
)
from specsim.proposers.ngram import (
    acceptance_from_counts,
    count_acceptance,
    documents,
    lookup,
    tokens,
    write_tables,
)

ROOT = Path(__file__).resolve().parents[2]
HW = load_hardware("a100-80gb")
LLAMA = load_model("llama-2-7b")
# The Medusa card's target: the card text asked for in models/lm (a test copy until then).
VICUNA = LLAMA.__class__(
    **{
        **{k: getattr(LLAMA, k) for k in LLAMA.__dataclass_fields__ if k != "source_path"},
        "slug": "vicuna-7b-v1.3",
        "name": "Vicuna 7B v1.3",
        "family": "llama",
        "max_position": 2048,
        "params": 6_738_415_616,
        "hf_repo": "lmsys/vicuna-7b-v1.3",
        "sources": {"config": "https://huggingface.co/lmsys/vicuna-7b-v1.3/blob/main/config.json"},
    }
)
MEDUSA = ROOT / "models" / "heads" / "medusa-vicuna-7b-v1.3.toml"


def test_the_medusa_card_is_the_published_top_k_accuracies() -> None:
    card = load_head("medusa-vicuna-7b-v1.3")
    text = MEDUSA.read_text(encoding="utf-8")
    topk = [[float(x) for x in m.split()] for m in re.findall(r"top-1\.\.5: ([0-9. ]+)", text)]
    assert len(topk) == card.max_depth == 5
    marginal = [[t[0]] + [t[i] - t[i - 1] for i in range(1, 5)] for t in topk]
    derived = RankAcceptance.from_marginal(marginal)
    assert np.allclose(derived.accept, card.accept, atol=1e-6)
    # The cost: five heads of d*d + d + d*vocab weights over one LLaMA-7B layer.
    d, v, ff = 4096, 32000, 11008
    layer = 4 * d * d + 3 * d * ff + 2 * d
    assert card.layer_fraction == pytest.approx(5 * (d * d + d + d * v) / layer, abs=1e-4)


def test_heads_cost_one_evaluation_per_pass_and_refuse_another_target() -> None:
    heads = Heads(card=load_head("medusa-vicuna-7b-v1.3"))
    tree = (-1, -1, 0, 0, 1, 2)
    one = heads.draft_cost(
        tree, deployment=Deployment(target=VICUNA, hardware=HW), batch=4, context=256
    )
    chain = heads.draft_cost(
        (-1, 0, 1), deployment=Deployment(target=VICUNA, hardware=HW), batch=4, context=256
    )
    assert one.time_s == pytest.approx(chain.time_s)  # one evaluation, whatever the tree
    ver = DraftModel(card=VICUNA, acceptance=heads.acceptance).draft_cost(
        (-1,), deployment=Deployment(target=VICUNA, hardware=HW), batch=4, context=256
    )
    assert one.time_s == pytest.approx(ver.time_s * 3.6528 / 32)
    with pytest.raises(ValueError, match="trained for target 'vicuna-7b-v1.3'.*'llama-2-7b'"):
        heads.draft_cost(
            tree, deployment=Deployment(target=LLAMA, hardware=HW), batch=1, context=10
        )
    with pytest.raises(ValueError, match="6 deep .* depth 5"):
        heads.draft_cost(
            (-1, 0, 1, 2, 3, 4),
            deployment=Deployment(target=VICUNA, hardware=HW),
            batch=1,
            context=10,
        )


def test_an_autoregressive_head_steps_once_per_depth() -> None:
    card = HeadCard(
        slug="h",
        name="h",
        kind="autoregressive",
        target="vicuna-7b-v1.3",
        layer_fraction=1.0,
        max_depth=4,
        accept=((0.5,),),
        sources=["test"],
    )
    deep = Heads(card=card).draft_cost(
        (-1, 0, 1), deployment=Deployment(target=VICUNA, hardware=HW), batch=1, context=100
    )
    flat = Heads(card=card).draft_cost(
        (-1,), deployment=Deployment(target=VICUNA, hardware=HW), batch=1, context=100
    )
    assert deep.time_s == pytest.approx(3 * flat.time_s, rel=0.01)


def test_bad_head_cards_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'kind' must be one of"):
        HeadCard(
            slug="h",
            name="h",
            kind="magic",
            target="t",
            layer_fraction=1.0,
            max_depth=1,
            accept=((0.5,),),
            sources=["x"],
        )
    with pytest.raises(ValueError, match="depth 1, rank 0"):
        HeadCard(
            slug="h",
            name="h",
            kind="parallel",
            target="t",
            layer_fraction=1.0,
            max_depth=1,
            accept=((1.5,),),
            sources=["x"],
        )
    bad = tmp_path / "x.toml"
    bad.write_text(MEDUSA.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ValueError, match="name the file medusa-vicuna-7b-v1.3.toml"):
        load_head(bad)
    with pytest.raises(ValueError, match="no head card 'nope'"):
        load_head("nope")


def test_a_draft_model_steps_over_the_frontier_and_checks_its_target() -> None:
    acc = RankAcceptance(accept=((0.6, 0.2),))
    draft = DraftModel(card=load_model("llama-68m"), acceptance=acc)
    assert frontier_widths((-1, -1, 0, 0, 1, 1)) == (1, 2)
    wide = draft.draft_cost(
        (-1, -1, 0, 0, 1, 1), deployment=Deployment(target=LLAMA, hardware=HW), batch=2, context=50
    )
    chain = draft.draft_cost(
        (-1, 0), deployment=Deployment(target=LLAMA, hardware=HW), batch=2, context=50
    )
    assert wide.time_s >= chain.time_s > 0.0
    with pytest.raises(ValueError, match="vocab|tokenizer|family"):
        DraftModel(card=load_model("qwen2.5-0.5b"), acceptance=acc).draft_cost(
            (-1,), deployment=Deployment(target=LLAMA, hardware=HW), batch=1, context=1
        )
    look = NGram(acceptance=acc).draft_cost(
        (-1,), deployment=Deployment(target=LLAMA, hardware=HW), batch=1, context=1
    )
    c = LOOKUP_COST
    assert look.time_s == pytest.approx(
        c.per_sequence_s + c.per_context_token_s + c.per_draft_token_s, rel=1e-12
    )
    assert look.flops == 0.0 and look.energy_j == pytest.approx(HW.idle_power_w * look.time_s)
    assert verify_shape((-1, 0), context=7, batch=3).tokens == 9


@pytest.mark.parametrize(
    ("batch", "threads", "rounds"), [(4, 1, 4), (4, 2, 2), (5, 2, 3), (3, 8, 1)]
)
def test_a_batchs_lookups_run_in_rounds_over_the_host_threads(
    batch: int, threads: int, rounds: int
) -> None:
    # vLLM's batch_propose spreads the batch's sequences over its numba threads: a pass
    # waits for ceil(batch / threads) lookups in a row, each one sequence's search.
    acc = RankAcceptance(accept=((0.6, 0.2),))
    dep = Deployment(target=LLAMA, hardware=HW)
    tree, context = (-1, 0, 1), 300
    look = NGram(acceptance=acc, threads=threads).draft_cost(
        tree, deployment=dep, batch=batch, context=context
    )
    c = LOOKUP_COST
    one = c.per_sequence_s + c.per_context_token_s * context + c.per_draft_token_s * len(tree)
    assert look.time_s == pytest.approx(rounds * one, rel=1e-12)


def test_acceptance_files(tmp_path: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('source = "s"\nmarginal = [[0.5, 0.25], [0.4]]\n', encoding="utf-8")
    acc = load_acceptance(toml)
    assert acc.accept == ((0.5, 0.5), (0.4,)) and acc.source == "s"
    text = "# source: measured\ndepth,rank,accept\n1,0,0.6\n1,1,0.3\n2,0,0.5\n"
    (tmp_path / "a.csv").write_text(text, encoding="utf-8")
    acc = load_acceptance(tmp_path / "a.csv")
    assert acc.accept == ((0.6, 0.3), (0.5,)) and acc.source == "measured"
    (tmp_path / "b.csv").write_text("depth,rank,marginal\n1,0,0.7\n1,1,0.4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="depth 1: the ranks' probabilities sum to 1.1"):
        load_acceptance(tmp_path / "b.csv")
    (tmp_path / "c.csv").write_text("depth,rank,accept\n1,1,0.7\n", encoding="utf-8")
    with pytest.raises(ValueError, match="without gaps"):
        load_acceptance(tmp_path / "c.csv")
    (tmp_path / "d.toml").write_text("accept = [[0.5]]\nmarginal = [[0.5]]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="exactly one of"):
        load_acceptance(tmp_path / "d.toml")


def test_lookup_and_counts_on_a_known_text() -> None:
    text = "a b c a b d a b".split()
    assert lookup(text, 8, n=2, before=8) == ["d", "c"]  # equal counts: most recent first
    assert lookup(text, 8, n=2, before=5) == ["c"]  # only what was there when drafting
    assert lookup(text, 2, n=2, before=2) == []
    # "x y x y x y", 1-gram lookup: at t = 1 and t = 2 the last token has no earlier
    # occurrence whose follower the drafter holds -> misses; t = 3, 4, 5 hit at depth 1;
    # depth 2 is tried after the hits at t = 3 and 4 (t = 5 has no next token) and hits.
    tried, hit = count_acceptance([list("xyxyxy")], n=1, depths=2, ranks=1)
    assert tried == [[5], [2]] and hit == [[3], [2]]
    acc = acceptance_from_counts(tried, hit, source="t")
    assert acc.accept == ((0.6,), (1.0,))


def test_the_committed_ngram_table_is_what_the_command_measures(tmp_path: Path) -> None:
    sample = ROOT / "models" / "corpora" / "sample"
    assert {c for c, _ in documents(sample)} == {"en", "de", "es", "it", "code", "licences"}
    assert tokens("a, b") == ["a", ",", "b"]
    write_tables(source=sample, out=tmp_path)
    committed = ROOT / "models" / "measured" / "ngram"
    assert (tmp_path / "accept.csv").read_text() == (committed / "accept.csv").read_text()
    assert (tmp_path / "accept-sample.toml").read_text() == (
        committed / "accept-sample.toml"
    ).read_text()
    rows = list(csv.DictReader((committed / "accept.csv").read_text().splitlines()))
    assert {r["corpus"] for r in rows} >= {"all", "code", "en"}
    acc = load_acceptance(committed / "accept-sample.toml")
    assert acc.depths >= 2 and 0.0 < acc.accept[0][0] < 1.0


def _brute_counts(docs: list[list[str]], n: int, depths: int, ranks: int) -> tuple[Any, Any]:
    """The counts from :func:`lookup` itself (rescanning every occurrence each time)."""
    tried = [[0] * ranks for _ in range(depths)]
    hit = [[0] * ranks for _ in range(depths)]
    for text in docs:
        for t in range(n, len(text)):
            for d in range(depths):
                if t + d >= len(text):
                    break
                cands = lookup(text, t + d, n=n, before=t)
                r = next(
                    (r for r in range(ranks) if r < len(cands) and cands[r] == text[t + d]), None
                )
                for k in range(ranks if r is None else r + 1):
                    tried[d][k] += 1
                if r is None:
                    break
                hit[d][r] += 1
    return tried, hit


def test_the_incremental_counts_are_the_lookups() -> None:
    docs = [tokens(text) for _, text in documents(ROOT / "models" / "corpora" / "sample")][:40]
    for n in (1, 2):
        assert count_acceptance(docs, n=n, depths=3, ranks=3) == _brute_counts(docs, n, 3, 3)


def test_the_study_runs_on_the_cards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specsim.cards import write_card
    from specsim.report.studies import studies_package

    write_card(VICUNA, tmp_path / "vicuna-7b-v1.3.toml")
    monkeypatch.setenv("SPECSIM_CARDS", str(tmp_path))
    study = importlib.import_module(f"{studies_package().__name__}.proposers")
    cfg = study.Config(batches=(1, 8, 64), hardware=("a100-80gb",), fast_budget=8)
    df = study.run(cfg, None, fast=True)
    assert (df.groupby(["hardware", "batch"])["winner"].sum() >= 1).all()
    tree = df[df["series"] == "Medusa heads, best tree"].set_index("batch")
    assert tree.loc[1, "nodes"] > tree.loc[64, "nodes"]  # the tree shrinks as the batch grows
    assert set(study.figures(df)) == {
        "proposers_throughput",
        "proposers_energy",
        "proposers_discarded",
        "proposers_tree_size",
    }
    assert "Medusa heads" in study.summary(df)
    eagle = df[df["series"] == "EAGLE head, chain"].set_index("batch")
    assert (eagle["nodes"] <= 5).all() and (eagle["depth"] == eagle["nodes"]).all()  # chains
    assert eagle.loc[1, "speedup"] > 1.0 and "EAGLE head" in study.summary(df)
