"""Draft KV budgets: a budgeted draft step reads min(context, budget) cached tokens, exactly;
a budget larger than the context is an error naming both; at long context the speedup of a
streaming self-speculation draft rises with the batch (MagicDec, arXiv:2408.11049)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape
from specsim.policies.tree_optimizer import chain_tree, evaluate_tree
from specsim.proposers import DraftModel, Heads, RankAcceptance
from specsim.proposers.budget import KVBudget, StreamingSelfSpec

LLAMA = load_model("llama-3.1-8b")
DEP = Deployment(target=LLAMA, hardware="h200")
ACC = RankAcceptance(accept=((0.8,),) * 8)
SELF = StreamingSelfSpec(target="llama-3.1-8b", budget=512, acceptance=ACC)


@pytest.mark.parametrize("context", [512, 4096, 32768, 128000])
def test_a_budgeted_step_is_the_target_step_at_the_budget(context: int) -> None:
    """The oracle: one draft step at any context >= budget is one target pass over one new
    position per sequence after ``budget`` cached tokens (time, energy and flops)."""
    batch = 8
    at_budget = DEP.pass_cost(PassShape.chain(context=512, new=1, batch=batch))
    got = SELF.draft_cost([-1], deployment=DEP, batch=batch, context=context)
    assert got.time_s == pytest.approx(at_budget.time_s, rel=1e-12)
    assert got.energy_j == pytest.approx(at_budget.energy_j, rel=1e-12)
    assert got.flops == pytest.approx(at_budget.flops, rel=1e-12)


def test_the_step_reads_budget_tokens_of_kv_per_sequence() -> None:
    """The KV bytes of the pass a budgeted step is priced as grow by batch x (one token's KV)
    per cached token, so pricing it at ``budget`` reads budget, not context, tokens; and step
    ``d`` of a chain reads ``budget + d - 1`` (the round's own drafted tokens)."""
    batch, kv = 4, LLAMA.kv_bytes_per_token(2)  # bf16
    read = [
        DEP.pass_cost(PassShape.chain(context=c, new=1, batch=batch)).kv_bytes for c in (512, 513)
    ]
    assert read[1] - read[0] == pytest.approx(batch * kv)
    steps = [
        DEP.pass_cost(PassShape.chain(context=512 + d, new=1, batch=batch)).time_s for d in range(3)
    ]
    chain = SELF.draft_cost([-1, 0, 1], deployment=DEP, batch=batch, context=65536).time_s
    assert chain == pytest.approx(sum(steps), rel=1e-12)


def test_any_proposer_takes_a_budget() -> None:
    """A draft model and an MTP module under a budget cost their plain draft at the budget."""
    draft = DraftModel(card=load_model("llama-3.2-1b"), acceptance=ACC)
    budgeted = KVBudget(proposer=draft, budget=1024, acceptance=ACC)
    plain = draft.draft_cost([-1, 0], deployment=DEP, batch=16, context=1024)
    assert budgeted.draft_cost([-1, 0], deployment=DEP, batch=16, context=32768) == plain
    assert budgeted.memory_bytes(DEP) == draft.memory_bytes(DEP)
    assert budgeted.overlappable and "KV budget 1024" in budgeted.name
    dsv3 = Deployment(target="deepseek-v3", hardware="h200", tensor_parallel=8, expert_parallel=8)
    mtp = Heads(card=load_head("mtp-deepseek-v3"))
    window = KVBudget(proposer=mtp, budget=2048, acceptance=mtp.acceptance)
    got = window.draft_costs([-1], deployment=dsv3, batch=4, context=np.array([4096, 65536]))
    want = mtp.draft_cost([-1], deployment=dsv3, batch=4, context=2048).time_s
    np.testing.assert_allclose(got.time_s, [want, want], rtol=1e-12)


def test_a_budget_larger_than_the_context_is_an_error_naming_both() -> None:
    with pytest.raises(ValueError, match=r"KV budget 512 is larger than the context 256"):
        SELF.draft_cost([-1], deployment=DEP, batch=1, context=256)
    wrapped = KVBudget(proposer=SELF, budget=4096, acceptance=ACC)
    with pytest.raises(ValueError, match=r"KV budget 4096 is larger than the context 2048"):
        wrapped.draft_costs([-1], deployment=DEP, batch=1, context=np.array([8192, 2048]))


@pytest.mark.parametrize(
    "bad", [0, -3, 1.5, True, "512"], ids=["zero", "negative", "float", "bool", "str"]
)
def test_a_bad_budget_is_named(bad: object) -> None:
    with pytest.raises(ValueError, match="budget"):
        StreamingSelfSpec(target="llama-3.1-8b", budget=bad, acceptance=ACC)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="KVBudget budget"):
        KVBudget(proposer=SELF, budget=bad, acceptance=ACC)  # type: ignore[arg-type]


def test_self_speculation_is_for_its_own_target_and_adds_no_weights() -> None:
    other = Deployment(target="llama-3.1-70b", hardware="h200", tensor_parallel=4)
    with pytest.raises(ValueError, match=r"llama-3.1-8b.*llama-3.1-70b"):
        SELF.draft_cost([-1], deployment=other, batch=1, context=4096)
    assert SELF.memory_bytes(DEP) == 0.0
    assert SELF.budget_kv_bytes(DEP) == 512 * LLAMA.kv_bytes_per_token(2)
    assert not SELF.overlappable
    with pytest.raises(ValueError, match="9 deep"):
        SELF.draft_cost(chain_tree(9), deployment=DEP, batch=1, context=4096)


def _speedup(*, batch: int, context: int, deployment: Deployment) -> float:
    tree = chain_tree(3)
    spec = evaluate_tree(tree, proposer=SELF, deployment=deployment, batch=batch, context=context)
    plain = evaluate_tree((), proposer=SELF, deployment=deployment, batch=batch, context=context)
    return spec.tokens_per_s / plain.tokens_per_s


@pytest.mark.parametrize("context", [32768, 128000])
def test_at_long_context_the_speedup_rises_with_batch(context: int) -> None:
    """KV-bound verification costs about one plain step at every batch while the budgeted
    draft stays cheap: the speedup at batch 32 exceeds the one at batch 1 (MagicDec's
    regime), on 8 GPUs so that the batch's KV cache fits."""
    dep = dataclasses.replace(DEP, tensor_parallel=8)
    speedups = [_speedup(batch=b, context=context, deployment=dep) for b in (1, 8, 32)]
    assert speedups[0] < speedups[1] < speedups[2]
    assert speedups[2] > 1.0
