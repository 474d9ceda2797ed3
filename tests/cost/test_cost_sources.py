"""The roofline record, and cost sources: the minimal protocol and its optional speed paths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy.typing import NDArray

from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, Formats, Roofline, roofline, step_cost, time_energy
from specsim.sim import (
    BatchedCostSource,
    CardCost,
    IterationCost,
    PassCost,
    PlainCost,
    block_costs,
    iteration_cost,
)


@pytest.fixture(scope="module")
def card() -> CardCost:
    return CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )


def test_roofline_round_trips_through_its_fields() -> None:
    co = roofline(load_model("llama-2-70b"), load_hardware("h200"), Formats.of("bfloat16"), 4.0)
    fields = {f.name: getattr(co, f.name) for f in dataclasses.fields(Roofline)}
    again = Roofline(**fields)
    assert again == co and hash(again) == hash(co)
    assert dataclasses.replace(co, fixed_s=co.fixed_s) == co
    with pytest.raises(dataclasses.FrozenInstanceError):
        co.fixed_s = 0.0  # type: ignore[misc]
    # Same cards, same record (memoized); the fields mean what their names say.
    assert (
        roofline(load_model("llama-2-70b"), load_hardware("h200"), Formats.of("bfloat16"), 4.0)
        == co
    )
    assert co.devices == 4.0 and co.layers == 80 and not co.per_operation_energy
    T, S, R = 8.0, 4000.0, 900.0
    time, _, roof, flops, nbytes = time_energy(co, T, S, R)
    assert flops == T * co.flops_per_token + S * co.flops_per_pair
    assert nbytes == co.weight_bytes + R * co.bytes_per_cached + T * co.bytes_per_token
    assert time == pytest.approx(roof + T * co.allreduce_per_token_s + co.fixed_s, rel=1e-15)


class Minimal:
    """A user's cost source with only the required methods, here wrapping a CardCost."""

    def __init__(self, inner: CardCost) -> None:
        self.inner = inner

    @property
    def overlapped(self) -> bool:
        return False

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        return self.inner.verify(new_tokens, context)

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        return self.inner.draft_step(context)

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        return self.inner.prefill(prompts, draft=draft)


def test_a_minimal_source_gets_the_speed_paths_composed(card: CardCost) -> None:
    mini = Minimal(card)
    assert isinstance(card, BatchedCostSource) and isinstance(PlainCost(c=0.1), BatchedCostSource)
    assert not isinstance(mini, BatchedCostSource)
    gamma, ctx = np.array([0, 3, 1, 5]), np.array([10, 400, 77, 1200])
    got, want = iteration_cost(mini, gamma, ctx), card.iteration(gamma, ctx)
    assert isinstance(want, IterationCost) and isinstance(got, IterationCost)
    for a, b in zip(got, want, strict=True):
        assert a == pytest.approx(b, rel=1e-12)
    assert iteration_cost(card, gamma, ctx) == want
    slow, fast = block_costs(mini, gamma, ctx), card.blocks(gamma, ctx)
    for name in ("verify_time", "verify_flops", "verify_energy", "draft_time", "draft_energy"):
        assert getattr(slow, name) == pytest.approx(getattr(fast, name), rel=1e-12)


def test_iteration_costs_are_named(card: CardCost) -> None:
    it = card.uniform_iteration(batch=4, context_sum=1000, gamma=3)
    verify = step_cost(card.target, card.hardware, batch=4, context=250, new_tokens=4)
    assert it.time_s == pytest.approx(it.draft_s + verify.time_s, rel=1e-12)
    plain = PlainCost(c=0.1, v=1.2).uniform_iteration(batch=4, context_sum=0, gamma=3)
    assert plain.time_s == pytest.approx(1.5) and plain.draft_s == pytest.approx(0.3)
    assert plain.energy_j == 0.0 and tuple(plain) == (plain.time_s, 0.0, plain.draft_s)
