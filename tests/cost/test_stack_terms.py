"""The speculative path's costs in a stack (specsim.cost.stack_terms): each term found."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import StackProfile, compose, load_hardware, load_model, load_stack
from specsim.cards.stack_files import stacks_dir
from specsim.cost import pass_aggregates_cost, step_cost, step_cost_grid
from specsim.cost.deployment import Deployment
from specsim.cost.formats import resolve_formats
from specsim.cost.roofline import roofline
from specsim.cost.shape import PassShape

M, HW = load_model("llama-2-7b"), load_hardware("a100-80gb")
FM = resolve_formats(M, None)

# A stack with every term nonzero and round numbers, so each term's size is known.
TERMS = {
    "sequence_overhead_s": 1e-5,
    "rejection_s_per_token": 3e-6,
    "speculation_overhead_s": 7e-4,
    "eager_layer_overhead_s": 2e-5,
    "draft_step_overhead_s": 4e-4,
}


def _stack(base: str = "vllm-v1", **changes: object) -> StackProfile:
    return dataclasses.replace(load_stack(base), **{**TERMS, **changes})


def _cost(stack: StackProfile, *, batch: int, new: int, verify: bool, context: int = 256):
    rt = compose(stack, HW)
    return step_cost(M, HW, batch=batch, context=context, new_tokens=new, runtime=rt, verify=verify)


def test_verify_cost_is_a_staircase_in_the_tokens_between_graph_sizes() -> None:
    """vLLM V1 pads the tokens to the next of ..., 256, 272, ...: with no cached tokens and no
    pairs, the time of T tokens in (256, 272] is that of 272 tokens less (272 - T) new-token
    attention terms, exactly; past 272 the eager path is not taken (more sizes), past 512 it is."""
    rt = compose(_stack(), HW)
    co = roofline(M, HW, FM, 1.0, rt)

    def terms(T: float):
        return pass_aggregates_cost(
            M, HW, batch=1.0, tokens=T, context_tokens=0.0, pairs=0.0, runtime=rt
        )

    def time(T: float) -> float:
        return float(terms(T).time_s)

    top = time(272.0)
    for T in (257.0, 260.0, 271.0):
        assert time(T) + (272.0 - T) * co.attention_new_s == pytest.approx(top, rel=1e-12)
    jump = time(273.0) - top
    assert jump > 10 * (time(272.0) - time(271.0))  # the next step of the staircase
    # Above the largest size (512): eager, one launch cost per layer more, and no padding.
    eager = float(terms(513.0).stack_time_s - terms(512.0).stack_time_s)
    assert eager == pytest.approx(M.layers * TERMS["eager_layer_overhead_s"], rel=1e-12)
    assert time(513.0) - time(512.0) > eager
    assert float(terms(513.0).padded_tokens) == 513.0 and float(terms(257.0).padded_tokens) == 272


def test_batch_graphs_pad_the_rows_and_without_padding_run_eagerly() -> None:
    sg = _stack("sglang")  # sizes ..., 32, 40, 56, ... of the batch
    c33 = _cost(sg, batch=33, new=4, verify=True)
    assert c33.padded_tokens == 40 * 4 and c33.tokens == 33 * 4
    exact = dataclasses.replace(sg, graph_padding=False)
    e33 = _cost(exact, batch=33, new=4, verify=True)
    e32 = _cost(exact, batch=32, new=4, verify=True)
    assert e33.padded_tokens == 33 * 4 and e32.padded_tokens == 32 * 4
    eager = M.layers * TERMS["eager_layer_overhead_s"]
    assert e33.stack_time_s - c33.stack_time_s == pytest.approx(eager, rel=1e-12)
    seq = TERMS["sequence_overhead_s"]
    assert e33.stack_time_s - e32.stack_time_s == pytest.approx(eager + seq + 4 * 3e-6, rel=1e-9)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_batch_expansion_multiplies_the_cached_kv_reads_by_k_plus_one(k: int) -> None:
    v0 = _stack("vllm-v0")
    mq = dataclasses.replace(v0, verify="multi-query")
    B, n = 4, k + 1
    exp, plain = _cost(v0, batch=B, new=n, verify=True), _cost(mq, batch=B, new=n, verify=True)
    co = roofline(M, HW, FM, 1.0, compose(v0, HW))
    written = 2 * B * n * M.layers * co.kv_bytes  # the new tokens' keys and values
    assert exp.kv_bytes - written == pytest.approx(n * (plain.kv_bytes - written), rel=1e-12)
    assert exp.kv_bytes - plain.kv_bytes == pytest.approx(k * B * 256 * M.layers * co.kv_bytes)
    assert exp.time_s > plain.time_s
    # Rows stay the multi-query pass's; the host counts B * (k + 1) scheduled sequences.
    assert exp.padded_tokens == plain.padded_tokens
    extra = (n - 1) * B * TERMS["sequence_overhead_s"]
    assert exp.stack_time_s - plain.stack_time_s == pytest.approx(extra, rel=1e-9)
    # A plain pass (not a verification) is not expanded.
    assert (
        _cost(v0, batch=B, new=1, verify=False).kv_bytes
        == _cost(mq, batch=B, new=1, verify=False).kv_bytes
    )


def test_an_expanded_batch_past_the_largest_graph_runs_eagerly() -> None:
    v0 = _stack("vllm-v0")  # batch graphs up to 256
    on = _cost(v0, batch=64, new=4, verify=True)  # 256 expanded sequences: captured
    off = _cost(v0, batch=65, new=4, verify=True)  # 260: eager
    assert on.padded_tokens == 256 and off.padded_tokens == 260
    eager = M.layers * TERMS["eager_layer_overhead_s"]
    seq = 4 * TERMS["sequence_overhead_s"] + 4 * TERMS["rejection_s_per_token"]
    assert off.stack_time_s - on.stack_time_s == pytest.approx(eager + seq, rel=1e-9)


def test_verification_adds_the_rejection_sampler_and_configured_speculation() -> None:
    st = _stack()
    B, n = 8, 4
    v, p = _cost(st, batch=B, new=n, verify=True), _cost(st, batch=B, new=n, verify=False)
    added = B * n * TERMS["rejection_s_per_token"] + TERMS["speculation_overhead_s"]
    assert v.stack_time_s - p.stack_time_s == pytest.approx(added, rel=1e-12)
    assert v.time_s - p.time_s == pytest.approx(added, rel=1e-9)
    assert v.overhead_time_s - p.overhead_time_s == pytest.approx(added, rel=1e-9)
    # One new token per sequence on a captured size: the per-sequence host work alone.
    plain = _cost(st, batch=B, new=1, verify=False)
    assert plain.stack_time_s == pytest.approx(B * TERMS["sequence_overhead_s"], rel=1e-12)


def test_a_tree_is_refused_by_a_batch_expansion_stack_and_one_without_tree_masks() -> None:
    tree = PassShape.tree(context=128, parents=[-1, 0, 0, 1])
    with pytest.raises(ValueError, match=r"stack 'vllm-v0' verifies by batch expansion"):
        Deployment(target=M, hardware=HW, runtime="vllm-v0").pass_cost(tree)
    fast = compose(load_stack(stacks_dir() / "gpt-fast-stack.toml"), HW)
    with pytest.raises(ValueError, match=r"stack 'gpt-fast-stack' has no tree attention mask"):
        Deployment(target=M, hardware=HW, runtime=fast).pass_cost(tree)
    cost = Deployment(target=M, hardware=HW, runtime="sglang").pass_cost(tree)
    assert cost.tokens == 4 and cost.stack_time_s > 0  # a tree is a verification
    # A chain written as a tree pass is a chain: batch expansion verifies it.
    chain = PassShape.tree(context=128, parents=[-1, 0, 1, 2])
    v0 = Deployment(target=M, hardware=HW, runtime="vllm-v0")
    as_chain = v0.aggregates_cost(batch=1, tokens=4, context_tokens=128, pairs=4 * 128 + 10)
    assert v0.pass_cost(chain).kv_bytes > as_chain.kv_bytes  # expanded: a verification


def test_draft_steps_pay_the_draft_step_host_cost_and_eager_launches() -> None:
    rt = compose(_stack(), HW)
    d = rt.drafting()
    assert d.pass_overhead_s == TERMS["draft_step_overhead_s"] and d.sampling_s_per_token == 0
    assert d.layer_overhead_s == rt.layer_overhead_s and d is rt.drafting()
    eager = compose(_stack(draft_graphs=False), HW).drafting()
    assert eager.layer_overhead_s == rt.layer_overhead_s + TERMS["eager_layer_overhead_s"]
    draft = load_model("llama-68m")
    a = step_cost(draft, HW, batch=1, context=100, new_tokens=1, runtime=rt)
    b = step_cost(draft, HW, batch=1, context=100, new_tokens=1, runtime=d)
    assert a.time_s - b.time_s == pytest.approx(
        rt.pass_overhead_s - d.pass_overhead_s + TERMS["sequence_overhead_s"], rel=1e-9
    )


def test_a_profile_without_a_stack_adds_nothing() -> None:
    c = step_cost(M, HW, batch=3, context=100, new_tokens=5, verify=True, runtime="gpt-fast")
    assert c.stack_time_s == 0 and c.padded_tokens == c.tokens == 15


def test_the_grid_prices_stack_terms_as_single_passes() -> None:
    rt = compose(_stack("sglang"), HW)
    batch = np.array([1, 9, 33, 150, 200])
    grid = step_cost_grid(M, HW, batch=batch, context=300, new_tokens=1, runtime=rt)
    for i, b in enumerate(batch.tolist()):
        one = step_cost(M, HW, batch=b, context=300, new_tokens=1, runtime=rt)
        assert grid.time_s[i] == pytest.approx(one.time_s, rel=1e-12)
        assert grid.padded_tokens[i] == one.padded_tokens


@pytest.mark.parametrize("base", ["vllm-v1", "vllm-v0"])
def test_an_empty_pass_in_a_grid_has_no_rows_and_no_warning(base: str) -> None:
    """A grid of passes may hold an empty one (a draft step no sequence takes): it has 0 rows
    and 0 cached reads, not NaN, and warns nothing (the serving engine masks it)."""
    from specsim.cost.stack_terms import stack_costs, stack_terms  # start-up: under test only

    sc = stack_costs(compose(_stack(base), HW), M.layers)
    assert sc is not None
    T, B, R = np.array([0.0, 8.0]), np.array([0.0, 2.0]), np.array([0.0, 512.0])
    with np.errstate(all="raise"):
        st = stack_terms(sc, T=T, R=R, batch=B, verify=True)
    assert np.isfinite(st.rows).all() and st.rows[0] == 0.0 and st.rows[1] >= 8.0
    assert np.isfinite(st.R).all() and st.R[0] == 0.0
