"""EAGLE-3 head cards: the weights from the released architecture, the published
per-position rates, the assumed depths labelled, and the target check."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from specsim.cards import load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape
from specsim.proposers import Heads

ROOT = Path(__file__).resolve().parents[2]


def _eagle3_weights(*, d: int, heads: int, kv_heads: int, head_dim: int, d_ff: int) -> int:
    """One EAGLE-3 step (arXiv:2503.01840; SafeAILab/EAGLE cnets.py): q/k/v read 2d, o_proj,
    SwiGLU MLP, four RMSNorms, fc 3d -> d and the head's own LM head over 32000 tokens."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return 2 * d * q + 2 * (2 * d * kv) + q * d + 3 * d * d_ff + 4 * d + 3 * d * d + d * 32000


@pytest.mark.parametrize(
    ("slug", "target"),
    [("eagle3-llama-3.1-8b", "llama-3.1-8b"), ("eagle3-llama-3.3-70b", "llama-3.1-70b")],
)
def test_weights_follow_the_architecture_and_the_target_layer(slug: str, target: str) -> None:
    card, model = load_head(slug), load_model(target)
    assert card.target == target and card.kind == "autoregressive"
    want = _eagle3_weights(
        d=model.d_model,
        heads=model.heads,
        kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        d_ff=model.d_ff,
    )
    assert card.weights_per_eval == want
    assert card.layer_fraction == pytest.approx(want / model.decode_layer_params, rel=1e-5)
    Heads(card=card).check_target(model)  # the card's own consistency check passes


def test_the_8b_rows_are_the_published_marginals_as_conditionals() -> None:
    text = (ROOT / "models" / "heads" / "eagle3-llama-3.1-8b.toml").read_text(encoding="utf-8")
    m = re.search(r"published marginal acceptance \(positions 1 2 3\): ([0-9. ]+)", text)
    assert m is not None
    marginals = [float(v) for v in m.group(1).split()]
    assert marginals == [0.7296, 0.5208, 0.3545]  # vLLM's llama3-8b-eagle3 baseline
    card = load_head("eagle3-llama-3.1-8b")
    running = 1.0
    for depth, marginal in enumerate(marginals, start=1):
        running *= card.accept[depth - 1][0]
        assert running == pytest.approx(marginal, abs=5e-6)
    # vLLM's mean acceptance length for the three positions is 2.60: 1 + the marginals.
    assert 1 + sum(marginals) == pytest.approx(2.60, abs=0.01)
    assert card.assumed_depths == (4, 5)


def test_the_70b_card_gives_the_published_chain_length_and_says_its_depths_are_assumed() -> None:
    card = load_head("eagle3-llama-3.3-70b")
    # One rate at every depth, fitted to the published mean acceptance length of a chain of
    # K = 7 (2.88, MT-bench): the split by depth is the card's assumption.
    assert card.max_depth == 7 and len({row for row in card.accept}) == 1
    assert 1 + float(np.cumprod([row[0] for row in card.accept]).sum()) == pytest.approx(
        2.88, abs=5e-4
    )
    assert card.assumed_depths == (1, 2, 3, 4, 5, 6, 7)
    assert "assumed" in Heads(card=card).acceptance.source


def test_a_head_for_another_target_is_refused_naming_both() -> None:
    dep = Deployment(target="llama-3.1-70b", hardware="h100-sxm", tensor_parallel=4)
    head = Heads(card=load_head("eagle3-llama-3.1-8b"))
    with pytest.raises(ValueError, match=r"llama-3.1-8b.*llama-3.1-70b"):
        head.draft_cost([-1], deployment=dep, batch=1, context=512)


def test_the_70b_head_is_a_small_share_of_a_70b_step() -> None:
    """A head step is about 1.6 of 80 layers: a few percent of a target step on 4 GPUs."""
    dep = Deployment(target="llama-3.1-70b", hardware="h100-sxm", tensor_parallel=4)
    head = Heads(card=load_head("eagle3-llama-3.3-70b"))
    draft = head.draft_cost([-1], deployment=dep, batch=1, context=1024).time_s
    step = head.card.layer_fraction / 80
    full = dep.pass_cost(PassShape.chain(context=1024, new=1)).time_s
    assert draft == pytest.approx(step * full, rel=0.05)
