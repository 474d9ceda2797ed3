"""Stacks at the edges of the serving engine: a branching tree refused at setup on a stack
that cannot verify one (batch expansion, or no tree mask), a chain allowed; prefill chunks
never counted as verifications."""

from __future__ import annotations

import numpy as np
import pytest
from tree_cases import DRAFT, HW, TARGET

from specsim.cost.deployment import Deployment
from specsim.sim.arrivals import PoissonWorkload
from specsim.sim.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.tree_serving import TreeServingConfig
from specsim.sim.tree_serving_dynamic import DynamicTreeServingConfig

WORK = PoissonWorkload(rate_per_s=1.0, requests=4, prompt_tokens=32, output_tokens=8)
BRANCHING = (-1, 0, 0, 1)
CHAIN = (-1, 0, 1)


def _static(runtime: str, parents: tuple[int, ...]) -> TreeServingConfig:
    dep = Deployment(target=TARGET, hardware=HW, runtime=runtime)
    return TreeServingConfig(
        workload=WORK, parents=parents, proposer=DRAFT, deployment=dep, plain_twin=False
    )


def _dynamic(runtime: str, policy: ConfidenceTree) -> DynamicTreeServingConfig:
    return DynamicTreeServingConfig(
        workload=WORK,
        policy=policy,
        world=NodeConfidence(concentration=2.0),
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW, runtime=runtime),
        plain_twin=False,
    )


@pytest.mark.parametrize(
    ("runtime", "why"),
    [("vllm-v0", "batch expansion"), ("hf-transformers", "no tree attention mask")],
)
def test_a_branching_tree_is_refused_at_setup_naming_stack_and_tree(runtime: str, why: str) -> None:
    with pytest.raises(ValueError, match=rf"parents: .*\(-1, 0, 0, 1\).*{runtime!r}.*{why}"):
        _static(runtime, BRANCHING)
    with pytest.raises(ValueError, match=rf"policy: .*{runtime!r}.*{why}"):
        _dynamic(runtime, ConfidenceTree(budget=6, max_depth=4))


@pytest.mark.parametrize("runtime", ["vllm-v0", "hf-transformers"])
def test_a_chain_is_served_on_every_stack(runtime: str) -> None:
    _static(runtime, CHAIN)
    _dynamic(runtime, ConfidenceTree(budget=6, max_depth=4, max_rank=1))


def test_trees_on_a_tree_stack_are_allowed() -> None:
    _static("sglang", BRANCHING)
    _dynamic("sglang", ConfidenceTree(budget=6, max_depth=4))
