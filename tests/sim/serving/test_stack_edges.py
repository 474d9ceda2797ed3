"""Stacks at the edges of the serving engine: a branching tree refused at setup on a stack
that cannot verify one (batch expansion, or no tree mask), a chain allowed; prefill chunks
never counted as verifications."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tree_cases import DRAFT, HW, TARGET

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_model
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape
from specsim.sim import CardCost
from specsim.sim.costs.source import PassCost
from specsim.sim.serving.batch import Batch, Requests, draw_requests
from specsim.sim.serving.chunk_drain import chunk_cost
from specsim.sim.serving.tree_serving import TreeServingConfig
from specsim.sim.serving.tree_serving_dynamic import DynamicTreeServingConfig
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence
from specsim.sim.workload.arrivals import PoissonWorkload

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


class Thin:
    """A cost source without ``chunk_costs`` (chunks priced from its passes), over a card."""

    def __init__(self, card: CardCost) -> None:
        self.card = card
        self.verify, self.prefill, self.draft_step = card.verify, card.prefill, card.draft_step
        self.chains_pass = card.chains_pass

    @property
    def overlapped(self) -> bool:
        return self.card.overlapped


V0 = Deployment(target=TARGET, hardware=HW, runtime="vllm-v0")
SIZES, OFFSETS = [300, 7], [0, 120]


def _batch(rng: np.random.Generator, n: int) -> Batch:
    table = pd.DataFrame(
        {
            "arrival_s": np.zeros(n),
            "prompt_tokens": rng.integers(10, 900, n),
            "output_tokens": rng.integers(5, 300, n),
        }
    )
    draws = draw_requests(
        IIDAcceptance(alpha=0.6), table["output_tokens"].to_numpy(), max_gamma=5, rng=rng
    )
    batch = Batch(64)
    batch.add(np.arange(n), Requests.build(table, draws, max_gamma=5))
    return batch


def _plain(p: PassCost) -> tuple[float, float]:
    return p.time_s, p.energy_j or 0.0


def test_a_prefill_chunk_alone_pays_no_rejection_sampler_on_a_stack() -> None:
    """No sequence decodes: the chunks' pass is a plain pass (vLLM V0's rejection sampler
    and speculation overhead are not charged), on the closed form and on a thin source."""
    card = CardCost(deployment=V0)
    shape = PassShape.chain(context=OFFSETS, new=SIZES)
    want = _plain(V0.pass_cost(shape, verify=False))  # type: ignore[arg-type]
    verified = _plain(V0.pass_cost(shape, verify=True))  # type: ignore[arg-type]
    assert verified[0] > want[0]  # the stack does charge a verification
    for source in (card, Thin(card)):
        got = chunk_cost(source, 0, None, Batch(4), SIZES, OFFSETS, draft=False)  # type: ignore[arg-type]
        assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("gamma", [0, 3])
def test_chunks_beside_decoding_on_a_stack_equal_the_closed_form(gamma: int) -> None:
    """Beside a decoding batch (plain at gamma 0, verifying at 3), the thin source's chunks
    cost what the closed form says: a chunk never turns a pass into a verification."""
    draft = load_model("llama-68m")
    card = CardCost(deployment=V0, draft=draft)
    rng = np.random.default_rng(3)
    for _ in range(10):
        batch = _batch(rng, int(rng.integers(1, 12)))
        g = None if rng.random() < 0.5 else rng.integers(0, gamma + 1, batch.size)
        for d in (False, True):
            closed = chunk_cost(card, gamma, g, batch, SIZES, OFFSETS, draft=d)
            thin = chunk_cost(Thin(card), gamma, g, batch, SIZES, OFFSETS, draft=d)  # type: ignore[arg-type]
            assert thin == pytest.approx(closed, rel=1e-9)


V1 = Deployment(target=TARGET, hardware=HW, runtime="vllm-v1")


def test_chunks_beside_a_verification_pay_no_rejection_sampler() -> None:
    """A mixed pass (5 sequences verifying 4 positions each, prefill chunks of 300 and 7
    tokens) runs the rejection sampler over the 20 verified tokens only. By hand, on vLLM V1
    (2 us per token, 0.2 ms configured speculation; no batch expansion): the verification
    adds 20 * 2e-6 + 2e-4 = 2.4e-4 s to the mixed pass as to the decoding pass alone, so the
    chunks cost what they cost in plain passes (charged over all 327 tokens, they would cost
    307 * 2e-6 = 6.14e-4 s more), on the closed form and on a thin source."""
    rt = V1.runtime
    assert rt is not None and rt.stack_profile is not None
    st = rt.stack_profile
    assert (st.rejection_s_per_token, st.speculation_overhead_s) == (2e-6, 2e-4)
    batch = _batch(np.random.default_rng(5), 5)
    ctx, pos = batch.cached(), np.full(5, 4)
    decode = PassShape.chain(context=ctx, new=pos)
    mixed = PassShape.chain(context=np.r_[ctx, OFFSETS], new=np.r_[pos, SIZES])
    plain = V1.pass_cost(mixed, verify=False).time_s
    assert V1.pass_cost(mixed, verify=True, verified=20).time_s - plain == pytest.approx(
        2.4e-4, rel=1e-9
    )
    assert V1.pass_cost(mixed, verify=True).time_s - plain == pytest.approx(
        327 * 2e-6 + 2e-4, rel=1e-9
    )  # without ``verified`` every new token is a verified one
    want = plain - V1.pass_cost(decode, verify=False).time_s
    card = CardCost(deployment=V1, draft=load_model("llama-68m"))
    for source in (card, Thin(card)):
        got = chunk_cost(source, 3, None, batch, SIZES, OFFSETS, draft=False)
        assert got[0] == pytest.approx(want, rel=1e-9, abs=1e-12)
