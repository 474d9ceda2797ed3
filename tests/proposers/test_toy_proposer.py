"""A proposer defined here, in the test file, runs through the optimizer and the simulators.

Issue 22's promise: a new proposer is one module and a card, with no edit to the
simulators. :class:`Toy` is that module: a fixed host time per drafted node, a fixed
acceptance per depth, nothing else. Each check derives what the toy must cost from its
own two numbers, so a simulator that ignored the proposer (or priced it as another kind)
fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from numpy.typing import ArrayLike

from specsim.cards import ModelCard, load_hardware, load_model
from specsim.cost import Deployment
from specsim.cost.shape import check_tree
from specsim.policies.tree_optimizer import evaluate_tree, optimize_tree
from specsim.proposers import DraftCost, ProposerProtocol, RankAcceptance, check_proposer
from specsim.sim.stream.tree_stream import TreeStreamConfig, simulate_tree_stream

NODE_S = 2.5e-4  # the toy's host time per drafted node (seconds)
ACCEPT = (0.8, 0.6, 0.4)  # rank-0 acceptance at depths 1..3; rank 1 at half


@dataclass(frozen=True)
class Toy:
    """The smallest proposer: ``NODE_S`` seconds per drafted node, no energy, no flops."""

    @property
    def name(self) -> str:
        return "toy"

    @property
    def acceptance(self) -> RankAcceptance:
        return RankAcceptance(
            accept=tuple((a, a / 2) for a in ACCEPT), source="this test", max_depth=3
        )

    @property
    def overlappable(self) -> bool:
        return False

    def check_target(self, target: ModelCard) -> None:
        del target  # drafts for any target

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        del deployment
        n = len(check_tree(parents)) * batch
        ctx = np.atleast_1d(np.asarray(context))
        return DraftCost(np.full(ctx.shape, NODE_S * n), np.zeros(ctx.shape), np.zeros(ctx.shape))

    def draft_cost(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: int
    ) -> DraftCost:
        return self.draft_costs(parents, deployment=deployment, batch=batch, context=context).at(0)

    def memory_bytes(self, deployment: Deployment) -> float:
        del deployment
        return 0.0


@pytest.fixture(scope="module")
def deployment() -> Deployment:
    return Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"))


def test_the_toy_is_a_proposer() -> None:
    assert isinstance(Toy(), ProposerProtocol)
    check_proposer(Toy())


def test_the_optimizer_prices_the_toy_draft(deployment: Deployment) -> None:
    tree = (-1, 0, 0, 1)
    plan = evaluate_tree(tree, proposer=Toy(), deployment=deployment, batch=2, context=256)
    assert plan.draft_s == pytest.approx(NODE_S * len(tree) * 2, rel=1e-12)
    best = optimize_tree(proposer=Toy(), deployment=deployment, batch=1, budget=8)
    assert best.best.draft_s == pytest.approx(NODE_S * len(best.best.parents), rel=1e-12)
    assert best.best.tokens_per_pass > 1.0


def test_the_single_stream_tree_simulator_prices_the_toy(deployment: Deployment) -> None:
    tree = (-1, 0, 1)
    cfg = TreeStreamConfig(proposer=Toy(), deployment=deployment, tokens=400, parents=tree)
    res = simulate_tree_stream(cfg, np.random.default_rng(7))
    assert np.allclose(res.draft_s, NODE_S * len(tree), rtol=0, atol=1e-15)
    # acceptance is the toy's: a chain of three accepts depth d with prod(ACCEPT[:d])
    expected = 1 + ACCEPT[0] + ACCEPT[0] * ACCEPT[1] + ACCEPT[0] * ACCEPT[1] * ACCEPT[2]
    mean = 1 + res.accepted.mean()
    se = res.accepted.std(ddof=1) / np.sqrt(res.accepted.size)
    assert abs(mean - expected) < 5 * se


def test_the_serving_engine_prices_and_accepts_with_the_toy() -> None:
    """Serving prices the toy's drafts and accepts by its table. Long outputs, so the few
    passes cut at a request's end (a bias below 0.01 tokens here) hide in the noise."""
    from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving
    from specsim.sim.workload.arrivals import PoissonWorkload
    from specsim.stats import ratio_interval

    tree = (-1, 0, 1)
    cfg = TreeServingConfig(
        workload=PoissonWorkload(
            rate_per_s=5.0, requests=30, prompt_tokens=(64, 128), output_tokens=(300, 400)
        ),
        proposer=Toy(),
        parents=tree,
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
    )
    res = simulate_tree_serving(cfg, np.random.default_rng(3))
    it = res.iterations
    # every pass drafts the toy's tree for each sequence in it: NODE_S per drafted node
    assert np.allclose(it["draft_s"], NODE_S * it["draft_tokens"], rtol=0, atol=1e-15)
    assert (it["draft_tokens"] <= len(tree) * it["batch"]).all() and it["draft_s"].sum() > 0
    # the engine's mean accepted length follows the toy's acceptance (a chain of three)
    expected = 1 + ACCEPT[0] + ACCEPT[0] * ACCEPT[1] + ACCEPT[0] * ACCEPT[1] * ACCEPT[2]
    req = res.requests
    ri = ratio_interval(req["accepted_tokens"], req["verify_steps"])
    assert res.metrics()["mean_acceptance_length"] == pytest.approx(1 + ri.estimate)
    assert abs(1 + ri.estimate - expected) < 5 * ri.se + 0.01
