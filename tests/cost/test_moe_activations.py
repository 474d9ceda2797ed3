"""An MoE pass's activation traffic is that of the experts each token runs (its ``top_k``
routed experts and the shared ones), not of all the experts: the same as a dense model whose
feed-forward is those experts merged (the frontier study's dense twin), pass for pass."""

from __future__ import annotations

import dataclasses

import pytest

from specsim.cards import ModelCard, load_hardware, load_model
from specsim.cost import step_cost


def _merged(card: ModelCard) -> ModelCard:
    """``card`` with a token's routed and shared experts merged into one dense FFN."""
    moe = card.moe_spec
    assert moe is not None and moe.dense_layers == 0  # every layer routed: one FFN width
    width = (moe.top_k + moe.shared_experts) * moe.expert_ffn
    loose = dataclasses.replace(card, moe=None, d_ff=width, params_tolerance=1e9)
    return dataclasses.replace(
        loose, slug=f"{card.slug}-merged", params=loose.shape_params, source_path=None
    )


@pytest.mark.parametrize(("batch", "new_tokens"), [(1, 1), (16, 4), (64, 1)])
def test_moe_activation_bytes_are_a_tokens_experts(batch: int, new_tokens: int) -> None:
    moe, hw = load_model("qwen3-30b-a3b"), load_hardware("h200")
    kw = {"batch": batch, "context": 1024, "new_tokens": new_tokens}
    routed = step_cost(moe, hw, **kw)
    dense = step_cost(_merged(moe), hw, **kw)
    assert routed.activation_bytes == pytest.approx(dense.activation_bytes, rel=1e-12)
    # and the weights differ: the experts a pass touches, against the merged FFN once
    assert routed.weight_bytes > dense.weight_bytes
