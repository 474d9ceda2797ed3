"""The roofline cost model: known answers, invariants, input checks, derived quantities."""

from __future__ import annotations

import dataclasses
import doctest
import importlib

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

import specsim.cost
from specsim.cards import HardwareCard, ModelCard, load_hardware, load_model
from specsim.cost import (
    Deployment,
    Formats,
    cost_coefficient,
    cost_coefficient_frame,
    ops_coefficient,
    pass_aggregates_cost,
    pass_flops,
    ridge_tokens,
    roofline,
    step_cost,
    step_cost_grid,
    time_energy,
    verification_factor,
    verification_frame,
)
from specsim.plots.cost import plot_cost_coefficient, plot_verification_factor


@pytest.fixture(scope="module")
def m7() -> ModelCard:
    return load_model("llama-2-7b")


@pytest.fixture(scope="module")
def a100() -> HardwareCard:
    return load_hardware("a100-80gb")


@pytest.fixture(scope="module")
def ideal(a100: HardwareCard) -> HardwareCard:
    """An A100 with no overheads and full efficiency: the bare roofline."""
    return dataclasses.replace(
        a100,
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        layer_overhead_s=0.0,
        pass_overhead_s=0.0,
    )


def _attn_pairs(ctx: np.ndarray, new: np.ndarray) -> float:
    return float((new * ctx + new * (new + 1) / 2).sum())


# Known answers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("batch", "context", "new"), [(1, 0, 1), (1, 512, 1), (4, 100, 8), (3, [5, 50, 500], [1, 2, 3])]
)
def test_flops_are_two_per_weight_per_token_plus_causal_attention(
    m7: ModelCard, a100: HardwareCard, batch: int, context: ArrayLike, new: ArrayLike
) -> None:
    cost = step_cost(m7, a100, batch=batch, context=context, new_tokens=new)
    ctx = np.broadcast_to(np.asarray(context, float), (batch,))
    n = np.broadcast_to(np.asarray(new, float), (batch,))
    attn = 4 * m7.layers * m7.head_dim * m7.heads * _attn_pairs(ctx, n)
    assert cost.flops == pytest.approx(2 * m7.decode_params * n.sum() + attn, rel=1e-12)
    assert cost.tokens == n.sum()


def test_bytes_weights_once_kv_per_sequence(m7: ModelCard, a100: HardwareCard) -> None:
    for batch in (1, 8):
        cost = step_cost(m7, a100, batch=batch, context=300, new_tokens=4)
        assert cost.weight_bytes == pytest.approx(m7.decode_params * 2, rel=1e-12)
        kv_token = m7.kv_bytes_per_token(2.0)
        assert cost.kv_bytes == pytest.approx(kv_token * batch * (300 + 4 + 4), rel=1e-12)
        assert cost.bytes == pytest.approx(
            cost.weight_bytes + cost.kv_bytes + cost.activation_bytes, rel=1e-12
        )
        # Each GEMM reads its input and writes its output once (gated MLP: gate and up out),
        # attention reads q and writes its output; the head reads h, writes logits, plus the
        # embedding gather.
        d, q, f = m7.d_model, m7.q_dim, m7.d_ff
        per_token = m7.layers * (4 * d + 2 * q + 3 * f + 2 * q) + 2 * d + m7.vocab
        assert cost.activation_bytes == pytest.approx(per_token * 2.0 * batch * 4, rel=1e-12)


def test_batch_one_decode_is_pure_memory_time_on_the_bare_roofline(
    m7: ModelCard, ideal: HardwareCard
) -> None:
    cost = step_cost(m7, ideal, batch=1, context=128, new_tokens=1)
    assert cost.bound == "memory"
    assert cost.time_s == pytest.approx(cost.bytes / ideal.mem_bandwidth, rel=1e-12)
    assert cost.overhead_time_s == 0 and cost.allreduce_time_s == 0


def test_large_batches_are_compute_bound(m7: ModelCard, ideal: HardwareCard) -> None:
    cost = step_cost(m7, ideal, batch=64, context=16, new_tokens=8)
    assert cost.bound == "compute"
    assert cost.time_s >= cost.compute_time_s >= cost.memory_time_s
    assert cost.compute_time_s == pytest.approx(cost.flops / ideal.peak("float16"), rel=1e-12)


