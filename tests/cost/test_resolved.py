"""The resolved deployment: formats, stack and parallelism resolved once, the kernel on it,
and the keyword wrappers equal to it bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import specsim.cost.deployment as deployment_module
from specsim.cards import load_head, load_model, profile_of_card
from specsim.cost import (
    Deployment,
    PassShape,
    cost_coefficient,
    pass_aggregates_cost,
    pass_grid,
    step_cost,
    step_cost_grid,
    verification_factor,
)
from specsim.cost.deployment import resolve
from specsim.cost.formats import resolve_formats
from specsim.cost.resolved import pass_cost, pass_terms
from specsim.proposers import DraftModel, Heads, RankAcceptance

CASES = [
    {"target": "llama-2-7b", "hardware": "a100-80gb"},
    {"target": "llama-2-7b", "hardware": "a100-80gb", "weights": "int4", "group_size": 32},
    {"target": "llama-2-70b", "hardware": "h100-sxm", "tensor_parallel": 4, "runtime": "vllm-v1"},
    {"target": "llama-3.1-8b", "hardware": "h100-sxm", "runtime": "vllm-v0", "kv": "fp8"},
    {
        "target": "deepseek-v3",
        "hardware": "b200",
        "tensor_parallel": 8,
        "expert_parallel": 8,
        "runtime": "tensorrt-llm",
    },
]


def _keywords(case: dict[str, object]) -> dict[str, object]:
    kw = dict(case)
    kw.pop("target"), kw.pop("hardware")
    return kw


def test_a_deployment_is_resolved_once_and_remembered() -> None:
    """resolved() is one value per deployment, and a copy over the same cards finds it."""
    dep = Deployment(target="llama-2-7b", hardware="a100-80gb", weights="int8", kv="fp8")
    r = dep.resolved()
    assert dep.resolved() is r
    assert dataclasses.replace(dep).resolved() is r
    assert (r.formats.weight_format, r.formats.kv_format) == ("int8", "float8")
    assert r.formats == resolve_formats(dep.target, None, weights="int8", kv="fp8")
    assert (r.tensor_parallel, r.expert_parallel, r.encoder) == (1, 1, 0.0)
    assert r.runtime is profile_of_card(dep.hardware) and r.stack is None
    assert Deployment(target="llama-2-7b", hardware="a100-80gb", runtime="sglang").resolved().stack


def test_the_remembered_value_tells_formats_and_parallelism_apart() -> None:
    """Two deployments over the same cards with other formats or devices resolve apart."""
    base = Deployment(target="llama-2-7b", hardware="a100-80gb")
    kv8 = dataclasses.replace(base, kv="fp8")
    tp2 = dataclasses.replace(base, tensor_parallel=2)
    assert base.resolved().formats.kv_format == "float16"
    assert kv8.resolved().formats.kv_format == "float8"
    assert tp2.resolved().tensor_parallel == 2
    assert base.resolved() is not kv8.resolved() is not tp2.resolved()


def test_the_group_size_is_the_deployments() -> None:
    """int4 with a group of 32 resolves with 32 (more scale bytes than the default 128)."""
    dep = Deployment(target="llama-2-7b", hardware="a100-80gb", weights="int4", group_size=32)
    fm = dep.resolved().formats
    assert fm.group_size == 32
    assert fm == resolve_formats(dep.target, None, weights="int4", group_size=32)
    default = Deployment(target="llama-2-7b", hardware="a100-80gb", weights="int4").resolved()
    assert fm.weights > default.formats.weights


@pytest.mark.parametrize("case", CASES)
def test_the_kernel_equals_the_keyword_wrappers_bit_for_bit(case: dict[str, object]) -> None:
    dep = Deployment(**case)  # type: ignore[arg-type]
    kw = _keywords(case)
    m, hw = case["target"], case["hardware"]
    shape = PassShape.chain(context=[100, 700], new=[3, 1])
    for verify in (False, True):
        got = pass_cost(dep.resolved(), shape, verify=verify)
        want = step_cost(m, hw, batch=2, context=[100, 700], new_tokens=[3, 1], verify=verify, **kw)
        assert got == want
        assert dep.pass_cost(shape, verify=verify) == want
    sums = {"batch": 3.0, "tokens": 9.0, "context_tokens": 1500.0, "pairs": 4518.0}
    terms = pass_terms(dep.resolved(), **sums, verify=True)
    assert terms == pass_aggregates_cost(m, hw, **sums, verify=True, **kw)  # type: ignore[arg-type]
    grid = pass_grid(dep, batch=[1, 8], context=512, new_tokens=[[1], [4]], check_memory=False)
    legacy = step_cost_grid(
        m, hw, batch=[1, 8], context=512, new_tokens=[[1], [4]], check_memory=False, **kw
    )
    np.testing.assert_array_equal(grid.time_s, legacy.time_s)
    np.testing.assert_array_equal(grid.energy_j, legacy.energy_j)


def test_v_and_c_take_a_deployment_first() -> None:
    """One convention: verification_factor(deployment, gamma) and cost_coefficient(deployment,
    draft) equal the card-and-keyword forms; the keywords beside a Deployment are an error."""
    kw = {"weights": "int8", "runtime": "vllm-v1"}
    dep = Deployment(target="llama-3.1-8b", hardware="h100-sxm", **kw)  # type: ignore[arg-type]
    v = verification_factor(dep, [0, 1, 4], batch=[[1], [32]], context=1024)
    legacy = verification_factor("llama-3.1-8b", "h100-sxm", [0, 1, 4], batch=[[1], [32]],
                                 context=1024, **kw)  # fmt: skip
    np.testing.assert_array_equal(v, legacy)
    assert verification_factor(dep, gamma=3) == verification_factor(dep, 3)
    with pytest.raises(TypeError, match="weights"):
        verification_factor(dep, 3, weights="int4")  # type: ignore[call-overload]
    draft = load_model("llama-3.2-1b")
    assert cost_coefficient(dep, draft, batch=4) == cost_coefficient(draft, dep, batch=4)
    proposer = DraftModel(card=draft, acceptance=RankAcceptance(accept=((0.7,),)))
    c = cost_coefficient(dep, proposer, batch=4, context=[256, 2048])
    assert np.shape(c) == (2,) and 0 < c[0] < c[1] < 1
    eagle = cost_coefficient(dep, Heads(card=load_head("eagle3-llama-3.1-8b")), context=512)
    assert 0 < eagle < c[0]


def test_formats_are_resolved_once_however_many_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32: a plan resolved weight formats thousands of times for a few deployments;
    pricing the same deployment many ways resolves them only when it is built, and when its
    drafting deployment (the stack's drafting profile, remembered) is."""
    calls = []
    real = deployment_module.resolve_formats

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(deployment_module, "resolve_formats", counted)
    dep = Deployment(target="llama-3.1-8b", hardware="h100-sxm", weights="int4", runtime="sglang")
    assert len(calls) == 1
    eagle = Heads(card=load_head("eagle3-llama-3.1-8b"))
    for c in range(0, 4000, 100):
        dep.pass_cost(PassShape.chain(context=c, new=4, batch=8))
        dep.aggregates_cost(batch=8, tokens=32, context_tokens=8 * c, pairs=8 * (4 * c + 10))
        eagle.draft_cost([-1, 0, 1], deployment=dep, batch=8, context=c)
    pass_grid(dep, batch=[1, 64], context=512, new_tokens=1)
    verification_factor(dep, [1, 3], batch=16)
    assert len(calls) == 2 and dep.drafting() is dep.drafting()
    assert resolve(dep) is dep.resolved()


def test_an_encoder_length_resolves_apart() -> None:
    """T5: the encoder tokens are part of the resolved value; a decoder takes none."""
    t5 = Deployment(target="t5-small", hardware="a100-80gb")
    assert t5.resolved().encoder == 512.0 and t5.resolved(encoder_length=64).encoder == 64.0
    shape = PassShape.chain(context=10, new=2)
    want = step_cost("t5-small", "a100-80gb", batch=1, context=10, new_tokens=2, encoder_length=64)
    assert t5.pass_cost(shape, encoder_length=64) == want
    with pytest.raises(ValueError, match="decoder-only"):
        Deployment(target="llama-2-7b", hardware="a100-80gb").resolved(encoder_length=64)
