"""The simulator on a stack profile (``vllm-v0``: batch expansion, per-sequence host work, a
rejection sampler, configured speculation, a proposer worker's draft steps): every pass it
charges equals the cost model's pass, recomputed here with :func:`specsim.cost.step_cost`,
``verify=True`` exactly on the passes that verify drafted tokens, draft steps under the
stack's drafting profile; the plain twin pays none of the speculative terms."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_model
from specsim.cli import main
from specsim.cost import Deployment, cost_coefficient, step_cost, verification_factor
from specsim.policies.lookahead import FixedGamma
from specsim.policies.tree_optimizer import optimize_tree, tree_refusal
from specsim.proposers import DraftModel, load_acceptance
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.stream.stream import StreamConfig, simulate_stream

ROOT = Path(__file__).resolve().parents[3]
ACCEPT = str(ROOT / "models" / "measured" / "ngram" / "accept-sample.toml")
TARGET, DRAFT, HW = "llama-2-7b", "llama-68m", "a40"
DEP = Deployment(target=TARGET, hardware=HW, runtime="vllm-v0")
RT = DEP.runtime
assert RT is not None and RT.stack_profile is not None
ST = RT.stack_profile
B, PROMPT, GAMMA = 4, 64, 3


@dataclasses.dataclass(frozen=True)
class _AllAtOnce:
    """``requests`` requests of ``prompt`` tokens, all arriving at 0, each wanting ``output``."""

    requests: int
    prompt: int
    output: int

    @property
    def mean_prompt_tokens(self) -> float:
        return float(self.prompt)

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        n = self.requests
        return pd.DataFrame(
            {
                "arrival_s": np.zeros(n),
                "prompt_tokens": np.full(n, self.prompt),
                "output_tokens": np.full(n, self.output),
            }
        )


def _contexts(total: int) -> np.ndarray:
    """``B`` contexts summing to ``total`` (a chain pass's cost depends on their sum only)."""
    ctx = np.full(B, total // B, dtype=np.int64)
    ctx[0] += total - B * (total // B)
    return ctx


@pytest.fixture(scope="module")
def served() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A served batch on vllm-v0 with alpha = 0 (every pass emits one token per sequence, so
    the contexts are known): the speculative and the plain twin's iteration tables."""
    cfg = ServingConfig(
        workload=_AllAtOnce(B, PROMPT, 40),
        cost=CardCost(deployment=DEP, draft=DRAFT),
        acceptance=IIDAcceptance(alpha=0.0),
        policy=FixedGamma(gamma=GAMMA),
        max_batch=8,
        max_gamma=GAMMA,
    )
    r = simulate_serving(cfg, np.random.default_rng(1))
    return r.iterations_spec, r.iterations_plain


def _steady(it: pd.DataFrame) -> list[tuple[int, float, float, int]]:
    """Per iteration with every request admitted, none finished and no prefill: (index,
    pass seconds, draft seconds, context sum). The context sum is the cached tokens: the
    prompts and the tokens emitted before the iteration less the last each emitted (the
    first token each prefill emitted, then each pass's last, is written by the next pass)."""
    before = np.concatenate([[0], np.cumsum(it["emitted"].to_numpy())[:-1]])
    rows = []
    for i in range(len(it)):
        row = it.iloc[i]
        if row["batch"] != B or row["prefill_s"] != 0.0 or i > 30:
            continue
        pass_s = row["end_s"] - row["start_s"] - row["draft_s"]
        rows.append((i, float(pass_s), float(row["draft_s"]), B * PROMPT + int(before[i])))
    assert len(rows) > 20
    return rows


def test_serving_passes_are_verifications_at_their_batch(served: tuple) -> None:
    for _, pass_s, _, total in _steady(served[0]):
        kw = dict(batch=B, context=_contexts(total), new_tokens=GAMMA + 1, runtime=RT)
        want = step_cost(TARGET, HW, **kw, verify=True).time_s
        assert pass_s == pytest.approx(want, rel=1e-9)
        # Dropping verify= would miss the rejection sampler, the configured speculation and
        # batch expansion's extra sequences (host work), and its repeated cached-KV reads.
        plain = step_cost(TARGET, HW, **kw).time_s
        host = (
            B * (GAMMA + 1) * ST.rejection_s_per_token
            + ST.speculation_overhead_s
            + B * GAMMA * ST.sequence_overhead_s
        )
        assert want - plain > host + 1e-4


def test_serving_draft_steps_run_under_the_drafting_profile(served: tuple) -> None:
    for _, _, draft_s, total in _steady(served[0]):
        ctx = _contexts(total)
        steps = [
            step_cost(DRAFT, HW, batch=B, context=ctx + j, new_tokens=1, runtime=RT.drafting())
            for j in range(GAMMA)
        ]
        assert draft_s == pytest.approx(sum(s.time_s for s in steps), rel=1e-9)
        # Against the stack's pass profile: the draft step's own host cost replaces the pass's;
        # vLLM V0's drafter is a worker of its own (draft_worker "separate"), so its steps keep
        # the per-sequence work (the rows are the same: batch 4 is a captured size).
        as_pass = sum(
            step_cost(DRAFT, HW, batch=B, context=ctx + j, new_tokens=1, runtime=RT).time_s
            for j in range(GAMMA)
        )
        assert ST.draft_worker == "separate"
        host = RT.pass_overhead_s - ST.draft_step_overhead_s
        assert as_pass - draft_s == pytest.approx(GAMMA * host, rel=1e-6)


def test_the_plain_twin_pays_no_speculative_terms(served: tuple) -> None:
    for _, pass_s, draft_s, total in _steady(served[1]):
        assert draft_s == 0.0
        kw = dict(batch=B, context=_contexts(total), new_tokens=1, runtime=RT)
        assert pass_s == pytest.approx(step_cost(TARGET, HW, **kw).time_s, rel=1e-9)
        ver = step_cost(TARGET, HW, **kw, verify=True).time_s
        assert ver - pass_s == pytest.approx(
            B * ST.rejection_s_per_token + ST.speculation_overhead_s, rel=1e-6
        )


def test_mixed_iterations_verify_and_draft_as_composed() -> None:
    cost = CardCost(deployment=DEP, draft=DRAFT)
    gamma = np.array([0, 2, 3, 3], dtype=np.int64)
    ctx = np.array([70, 95, 130, 300], dtype=np.int64)
    want = step_cost(
        TARGET, HW, batch=4, context=ctx, new_tokens=gamma + 1, runtime=RT, verify=True
    ).time_s
    for j in range(3):
        on = gamma > j
        want += step_cost(
            DRAFT,
            HW,
            batch=int(on.sum()),
            context=ctx[on] + j,
            new_tokens=1,
            runtime=RT.drafting(),
        ).time_s
    assert cost.iteration(gamma, ctx).time_s == pytest.approx(want, rel=1e-9)
    count = np.bincount(gamma, minlength=4)[None, :]
    csum = np.bincount(gamma, weights=ctx, minlength=4)[None, :]
    bulk = cost.iterations(count, csum)
    assert float(bulk.time_s[0]) == cost.iteration(gamma, ctx).time_s
    # A plain pass of the same cost source (gamma 0 everywhere) is no verification.
    zero = np.zeros(4, dtype=np.int64)
    plain = step_cost(TARGET, HW, batch=4, context=ctx, new_tokens=1, runtime=RT).time_s
    assert cost.iteration(zero, ctx).time_s == pytest.approx(plain, rel=1e-9)
    assert cost.verify(zero + 1, ctx).time_s == pytest.approx(plain, rel=1e-9)


def test_a_stream_verifies_its_blocks_and_its_baseline_does_not() -> None:
    cost = CardCost(deployment=DEP, draft=DRAFT)
    cfg = StreamConfig(
        tokens=60,
        acceptance=IIDAcceptance(alpha=0.6),
        policy=FixedGamma(gamma=GAMMA),
        cost=cost,
        prompt=PROMPT,
    )
    res = simulate_stream(cfg, np.random.default_rng(3))
    blk = res.blocks
    for g, start, t, d in zip(
        blk.gamma, blk.start, blk.costs.verify_time, blk.costs.draft_time, strict=True
    ):
        c = PROMPT + int(start)
        kw = dict(batch=1, context=c, new_tokens=int(g) + 1, runtime=RT)
        assert t == pytest.approx(step_cost(TARGET, HW, **kw, verify=g > 0).time_s, rel=1e-9)
        step = step_cost(DRAFT, HW, batch=1, context=c, new_tokens=1, runtime=RT.drafting())
        assert d == pytest.approx(step.time_s, rel=1e-9)
    total = int(blk.emitted.sum())
    base = sum(
        step_cost(TARGET, HW, batch=1, context=PROMPT + i, new_tokens=1, runtime=RT).time_s
        for i in range(total)
    )
    assert res.baseline_time_s == pytest.approx(base, rel=1e-9)


def test_verification_factor_prices_a_verification_over_a_plain_pass() -> None:
    v = verification_factor(TARGET, HW, [0, 1, 3], batch=8, context=256, runtime=RT)
    one = step_cost(TARGET, HW, batch=8, context=256, new_tokens=1, runtime=RT).time_s
    want = [1.0] + [
        step_cost(
            TARGET, HW, batch=8, context=256, new_tokens=g + 1, runtime=RT, verify=True
        ).time_s
        / one
        for g in (1, 3)
    ]
    np.testing.assert_allclose(v, want, rtol=1e-9)


def test_the_cost_coefficient_prices_a_draft_step_under_the_drafting_profile() -> None:
    c = cost_coefficient(load_model(DRAFT), DEP, batch=B, context=300)
    kw = dict(batch=B, context=300, new_tokens=1)
    step = step_cost(DRAFT, HW, **kw, runtime=RT.drafting()).time_s
    assert c == pytest.approx(step / step_cost(TARGET, HW, **kw, runtime=RT).time_s, rel=1e-9)


def test_the_draft_model_proposer_prices_its_steps_under_the_drafting_profile() -> None:
    prop = DraftModel(card=load_model(DRAFT), acceptance=load_acceptance(ACCEPT))
    got = prop.draft_cost((-1, 0, 1), deployment=DEP, batch=B, context=200)
    want = sum(
        step_cost(DRAFT, HW, batch=B, context=200 + j, new_tokens=1, runtime=RT.drafting()).time_s
        for j in range(3)
    )
    assert float(got.time_s) == pytest.approx(want, rel=1e-9)


def test_tree_search_on_a_chain_only_stack_tries_chains_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    prop = DraftModel(card=load_model(DRAFT), acceptance=load_acceptance(ACCEPT))
    o = optimize_tree(proposer=prop, deployment=DEP, batch=2, budget=8, max_depth=6)
    assert "batch expansion" in o.chains_only
    assert o.best.parents == tuple(range(-1, o.best.nodes - 1))  # a chain (or nothing)
    assert o.kary not in o.plans() and len(o.plans()) == 3
    trees = dataclasses.replace(DEP, runtime="sglang")
    assert tree_refusal(trees) == ""
    assert optimize_tree(proposer=prop, deployment=trees, batch=2, budget=8).kary.nodes > 0
    base = ["tree", "--model", TARGET, "--hardware", HW, "--runtime", "vllm-v0", "--draft", DRAFT]
    base += ["--acceptance", ACCEPT, "--budget", "8", "--max-depth", "6"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "chains only (no branching tree searched): runtime: stack 'vllm-v0'" in out
    assert "best k-ary" not in out
    assert main([*base, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["kary"] is None and "batch expansion" in js["chains_only"]
