"""Routing skew in the cost model: the card's ``moe.routing`` reaches every pass's weights."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import load_hardware, load_model
from specsim.cards.model import ModelCard
from specsim.cost.deployment import Deployment
from specsim.cost.moe import routing_load, touched_experts
from specsim.cost.shape import PassShape
from specsim.theory import count_cv, experts_touched, experts_touched_load, lognormal_load

H200 = load_hardware("h200")
DSV3 = load_model("deepseek-v3")
PROFILE = "deepseek-r1-translation"


def _routed(card: ModelCard, routing: object) -> ModelCard:
    return dataclasses.replace(card, moe={**card.moe, "routing": routing})  # type: ignore[dict-item]


def _weights(card: ModelCard, *, batch: int, new: int, tp: int = 8, ep: int = 1) -> float:
    dep = Deployment(target=card, hardware=H200, tensor_parallel=tp, expert_parallel=ep)
    return dep.pass_cost(PassShape.chain(context=512, new=new, batch=batch)).weight_bytes


def test_a_skewed_card_reads_the_experts_its_load_touches() -> None:
    skewed = _routed(DSV3, PROFILE)
    load = lognormal_load(256, cv=count_cv(mean=128.0, std=164.1))
    np.testing.assert_allclose(routing_load(skewed), load, rtol=1e-12)
    assert routing_load(DSV3) is None
    expert = DSV3.moe_layers * DSV3.routed_expert_params  # float8: one byte each
    for batch, new in [(1, 1), (1, 4), (1, 8), (16, 4), (64, 1)]:
        n = batch * new
        extra = expert * (
            experts_touched_load(n, load=load, top_k=8) - experts_touched(n, experts=256, top_k=8)
        )
        uniform, got = _weights(DSV3, batch=batch, new=new), _weights(skewed, batch=batch, new=new)
        assert got == pytest.approx(uniform + extra, rel=1e-12)
        assert (got < uniform) if n > 1 else got == pytest.approx(uniform, rel=1e-12)


def test_a_list_of_shares_is_used_as_given_and_uniform_shares_change_nothing() -> None:
    mixtral = load_model("mixtral-8x7b")
    flat = _routed(mixtral, [0.125] * 8)
    hot = _routed(mixtral, [0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    for new in (1, 3, 8):
        assert _weights(flat, batch=1, new=new, tp=1) == pytest.approx(
            _weights(mixtral, batch=1, new=new, tp=1), rel=1e-12
        )
    want = experts_touched_load(8, load=[0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05], top_k=2)
    assert touched_experts(hot, 8) == pytest.approx(want, rel=1e-15) and want < 7.2
    # The same under expert parallelism: EP moves the collectives, not the expert reads.
    skewed = _routed(DSV3, PROFILE)
    assert _weights(skewed, batch=4, new=4, ep=8) == pytest.approx(
        _weights(skewed, batch=4, new=4, ep=1), rel=1e-12
    )


def test_skew_lowers_the_pass_time_ratio_at_batch_1() -> None:
    ratios = {}
    for name, card in (("uniform", DSV3), ("skewed", _routed(DSV3, PROFILE))):
        dep = Deployment(target=card, hardware=H200, tensor_parallel=8)
        one = dep.pass_cost(PassShape.chain(context=512, new=1, batch=1)).time_s
        eight = dep.pass_cost(PassShape.chain(context=512, new=8, batch=1)).time_s
        ratios[name] = eight / one
    assert 1.0 < ratios["skewed"] < ratios["uniform"]


@pytest.mark.parametrize(
    ("slug", "routing", "error", "message"),
    [
        ("mixtral-8x7b", "zipf", ValueError, "no routing profile 'zipf' \\(known: uniform, deep"),
        (
            "mixtral-8x7b",
            PROFILE,
            ValueError,
            "measures 256 experts \\(deepseek-r1\\), the card has 8",
        ),
        ("kimi-k2", PROFILE, ValueError, "the card has 384"),
        ("mixtral-8x7b", [0.5, 0.5], ValueError, "lists 2 shares, moe.experts = 8"),
        ("mixtral-8x7b", [0.2] * 8, ValueError, "must sum to 1, they sum to 1.6"),
        ("mixtral-8x7b", [0.25, 0.25, 0.5] + [0.0] * 5, ValueError, "positive and finite"),
        ("mixtral-8x7b", [0.6] + [0.4 / 7] * 7, ValueError, "exceeds 1 / top_k = 0.5"),
        ("mixtral-8x7b", 3, TypeError, "'uniform', a profile name or a list of shares"),
    ],
)
def test_bad_routing_names_the_card_and_the_field(
    slug: str, routing: object, error: type[Exception], message: str
) -> None:
    card = load_model(slug)
    with pytest.raises(error, match=message) as info:
        _routed(card, routing)
    assert f"{slug}.toml: field 'moe.routing'" in str(info.value)


def test_the_simulators_fast_paths_see_the_skew() -> None:
    # The serving engine prices steps by sums over the batch and the tree optimizer by the
    # grid; both go through the same touched-expert count as one pass.
    from specsim.cost import step_cost_grid

    skewed = _routed(DSV3, PROFILE)
    dep = Deployment(target=skewed, hardware=H200, tensor_parallel=8, expert_parallel=8)
    shape = PassShape.chain(context=np.array([100, 700, 30]), new=np.array([3, 5, 1]))
    one = dep.pass_cost(shape)
    sums = dep.aggregates_cost(
        batch=3, tokens=shape.tokens, context_tokens=830, pairs=float(shape.pairs().sum())
    )
    assert float(sums.weight_bytes) == pytest.approx(one.weight_bytes, rel=1e-12)
    assert float(sums.time_s) == pytest.approx(one.time_s, rel=1e-12)
    uniform = Deployment(target=DSV3, hardware=H200, tensor_parallel=8, expert_parallel=8)
    assert one.weight_bytes < uniform.pass_cost(shape).weight_bytes
    grid = step_cost_grid(
        skewed, H200, batch=2, context=256, new_tokens=np.array([1, 4]), tensor_parallel=8
    )
    for j, new in enumerate((1, 4)):
        single = Deployment(target=skewed, hardware=H200, tensor_parallel=8).pass_cost(
            PassShape.chain(context=256, new=new, batch=2)
        )
        assert float(np.asarray(grid.time_s)[j]) == pytest.approx(single.time_s, rel=1e-12)