def test_overheads_add_per_layer_and_per_pass(m7: ModelCard, a100: HardwareCard) -> None:
    cost = step_cost(m7, a100, batch=1, context=10, new_tokens=1)
    assert cost.overhead_time_s == pytest.approx(
        m7.layers * a100.layer_overhead_s + a100.pass_overhead_s
    )
    assert cost.time_s == pytest.approx(cost.roofline_time_s + cost.overhead_time_s)


def test_ridge_tokens_known_answer(a100: HardwareCard) -> None:
    expected = 2 * 312e12 * a100.compute_efficiency / (2 * 2.039e12 * a100.memory_efficiency)
    assert ridge_tokens(a100, "bfloat16") == pytest.approx(expected)
    assert ridge_tokens(a100, "int8") == pytest.approx(expected)  # 2x peak, half the bytes


# Invariants -------------------------------------------------------------------------------
def test_homogeneous_step_cost_equals_the_grid_element(m7: ModelCard, a100: HardwareCard) -> None:
    grid = step_cost_grid(
        m7, a100, batch=[[1], [6]], context=[0, 77, 900], new_tokens=3, tensor_parallel=[[1], [2]]
    )
    assert grid.time_s.shape == (2, 3)
    for i, (b, tp) in enumerate(((1, 1), (6, 2))):
        for j, c in enumerate((0, 77, 900)):
            one = step_cost(m7, a100, batch=b, context=c, new_tokens=3, tensor_parallel=tp)
            for name in ("time_s", "flops", "bytes", "energy_j", "kv_bytes", "allreduce_time_s"):
                assert getattr(grid, name)[i, j] == pytest.approx(getattr(one, name), rel=1e-12)
            assert grid.bound[i, j] == one.bound


def test_flops_and_kv_are_additive_over_sequences(m7: ModelCard, a100: HardwareCard) -> None:
    both = step_cost(m7, a100, batch=2, context=[40, 900], new_tokens=[5, 2])
    first = step_cost(m7, a100, batch=1, context=40, new_tokens=5)
    second = step_cost(m7, a100, batch=1, context=900, new_tokens=2)
    assert both.flops == pytest.approx(first.flops + second.flops, rel=1e-12)
    assert both.kv_bytes == pytest.approx(first.kv_bytes + second.kv_bytes, rel=1e-12)
    assert both.weight_bytes == pytest.approx(first.weight_bytes, rel=1e-12)
    assert max(first.time_s, second.time_s) < both.time_s < first.time_s + second.time_s


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 32),
    context=st.integers(0, 2000),
    new=st.integers(1, 16),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_time_grows_with_batch_context_and_new_tokens(
    batch: int, context: int, new: int, tp: int
) -> None:
    m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    base = step_cost(m, hw, batch=batch, context=context, new_tokens=new, tensor_parallel=tp)
    for kw in ({"batch": batch + 1}, {"context": context + 64}, {"new_tokens": new + 1}):
        args = {"batch": batch, "context": context, "new_tokens": new, **kw}
        more = step_cost(m, hw, tensor_parallel=tp, **args)  # type: ignore[arg-type]
        assert more.time_s > base.time_s and more.flops > base.flops and more.bytes > base.bytes
    assert hw.idle_power_w * base.time_s * tp * (1 - 1e-12) <= base.energy_j  # rounding: 1e-12
    assert base.energy_j <= hw.max_power_w * base.time_s * tp * (1 + 1e-12)


def test_tensor_parallel_splits_work_and_adds_all_reduces(
    m7: ModelCard, a100: HardwareCard
) -> None:
    one = step_cost(m7, a100, batch=1, context=100, new_tokens=1)
    two = step_cost(m7, a100, batch=1, context=100, new_tokens=1, tensor_parallel=2)
    assert two.flops == pytest.approx(one.flops, rel=1e-12)  # same work, split
    msg = m7.d_model * 2.0
    per_ar = 2 * (2 - 1) / 2 * msg / a100.interconnect_bandwidth + a100.interconnect_latency_s
    assert two.allreduce_time_s == pytest.approx(2 * m7.layers * per_ar)
    assert two.roofline_time_s == pytest.approx(one.roofline_time_s / 2, rel=0.02)
    assert two.resident_bytes < 0.51 * one.resident_bytes
    # Eight KV heads over 16 devices are replicated, not split below one head.
    m70 = load_model("llama-2-70b")
    kv = [
        step_cost(m70, a100, batch=1, context=1000, new_tokens=1, tensor_parallel=t).kv_bytes
        for t in (8, 16)
    ]
    assert kv[1] == pytest.approx(2 * kv[0], rel=1e-12)


