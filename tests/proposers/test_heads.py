"""Head cards: the EAGLE card's published numbers and cost, targets, and bad cards named."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from specsim.cards import HeadCard, load_hardware, load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import best_trees, chain_tree, optimize_tree, tree_tokens
from specsim.proposers import DraftModel, Heads, RankAcceptance, tree_depths

ROOT = Path(__file__).resolve().parents[2]
EAGLE = ROOT / "models" / "heads" / "eagle-vicuna-7b-v1.3.toml"
VICUNA = load_model("vicuna-7b-v1.3")
HW = load_hardware("a100-80gb")
D, FF, VOCAB = 4096, 11008, 32000  # Vicuna-7B v1.3's config.json


def _published() -> dict[int, float]:
    """The card's comment line of published n-alpha, as {depth: value}."""
    text = EAGLE.read_text(encoding="utf-8")
    m = re.search(r"published n-alpha \(n = ([0-9 ]+)\): ([0-9. ]+)", text)
    assert m is not None
    ns, values = m.group(1).split(), m.group(2).split()
    return {int(n) + 1: float(v) for n, v in zip(ns, values, strict=True)}


def test_the_eagle_card_holds_the_published_n_alpha_and_labels_the_rest() -> None:
    card = load_head("eagle-vicuna-7b-v1.3")
    assert (card.target, card.kind, card.max_depth) == ("vicuna-7b-v1.3", "autoregressive", 5)
    published = _published()
    assert published == {1: 0.79, 2: 0.74, 5: 0.67}
    for depth, value in published.items():
        assert card.accept[depth - 1] == (value,)
    # The other depths are the stated assumption (linear between 1-alpha and 4-alpha) and
    # flagged as assumed; every row has one rank (only the top candidate is published).
    assert card.assumed_depths == (3, 4)
    assert set(card.assumed_depths) | set(published) == set(range(1, card.max_depth + 1))
    line = np.interp([3, 4], [2, 5], [published[2], published[5]])
    assert [card.accept[2][0], card.accept[3][0]] == pytest.approx(line, abs=1e-6)
    assert all(len(row) == 1 for row in card.accept)
    acc = Heads(card=card).acceptance
    assert "depths 3, 4 assumed" in acc.source
    assert acc.conditional(1, 1) == 0.0  # no second candidate is claimed


def test_the_eagle_cost_is_its_architecture_over_one_target_layer() -> None:
    card = load_head("eagle-vicuna-7b-v1.3")
    layer = 4 * D * D + 3 * D * FF + 2 * D
    assert VICUNA.decode_layer_params == layer == 202_383_360
    # One decoder layer with one RMSNorm, fc = Linear(2d, d) with bias, the shared LM head.
    weights = (4 * D * D + 3 * D * FF + D) + (2 * D * D + D) + D * VOCAB
    assert card.weights_per_eval == weights == 367_009_792
    assert card.layer_fraction == pytest.approx(weights / layer, abs=1e-4)
    heads = Heads(card=card)
    heads.check_target(VICUNA)
    # Stepped once per depth: a chain of five costs five head steps, each layer_fraction / layers
    # of the target's one-position pass (contexts 0..4 apart: within 1%).
    five = heads.draft_cost(
        chain_tree(5), deployment=Deployment(target=VICUNA, hardware=HW), batch=2, context=300
    )
    one = DraftModel(card=VICUNA, acceptance=heads.acceptance).draft_cost(
        (-1,), deployment=Deployment(target=VICUNA, hardware=HW), batch=2, context=300
    )
    assert five.time_s == pytest.approx(
        5 * one.time_s * card.layer_fraction / VICUNA.layers, rel=0.01
    )
    # The Medusa card's cost checks out the same way.
    Heads(card=load_head("medusa-vicuna-7b-v1.3")).check_target(VICUNA)


def test_the_eagle_card_drafts_chains_and_agrees_with_the_papers_chain_length() -> None:
    acc = Heads(card=load_head("eagle-vicuna-7b-v1.3")).acceptance
    trees = best_trees(acc, budget=8, max_depth=5)
    best = max(trees, key=lambda t: tree_tokens(t, acc))
    assert best == chain_tree(5)  # rank 1 has acceptance 0: a branch never pays
    chain = tree_tokens(chain_tree(5), acc)
    expected = 1 + np.cumprod([row[0] for row in acc.accept]).sum()
    assert chain == pytest.approx(expected, rel=1e-12)
    # A consistency check, not a fit: the paper's chain-draft acceptance length for Vicuna 7B
    # (3.20, as quoted with the n-alpha; the card's source) is within 3% of the card's.
    assert abs(chain - 3.20) / 3.20 < 0.03


def test_a_head_card_for_another_target_is_refused() -> None:
    heads = Heads(card=load_head("eagle-vicuna-7b-v1.3"))
    other = load_model("llama-2-7b")
    with pytest.raises(ValueError, match="'eagle-vicuna-7b-v1.3'.*'vicuna-7b-v1.3'.*'llama-2-7b'"):
        heads.draft_cost(
            (-1, 0), deployment=Deployment(target=other, hardware=HW), batch=1, context=10
        )


