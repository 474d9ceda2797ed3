"""MoE targets in the cost model: touched experts, top-k flops, v(gamma), expert parallelism."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost import step_cost, verification_factor
from specsim.cost.collectives import ALGORITHMS, allreduce_time, alltoall_time
from specsim.cost.deployment import Deployment
from specsim.cost.moe import moe_routed_fraction
from specsim.cost.shape import PassShape
from specsim.theory import experts_touched, moe_verification_factor

MIXTRAL, H200 = load_model("mixtral-8x7b"), load_hardware("h200")


def _weights(model_slug: str, *, batch: int, new: int, tp: int = 1, ep: int = 1) -> float:
    dep = Deployment(
        target=load_model(model_slug), hardware=H200, tensor_parallel=tp, expert_parallel=ep
    )
    return dep.pass_cost(PassShape.chain(context=64, new=new, batch=batch)).weight_bytes


def test_a_pass_reads_the_fixed_weights_once_and_the_touched_experts() -> None:
    m = MIXTRAL
    wb = 2.0  # bfloat16
    fixed = m.fixed_layer_params + m._norm_params + m.vocab * m.d_model
    expert = m.moe_layers * m.routed_expert_params
    for batch, new in [(1, 1), (1, 4), (2, 5), (16, 8)]:
        n = batch * new  # the pass's tokens: batch x positions
        want = (fixed + expert * experts_touched(n, experts=8, top_k=2)) * wb
        assert _weights("mixtral-8x7b", batch=batch, new=new) == pytest.approx(want, rel=1e-12)
    # One token reads the activated parameters; a large pass every expert (all but the
    # input embedding table, which a pass gathers from).
    assert _weights("mixtral-8x7b", batch=1, new=1) == pytest.approx(m.decode_params * wb)
    everything = (m.shape_params - m.vocab * m.d_model) * wb
    assert _weights("mixtral-8x7b", batch=64, new=4) == pytest.approx(everything, rel=1e-12)


def test_flops_count_only_the_top_k_experts() -> None:
    c1 = step_cost(MIXTRAL, H200, batch=1, context=0, new_tokens=1)
    c8 = step_cost(MIXTRAL, H200, batch=8, context=0, new_tokens=1)
    attn = MIXTRAL.layers * 4 * MIXTRAL.head_dim * MIXTRAL.heads  # one (query, key) pair
    assert c1.flops == pytest.approx(2 * MIXTRAL.decode_params + attn, rel=1e-12)
    assert c8.flops == pytest.approx(8 * c1.flops, rel=1e-12)  # linear in tokens, not experts


@pytest.mark.parametrize("slug", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b"])
def test_the_cost_models_weight_traffic_is_the_theory_v_gamma(slug: str) -> None:
    model = load_model(slug)
    moe = model.moe_spec
    assert moe is not None
    tp = 8 if slug == "deepseek-v3" else 1
    one = _weights(slug, batch=1, new=1, tp=tp)
    f = moe_routed_fraction(model)
    for gamma in range(8):
        ratio = _weights(slug, batch=1, new=gamma + 1, tp=tp) / one
        want = moe_verification_factor(
            gamma, experts=moe.experts, top_k=moe.top_k, routed_fraction=f
        )
        assert ratio == pytest.approx(want, rel=1e-12)


def test_verification_is_not_free_on_an_moe_target_at_batch_1() -> None:
    # EAGLE (arXiv:2401.15077, Section 4): 1.5x on Mixtral against ~3x on dense 7B targets,
    # because verifying gamma + 1 positions reads more experts.
    v_moe = verification_factor(MIXTRAL, H200, 4)
    v_dense = verification_factor(load_model("llama-2-7b"), H200, 4)
    assert v_dense < 1.2 < 2.0 < v_moe


def test_a_dense_target_is_unchanged_by_the_moe_terms() -> None:
    dense = load_model("llama-2-7b")
    a = step_cost(dense, H200, batch=4, context=300, new_tokens=5)
    b = Deployment(target=dense, hardware=H200, expert_parallel=1).pass_cost(
        PassShape.chain(context=300, new=5, batch=4)
    )
    assert a == b and moe_routed_fraction(dense) == 0.0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("tp", "ep"), [(8, 8), (8, 4), (8, 2), (16, 16), (16, 8)])
def test_expert_parallel_collectives_are_the_collectives_model(
    algorithm: str, tp: int, ep: int
) -> None:
    hw = dataclasses.replace(H200, collective_algorithm=algorithm, collective_overhead_s=2e-6)
    model = load_model("deepseek-v3")
    moe = model.moe_spec
    assert moe is not None
    dep = Deployment(target=model, hardware=hw, tensor_parallel=tp, expert_parallel=ep)
    link = {"bandwidth": hw.interconnect_bandwidth, "latency_s": hw.interconnect_latency_s}
    for T in (1, 8, 64):
        cost = dep.pass_cost(PassShape.chain(context=128, new=T))
        d = T * model.d_model * 1.0  # float8 activations, bytes of the pass's hidden states
        ar = allreduce_time(d, tp, algorithm=algorithm, **link)
        group = allreduce_time(d, tp // ep, algorithm=algorithm, **link)
        a2a = alltoall_time(moe.top_k * d / ep, ep, algorithm=algorithm, **link)
        want = (
            (model.layers + moe.dense_layers) * ar
            + model.moe_layers * (group + 2 * a2a)
            + hw.collective_overhead_s * (tp - 1)
        )
        assert cost.allreduce_time_s == pytest.approx(want, rel=1e-12), (T, cost)


def test_expert_parallelism_keeps_the_weights_per_device() -> None:
    model = load_model("deepseek-v3")
    shape = PassShape.chain(context=128, new=4)
    costs = [
        Deployment(target=model, hardware=H200, tensor_parallel=8, expert_parallel=ep).pass_cost(
            shape
        )
        for ep in (1, 2, 8)
    ]
    assert len({c.resident_bytes for c in costs}) == 1
    assert len({c.weight_bytes for c in costs}) == 1
    # All weights over 8 devices, and the whole MLA latent on each (float8, 132 tokens).
    kv = (128 + 4) * model.layers * 576 * 1.0
    assert costs[0].resident_bytes == pytest.approx(model.shape_params / 8 + kv, rel=1e-12)


@pytest.mark.parametrize(
    ("slug", "tp", "ep", "message"),
    [
        ("deepseek-v3", 8, 3, "3 does not divide the 256 routed experts of deepseek-v3"),
        ("mixtral-8x7b", 8, 16, "16 does not divide the 8 routed experts of mixtral-8x7b"),
        ("deepseek-v3", 4, 8, "8 does not divide tensor_parallel = 4"),
        ("llama-2-7b", 2, 2, "2 needs an MoE target; llama-2-7b has no experts"),
        ("deepseek-v3", 8, 0, "expected an integer >= 1, got 0"),
    ],
)
def test_bad_expert_parallelism_names_the_value(slug: str, tp: int, ep: int, message: str) -> None:
    with pytest.raises(ValueError, match=f"deployment expert_parallel: {message}"):
        Deployment(target=slug, hardware=H200, tensor_parallel=tp, expert_parallel=ep)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"expert_parallel: {message}"):
        step_cost(
            slug, H200, batch=1, context=8, new_tokens=1, tensor_parallel=tp, expert_parallel=ep
        )


def test_a_full_moe_model_that_does_not_fit_says_so() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        step_cost("deepseek-v3", H200, batch=1, context=8, new_tokens=1)
    assert np.isfinite(step_cost("qwen3-30b-a3b", H200, batch=1, context=8, new_tokens=1).time_s)


def test_fp4_weight_formats_and_gpt_oss_120b_on_one_80gb_gpu() -> None:
    # OCP MX v1.0: 32 E2M1 values + one E8M0 scale; NVFP4: 16 E2M1 values + one E4M3 scale.
    from specsim.cost.quant import WEIGHT_FORMATS

    assert WEIGHT_FORMATS["mxfp4"].bytes_per_weight(d_model=2880, group_size=None) == 17 / 32
    assert WEIGHT_FORMATS["nvfp4"].bytes_per_weight(d_model=2880, group_size=None) == 9 / 16
    # gpt-oss README: gpt-oss-120b in MXFP4 "fits into a single 80GB GPU" (H100); in bf16 not.
    h100 = load_hardware("h100-sxm")
    cost = step_cost("gpt-oss-120b", h100, batch=1, context=512, new_tokens=1, weights="mxfp4")
    assert cost.resident_bytes < h100.mem_capacity
    with pytest.raises(ValueError, match="does not fit"):
        step_cost("gpt-oss-120b", h100, batch=1, context=512, new_tokens=1)


@pytest.mark.parametrize("ep", [1, 8])
def test_pass_sums_and_one_pass_agree_on_an_moe_deployment(ep: int) -> None:
    dep = Deployment(target="deepseek-v3", hardware=H200, tensor_parallel=8, expert_parallel=ep)  # type: ignore[arg-type]
    shape = PassShape.chain(context=np.array([100, 700, 30]), new=np.array([3, 5, 1]))
    one = dep.pass_cost(shape)
    sums = dep.aggregates_cost(
        batch=3, tokens=shape.tokens, context_tokens=830, pairs=float(shape.pairs().sum())
    )
    assert float(sums.time_s) == pytest.approx(one.time_s, rel=1e-12)
    assert float(sums.weight_bytes) == pytest.approx(one.weight_bytes, rel=1e-12)
    # Plain floats (the simulator's fast path) give the same as arrays.
    arr = dep.aggregates_cost(
        batch=np.array([3.0]),
        tokens=np.array([9.0]),
        context_tokens=np.array([830.0]),
        pairs=np.array([float(shape.pairs().sum())]),
    )
    assert float(arr.time_s[0]) == pytest.approx(one.time_s, rel=1e-12)


def test_routed_experts_in_a_format_of_their_own() -> None:
    # gpt-oss ships its experts in MXFP4 and the rest in bf16 (gpt-oss README).
    m = load_model("gpt-oss-120b")
    h100 = load_hardware("h100-sxm")
    dep = Deployment(target=m, hardware=h100, expert_weights="mxfp4")
    routed = m.moe_layers * m.routed_expert_params
    rest = m.fixed_layer_params + m._norm_params + m.vocab * m.d_model
    for new in (1, 4):
        cost = dep.pass_cost(PassShape.chain(context=64, new=new))
        touched = experts_touched(new, experts=128, top_k=4)
        assert cost.weight_bytes == pytest.approx(rest * 2 + routed * touched * 17 / 32, rel=1e-12)
    fp = dep.pass_cost(PassShape.chain(context=0, new=1)).resident_bytes
    resident = (m.shape_params - 128 * routed) * 2 + 128 * routed * 17 / 32
    assert fp == pytest.approx(resident + m.kv_bytes_per_token(2.0), rel=1e-12)
    assert dep.describe()["expert_weights"] == "mxfp4"
    with pytest.raises(ValueError, match="'mxfp4' needs an MoE target; llama-2-7b has no experts"):
        Deployment(target="llama-2-7b", hardware=h100, expert_weights="mxfp4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expert_weights: unknown format 'fp3'"):
        Deployment(target=m, hardware=h100, expert_weights="fp3")


def test_expert_format_dequantization_covers_the_experts_a_token_multiplies() -> None:
    m = load_model("gpt-oss-120b")
    h100 = load_hardware("h100-sxm")
    shape = PassShape.chain(context=64, new=1)
    experts = Deployment(target=m, hardware=h100, expert_weights="mxfp4").pass_cost(shape)
    whole = Deployment(target=m, hardware=h100, weights="mxfp4").pass_cost(shape)
    plain = Deployment(target="gpt-oss-20b", hardware=h100).pass_cost(shape)  # type: ignore[arg-type]
    assert plain.dequant_time_s == 0.0 < experts.dequant_time_s < whole.dequant_time_s
    # Both dequantize per weight a token multiplies: all of decode_params, or its routed part.
    active_routed = m.moe_layers * 4 * m.routed_expert_params
    ratio = whole.dequant_time_s / experts.dequant_time_s
    assert ratio == pytest.approx(m.decode_params / active_routed, rel=1e-9)


def test_the_grid_and_v_gamma_agree_with_single_passes_under_ep() -> None:
    from specsim.cost import step_cost_grid

    model = load_model("deepseek-v3")
    grid = step_cost_grid(
        model,
        H200,
        batch=2,
        context=256,
        new_tokens=np.array([1, 4]),
        tensor_parallel=np.array([[8], [16]]),
        expert_parallel=8,
    )
    for i, tp in enumerate((8, 16)):
        for j, new in enumerate((1, 4)):
            one = step_cost(
                model,
                H200,
                batch=2,
                context=256,
                new_tokens=new,
                tensor_parallel=tp,
                expert_parallel=8,
            )
            assert grid.time_s[i, j] == pytest.approx(one.time_s, rel=1e-12)
    v = verification_factor(model, H200, 3, tensor_parallel=8, expert_parallel=8)
    kw = {"batch": 1, "context": 512, "tensor_parallel": 8, "expert_parallel": 8}
    want = (
        step_cost(model, H200, new_tokens=4, **kw).time_s
        / step_cost(model, H200, new_tokens=1, **kw).time_s
    )
    assert v == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="8 does not divide tensor_parallel = 4"):
        step_cost_grid(
            model,
            H200,
            batch=1,
            context=8,
            new_tokens=1,
            tensor_parallel=np.array([4, 8]),
            expert_parallel=8,
        )
