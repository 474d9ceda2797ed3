"""The one drafting rule: DraftWork priced under the deployment's drafting profile, the
stack's draft worker (same or separate), and a draft's own deployment checked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards.stack_files import load_stack
from specsim.cost import Deployment, PassShape
from specsim.cost.drafting import DraftWork, check_draft_deployment, price_draft
from specsim.cost.resolved import pass_terms

SGLANG, V0 = load_stack("sglang"), load_stack("vllm-v0")
STACKS = ("vllm-v0", "vllm-v1", "sglang", "tensorrt-llm", "hf-transformers", "gpt-fast-stack",
          "llama.cpp", "research-cuda-graphs")  # fmt: skip


def _work(dep: Deployment, *, scale: float = 1.0, batch: float = 4.0) -> DraftWork:
    ctx = np.array([[256.0, 2048.0], [257.0, 2049.0]])  # two steps at two contexts
    return DraftWork(
        deployment=dep,
        batch=batch,
        tokens=batch,
        context_tokens=batch * ctx,
        pairs=batch * (ctx + 1.0),
        scale=scale,
    )


def test_without_a_stack_a_step_is_scale_of_the_pass() -> None:
    """No stack, no draft-step cost of its own: each step is ``scale`` of the model's pass,
    fixed costs included (the pricing before the rule), summed over the steps."""
    dep = Deployment(target="llama-3.1-8b", hardware="h100-sxm")
    got = price_draft(_work(dep, scale=0.06))
    for j, c in enumerate((256, 2048)):
        want = sum(
            0.06 * dep.pass_cost(PassShape.chain(context=c + d, new=1, batch=4)).time_s
            for d in range(2)
        )
        assert got.time_s[j] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("stack", [SGLANG, V0], ids=["same", "separate"])
def test_a_draft_step_pays_the_stacks_draft_step_host_cost(stack: object) -> None:
    """On a stack, a step's host seconds are the stack's draft-step cost, whatever ``scale``
    (a head inside the target's step still costs a draft step), and never its per-pass cost;
    the model work alone scales."""
    dep = Deployment(target="llama-3.1-8b", hardware="h100-sxm", runtime=stack)  # type: ignore[arg-type]
    st = dep.runtime.stack_profile  # type: ignore[union-attr]
    assert dep.drafting().resolved().step_host_s(4.0) == st.draft_step_host_s(4.0)
    host = st.draft_step_host_s(4.0)
    one, part = price_draft(_work(dep)), price_draft(_work(dep, scale=0.25))
    np.testing.assert_allclose(part.time_s - 2 * host, 0.25 * (one.time_s - 2 * host), rtol=1e-12)
    more = dataclasses.replace(st, pass_overhead_s=st.pass_overhead_s + 0.01)
    dear = dataclasses.replace(st, draft_step_overhead_s=st.draft_step_overhead_s + 0.01)
    for changed, extra in ((more, 0.0), (dear, 0.02)):  # two steps
        d2 = Deployment(target=dep.target, hardware=dep.hardware, runtime=changed)
        got = price_draft(_work(d2, scale=0.25)).time_s
        np.testing.assert_allclose(got - part.time_s, extra, rtol=1e-9, atol=1e-15)


def test_a_separate_worker_pays_per_sequence_and_pads() -> None:
    """vLLM V0's proposer worker: each step is a pass of the worker, its per-sequence host
    work and its captured batch sizes (batch 3 pads to 4); inside the target's step, none."""
    assert (V0.draft_worker, SGLANG.draft_worker) == ("separate", "same")
    assert V0.draft_step_host_s(8) == V0.draft_step_overhead_s + 8 * V0.sequence_overhead_s
    assert SGLANG.draft_step_host_s(8) == SGLANG.draft_step_overhead_s
    prof = Deployment(target="llama-3.2-1b", hardware="h100-sxm", runtime=V0).drafting().runtime
    assert prof.stack_profile.graph_sizes == V0.graph_sizes  # type: ignore[union-attr]
    assert prof.stack_profile.sequence_overhead_s == V0.sequence_overhead_s  # type: ignore[union-attr]
    sums = {"batch": 3.0, "tokens": 3.0, "context_tokens": 3e3, "pairs": 3003.0}
    sep = Deployment(target="llama-3.2-1b", hardware="h100-sxm", runtime=V0).drafting()
    assert pass_terms(sep.resolved(), **sums).padded_tokens == 4.0
    same = Deployment(target="llama-3.2-1b", hardware="h100-sxm", runtime=SGLANG).drafting()
    assert pass_terms(same.resolved(), **sums).padded_tokens == 3.0
    assert same.runtime.stack_profile.graph_sizes is None  # type: ignore[union-attr]
    assert same.runtime.stack_profile.sequence_overhead_s == 0.0  # type: ignore[union-attr]


@pytest.mark.parametrize("slug", STACKS)
def test_every_shipped_stack_says_how_it_drafts(slug: str) -> None:
    """Each stack names its draft worker and graph path and cites where it read them."""
    st = load_stack(slug)
    assert st.draft_worker in ("same", "separate")
    sources = st.sources if isinstance(st.sources, dict) else {}
    assert "draft_worker" in sources, f"{slug}: [sources] draft_worker"
    assert st.draft_step_host_s(1.0) <= st.pass_overhead_s + st.sequence_overhead_s


def test_bad_draft_work_is_an_error_naming_the_field() -> None:
    dep = Deployment(target="llama-3.2-1b", hardware="h100-sxm")
    good = {"deployment": dep, "batch": [1], "tokens": [1], "context_tokens": [8], "pairs": [9]}
    with pytest.raises(TypeError, match="deployment"):
        DraftWork(**{**good, "deployment": "llama-3.2-1b"})  # type: ignore[arg-type]
    for scale in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="scale"):
            DraftWork(**good, scale=scale)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pairs"):
        DraftWork(**{**good, "pairs": [-1]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one value per step"):
        DraftWork(**{**good, "batch": 1, "tokens": 1, "context_tokens": 8, "pairs": 9})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefill"):
        DraftWork(**{**good, "tokens": [0]}, prefill=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="DraftWork"):
        price_draft(good)  # type: ignore[arg-type]
    nothing = price_draft(DraftWork(**{**good, "tokens": [0], "batch": [0]}))  # type: ignore[arg-type]
    assert (nothing.time_s, nothing.energy_j, nothing.flops) == (0.0, 0.0, 0.0)


def test_a_drafts_own_deployment_is_checked_against_the_targets() -> None:
    dep = Deployment(target="llama-2-7b", hardware="a100-80gb")
    draft = Deployment(target="llama-68m", hardware="a100-80gb")
    check_draft_deployment(dep, draft.target, draft, where="w")
    with pytest.raises(ValueError, match=r"w\.target: expected the draft 'llama-160m'"):
        check_draft_deployment(dep, Deployment(target="llama-160m", hardware="a40").target,
                               draft, where="w")  # fmt: skip
    own = dataclasses.replace(draft, draft_placement="own-device")
    with pytest.raises(ValueError, match=r"w\.draft_placement"):
        check_draft_deployment(dep, draft.target, own, where="w")
    with pytest.raises(ValueError, match=r"w\.hardware"):
        check_draft_deployment(dep, draft.target, dataclasses.replace(draft, hardware="a40"),  # type: ignore[arg-type]
                               where="w")  # fmt: skip