def test_energy_per_operation_model_when_the_card_has_it(m7: ModelCard, a100: HardwareCard) -> None:
    hw = dataclasses.replace(a100, energy_per_flop_j=1e-12, energy_per_byte_j=1e-11)
    cost = step_cost(m7, hw, batch=2, context=50, new_tokens=3, tensor_parallel=2)
    expected = 2 * hw.idle_power_w * cost.time_s + 1e-12 * cost.flops + 1e-11 * cost.bytes
    assert cost.energy_j == pytest.approx(expected, rel=1e-12)


def test_t5_decoder_reads_the_cross_attention_cache() -> None:
    xxl, tpu = load_model("t5-xxl"), load_hardware("tpu-v4")
    short = step_cost(xxl, tpu, batch=1, context=10, new_tokens=1, encoder_length=64)
    long = step_cost(xxl, tpu, batch=1, context=10, new_tokens=1, encoder_length=1024)
    cross_kv = xxl.layers * 2 * xxl.kv_dim * 2.0 * (1024 - 64)
    assert long.kv_bytes - short.kv_bytes == pytest.approx(cross_kv, rel=1e-12)
    assert long.flops - short.flops == pytest.approx(
        4 * xxl.layers * xxl.head_dim * xxl.heads * (1024 - 64), rel=1e-12
    )


@settings(max_examples=60, deadline=None)
@given(
    T=st.floats(1.0, 1e5),
    S=st.floats(0.0, 1e10),
    R=st.floats(0.0, 1e8),
    tp=st.sampled_from([1, 2, 8]),
    per_op_energy=st.booleans(),
)
def test_one_pass_on_floats_equals_the_array_evaluation(
    m7: ModelCard, a100: HardwareCard, T: float, S: float, R: float, tp: int, per_op_energy: bool
) -> None:
    # time_energy takes a float fast path for single passes; it must match the numpy path.
    hw = a100
    if per_op_energy:
        hw = dataclasses.replace(a100, energy_per_flop_j=1e-12, energy_per_byte_j=1e-11)
    co = roofline(m7, hw, Formats.of("float16"), float(tp))
    one = time_energy(co, T, S, R)
    many = time_energy(co, np.array([T, 7.0]), np.array([S, 0.0]), np.array([R, 3.0]))
    for x, y in zip(one, many, strict=True):
        assert type(x) is float
        assert x == pytest.approx(float(y[0]), rel=1e-14)


# Errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"context": -1}, "context: expected finite integer"),
        ({"new_tokens": 1.5}, "new_tokens: expected finite integer.*1.5"),
        ({"new_tokens": 0}, "new_tokens"),
        ({"batch": 0}, "batch"),
        ({"context": float("nan")}, "context"),
        ({"batch": 2, "context": [1, 2, 3]}, "context: expected a scalar or an array of length"),
        ({"dtype": "float64"}, "dtype: unknown dtype 'float64'"),
        ({"tensor_parallel": 0}, "tensor_parallel"),
        ({"encoder_length": 64}, "encoder_length: model 'llama-2-7b' is decoder-only"),
    ],
)
def test_bad_inputs_raise_naming_the_parameter(
    m7: ModelCard, a100: HardwareCard, kwargs: dict[str, object], fragment: str
) -> None:
    args: dict[str, object] = {"batch": 1, "context": 10, "new_tokens": 1, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        step_cost(m7, a100, **args)  # type: ignore[arg-type]


def test_bool_and_string_inputs_are_type_errors(m7: ModelCard, a100: HardwareCard) -> None:
    with pytest.raises(TypeError, match="batch"):
        step_cost(m7, a100, batch=True, context=1, new_tokens=1)
    with pytest.raises(TypeError, match="context"):
        step_cost_grid(m7, a100, batch=1, context="12", new_tokens=1)


def test_a_model_that_does_not_fit_names_the_sizes(m7: ModelCard, a100: HardwareCard) -> None:
    with pytest.raises(
        ValueError, match=r"llama-2-70b.*weights 137\.95 GB per device.*> memory 80\.00 GB"
    ):
        step_cost(load_model("llama-2-70b"), a100, batch=1, context=10, new_tokens=1)
    with pytest.raises(ValueError, match=r"KV cache \d+\.\d\d GB for batch 256"):
        step_cost(m7, a100, batch=256, context=1000, new_tokens=1)
    grid = step_cost_grid(m7, a100, batch=[1, 256], context=1000, new_tokens=1, check_memory=False)
    assert grid.fits.tolist() == [True, False]
    with pytest.raises(ValueError, match=r"element \(1,\) of 1 that do not fit"):
        step_cost_grid(m7, a100, batch=[1, 256], context=1000, new_tokens=1)
    with pytest.raises(ValueError, match="do not broadcast"):
        step_cost_grid(m7, a100, batch=[1, 2], context=[1, 2, 3], new_tokens=1)


def test_dtype_the_accelerator_lacks(m7: ModelCard) -> None:
    with pytest.raises(ValueError, match="tpu-v4.*float16"):
        step_cost(m7, load_hardware("tpu-v4"), batch=1, context=1, new_tokens=1)


# Derived quantities -----------------------------------------------------------------------
def test_verification_factor_near_one_at_batch_one(m7: ModelCard, a100: HardwareCard) -> None:
    v = verification_factor(m7, a100, np.arange(8), batch=1, context=512, dtype="bfloat16")
    assert isinstance(v, np.ndarray) and v.shape == (8,)
    assert v[0] == pytest.approx(1.0)
    assert np.all(np.diff(v) > 0) and v[-1] < 1.1


def test_verification_factor_rises_towards_gamma_plus_one_past_the_ridge(
    m7: ModelCard, a100: HardwareCard
) -> None:
    ridge = ridge_tokens(a100, "bfloat16")
    batches = 2 ** np.arange(0, 10)
    for gamma in (1, 3, 7):
        v = np.asarray(
            verification_factor(m7, a100, gamma, batch=batches, context=128, dtype="bfloat16")
        )
        tokens = batches * (gamma + 1)
        assert np.all(np.diff(v) >= 0) and np.all(v <= gamma + 1)
        assert np.all(v[tokens <= ridge / 2] < 1.1)  # memory-bound: weights read once either way
        far = tokens >= 8 * ridge
        assert far.any() and np.all(v[far] > 0.6 * (gamma + 1))  # compute-bound: ~ gamma + 1


def test_small_draft_pays_overheads_far_above_its_parameter_ratio(
    m7: ModelCard, a100: HardwareCard
) -> None:
    m68 = load_model("llama-68m")
    c = cost_coefficient(
        m68, Deployment(target=m7, hardware=a100, dtype="bfloat16"), batch=1, context=128
    )
    ratio = m68.params / m7.params
    assert isinstance(c, float) and c > 3 * ratio
    # Without per-layer and per-pass overheads c falls back to about the ratio of bytes read.
    bare = dataclasses.replace(a100, layer_overhead_s=0.0, pass_overhead_s=0.0)
    c_bare = cost_coefficient(
        m68, Deployment(target=m7, hardware=bare, dtype="bfloat16"), batch=1, context=128
    )
    assert ratio * 0.5 < c_bare < ratio * 1.2 < c
    # The operations coefficient ignores the hardware: about the decode-parameter ratio.
    c_hat = ops_coefficient(m68, m7, context=128)
    assert c_hat == pytest.approx(m68.decode_params / m7.decode_params, rel=0.05)


def test_cost_coefficient_vectorises_and_takes_a_draft_deployment(
    m7: ModelCard, a100: HardwareCard
) -> None:
    m68 = load_model("llama-68m")
    c = cost_coefficient(
        m68, Deployment(target=m7, hardware=a100), batch=[1, 4, 16], context=[[128], [2000]]
    )
    assert isinstance(c, np.ndarray) and c.shape == (2, 3)
    # llama-68m has 2048 positions: a c past them is refused unless asked for by name.
    with pytest.raises(
        ValueError,
        match=r"^context: 4096 \+ 1 new tokens exceeds llama-68m's "
        r"max_position 2048$",
    ):
        cost_coefficient(m68, Deployment(target=m7, hardware=a100), context=4096)
    assert (
        cost_coefficient(
            m68, Deployment(target=m7, hardware=a100), context=4096, check_positions=False
        )
        > 0
    )
    slow = Deployment(target=m68, hardware="rtx-3090", draft_placement="own-device")
    dep = Deployment(target=m7, hardware=a100)
    assert cost_coefficient(m68, dep, draft_deployment=slow) > cost_coefficient(m68, dep)


def test_pass_flops_matches_step_cost(m7: ModelCard, a100: HardwareCard) -> None:
    got = np.asarray(pass_flops(m7, batch=[1, 3], context=64, new_tokens=4))
    for i, b in enumerate((1, 3)):
        assert got[i] == pytest.approx(
            step_cost(m7, a100, batch=b, context=64, new_tokens=4).flops, rel=1e-12
        )


def test_a_hundred_thousand_configurations_in_one_call(m7: ModelCard, a100: HardwareCard) -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    grid = step_cost_grid(
        m7,
        a100,
        batch=rng.integers(1, 64, n),
        context=rng.integers(0, 4096 - 8, n),  # the last new token within max_position 4096
        new_tokens=rng.integers(1, 9, n),
        check_memory=False,
    )
    assert grid.time_s.shape == (n,) and np.all(np.isfinite(grid.time_s))
    assert np.all(grid.time_s >= np.maximum(grid.compute_time_s, grid.memory_time_s))


def test_derived_quantities_are_importable_from_cost() -> None:
    assert specsim.cost.cost_coefficient is cost_coefficient
    assert specsim.cost.verification_factor is verification_factor
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        specsim.cost.nothing  # noqa: B018


def test_pass_aggregates_cost_equals_step_cost(m7: ModelCard, a100: HardwareCard) -> None:
    ctx, new = np.array([30.0, 700.0, 5.0]), np.array([4.0, 1.0, 2.0])
    one = step_cost(m7, a100, batch=3, context=ctx, new_tokens=new, tensor_parallel=2)
    agg = pass_aggregates_cost(
        m7,
        a100,
        batch=3,
        tokens=new.sum(),
        context_tokens=ctx.sum(),
        pairs=(new * ctx + new * (new + 1) / 2).sum(),
        tensor_parallel=2,
        dtype="float16",
    )
    for name in ("time_s", "flops", "bytes", "energy_j", "kv_bytes"):
        assert float(agg[name]) == pytest.approx(getattr(one, name), rel=1e-12)


# Tables and figures -----------------------------------------------------------------------
def test_frames_and_figures(m7: ModelCard, a100: HardwareCard) -> None:
    dep = Deployment(target=m7, hardware=a100)
    df = verification_frame(dep, gammas=(1, 7), batches=(1, 8, 64, 512), context=256)
    assert set(df.gamma) == {1, 7} and (df.tokens == df.batch * (df.gamma + 1)).all()
    assert df.attrs["dropped_not_fitting"] == 2  # batch 512 at context 256 exceeds 80 GB
    fig = plot_verification_factor(df)
    assert isinstance(fig, Figure) and fig.axes[0].get_xscale() == "log"
    drafts = [load_model("llama-68m"), load_model("llama-160m")]
    cf = cost_coefficient_frame(
        drafts, Deployment(target=m7, hardware=a100), batches=(1, 16), contexts=(128, 1024)
    )
    assert len(cf) == 8 and (cf.c > cf.param_ratio).all()
    assert isinstance(plot_cost_coefficient(cf), Figure)
    with pytest.raises(ValueError, match="lacks column"):
        plot_verification_factor(pd.DataFrame({"gamma": [1]}))
    with pytest.raises(TypeError, match="DataFrame"):
        plot_cost_coefficient([1, 2])  # type: ignore[arg-type, unused-ignore]


@pytest.mark.parametrize(
    "name", ["specsim.cards", "specsim.cost", "specsim.cost.model", "specsim.cost.frames"]
)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