def _card(**kw: object) -> HeadCard:
    base: dict[str, object] = {
        "slug": "h",
        "name": "h",
        "kind": "autoregressive",
        "target": "vicuna-7b-v1.3",
        "layer_fraction": 1.0,
        "max_depth": 3,
        "accept": ((0.7,), (0.6,)),
        "sources": ["x"],
    }
    return HeadCard(**{**base, **kw})  # type: ignore[arg-type]


def test_bad_head_cards_are_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'layer_fraction' is 1.0, but weights_per_eval"):
        Heads(card=_card(weights_per_eval=367_009_792)).check_target(VICUNA)
    with pytest.raises(TypeError, match="field 'weights_per_eval': expected an integer"):
        _card(weights_per_eval=1.5)
    with pytest.raises(ValueError, match="field 'weights_per_eval': expected an integer >= 1"):
        _card(weights_per_eval=0)
    with pytest.raises(ValueError, match="'assumed_depths' names depth 3, but 'accept' has 2"):
        _card(assumed_depths=(3,))
    with pytest.raises(TypeError, match="field 'assumed_depths' must be a list"):
        _card(assumed_depths=3)
    with pytest.raises(ValueError, match="'accept' depth 2, rank 0"):
        _card(accept=((0.7,), (-0.1,)))
    text = EAGLE.read_text(encoding="utf-8")
    path = tmp_path / "eagle-vicuna-7b-v1.3.toml"
    path.write_text(
        text.replace("layer_fraction = 1.8134", "layer_fraction = 1.1658"), encoding="utf-8"
    )
    card = load_head(path)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: field 'layer_fraction'"):
        Heads(card=card).check_target(VICUNA)
    path.write_text(
        text.replace("assumed_depths = [3, 4]", "assumed_depth = [3, 4]"), encoding="utf-8"
    )
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['assumed_depth'\]"):
        load_head(path)
    path.write_text(text.replace("max_depth = 5", "max_depth = 4"), encoding="utf-8")
    with pytest.raises(ValueError, match="'accept' has 5 depths but max_depth is 4"):
        load_head(path)


def test_a_card_with_one_rank_acts_as_a_chain_table() -> None:
    acc = RankAcceptance(accept=load_head("eagle-vicuna-7b-v1.3").accept)
    assert acc.table(6, 2)[:, 1].tolist() == [0.0] * 6
    assert acc.conditional(6, 0) == acc.conditional(5, 0)  # past the table: the last row


