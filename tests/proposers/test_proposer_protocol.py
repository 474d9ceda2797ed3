"""The proposer protocol: every shipped kind has it, a new one needs no edit elsewhere, and
anything else is a TypeError naming what it lacks; n-gram lookup's measured host cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import ArrayLike

from specsim.cards import ModelCard, load_hardware, load_head, load_model
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import chain_tree, evaluate_tree, optimize_tree
from specsim.proposers import (
    LOOKUP_COST,
    DraftCost,
    DraftModel,
    Heads,
    NGram,
    ProposerProtocol,
    RankAcceptance,
    check_proposer,
    fit_lookup_cost,
)
from specsim.sim.stream.tree_stream import TreeStreamConfig, simulate_tree_stream

ROOT = Path(__file__).resolve().parents[2]
TARGET, HW = load_model("llama-2-7b"), load_hardware("a100-80gb")
DEP = Deployment(target=TARGET, hardware=HW)
ACC = RankAcceptance(accept=((0.8, 0.3), (0.7, 0.2)))


@dataclass(frozen=True, kw_only=True)
class FixedCost:
    """A user's proposer in one class: a fixed host time per drafted node, nothing else."""

    seconds_per_node: float
    acceptance: RankAcceptance = ACC
    name: str = "fixed"
    overlappable: bool = False

    def check_target(self, target: ModelCard) -> None:
        del target

    def memory_bytes(self, deployment: Deployment) -> float:
        return 0.0

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        ctx = np.atleast_1d(np.asarray(context, dtype=np.float64))
        t = self.seconds_per_node * len(parents) + 0.0 * ctx
        return DraftCost(t, 0.0 * ctx, 0.0 * ctx)

    def draft_cost(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: int
    ) -> DraftCost:
        return self.draft_costs(parents, deployment=deployment, batch=batch, context=context).at(0)


def test_the_shipped_kinds_and_a_users_class_are_proposers() -> None:
    kinds: list[ProposerProtocol] = [
        DraftModel(card=load_model("llama-68m"), acceptance=ACC),
        Heads(card=load_head("medusa-vicuna-7b-v1.3")),
        NGram(acceptance=ACC),
        FixedCost(seconds_per_node=1e-3),
    ]
    for p in kinds:
        assert isinstance(p, ProposerProtocol) and check_proposer(p) is p
    assert [p.overlappable for p in kinds] == [True, False, False, False]
    assert NGram(acceptance=ACC, overlap=True).overlappable


def test_a_new_proposer_runs_in_the_optimizer_and_the_simulator_unchanged() -> None:
    slow, free = FixedCost(seconds_per_node=5e-3), FixedCost(seconds_per_node=0.0)
    plan = evaluate_tree(chain_tree(3), proposer=slow, deployment=DEP, batch=1)
    assert plan.draft_s == pytest.approx(15e-3)
    # A costly node budget makes the optimizer draft less than a free one does.
    assert (
        optimize_tree(proposer=slow, deployment=DEP, batch=1, budget=8).best.nodes
        < optimize_tree(proposer=free, deployment=DEP, batch=1, budget=8).best.nodes
    )
    cfg = TreeStreamConfig(parents=chain_tree(2), proposer=slow, deployment=DEP, tokens=200)
    res = simulate_tree_stream(cfg, np.random.default_rng(5))
    np.testing.assert_allclose(res.draft_s, 10e-3)


@pytest.mark.parametrize(
    "bad, lacks", [(object(), "name, acceptance"), (ACC, "acceptance, overlappable")]
)
def test_anything_else_is_a_type_error_naming_what_it_lacks(bad: object, lacks: str) -> None:
    with pytest.raises(TypeError, match=f"is not a proposer: it lacks {lacks}"):
        evaluate_tree((-1,), proposer=bad, deployment=DEP, batch=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lacks"):
        optimize_tree(proposer=bad, deployment=DEP, batch=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lacks"):
        TreeStreamConfig(parents=(-1,), proposer=bad, deployment=DEP, tokens=5)  # type: ignore[arg-type]


def test_the_lookup_cost_is_the_fit_of_the_committed_measurement() -> None:
    fit = fit_lookup_cost(ROOT / "models" / "measured" / "ngram" / "lookup-cost.csv")
    for name in ("per_sequence", "per_context_token", "per_draft_token"):
        got, want = getattr(fit, f"{name}_s"), getattr(LOOKUP_COST, f"{name}_s")
        se = getattr(fit, f"{name}_se")
        assert se > 0.0 and abs(got - want) <= 0.25 * se, name  # the constant is the rounded fit
    # The search is linear in the context searched: ~1.1 ns a token on that CPU.
    assert 5 * fit.per_context_token_se < fit.per_context_token_s


def test_a_bad_measurement_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("context,k,seconds\n1,1,1\n")
    with pytest.raises(ValueError, match="m.csv: expected numeric columns context, k, min_s"):
        fit_lookup_cost(path)
    rows = "".join(f"{c},1,{1e-6 - 1e-9 * c}\n" for c in (10, 100, 200, 400, 800))
    path.write_text("context,k,min_s\n" + rows)
    with pytest.raises(ValueError, match="context and k must both vary"):
        fit_lookup_cost(path)
    rows = "".join(f"{c},{k},{1e-6 - 1e-9 * c}\n" for c in (10, 100, 800) for k in (1, 8))
    path.write_text("context,k,min_s\n" + rows)
    with pytest.raises(ValueError, match="per_context_token_s is negative"):
        fit_lookup_cost(path)


def test_a_batch_of_lookups_runs_in_rounds_over_the_host_threads() -> None:
    c = dataclasses.replace(LOOKUP_COST, per_sequence_s=1e-6, per_context_token_s=1e-9)
    one = NGram(acceptance=ACC, cost=c).draft_cost((-1, 0), deployment=DEP, batch=5, context=100)
    four = NGram(acceptance=ACC, cost=c, threads=4).draft_cost(
        (-1, 0), deployment=DEP, batch=5, context=100
    )
    per = 1e-6 + 1e-7 + 2 * c.per_draft_token_s
    assert one.time_s == pytest.approx(5 * per) and four.time_s == pytest.approx(2 * per)
    with pytest.raises(ValueError, match="n-gram threads: expected an integer >= 1, got 0"):
        NGram(acceptance=ACC, threads=0)
    with pytest.raises(ValueError, match="batch: expected an integer >= 1, got 0"):
        NGram(acceptance=ACC).draft_cost((-1,), deployment=DEP, batch=0, context=1)


def test_memory_beside_the_target() -> None:
    assert NGram(acceptance=ACC).memory_bytes(DEP) == 0.0
    medusa = Heads(card=load_head("medusa-vicuna-7b-v1.3"))
    vicuna = Deployment(target=load_model("vicuna-7b-v1.3"), hardware=HW)
    layer = vicuna.target.decode_layer_params * 2.0  # float16 weights
    assert medusa.memory_bytes(vicuna) == pytest.approx(medusa.card.layer_fraction * layer)
    two = dataclasses.replace(vicuna, tensor_parallel=2)
    assert medusa.memory_bytes(two) == pytest.approx(medusa.memory_bytes(vicuna) / 2)
