"""Chain serving with any proposer: ``ServingConfig(proposer=...)`` drafts each block with the
proposer's ``draft_costs`` (heads, n-gram lookup, ...) instead of the cost source's draft
model, under any lookahead policy.

The known answer: every token accepted (alpha = 1), every request arriving at once and
outputs of ``1 + m (gamma + 1)`` tokens, so that no block is cut at a request's end; then
each pass is known in advance, and a plain recomputation (prefill, then per pass the
target's verification of ``gamma + 1`` positions per sequence plus the proposer's pass
drafting a chain of ``gamma`` at the batch's mean context) gives the timeline, which the
engine must equal to 1e-9. The same proposer as a width-one chain tree on the serving
engine drafts the same passes (the same ``draft_s``, to 1e-9, and the same counts); both
verify at the cached context, one token short of prompt and emitted tokens (the last one
emitted is written by the pass: docs/design.md, "The context of a pass").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_head, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma, LoadAdaptive
from specsim.policies.tree_optimizer import chain_tree
from specsim.proposers import Heads, NGram, RankAcceptance
from specsim.sim import CardCost, PlainCost, ServingConfig, TraceWorkload, simulate_serving
from specsim.sim.config.config import config_from_dict
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving

G = 3
VICUNA, HW = load_model("vicuna-7b-v1.3"), load_hardware("a100-80gb")
HEADS = Heads(card=load_head("eagle-vicuna-7b-v1.3"))
DEPLOYMENT = Deployment(target=VICUNA, hardware=HW)
PROMPTS = (100, 137, 174, 211, 248)
OUTPUTS = tuple(1 + (G + 1) * m for m in (3, 4, 5, 6, 7))
WORK = TraceWorkload(arrival_s=(0.0,) * 5, prompt_tokens=PROMPTS, output_tokens=OUTPUTS)


class Certain:
    """The heads with every drafted token accepted (the tree run's acceptance, to match the
    chain run's alpha = 1); their costs are the heads' own."""

    name, overlappable = "certain heads", False

    def __init__(self, inner: Heads) -> None:
        self.inner = inner

    @property
    def acceptance(self) -> RankAcceptance:
        return RankAcceptance(accept=((1.0,),) * G)

    def check_target(self, target: Any) -> None:
        self.inner.check_target(target)

    def draft_costs(self, parents: Any, **kw: Any) -> Any:
        return self.inner.draft_costs(parents, **kw)

    def draft_cost(self, parents: Any, **kw: Any) -> Any:
        return self.inner.draft_cost(parents, **kw)

    def memory_bytes(self, deployment: Any) -> float:
        return self.inner.memory_bytes(deployment)


def _chain(**kw: Any) -> ServingConfig:
    base: dict[str, Any] = dict(
        workload=WORK,
        cost=CardCost(deployment=Deployment(target=VICUNA, hardware=HW)),
        acceptance=IIDAcceptance(alpha=1.0),
        policy=FixedGamma(gamma=G),
        max_gamma=G,
        max_batch=8,
        proposer=HEADS,
        plain_twin=False,
    )
    base.update(kw)
    return ServingConfig(**base)


def _recomputed(cost: CardCost, admitted: list[int]) -> list[tuple[float, float, float]]:
    """(start, end, draft seconds) of each pass, recomputed pass by pass (module docstring);
    each pass first admits the next ``admitted[r]`` requests (``r`` the pass), in arrival order, and
    prefills their prompts (when requests arriving together are seen is the clock's
    business, read from the table)."""
    prompts = np.array(PROMPTS, dtype=np.int64)
    ctx = prompts + 1  # each sequence's context as the chain engine counts it (root included)
    left = np.array([(o - 1) // (G + 1) for o in OUTPUTS])
    rows, start, joined = [], 0.0, 0
    for n in admitted:
        new = slice(joined, joined + n)
        t = 0.0
        if n:  # the target's prompt pass, and the heads' own KV prefill beside it
            own = HEADS.prefill_cost(deployment=DEPLOYMENT, tokens=prompts[new], context=[0] * n)
            t = cost.prefill(prompts[new], draft=False).time_s + float(own.time_s)
        joined += n
        run = left > 0
        run[joined:] = False
        b, c = int(run.sum()), ctx[run]
        verify = cost.verify(np.full(b, G + 1, dtype=np.int64), c - 1).time_s  # cached
        mean = int(round(float((c - 1).sum()) / b))
        draft = float(
            HEADS.draft_costs(chain_tree(G), deployment=DEPLOYMENT, batch=b, context=mean).time_s[0]
        )
        end = start + t + verify + draft
        rows.append((start, end, draft))
        start = end
        ctx[run] += G + 1
        left[run] -= 1
    assert not left.any(), "the table's admissions do not serve every request"
    return rows


def test_heads_in_chain_serving_price_what_a_recomputation_and_the_chain_tree_price() -> None:
    cfg = _chain()
    it = simulate_serving(cfg, np.random.default_rng(0)).iterations_spec
    want = np.array(_recomputed(cfg.cost, it["admitted"].tolist()))  # type: ignore[arg-type]
    got = it[["start_s", "end_s", "draft_s"]].to_numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0.0)
    assert (it["draft_tokens"] == G * it["batch"]).all()
    tree = TreeServingConfig(
        workload=WORK,
        parents=chain_tree(G),
        proposer=Certain(HEADS),  # type: ignore[arg-type]
        deployment=DEPLOYMENT,
        max_batch=8,
        plain_twin=False,
    )
    ti = simulate_tree_serving(tree, np.random.default_rng(0)).iterations
    np.testing.assert_allclose(it["draft_s"], ti["draft_s"], rtol=1e-9, atol=0.0)
    for col in ("batch", "admitted", "draft_tokens", "positions", "emitted"):
        assert (it[col] == ti[col]).all(), col


def test_a_lookahead_policy_drafts_with_heads_or_ngram() -> None:
    """Under a load-adaptive lookahead (its table priced with the proposer's drafts), heads
    cost draft time and an n-gram lookup costs far less; every request finishes."""
    policy = LoadAdaptive(alpha=0.7, max_gamma=G)
    runs = {}
    for name, proposer in (
        ("heads", HEADS),
        ("ngram", NGram(acceptance=RankAcceptance(accept=((0.7,),)))),
    ):
        cfg = _chain(policy=policy, proposer=proposer, acceptance=IIDAcceptance(alpha=0.7))
        res = simulate_serving(cfg, np.random.default_rng(1))
        assert np.isfinite(res.requests_spec["finish_s"]).all()
        runs[name] = res.iterations_spec
    assert runs["heads"]["draft_tokens"].sum() > 0
    assert 0 < runs["ngram"]["draft_s"].sum() < runs["heads"]["draft_s"].sum()


def test_a_proposer_needs_a_cost_source_on_cards_and_the_protocol() -> None:
    with pytest.raises(ValueError, match="proposer: .*PlainCost has none"):
        _chain(cost=PlainCost(c=0.1))
    with pytest.raises(TypeError, match="proposer: object is not a proposer"):
        _chain(proposer=object())
    with pytest.raises(ValueError):  # the head card was trained for vicuna-7b-v1.3
        _chain(
            cost=CardCost(deployment=Deployment(target=load_model("llama-2-7b"), hardware=HW)),
            proposer=HEADS,
        )


def test_a_proposer_table_without_a_tree_drafts_a_chain_run() -> None:
    table: dict[str, Any] = {
        "mode": "serving",
        "max_gamma": G,
        "deployment": {"target": "vicuna-7b-v1.3", "hardware": "a100-80gb"},
        "proposer": {"kind": "heads", "card": "eagle-vicuna-7b-v1.3"},
        "acceptance": {"kind": "iid", "alpha": 1.0},
        "policy": {"kind": "fixed", "gamma": G},
        "workload": {
            "kind": "trace",
            "arrival_s": [0.0] * 5,
            "prompt_tokens": list(PROMPTS),
            "output_tokens": list(OUTPUTS),
        },
        "max_batch": 8,
        "plain_twin": False,
    }
    spec = config_from_dict(table, where="run.toml")
    assert isinstance(spec.config, ServingConfig) and spec.config.proposer == HEADS
    got = simulate_serving(spec.config, np.random.default_rng(0)).iterations_spec
    want = simulate_serving(_chain(), np.random.default_rng(0)).iterations_spec
    assert got.equals(want)
    with pytest.raises(ValueError, match=r"run.toml.*max_gamma: 64: .*reach depth 5"):
        config_from_dict({k: v for k, v in table.items() if k != "max_gamma"}, where="run.toml")
