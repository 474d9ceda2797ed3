"""Runtime profiles (issue 14, section 1): cards, defaults, anchors, bad input."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from specsim.cards import (
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_LAYER_OVERHEAD_S,
    DEFAULT_MEMORY_EFFICIENCY,
    DEFAULT_PASS_OVERHEAD_S,
    list_hardware,
    list_runtimes,
    load_hardware,
    load_model,
    load_runtime,
    profile_of_card,
    write_hardware_card,
)
from specsim.cli import main
from specsim.cost import Deployment, step_cost, verification_factor
from specsim.sim.costs.costs import CardCost

ROOT = Path(__file__).resolve().parents[2]
STACK = ("compute_efficiency", "memory_efficiency", "layer_overhead_s", "pass_overhead_s")
M7 = load_model("llama-2-7b")


def test_shipped_profiles_load_and_cite_sources() -> None:
    slugs = {r.slug for r in list_runtimes()}
    assert {
        "gpt-fast",
        "pytorch-eager-a100",
        "llama-cpp-rtx3090",
        "t5x-tpu-v4",
        "cpu-eager-pytorch",
        "vllm-h100",
    } <= slugs
    for path in sorted((ROOT / "models" / "runtime").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        assert "[sources]" in text
        for line in text.split("[sources]")[0].splitlines():
            # every number carries its source or how it was fitted, on its line
            if re.match(r"^[a-z_]+ = [0-9.e+-]+\s*(#|$)", line):
                assert "#" in line, f"{path.name}: {line!r} has no source comment"


def test_hardware_cards_carry_no_stack_numbers() -> None:
    for path in sorted((ROOT / "models" / "hardware").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        for key in STACK:
            assert not re.search(rf"^{key}\s*=", text, re.M), f"{path.name} sets {key}"
        assert re.search(r'^runtime = "', text, re.M), f"{path.name} names no runtime"
    for hw in list_hardware():
        if hw.runtime is None:  # the calibrated card: its own fitted numbers (deprecated path)
            assert hw.calibration is not None
            continue
        prof = load_runtime(hw.runtime)
        assert all(getattr(hw, k) == getattr(prof, k) for k in STACK), hw.slug


def test_defaults_reproduce_todays_numbers() -> None:
    a100 = load_hardware("a100-80gb")
    defaults = (
        DEFAULT_COMPUTE_EFFICIENCY,
        DEFAULT_MEMORY_EFFICIENCY,
        DEFAULT_LAYER_OVERHEAD_S,
        DEFAULT_PASS_OVERHEAD_S,
    )
    assert tuple(getattr(a100, k) for k in STACK) == defaults
    for slug, profile in (
        ("a100-80gb", "gpt-fast"),
        ("h100-sxm", "gpt-fast"),
        ("tpu-v4", "t5x-tpu-v4"),
    ):
        hw = load_hardware(slug)
        model = load_model("t5-small") if slug == "tpu-v4" else M7
        kw = {"batch": 4, "context": 200, "new_tokens": 5}
        assert step_cost(model, hw, **kw) == step_cost(model, hw, runtime=profile, **kw)
    tpu = load_hardware("tpu-v4")
    assert (tpu.compute_efficiency, tpu.layer_overhead_s, tpu.pass_overhead_s) == (
        0.462,
        1.75e-05,
        9e-06,
    )


@pytest.mark.parametrize(
    ("profile", "hardware", "weights", "context", "rate"),
    [
        ("pytorch-eager-a100", "a100-80gb", None, 105, 25.5),
        ("llama-cpp-rtx3090", "rtx-3090", None, 64, 48.52),
        ("llama-cpp-rtx3090", "rtx-3090", "q4_0", 64, 121.82),
    ],
)
def test_profiles_reproduce_the_rates_they_were_fitted_on(
    profile: str, hardware: str, weights: str | None, context: int, rate: float
) -> None:
    dtype = "float16" if profile.startswith("llama") else "bfloat16"
    cost = step_cost(
        M7,
        hardware,
        batch=1,
        context=context,
        new_tokens=1,
        dtype=dtype,
        weights=weights,
        runtime=profile,
    )
    assert 1 / cost.time_s == pytest.approx(rate, rel=0.002)


def test_eager_host_cost_makes_a_small_draft_expensive() -> None:
    # Per-layer host cost does not shrink with the model: c of a 68M draft is several times
    # larger under eager PyTorch than under compiled decoding.
    a100, d = load_hardware("a100-80gb"), load_model("llama-68m")
    kw = {"batch": 1, "context": 128, "new_tokens": 1}

    def c(rt: str | None) -> float:
        return (
            step_cost(d, a100, runtime=rt, **kw).time_s
            / step_cost(M7, a100, runtime=rt, **kw).time_s
        )

    assert c("pytorch-eager-a100") > c(None)
    v = verification_factor(M7, a100, 4, batch=1, context=128, runtime="pytorch-eager-a100")
    assert 1.0 < v < 1.01  # the host cost is the same for 5 rows as for one


def test_calibrated_cpu_card_and_its_profile_agree() -> None:
    cpu = load_hardware("cpu-epyc-2vcpu")
    prof = load_runtime("cpu-eager-pytorch")
    assert all(getattr(cpu, k) == getattr(prof, k) for k in STACK)
    m = load_model("llama-160m")
    kw = {"batch": 2, "context": 64, "new_tokens": 3}
    assert step_cost(m, cpu, **kw) == step_cost(m, cpu, runtime=prof, **kw)
    assert profile_of_card(cpu).fitted_on == "cpu-epyc-2vcpu"


def test_sampling_cost_is_per_new_token() -> None:
    prof = dataclasses.replace(load_runtime("gpt-fast"), sampling_s_per_token=1e-4)
    a100 = load_hardware("a100-80gb")
    base = step_cost(M7, a100, batch=2, context=64, new_tokens=3)
    more = step_cost(M7, a100, batch=2, context=64, new_tokens=3, runtime=prof)
    assert more.time_s - base.time_s == pytest.approx(6e-4, rel=1e-9)
    assert more.overhead_time_s - base.overhead_time_s == pytest.approx(6e-4, rel=1e-9)


def test_card_cost_takes_a_runtime() -> None:
    a100, d = load_hardware("a100-80gb"), load_model("llama-68m")
    src = CardCost(
        deployment=Deployment(target=M7, hardware=a100, runtime="pytorch-eager-a100"), draft=d
    )
    ctx = np.array([100])
    want = step_cost(M7, a100, batch=1, context=100, new_tokens=4, runtime="pytorch-eager-a100")
    assert src.verify(np.array([4]), ctx).time_s == pytest.approx(want.time_s, rel=1e-12)
    dra = step_cost(d, a100, batch=1, context=100, new_tokens=1, runtime="pytorch-eager-a100")
    assert src.draft_step(ctx).time_s == pytest.approx(dra.time_s, rel=1e-12)
    it = src.uniform_iteration(batch=1, context_sum=100, gamma=3)
    assert it.time_s > want.time_s + 3 * dra.time_s * 0.99


def test_bad_profiles_are_named(tmp_path: Path) -> None:
    a100 = load_hardware("a100-80gb")
    kw = {"batch": 1, "context": 8, "new_tokens": 1}
    with pytest.raises(ValueError, match=r"runtime: no runtime card 'vllm-a100'"):
        step_cost(M7, a100, runtime="vllm-a100", **kw)
    with pytest.raises(ValueError, match=r"fitted on 'cpu-epyc-2vcpu'.*'a100-80gb'"):
        step_cost(M7, a100, runtime="cpu-eager-pytorch", **kw)
    with pytest.raises(ValueError, match=r"fitted on 'rtx-3090'.*'a100-80gb'"):
        CardCost(
            deployment=Deployment(target=M7, hardware=a100, runtime="llama-cpp-rtx3090"), draft=None
        )
    with pytest.raises(ValueError, match=r"profile 'gpt-fast' is for \['gpu'\].*cpu"):
        step_cost(load_model("llama-68m"), "cpu-epyc-2vcpu", runtime="gpt-fast", **kw)
    card = (ROOT / "models" / "hardware" / "l4.toml").read_text(encoding="utf-8")
    bad = tmp_path / "l4.toml"
    bad.write_text(card.replace('runtime = "gpt-fast"', 'runtime = "no-such-stack"'))
    with pytest.raises(ValueError, match=r"l4.toml: runtime: no runtime card 'no-such-stack'"):
        load_hardware(bad)
    prof = (ROOT / "models" / "runtime" / "gpt-fast.toml").read_text(encoding="utf-8")
    broken = tmp_path / "gpt-fast.toml"
    broken.write_text(prof.replace("memory_efficiency = 0.834", "memory_efficiency = 1.5"))
    with pytest.raises(ValueError, match=r"field 'memory_efficiency' must be in \(0, 1\]"):
        load_runtime(broken)


def test_card_naming_a_runtime_round_trips(tmp_path: Path) -> None:
    h100 = load_hardware("h100-sxm")
    path = write_hardware_card(h100, tmp_path / "h100-sxm.toml")
    text = path.read_text(encoding="utf-8")
    assert 'runtime = "gpt-fast"' in text and "layer_overhead_s" not in text
    assert load_hardware(path) == dataclasses.replace(h100, source_path=str(path))
    own = dataclasses.replace(h100, layer_overhead_s=1e-5)  # e.g. a calibrated value
    path = write_hardware_card(own, tmp_path / "h100-sxm.toml")
    assert "layer_overhead_s = 1e-05" in path.read_text(encoding="utf-8")
    assert load_hardware(path).layer_overhead_s == 1e-5  # the card's own number wins


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cards"]) == 0
    out = capsys.readouterr().out
    assert "runtime profiles" in out and "llama-cpp-rtx3090" in out
    assert re.search(r"^  vllm-h100 +vllm .*fitted on h100-sxm$", out, re.M)
    argv = ["cost", "--model", "llama-2-7b", "--hardware", "a100-80gb"]
    assert main([*argv, "--runtime", "pytorch-eager-a100"]) == 0
    assert "runtime       pytorch-eager-a100" in capsys.readouterr().out
    assert main([*argv, "--runtime", "nope"]) != 0
    assert "--runtime: no runtime card 'nope'" in capsys.readouterr().err


def test_efficiency_by_rows_and_format_known_answers() -> None:
    from specsim.cost import Formats, roofline, time_energy
    from specsim.cost.formats import resolve_formats

    base = load_runtime("gpt-fast")
    prof = dataclasses.replace(
        base,
        memory_efficiency=0.5,
        memory_efficiency_rows={"1": 0.5, "64": 0.8},
        compute_efficiency_rows={"8": 0.26, "512": 0.52},
    )
    x, sc, sm = prof.efficiencies("bfloat16")
    assert x == (0.0, 3.0, 6.0, 9.0)
    assert sm == pytest.approx((1.0, 0.5 / 0.65, 0.5 / 0.8, 0.5 / 0.8))
    assert sc == pytest.approx((0.52 / 0.26, 0.52 / 0.26, 0.52 / 0.39, 1.0))
    a100, fmt = load_hardware("a100-80gb"), Formats.of("bfloat16")
    co = roofline(M7, a100, fmt, 1.0, prof)
    T = 8.0  # log2 = 3: memory at 0.65, compute at 0.26
    dense = max(T * co.dense_compute_s * 2.0, (T * co.dense_memory_s + co.dense_weights_s) / 1.3)
    head = max(T * co.head_compute_s * 2.0, (T * co.head_memory_s + co.head_weights_s) / 1.3)
    attention = max(0.0, T * co.attention_new_s)
    want = dense + head + attention + co.fixed_s
    assert time_energy(co, T, 0.0, 0.0)[0] == pytest.approx(want, rel=1e-12)
    # One row at the table's first point is the scalar profile exactly.
    flat = dataclasses.replace(base, memory_efficiency=0.5)
    kw = {"batch": 1, "context": 100, "new_tokens": 1}
    assert step_cost(M7, a100, runtime=prof, **kw).time_s == pytest.approx(
        step_cost(M7, a100, runtime=flat, **kw).time_s, rel=1e-12
    )
    # More rows reach a larger fraction of bandwidth: verification costs less than at 0.5.
    kw = {"batch": 16, "context": 100, "new_tokens": 4}
    assert (
        step_cost(M7, a100, runtime=prof, **kw).time_s
        < step_cost(M7, a100, runtime=flat, **kw).time_s
    )
    # A format factor halves the bandwidth the int4 weight reads reach.
    slow = dataclasses.replace(base, format_memory_factor={"int4": 0.5})
    f4 = resolve_formats(M7, "bfloat16", weights="int4")
    c0, c1 = roofline(M7, a100, f4, 1.0, base), roofline(M7, a100, f4, 1.0, slow)
    t0, t1 = time_energy(c0, 1.0, 0.0, 0.0)[0], time_energy(c1, 1.0, 0.0, 0.0)[0]
    assert t1 - t0 == pytest.approx(
        c0.dense_memory_s + c0.dense_weights_s + c0.head_memory_s + c0.head_weights_s, rel=1e-12
    )
    assert slow.efficiencies("bfloat16") == ((), (), ())
    with pytest.raises(ValueError, match=r"memory_efficiency_rows key '0' must be a row count"):
        dataclasses.replace(base, memory_efficiency_rows={"0": 0.5})
    with pytest.raises(ValueError, match=r"memory_efficiency_rows.64' must be in \(0, 1\]"):
        dataclasses.replace(base, memory_efficiency_rows={"64": 1.5})


# The vLLM profile (models/runtime/vllm-h100.toml): fitted in closed form on the vLLM blog's
# ITL line for Llama-3.1-8B on one H100 (slope 4.37e-05 ms/token, intercept 6.44 ms).
L31 = load_model("llama-3.1-8b")


def _itl_ms(input_len: int, *, kv: str = "bfloat16", batch: int = 1, hw: str = "h100-sxm") -> float:
    cost = step_cost(
        L31, hw, batch=batch, context=input_len + 64, new_tokens=1, kv=kv, runtime="vllm-h100"
    )
    return 1e3 * cost.time_s


def test_vllm_profile_reproduces_the_line_it_was_fitted_on() -> None:
    from specsim.validate.fidelity.anchors import VLLM_LINES

    prof = load_runtime("vllm-h100")
    assert (prof.stack, prof.fitted_on) == ("vllm", "h100-sxm")
    slope, intercept = VLLM_LINES["bfloat16"]
    # The closed form on the card: the slope is one token's K and V over the bandwidth.
    kv_bytes = L31.layers * 2 * L31.kv_heads * L31.head_dim * 2
    h100 = load_hardware("h100-sxm")
    assert prof.memory_efficiency == pytest.approx(
        kv_bytes / (slope * 1e-3 * h100.mem_bandwidth), abs=5e-5
    )
    # Residual 0 by construction; the card's rounded digits leave < 0.01% on each number.
    points = np.array([256, 1000, 8000, 32000, 125_000])
    itl = np.array([_itl_ms(int(n)) for n in points])
    assert itl == pytest.approx(intercept + slope * points, rel=1e-4)
    assert _itl_ms(0) == pytest.approx(intercept, rel=1e-4)


def test_vllm_profile_is_refused_on_another_device() -> None:
    for other in ("a100-80gb", "h200", "l4"):
        with pytest.raises(ValueError, match=r"'vllm-h100' was fitted on 'h100-sxm'"):
            step_cost(L31, other, batch=1, context=64, new_tokens=1, runtime="vllm-h100")
    with pytest.raises(ValueError, match=r"fitted on 'h100-sxm'.*'a100-80gb'"):
        CardCost(
            deployment=Deployment(
                target=M7, hardware=load_hardware("a100-80gb"), runtime="vllm-h100"
            ),
            draft=None,
        )


def test_vllm_checks_are_out_of_sample_and_report_misses() -> None:
    from specsim.validate.fidelity.anchors import vllm_anchors, vllm_checks

    fitted = vllm_anchors()
    assert len(fitted) == 2 and fitted["fitted_on"].str.startswith("itself").all()
    assert (fitted["verdict"] == "within interval").all()
    checks = vllm_checks()
    assert len(checks) == 4
    assert not any(str(r["fitted_on"]).startswith("itself") for r in checks)
    # The figures the profile did not see: FP8 KV slope and intercept, then the median ITL
    # at concurrency 8 (BF16, FP8); each a miss of its printed digits, by these errors.
    errors = [float(r["error"]) for r in checks]  # type: ignore[arg-type]
    assert errors == pytest.approx([-0.078, -0.0215, -0.0915, -0.2173], abs=1e-3)
    assert all(r["verdict"] == "miss" for r in checks)
    assert _itl_ms(21_000 - 64, batch=8) == pytest.approx(13.79, abs=0.005)
