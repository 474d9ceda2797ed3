"""MoE and MLA model cards: shapes against the published parameter counts, and bad tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specsim.cards import load_model

# (total, activated) parameters as each model's source states them (cited in the cards'
# [sources]); the second element of the key is how many significant digits it gives.
PUBLISHED = {
    "mixtral-8x7b": (46.7e9, 12.9e9),  # Mistral AI, "Mixtral of experts"
    "deepseek-v3": (671e9, 37e9),  # DeepSeek-V3 Technical Report, abstract
    "qwen3-30b-a3b": (30.5e9, 3.3e9),  # Qwen3-30B-A3B model card
    "qwen3-235b-a22b": (235e9, 22e9),  # Qwen3-235B-A22B model card
    "gpt-oss-20b": (20.91e9, 3.61e9),  # gpt-oss model card, Table 1
    "gpt-oss-120b": (116.83e9, 5.13e9),  # gpt-oss model card, Table 1
    "kimi-k2": (1e12, 32e9),  # Kimi K2 README: "1T" total, 32B activated
}


@pytest.mark.parametrize("slug", sorted(PUBLISHED))
def test_total_and_active_parameters_match_the_published_counts(slug: str) -> None:
    card = load_model(slug)
    total, active = PUBLISHED[slug]
    # "1T" has one significant digit: the shape's 1.026T is within its rounding (5%).
    tol = 0.05 if slug == "kimi-k2" else 0.02
    assert abs(card.shape_params / total - 1) < tol
    # Sources differ on whether the input embedding table counts as activated (gpt-oss's
    # model card counts the unembedding only, Qwen counts both): one of the two is within 2%.
    embed = card.vocab * card.d_model
    gaps = [abs(card.decode_params / active - 1), abs((card.decode_params + embed) / active - 1)]
    assert min(gaps) < 0.02, gaps


def test_a_dense_card_has_no_experts_and_keeps_its_counts() -> None:
    card = load_model("llama-2-7b")
    assert card.moe_spec is None and card.mla_spec is None and card.moe_layers == 0
    assert card.routed_expert_params == 0
    assert card.fixed_layer_params == card.layers * card.decode_layer_params


def test_moe_counts_follow_from_the_experts() -> None:
    card = load_model("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    assert card.routed_expert_params == expert
    assert card.shape_params - card.decode_params == 32 * 6 * expert + card.vocab * card.d_model
    # DeepSeek-V3: 58 MoE layers after 3 dense ones.
    assert load_model("deepseek-v3").moe_layers == 58


def _write(tmp_path: Path, slug: str, **tables: dict[str, object]) -> Path:
    text = Path(load_model(slug).source_path or "").read_text()
    head = text.split("\n[moe]")[0].split("\n[sources]")[0]
    body = "".join(
        f"\n[{name}]\n" + "".join(f"{k} = {str(v).lower()}\n" for k, v in t.items())
        for name, t in tables.items()
    )
    out = tmp_path / f"{slug}.toml"
    out.write_text(head + body + '\n[sources]\nconfig = "test"\n')
    return out


@pytest.mark.parametrize(
    ("moe", "message"),
    [
        (
            {"experts": 8, "top_k": 9, "expert_ffn": 14336},
            r"'moe.top_k' = 9 exceeds moe.experts = 8",
        ),
        ({"experts": 8, "top_k": 0, "expert_ffn": 14336}, r"'moe.top_k': expected an integer >= 1"),
        ({"experts": 8, "expert_ffn": 14336}, r"missing key 'moe.top_k'"),
        (
            {"experts": 8, "top_k": 2, "expert_ffn": 14336, "topk": 2},
            r"unknown key\(s\) \['topk'\]",
        ),
        (
            {"experts": 8, "top_k": 2, "expert_ffn": 14336, "dense_layers": 32},
            "leaves no MoE layer",
        ),
    ],
)
def test_bad_moe_tables_name_the_key_and_the_file(
    tmp_path: Path, moe: dict[str, object], message: str
) -> None:
    path = _write(tmp_path, "mixtral-8x7b", moe=moe)
    with pytest.raises(ValueError, match=message) as err:
        load_model(path)
    assert str(path) in str(err.value)


def test_a_bad_mla_table_names_the_key() -> None:
    card = load_model("deepseek-v3")
    with pytest.raises(ValueError, match="missing key 'mla.v_head_dim'"):
        dataclasses.replace(
            card, mla={"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128}
        )
    with pytest.raises(TypeError, match="'mla.kv_lora_rank': expected an integer"):
        dataclasses.replace(card, mla={**(card.mla or {}), "kv_lora_rank": 512.5})
