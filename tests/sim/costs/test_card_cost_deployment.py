"""CardCost over a Deployment: each draft placement prices its passes as ``Deployment.pass_cost``
does on the deployment the draft runs on, and bad combinations name the field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, PassShape, cost_coefficient
from specsim.sim import CardCost

TARGET, DRAFT = load_model("llama-2-7b"), load_model("llama-68m")
A100, H100 = load_hardware("a100-80gb"), load_hardware("h100-sxm")
CTX = np.array([100, 333, 1200], dtype=np.int64)


def _placed(placement: str) -> tuple[CardCost, Deployment]:
    """A CardCost with the draft placed ``placement`` and the deployment its draft runs on,
    written out by hand (what the old keywords meant: the draft in the target's dtype and KV
    format, on the target's stack; its own device without tensor parallelism)."""
    dep = Deployment(target=TARGET, hardware=A100, dtype="bfloat16", kv="fp8")
    if placement == "overlapped, own hardware":
        own = Deployment(target=DRAFT, hardware=H100, weights="int4", draft_placement="overlapped")
        over = dataclasses.replace(dep, draft_placement="overlapped")
        return CardCost(deployment=over, draft=DRAFT, draft_deployment=own), own
    dep = dataclasses.replace(dep, draft_placement=placement)
    by_hand = Deployment(
        target=DRAFT, hardware=A100, dtype="bfloat16", kv="fp8", draft_placement=placement
    )
    return CardCost(deployment=dep, draft=DRAFT), by_hand


PLACEMENTS = ["shared", "own-device", "overlapped", "overlapped, own hardware"]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_placement_prices_the_passes_of_its_deployments(placement: str) -> None:
    cost, draft_dep = _placed(placement)
    assert cost.drafting() == draft_dep
    assert cost.overlapped == placement.startswith("overlapped")
    new = np.array([4, 4, 4], dtype=np.int64)
    assert (
        cost.verify(new, CTX).time_s
        == cost.deployment.pass_cost(PassShape.chain(context=CTX, new=new)).time_s
    )
    step = draft_dep.pass_cost(PassShape.chain(context=CTX, new=1))
    got = cost.draft_step(CTX)
    assert (got.time_s, got.energy_j) == (step.time_s, step.energy_j)
    # An iteration: gamma draft steps, each one token further on, then the pass over
    # gamma + 1 positions of every sequence (the closed-form sums, to rounding).
    gamma = 3
    want = cost.deployment.pass_cost(PassShape.chain(context=CTX, new=gamma + 1)).time_s
    want += sum(
        draft_dep.pass_cost(PassShape.chain(context=CTX + j, new=1)).time_s for j in range(gamma)
    )
    it = cost.uniform_iteration(batch=3, context_sum=int(CTX.sum()), gamma=gamma)
    assert it.time_s == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_only_a_shared_draft_takes_memory_on_the_target_device(placement: str) -> None:
    cost, _ = _placed(placement)
    target, draft = cost.footprints()
    assert (draft is not None) == (placement == "shared")
    free = (
        A100.mem_capacity - target.weights_bytes - (0.0 if draft is None else draft.weights_bytes)
    )
    per_token = target.kv_bytes_per_token + (0.0 if draft is None else draft.kv_bytes_per_token)
    assert cost.kv_capacity_tokens() == int(free / per_token)


def test_a_shared_draft_splits_over_the_target_devices_when_its_heads_allow() -> None:
    big = Deployment(target="llama-3.1-70b", hardware="h200", tensor_parallel=4)
    assert CardCost(deployment=big, draft="llama-3.2-1b").drafting().tensor_parallel == 4
    # llama-68m's 12 heads do not split over 8 devices: one device each, replicated.
    two = Deployment(target="llama-2-70b", hardware="h200", tensor_parallel=8)
    assert CardCost(deployment=two, draft="llama-68m").drafting().tensor_parallel == 1
    own = dataclasses.replace(big, draft_placement="own-device")
    assert CardCost(deployment=own, draft="llama-3.2-1b").drafting().tensor_parallel == 1


def test_cost_coefficient_is_the_ratio_of_the_two_deployments_passes() -> None:
    dep = Deployment(target=TARGET, hardware=A100, runtime="pytorch-eager-a100")
    shape = PassShape.chain(context=512, new=1)
    on = Deployment(target=DRAFT, hardware=A100, runtime="pytorch-eager-a100")
    want = on.pass_cost(shape).time_s / dep.pass_cost(shape).time_s
    assert cost_coefficient(DRAFT, dep, context=512) == pytest.approx(want, rel=1e-12)
    own = Deployment(target=DRAFT, hardware=H100)
    want = own.pass_cost(shape).time_s / dep.pass_cost(shape).time_s
    got = cost_coefficient(DRAFT, dep, context=512, draft_deployment=own)
    assert got == pytest.approx(want, rel=1e-12)
    with pytest.raises(TypeError, match="^deployment: expected a Deployment, got ModelCard"):
        cost_coefficient(DRAFT, TARGET, context=512)  # type: ignore[arg-type]


def test_bad_combinations_name_the_field() -> None:
    dep = Deployment(target=TARGET, hardware=A100)
    over = dataclasses.replace(dep, draft_placement="overlapped")
    own = Deployment(target=DRAFT, hardware=H100, draft_placement="overlapped")
    with pytest.raises(
        ValueError,
        match=r"^CardCost draft_deployment.draft_placement: 'overlapped' disagrees with the",
    ):
        CardCost(deployment=dep, draft=DRAFT, draft_deployment=own)
    with pytest.raises(
        ValueError,
        match=r"^CardCost draft_deployment.target: expected the draft 'llama-68m', got 'llama-160",
    ):
        CardCost(
            deployment=over,
            draft=DRAFT,
            draft_deployment=dataclasses.replace(own, target="llama-160m"),
        )
    with pytest.raises(
        ValueError,
        match=r"^CardCost draft_deployment.hardware: a shared draft runs on the target's 'a100",
    ):
        CardCost(
            deployment=dep,
            draft=DRAFT,
            draft_deployment=dataclasses.replace(own, draft_placement="shared"),
        )
    with pytest.raises(
        ValueError, match=r"^CardCost draft_deployment: given without a draft model"
    ):
        CardCost(deployment=over, draft=None, draft_deployment=own)
    with pytest.raises(ValueError, match="^draft: architecture 'decoder' of llama-68m differs"):
        CardCost(deployment=Deployment(target="t5-xxl", hardware=A100), draft=DRAFT)
    plain = CardCost(deployment=dep)
    with pytest.raises(ValueError, match="^CardCost draft: this cost source has no draft model"):
        plain.uniform_iteration(batch=2, context_sum=100, gamma=1)
    with pytest.raises(ValueError, match="^CardCost draft: this cost source has no draft model"):
        plain.draft_step(CTX)
    assert plain.uniform_iteration(batch=2, context_sum=100, gamma=0).draft_s == 0.0
