"""The cards of issue 33, item 5: attention kinds on model cards, the new models, heads and
parallel drafters, each number against the source its card cites."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from specsim.cards import (
    ModelCard,
    list_heads,
    list_proposer_cards,
    load_head,
    load_model,
    load_proposer_card,
)
from specsim.cards.attention import AttentionKind

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("slug", "kind", "window", "global_layers"),
    [
        ("gemma-3-4b", "sliding-window", 1024, 5),  # 34 layers: 5 x (5 local + 1 global) + 4
        ("gemma-3-12b", "sliding-window", 1024, 8),
        ("gemma-3-27b", "sliding-window", 1024, 10),  # 62 = 10 x 6 + 2 local
        ("llama-4-scout", "chunked", 8192, 12),  # NoPE every fourth of 48
        ("llama-4-maverick", "chunked", 8192, 12),
    ],
)
def test_local_and_global_layers(slug: str, kind: str, window: int, global_layers: int) -> None:
    card = load_model(slug)
    spec = card.attention_spec
    assert spec is not None and spec.kind == kind and spec.window == window
    assert spec.global_layers(card.layers) == global_layers
    # The rule of the cited code: layer i (from 0) global when (i + 1) % global_every == 0.
    assert sum((i + 1) % spec.global_every == 0 for i in range(card.layers)) == global_layers


def test_deepseek_v32_is_v3_with_an_indexer_in_every_layer() -> None:
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    spec = v32.attention_spec
    assert spec is not None and spec.kind == "sparse" and spec.top_k == 2048
    assert spec.local_layers(v32.layers) == 61 and spec.global_layers(61) == 0
    for name in ("layers", "d_model", "heads", "vocab", "moe", "mla", "d_ff"):
        assert getattr(v32, name) == getattr(v3, name), name
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64  # wq_b, wk, k_norm, weights
    assert v32.shape_params - v3.shape_params == 61 * per_layer
    assert spec.index_bytes_per_token == 128 + 4  # fp8 key + one fp32 scale per 128


@pytest.mark.parametrize(
    ("slug", "shape_b"),
    [
        ("gemma-3-4b", 3.880),  # Gemma 3 report, Table 1: 675M + 3,209M text parameters
        ("gemma-3-12b", 11.765),  # 1,012M + 10,759M
        ("gemma-3-27b", 27.008),  # 1,416M + 25,600M
        ("qwen3-8b", 8.191),  # model card: 8.2B, 6.95B non-embedding
        ("qwen3-32b", 32.762),  # 32.8B
        ("llama-4-scout", 107.770),  # 109B with the vision encoder
        ("llama-4-maverick", 400.712),  # 400B
    ],
)
def test_shape_counts(slug: str, shape_b: float) -> None:
    assert load_model(slug).shape_params / 1e9 == pytest.approx(shape_b, abs=5e-4)


def test_qwen3_non_embedding_count_is_the_model_cards() -> None:
    for slug, non_embedding in (("qwen3-8b", 6.95e9), ("qwen3-32b", 31.2e9)):
        card = load_model(slug)
        assert card.shape_params - 2 * card.vocab * card.d_model == pytest.approx(
            non_embedding, rel=0.005
        )


def _table(**changes: object) -> dict[str, object]:
    return {"kind": "sliding-window", "window": 1024, **changes}


@pytest.mark.parametrize(
    ("table", "match"),
    [
        (_table(kind="local"), r"'attention.kind' must be one of"),
        ({"kind": "chunked"}, r"missing key\(s\) \['window'\] in \[attention\]"),
        (_table(window=0), r"'attention.window': expected an integer >= 1, got 0"),
        (_table(global_every=1), r"'attention.global_every': expected an integer >= 2, got 1"),
        (_table(top_k=8), r"\['top_k'\] in \[attention\] do not apply to kind 'sliding-window'"),
        (_table(span=3), r"unknown key\(s\) \['span'\] in \[attention\]"),
        ({"kind": "sparse", "top_k": 8}, r"missing key\(s\) \['index_bytes_per_token'"),
    ],
)
def test_bad_attention_tables_are_named(table: dict[str, object], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        AttentionKind.from_table(table, where="x.toml")


def test_sparse_attention_needs_a_query_latent_and_windows_a_decoder() -> None:
    qwen = load_model("qwen3-8b")
    sparse = {"kind": "sparse", "top_k": 8, "index_heads": 2, "index_head_dim": 4}
    with pytest.raises(ValueError, match=r"needs an \[mla\] table with q_lora_rank"):
        dataclasses.replace(qwen, attention={**sparse, "index_bytes_per_token": 4})
    t5 = load_model("t5-small")
    with pytest.raises(ValueError, match=r"\[attention\] is for decoder-only cards"):
        dataclasses.replace(t5, attention=_table())


# Heads and parallel drafters -----------------------------------------------------------------
def _conditional(marginals: list[float]) -> list[float]:
    return [m / (marginals[i - 1] if i else 1.0) for i, m in enumerate(marginals)]


@pytest.mark.parametrize(
    ("slug", "marginals", "length"),
    [  # vLLM tests/v1/spec_decode/test_acceptance_length.py @ 029ba375
        ("eagle3-qwen3-8b", [0.6541, 0.3993, 0.2020], 2.26),
        ("eagle3-gpt-oss-20b", [0.7165, 0.5120, 0.3337], 2.56),
    ],
)
def test_eagle3_rows_are_the_published_per_position_rates(
    slug: str, marginals: list[float], length: float
) -> None:
    card = load_head(slug)
    rows = [r[0] for r in card.accept]
    assert rows[:3] == pytest.approx(_conditional(marginals), abs=1e-6)
    assert 1 + sum(marginals) == pytest.approx(length, abs=0.005)  # the test's own mean
    assert rows[3:] == [rows[2]] * 2 and card.assumed_depths == (4, 5)
    target = load_model(card.target)
    card.check_layer_fraction(target.decode_layer_params)


def test_a_head_nobody_measured_is_a_card_for_its_cost_with_every_depth_assumed() -> None:
    card = load_head("eagle3-gpt-oss-120b")
    assert card.assumed_depths == tuple(range(1, card.max_depth + 1))
    assert card.accept == load_head("eagle3-gpt-oss-20b").accept
    card.check_layer_fraction(load_model("gpt-oss-120b").decode_layer_params)


def _chain_length(card: object) -> float:
    rows = [r[0] for r in card.accept]  # type: ignore[attr-defined]
    return 1 + sum(math.prod(rows[: d + 1]) for d in range(len(rows)))


@pytest.mark.parametrize(
    ("slug", "draft_layers", "k", "positions", "length"),
    [
        ("peagle-gpt-oss-120b", 4, 8, "tree-depth", 2.68),  # MT-Bench AL at speculation 5
        ("dflash-qwen3-8b-b16", 5, 15, "k", 3.43),  # the 4B sibling's MT-bench tau (assumed)
        ("pard-llama-3.2-1b-llama-3.1-8b", 16, 12, "tree-depth", 5.6),
    ],
)
def test_parallel_drafters_layers_tokens_a_pass_and_mean(
    slug: str, draft_layers: int, k: int, positions: str, length: float
) -> None:
    card = load_proposer_card(slug)
    assert card.kind == "parallel"
    assert load_model(card.draft).layers == draft_layers  # type: ignore[union-attr]
    assert card.k == k and card.pass_positions == positions  # type: ignore[union-attr]
    assert _chain_length(card) == pytest.approx(length, abs=0.005)
    assert card.assumed_depths == tuple(range(1, len(card.accept) + 1))


def test_every_shipped_head_and_proposer_names_a_shipped_target() -> None:
    models = {p.stem for p in (ROOT / "models" / "lm").glob("*.toml")}
    for card in [*list_heads(), *list_proposer_cards()]:
        assert card.target in models, card.slug
    assert {"eagle3-qwen3-8b", "eagle3-gpt-oss-20b", "eagle3-gpt-oss-120b"} <= {
        h.slug for h in list_heads()
    }


def test_every_assumed_number_of_the_new_model_cards_says_so() -> None:
    for slug in ("peagle-gpt-oss-120b-draft", "dflash-qwen3-8b-b16-draft"):
        card: ModelCard = load_model(slug)
        text = Path(str(card.source_path)).read_text(encoding="utf-8")
        for name in ("d_model", "heads", "kv_heads", "head_dim", "d_ff"):
            line = next(ln for ln in text.splitlines() if ln.startswith(f"{name} ="))
            assert "ASSUMPTION" in line, (slug, name)
