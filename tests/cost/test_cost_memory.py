"""One memory footprint for the cost model and serving admission (issue 12, defect 2)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import DTYPE_BYTES, load_hardware, load_model
from specsim.cost import Deployment, Formats, footprint, kv_heads_per_device, step_cost
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, PoissonWorkload, ServingConfig


def test_kv_heads_are_replicated_once_devices_outnumber_them() -> None:
    # llama-2-70b has 8 KV heads: at TP 16 each device holds one (a replica), not half of one.
    m70 = load_model("llama-2-70b")
    assert [kv_heads_per_device(m70, tp) for tp in (1, 8, 16)] == [8.0, 1.0, 1.0]
    fp = footprint(m70, tensor_parallel=16, formats=Formats.of("float16"))
    assert fp.kv_bytes_per_token == 80 * 2 * 1 * 128 * 2 == 40_960


def test_serving_admission_and_the_cost_model_share_one_rule() -> None:
    # Defect 2: serving divided KV heads by TP without limit (20,480 bytes per token per
    # device for llama-2-70b at TP 16) while the cost model replicated them (40,960).
    m70, hw = load_model("llama-2-70b"), load_hardware("a100-80gb")
    card = CardCost(deployment=Deployment(target=m70, hardware=hw, tensor_parallel=16), draft=None)
    assert card.kv_bytes_per_token() == 40_960
    per_token = step_cost(m70, hw, batch=1, context=1000, new_tokens=1, tensor_parallel=16)
    more = step_cost(m70, hw, batch=1, context=1001, new_tokens=1, tensor_parallel=16)
    assert more.resident_bytes - per_token.resident_bytes == card.kv_bytes_per_token()


@pytest.mark.parametrize(
    ("target", "draft", "hardware", "tp"),
    [
        ("llama-2-70b", None, "a100-80gb", 16),
        ("llama-2-70b", "llama-68m", "a100-80gb", 16),
        ("llama-2-70b", "llama-68m", "h200", 2),
        ("llama-2-7b", "llama-68m", "a100-80gb", 1),
        ("llama-3.1-70b", "llama-3.2-1b", "h200", 4),
    ],
)
def test_what_serving_admits_fits_in_the_cost_model(
    target: str, draft: str | None, hardware: str, tp: int
) -> None:
    t, hw = load_model(target), load_hardware(hardware)
    # The whole KV budget in one sequence, past the card's positions: a memory probe only.
    t = dataclasses.replace(t, max_position=10**9)
    d = None if draft is None else load_model(draft)
    card = CardCost(deployment=Deployment(target=t, hardware=hw, tensor_parallel=tp), draft=d)
    workload = PoissonWorkload(rate_per_s=1.0, requests=1, prompt_tokens=8, output_tokens=8)
    config = ServingConfig(
        workload=workload,
        cost=card,
        acceptance=IIDAcceptance(alpha=0.5),
        policy=FixedGamma(gamma=0),
    )
    capacity = config.kv_capacity()
    assert capacity is not None
    # The whole budget in one sequence: the target's pass must fit beside the draft (held
    # whole on each device, in its card's dtype).
    width = 0.0 if d is None else DTYPE_BYTES[d.dtype]
    draft_bytes = (
        0.0 if d is None else (d.shape_params * width + capacity * d.kv_bytes_per_token(width))
    )
    full = step_cost(t, hw, batch=1, context=capacity - 1, new_tokens=1, tensor_parallel=tp)
    assert full.resident_bytes + draft_bytes <= hw.mem_capacity
    # ... and the budget is tight: a tenth more would not fit.
    over = int(capacity * 1.1)
    with pytest.raises(ValueError, match="does not fit"):
        step_cost(
            t,
            dataclasses.replace(hw, mem_capacity=hw.mem_capacity - draft_bytes),
            batch=1,
            context=over,
            new_tokens=1,
            tensor_parallel=tp,
        )


def test_the_serving_budget_is_the_card_cost_budget() -> None:
    card = CardCost(
        deployment=Deployment(
            target=load_model("llama-2-70b"), hardware=load_hardware("h200"), tensor_parallel=16
        ),
        draft=load_model("llama-68m"),
    )
    target, draft = card.footprints()
    assert draft is not None
    free = card.hardware.mem_capacity - target.weights_bytes - draft.weights_bytes
    per_token = target.kv_bytes_per_token + draft.kv_bytes_per_token
    assert card.kv_capacity_tokens() == int(free / per_token)
    workload = PoissonWorkload(rate_per_s=1.0, requests=1, prompt_tokens=8, output_tokens=8)
    config = ServingConfig(
        workload=workload,
        cost=card,
        acceptance=IIDAcceptance(alpha=0.5),
        policy=FixedGamma(gamma=0),
    )
    assert config.kv_capacity() == card.kv_capacity_tokens()


def test_no_room_for_a_kv_cache_names_the_sizes() -> None:
    card = CardCost(
        deployment=Deployment(
            target=load_model("llama-2-70b"), hardware=load_hardware("a100-80gb")
        ),
        draft=None,
    )
    with pytest.raises(ValueError, match=r"weights \(138\.0 GB per device\) leave no room"):
        card.kv_capacity_tokens()


def test_byte_widths_reach_only_their_own_terms() -> None:
    # The roofline carries one width per tensor kind: a narrower KV cache changes the KV
    # terms alone (what a quantized cache will need).
    m7 = load_model("llama-2-7b")
    fp16, kv8 = Formats.of("float16"), dataclasses.replace(Formats.of("float16"), kv=1.0)
    a = footprint(m7, tensor_parallel=1, formats=fp16)
    b = footprint(m7, tensor_parallel=1, formats=kv8)
    assert b.kv_bytes_per_token == a.kv_bytes_per_token / 2
    assert b.weights_bytes == a.weights_bytes
    assert np.isclose(a.kv_bytes_per_token, m7.kv_bytes_per_token(2.0))
