"""Weight and KV-cache formats (issue 14, section 2): bytes, dequantization, errors, capacity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import load_hardware, load_model
from specsim.cli import main
from specsim.cost import (
    WEIGHT_FORMATS,
    Deployment,
    Formats,
    pass_aggregates_cost,
    resolve_formats,
    step_cost,
    step_cost_grid,
    verification_factor,
)
from specsim.sim.costs.costs import CardCost

M7 = load_model("llama-2-7b")
A100 = load_hardware("a100-80gb")


def _cost(**kw: object):  # type: ignore[no-untyped-def]
    return step_cost(M7, A100, batch=1, context=128, new_tokens=1, dtype="float16", **kw)


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_7b_reads_about_a_quarter_of_fp16(group: int) -> None:
    # int4 stores 0.5 byte a weight plus a bf16 scale and zero point (4 bytes) per group, so
    # its weight bytes are (0.5 + 4 / g) / 2 of fp16's: a quarter plus 2 / g (the scales'
    # overhead: 6.25% of fp16 at g = 32, 1.6% at g = 128), exactly.
    fp16, int4 = _cost(), _cost(weights="int4", group_size=group)
    ratio = int4.weight_bytes / fp16.weight_bytes
    assert ratio == pytest.approx((0.5 + 4 / group) / 2, rel=1e-12)
    assert 0.25 < ratio <= 0.25 + 2 / group + 1e-12
    # The whole pass at batch 1 (KV cache and activations in fp16 as before) reads a little
    # more than that share: the KV cache of 128 tokens is 2% of fp16's bytes.
    total = int4.bytes / fp16.bytes
    assert ratio < total < ratio + 0.03
    assert int4.resident_bytes < 0.5 * fp16.resident_bytes


def test_block_formats_bytes_per_weight() -> None:
    # ggml's blocks (ggml/src/ggml-common.h): q8_0 34 B / 32, q4_0 18 B / 32, q4_K 144 B / 256.
    fp16 = _cost()
    for fmt, width in (("q8_0", 34 / 32), ("q4_0", 18 / 32), ("q4_K", 144 / 256)):
        c = _cost(weights=fmt)
        assert c.weight_bytes / fp16.weight_bytes == pytest.approx(width / 2, rel=1e-12)
        assert c.weight_format == fmt
    # int8 per channel: one bf16 scale per output channel of d_model inputs.
    assert resolve_formats(M7, "float16", weights="int8").weights == 1 + 2 / 4096


@pytest.mark.parametrize("fmt", ["int8", "int4", "q8_0", "q4_0", "q4_K", "fp8"])
def test_quantized_weights_make_verification_cost_more_than_one_pass(fmt: str) -> None:
    # Weight-only formats dequantize per row: v(4) well above 1 at batch 1, where the same
    # pass in fp16 costs almost exactly one decode step.
    v_fp16 = verification_factor(M7, A100, 4, batch=1, context=128, dtype="float16")
    v_q = verification_factor(M7, A100, 4, batch=1, context=128, dtype="float16", weights=fmt)
    assert v_fp16 < 1.01
    assert v_q > 1.3
    # Monotone in gamma and bounded by gamma + 1.
    vs = verification_factor(M7, A100, np.arange(8), batch=1, context=128, weights=fmt)
    assert np.all(np.diff(vs) > 0) and vs[0] == 1.0 and np.all(vs <= np.arange(8) + 1)


def test_native_formats_pay_no_dequantization() -> None:
    h100 = load_hardware("h100-sxm")
    fp8 = step_cost(M7, h100, batch=1, context=128, new_tokens=5, dtype="float8", weights="fp8")
    assert fp8.dequant_time_s == 0.0
    w8a8 = step_cost(M7, h100, batch=1, context=128, new_tokens=5, dtype="int8", weights="int8")
    assert w8a8.dequant_time_s == 0.0
    assert _cost(weights="fp16").dequant_time_s == 0.0


def test_dequantization_grows_per_row_then_per_tile() -> None:
    t = [_cost(weights="int4").dequant_time_s]
    for n in (2, 16, 32):
        c = step_cost(M7, A100, batch=1, context=128, new_tokens=n, weights="int4")
        t.append(c.dequant_time_s)
    assert t[1] == pytest.approx(2 * t[0]) and t[2] == pytest.approx(16 * t[0])
    assert t[3] == pytest.approx(17 * t[0])  # 16 rows, then one tile's worth per 16 more


def test_defaults_reproduce_the_single_dtype_model() -> None:
    base = _cost()
    same = _cost(weights="float16", kv="fp16")
    assert dataclasses.replace(same, weight_format="", kv_format="") == dataclasses.replace(
        base, weight_format="", kv_format=""
    )
    assert base.dequant_time_s == 0.0 and base.weight_format == "float16"
    assert resolve_formats(M7, None) is Formats.of(M7.dtype)


def test_grid_and_aggregates_take_the_formats() -> None:
    grid = step_cost_grid(
        M7, A100, batch=[1, 4], context=128, new_tokens=5, weights="int4", group_size=32, kv="fp8"
    )
    one = step_cost(
        M7, A100, batch=4, context=128, new_tokens=5, weights="int4", group_size=32, kv="fp8"
    )
    assert grid.time_s[1] == pytest.approx(one.time_s, rel=1e-12)
    assert grid.weight_format == "int4" and grid.kv_format == "float8"
    terms = pass_aggregates_cost(
        M7,
        A100,
        batch=4,
        tokens=20,
        context_tokens=512,
        pairs=4 * (5 * 128 + 15),
        weights="int4",
        group_size=32,
        kv="fp8",
    )
    assert terms.time_s == pytest.approx(one.time_s, rel=1e-12)


def test_kv_format_halves_kv_bytes_and_doubles_capacity() -> None:
    fp16 = CardCost(deployment=Deployment(target=M7, hardware=A100, dtype="float16"), draft=None)
    fp8 = CardCost(
        deployment=Deployment(target=M7, hardware=A100, dtype="float16", kv="fp8"), draft=None
    )
    assert fp8.kv_bytes_per_token() == fp16.kv_bytes_per_token() / 2
    assert fp8.kv_capacity_tokens() in (
        2 * fp16.kv_capacity_tokens(),
        2 * fp16.kv_capacity_tokens() + 1,
    )
    int4 = CardCost(deployment=Deployment(target=M7, hardware=A100, weights="int4"), draft=None)
    assert int4.kv_capacity_tokens() > fp16.kv_capacity_tokens()
    assert int4.footprints()[0].weights_bytes < 0.3 * fp16.footprints()[0].weights_bytes


def test_card_cost_prices_quantized_passes_like_step_cost() -> None:
    draft = load_model("llama-68m")
    src = CardCost(
        deployment=Deployment(target=M7, hardware=A100, weights="int4", group_size=32),
        draft=draft,
        draft_deployment=Deployment(target=draft, hardware=A100, weights="int8"),
    )
    ctx = np.array([100, 200])
    got = src.verify(np.array([4, 4]), ctx).time_s
    want = step_cost(M7, A100, batch=2, context=ctx, new_tokens=4, weights="int4", group_size=32)
    assert got == pytest.approx(want.time_s, rel=1e-12)
    it = src.uniform_iteration(batch=2, context_sum=300, gamma=3)
    assert it.time_s > want.time_s
    d = step_cost(draft, A100, batch=1, context=100, new_tokens=1, weights="int8")
    assert src.draft_step(np.array([100])).time_s == pytest.approx(d.time_s, rel=1e-12)


def test_bad_formats_are_named() -> None:
    with pytest.raises(ValueError, match=r"weights: unknown format 'int3'"):
        _cost(weights="int3")
    with pytest.raises(ValueError, match=r"kv: unknown format 'q4_0'"):
        _cost(kv="q4_0")
    with pytest.raises(ValueError, match=r"group_size: group size 48 .*'int4'.*d_model=4096"):
        _cost(weights="int4", group_size=48)
    with pytest.raises(ValueError, match=r"group_size: .*'float16' has no group size"):
        _cost(group_size=32)
    with pytest.raises(ValueError, match=r"group_size: .*fixed blocks of 32"):
        _cost(weights="q4_0", group_size=64)
    with pytest.raises(ValueError, match=r"group_size: expected an integer >= 1, got 0"):
        _cost(weights="int4", group_size=0)
    qwen = load_model("qwen2.5-0.5b")  # d_model 896 is not a multiple of q4_K's 256
    with pytest.raises(ValueError, match=r"block length 256 of weight format 'q4_K'.*d_model=896"):
        step_cost(qwen, A100, batch=1, context=8, new_tokens=1, weights="q4_K")
    with pytest.raises(ValueError, match="weights: unknown format"):
        CardCost(deployment=Deployment(target=M7, hardware=A100, weights="nf4"), draft=None)


def test_every_format_cites_its_source() -> None:
    for name, spec in WEIGHT_FORMATS.items():
        assert spec.name == name and spec.source


def test_cli_cost_formats(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "cost",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80gb",
        "--weights",
        "int4",
        "--group-size",
        "32",
        "--kv",
        "fp16",
        "--new-tokens",
        "5",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "weights int4 (group 32), KV cache float16" in out
    assert "dequantize" in out
    assert main([*argv[:5], "--weights", "int3"]) != 0
    assert "weights: unknown format 'int3'" in capsys.readouterr().err


# A stack's own numbers for a format (runtime profile, issue 14) ----------------------------


def _profile(**tables: dict[str, float]):  # type: ignore[no-untyped-def]
    from specsim.cards import profile_of_card

    return dataclasses.replace(profile_of_card(A100), slug="stack", **tables)


def test_a_profile_without_format_tables_prices_every_format_as_before() -> None:
    plain = _profile()
    for fmt in ("float16", "int8", "int4", "q4_K"):
        for n in (1, 4, 32):
            a = step_cost(M7, A100, batch=1, context=128, new_tokens=n, weights=fmt)
            b = step_cost(M7, A100, batch=1, context=128, new_tokens=n, weights=fmt, runtime=plain)
            assert b.time_s == pytest.approx(a.time_s, rel=1e-12)
    # a table for one format leaves every other format's price exactly as it was
    other = _profile(format_dequant_ops={"int4": 0.0}, format_compute_factor={"int4": 3.0})
    for fmt in ("float16", "int8"):
        a = step_cost(M7, A100, batch=4, context=128, new_tokens=8, weights=fmt, runtime=plain)
        b = step_cost(M7, A100, batch=4, context=128, new_tokens=8, weights=fmt, runtime=other)
        assert b.time_s == a.time_s


def test_profile_dequant_ops_replace_the_formats_default() -> None:
    """Known answer: the dequantization time is linear in the operations per weight, so a
    stack's 10x the default costs 10x; 0 removes it."""
    default = WEIGHT_FORMATS["int4"].dequant_ops
    base = step_cost(
        M7, A100, batch=1, context=128, new_tokens=4, weights="int4", runtime=_profile()
    )
    slow = step_cost(
        M7,
        A100,
        batch=1,
        context=128,
        new_tokens=4,
        weights="int4",
        runtime=_profile(format_dequant_ops={"int4": 10 * default}),
    )
    none = step_cost(
        M7,
        A100,
        batch=1,
        context=128,
        new_tokens=4,
        weights="int4",
        runtime=_profile(format_dequant_ops={"int4": 0.0}),
    )
    assert base.dequant_time_s > 0
    assert slow.dequant_time_s == pytest.approx(10 * base.dequant_time_s, rel=1e-12)
    assert none.dequant_time_s == 0.0
    assert slow.time_s - base.time_s == pytest.approx(9 * base.dequant_time_s, rel=1e-9)


def test_profile_compute_factor_speeds_the_compute_bound_pass_only() -> None:
    """A compute-bound pass (batch 64, 8 rows each) with a factor f on the compute fraction:
    its dense and head time divides by f; a memory-bound one-row pass does not move."""
    kw = dict(batch=64, context=128, new_tokens=8, weights="int8")
    plain, fast = _profile(), _profile(format_compute_factor={"int8": 2.0})
    a = step_cost(M7, A100, runtime=plain, **kw)  # type: ignore[arg-type]
    b = step_cost(M7, A100, runtime=fast, **kw)  # type: ignore[arg-type]
    assert b.time_s < a.time_s
    one = dict(batch=1, context=128, new_tokens=1, weights="int8")
    assert (
        step_cost(M7, A100, runtime=fast, **one).time_s  # type: ignore[arg-type]
        == step_cost(M7, A100, runtime=plain, **one).time_s
    )  # type: ignore[arg-type]