# The MTP card (models/heads/mtp-mimo-7b.toml) and its target (models/lm/mimo-7b.toml) ---------
MTP = ROOT / "models" / "heads" / "mtp-mimo-7b.toml"
# MiMo-7B's shape as cited on the model card: report Section 2.3 (36 layers, 4096, 11008, 32
# heads, 8 KV groups) and the config.json copy (head_dim 128, vocab 151680, attention biases).
MIMO_CONFIG: dict[str, int] = {
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151680,
    "max_position_embeddings": 32768,
}
MIMO_FLAGS = {"attention_bias": True, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _mimo_layer() -> int:
    """One Qwen2 decoder layer of MiMo-7B from the config: q/k/v/o with q/k/v biases, SwiGLU MLP,
    two RMSNorms."""
    c = MIMO_CONFIG
    d, q = c["hidden_size"], c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    attention = d * q + 2 * d * kv + q * d + (q + 2 * kv)
    return attention + 3 * d * c["intermediate_size"] + 2 * d


def test_the_mimo_model_card_is_the_cited_config() -> None:
    m = load_model("mimo-7b")
    c = MIMO_CONFIG
    got = (
        m.layers,
        m.d_model,
        m.d_ff,
        m.heads,
        m.kv_heads,
        m.head_dim,
        m.vocab,
        m.qkv_bias,
        m.tied_embeddings,
        m.max_position,
        m.dtype,
    )
    assert got == (
        c["num_hidden_layers"],
        c["hidden_size"],
        c["intermediate_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
        c["vocab_size"],
        MIMO_FLAGS["attention_bias"],
        MIMO_FLAGS["tie_word_embeddings"],
        c["max_position_embeddings"],
        MIMO_FLAGS["torch_dtype"],
    )
    assert (m.gated_mlp, m.norm, m.architecture) == (True, "rmsnorm", "decoder")
    layer = _mimo_layer()
    assert m.decode_layer_params == layer == 177_223_680
    total = c["num_hidden_layers"] * layer + c["hidden_size"] * (1 + 2 * c["vocab_size"])
    assert m.params == m.shape_params == total == 7_622_619_136
    assert 7.0e9 <= total < 8.0e9  # the published name, "7B" (not a finer figure)


def test_the_mtp_card_holds_the_readmes_about_90_percent_for_one_depth() -> None:
    card = load_head("mtp-mimo-7b")
    assert (card.target, card.kind, card.max_depth) == ("mimo-7b", "autoregressive", 1)
    text = MTP.read_text(encoding="utf-8")
    m = re.search(
        r"With one MTP layer for speculative decoding, the acceptance rate is about "
        r"(\d+)%",
        text,
    )
    assert m is not None
    assert card.accept == ((int(m.group(1)) / 100,),) == ((0.90,),)
    assert card.assumed_depths == ()
    assert "Approximate" in card.notes and "first MTP layer" in card.notes
    src = card.sources
    assert isinstance(src, dict)
    assert "3a3fe65e6081c9f340ff0d24d82c4d7a96a247c5/README.md" in src["accept"]
    assert "3a353c0508437a2341ae67252e62382ad012d165" in src["architecture"]
    acc = Heads(card=card).acceptance
    assert tree_tokens(chain_tree(1), acc) == pytest.approx(1.9, abs=1e-12)
    assert acc.conditional(1, 1) == 0.0  # top-1 only: no second candidate


def test_the_mtp_cost_is_one_mimo_layer_plus_input_proj_norms_and_the_lm_head() -> None:
    card, mimo = load_head("mtp-mimo-7b"), load_model("mimo-7b")
    c = MIMO_CONFIG
    d, vocab = c["hidden_size"], c["vocab_size"]
    # MiMoMultiTokenPredictorLayer: a Qwen2 decoder layer, input_proj = Linear(2d, d, bias=False),
    # token/hidden/final RMSNorm; then the target's LM head (shared), once per step.
    weights = _mimo_layer() + 2 * d * d + 3 * d + d * vocab
    assert card.weights_per_eval == weights == 832_071_680
    assert card.layer_fraction == pytest.approx(weights / _mimo_layer(), abs=1e-4)
    heads = Heads(card=card)
    heads.check_target(mimo)
    # One draft step is layer_fraction / 36 of the target's one-position pass, exactly.
    step = heads.draft_cost(
        chain_tree(1), deployment=Deployment(target=mimo, hardware=HW), batch=1, context=512
    )
    one = DraftModel(card=mimo, acceptance=heads.acceptance).draft_cost(
        (-1,), deployment=Deployment(target=mimo, hardware=HW), batch=1, context=512
    )
    assert step.time_s / one.time_s == pytest.approx(card.layer_fraction / 36, rel=1e-12)
    assert card.layer_fraction / 36 == pytest.approx(0.1304, abs=1e-4)


def test_the_mtp_card_is_refused_for_another_target() -> None:
    heads = Heads(card=load_head("mtp-mimo-7b"))
    for other in ("qwen2.5-7b", "vicuna-7b-v1.3"):
        with pytest.raises(ValueError, match=rf"'mtp-mimo-7b'.*'mimo-7b'.*'{re.escape(other)}'"):
            heads.draft_cost(
                (-1,),
                deployment=Deployment(target=load_model(other), hardware=HW),
                batch=1,
                context=10,
            )


def test_a_depth_two_draft_is_refused_by_the_mtp_card() -> None:
    heads, mimo = Heads(card=load_head("mtp-mimo-7b")), load_model("mimo-7b")
    for tree in (chain_tree(2), (-1, -1, 0)):
        with pytest.raises(
            ValueError, match="'mtp-mimo-7b': the tree is 2 deep but the card's heads reach depth 1"
        ):
            heads.draft_cost(
                tree, deployment=Deployment(target=mimo, hardware=HW), batch=1, context=10
            )
    # The acceptance refuses it too: a head card's table carries its max_depth, so a depth-2
    # chain is not priced at 1 + 0.9 + 0.81 by repeating the last row.
    assert heads.acceptance.conditional(1, 0) == 0.9
    with pytest.raises(ValueError, match="depth 2 is beyond what this proposer drafts"):
        heads.acceptance.conditional(2, 0)
    # The optimizer caps the depth at the card's max_depth: at most a chain of one.
    plan = optimize_tree(
        proposer=heads, deployment=Deployment(target=mimo, hardware=HW), batch=1, budget=4
    )
    assert max(tree_depths(plan.best.parents), default=0) <= 1
    assert plan.best.parents == chain_tree(1)  # at batch 1 a one-token draft pays


def test_head_cards_are_found_where_the_other_cards_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder named by SPECSIM_CARDS (or search_path) is searched for head cards too, in its
    heads/ subfolder, as for model, hardware and runtime cards."""
    from specsim.cards import list_heads
    from specsim.cards.files import ENV_VAR

    shipped = Path(load_head("medusa-vicuna-7b-v1.3").source_path or "")
    text = shipped.read_text(encoding="utf-8").replace(
        'slug = "medusa-vicuna-7b-v1.3"', 'slug = "medusa-copy"'
    )
    assert 'slug = "medusa-copy"' in text
    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / "medusa-copy.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="medusa-copy"):
        load_head("medusa-copy")
    assert load_head("medusa-copy", search_path=tmp_path).slug == "medusa-copy"
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert load_head("medusa-copy").accept == load_head("medusa-vicuna-7b-v1.3").accept
    assert "medusa-copy" in {c.slug for c in list_heads()}
