"""DeepSeek-V3's MTP module as a proposer: its shape, its cost through the deployment
(MoE, EP), its acceptance sources, and the errors for another target or a bad card."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import HeadCard, load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape
from specsim.proposers import Heads
from specsim.proposers.mtp import (
    mtp_block_card,
    mtp_kv_bytes_per_token,
    mtp_memory_bytes,
    mtp_module_params,
)

DSV3 = load_model("deepseek-v3")
MTP = Heads(card=load_head("mtp-deepseek-v3"))


def _dep(**kw: object) -> Deployment:
    base: dict[str, object] = {
        "target": DSV3,
        "hardware": "h200",
        "tensor_parallel": 8,
        "expert_parallel": 8,
    }
    return Deployment(**{**base, **kw})  # type: ignore[arg-type]


def test_the_module_has_the_released_size() -> None:
    """One MoE layer with all 256 experts, the projection and three norms, plus the copies of
    the embedding and head the checkpoint stores: the model card's 14B (both numbers rounded,
    685B - 671B), within 5%."""
    d = DSV3.d_model
    module = mtp_module_params(DSV3)
    assert module + 2 * DSV3.vocab * d == pytest.approx(14e9, rel=0.05)
    block = mtp_block_card(DSV3)
    assert (block.layers, block.moe_layers) == (1, 1)
    # The projection 2d -> d is priced as 2d extra LM-head rows: exactly its weights.
    assert (block.vocab - DSV3.vocab) * d == 2 * d * d


def test_a_step_is_one_pass_of_the_block_on_the_target_deployment() -> None:
    """The oracle: depth d of a chain is one pass of the one-layer block over one new
    position per sequence after context + d - 1 tokens, with the target's formats, TP and
    EP; a chain of three is the sum of those three passes."""
    dep = _dep()
    block_dep = dataclasses.replace(dep, target=mtp_block_card(DSV3))
    batch, ctx = 16, 4096
    steps = [
        block_dep.pass_cost(PassShape.chain(context=ctx + d, new=1, batch=batch)).time_s
        for d in range(3)
    ]
    got = MTP.draft_cost([-1, 0, 1], deployment=dep, batch=batch, context=ctx).time_s
    assert got == pytest.approx(sum(steps), rel=1e-9)


def test_the_cost_goes_through_expert_parallelism_and_the_experts_touched() -> None:
    """EP changes a step (the all-to-all and each device's experts), and a wider batch
    touches more distinct experts, so a step costs more per pass but less per token."""
    ep8 = MTP.draft_cost([-1], deployment=_dep(), batch=64, context=2048).time_s
    ep1 = MTP.draft_cost([-1], deployment=_dep(expert_parallel=1), batch=64, context=2048).time_s
    assert ep8 != pytest.approx(ep1, rel=1e-6)
    one = MTP.draft_cost([-1], deployment=_dep(), batch=1, context=2048).time_s
    wide = MTP.draft_cost([-1], deployment=_dep(), batch=64, context=2048).time_s
    assert one < wide < 64 * one


def test_a_step_is_a_small_share_of_a_target_step() -> None:
    """One of 61 layers plus the LM head and the per-pass overhead: between 1/61 and half
    of a target decode step at batch 1."""
    dep = _dep()
    step = dep.pass_cost(PassShape.chain(context=2048, new=1)).time_s
    draft = MTP.draft_cost([-1], deployment=dep, batch=1, context=2048).time_s
    assert step / 61 < draft < step / 2


def test_memory_and_kv_are_the_modules_own() -> None:
    dep = _dep()
    fm = dep.formats()
    assert MTP.memory_bytes(dep) == pytest.approx(mtp_module_params(DSV3) * fm.weights / 8)
    assert mtp_memory_bytes(dep) == MTP.memory_bytes(dep)
    # One MLA layer's latent and rotary key per token.
    assert mtp_kv_bytes_per_token(dep) == pytest.approx(DSV3.kv_bytes_per_token(fm.kv) / 61)


def test_acceptance_cites_the_report_and_labels_the_assumed_depths() -> None:
    card = MTP.card
    assert card.accept[0] == (0.875,)
    assert 0.85 <= card.accept[0][0] <= 0.90  # the report's 85%-90% (Section 5.4.3)
    assert card.assumed_depths == (2, 3, 4, 5, 6, 7)
    assert "2412.19437" in MTP.acceptance.source
    assert "assumed" in MTP.acceptance.source
    # The assumed rate reproduces the published mean acceptance length at K = 7 (3.20).
    running, tokens = 1.0, 1.0
    for row in card.accept:
        running *= row[0]
        tokens += running
    assert tokens == pytest.approx(3.20, abs=5e-4)


def test_an_mtp_card_for_another_target_is_an_error_naming_both() -> None:
    dep = Deployment(target="qwen3-30b-a3b", hardware="h200")
    with pytest.raises(ValueError, match=r"mtp-deepseek-v3.*deepseek-v3.*qwen3-30b-a3b"):
        MTP.draft_cost([-1], deployment=dep, batch=1, context=512)
    with pytest.raises(ValueError, match=r"mtp-deepseek-v3.*qwen3-30b-a3b"):
        MTP.memory_bytes(dep)


def test_an_mtp_card_must_price_one_whole_layer() -> None:
    fields = {f.name: getattr(MTP.card, f.name) for f in dataclasses.fields(HeadCard)}
    with pytest.raises(ValueError, match=r"layer_fraction.*0.5.*'mtp'"):
        HeadCard(**{**fields, "layer_fraction": 0.5})


def test_a_deeper_tree_than_the_card_is_refused() -> None:
    with pytest.raises(ValueError, match="8 deep"):
        MTP.draft_cost(list(range(-1, 7)), deployment=_dep(), batch=1, context=512)


def test_arrays_of_contexts_match_the_scalar_path() -> None:
    dep = _dep()
    ctx = np.array([512, 4096, 32768])
    arr = MTP.draft_costs([-1, 0], deployment=dep, batch=4, context=ctx)
    for i, c in enumerate(ctx):
        one = MTP.draft_cost([-1, 0], deployment=dep, batch=4, context=int(c))
        assert arr.time_s[i] == pytest.approx(one.time_s, rel=1e-12)


def test_the_documented_serving_run_accepts_as_the_card_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """studies/configs/deepseek-v3-mtp.toml (docs/moe.md), shrunk: the served chains of 3
    accept 1 + a1 (1 + a + a^2) tokens per pass, within four standard errors."""
    import json
    from pathlib import Path

    from specsim.cli import main

    config = Path(__file__).resolve().parents[2] / "studies" / "configs" / "deepseek-v3-mtp.toml"
    args = ["simulate", str(config), "--set", "workload.requests=60", "--json"]
    assert main(args) == 0
    record = json.loads(capsys.readouterr().out)
    a1, a = MTP.card.accept[0][0], MTP.card.accept[1][0]
    want = 1 + a1 * (1 + a + a * a)
    assert abs(record["tokens_per_pass"] - want) < 4 * record["tokens_per_pass_se"]
    assert record["tpot_speedup"] > 1.0
