"""Stack profiles and device parts (models/stacks/): any GPU stack on any GPU card."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specsim.cards import (
    RuntimeProfile,
    StackProfile,
    compose,
    list_hardware,
    list_runtimes,
    list_stacks,
    load_hardware,
    load_model,
    load_runtime,
    load_stack,
)
from specsim.cards.files import searched_first
from specsim.cards.stack_files import device_part_for, is_stack, list_device_parts, stacks_dir
from specsim.cli import main
from specsim.cost import step_cost
from specsim.cost.deployment import Deployment, deployment_from_table

STACKS = (
    "vllm-v0",
    "vllm-v1",
    "sglang",
    "tensorrt-llm",
    "hf-transformers",
    "gpt-fast-stack",
    "llama.cpp",
    "research-cuda-graphs",
)


def test_the_eight_stacks_ship_with_sources() -> None:
    stacks = {s.slug: s for s in list_stacks()}
    assert set(STACKS) <= set(stacks)
    for s in stacks.values():
        assert s.sources and s.source_path
        # Every number a stack marks as an assumption says so in its file.
        text = Path(s.source_path).read_text(encoding="utf-8")
        for name in s.assumptions:
            line = next(ln for ln in text.splitlines() if ln.startswith(f"{name} ="))
            assert "ASSUMPTION" in line, (s.slug, name)


def test_every_gpu_card_accepts_every_gpu_stack_unless_its_vendor_is_excluded() -> None:
    gpus = [hw for hw in list_hardware() if hw.kind == "gpu"]
    assert len(gpus) >= 15
    for hw in gpus:
        for stack in list_stacks():
            part = device_part_for(hw, stack.slug)
            excluded = stack.vendors is not None and part.vendor not in (None, *stack.vendors)
            if not excluded:
                prof = compose(stack, hw)
                assert prof.stack_profile == stack and prof.kinds == ["gpu"]
                assert prof.memory_efficiency == part.memory_efficiency
                continue
            with pytest.raises(ValueError, match=rf"device part '{part.slug}'"):
                compose(stack, hw)


def test_a_stack_named_by_slug_works_on_a_card_no_profile_was_fitted_on() -> None:
    dep = Deployment(target="llama-2-7b", hardware="a40", runtime="sglang")
    assert dep.runtime is not None and dep.runtime.stack_profile is not None
    assert dep.runtime.stack_profile.slug == "sglang"
    table = {"target": "llama-2-7b", "hardware": "l40s", "runtime": "vllm-v0"}
    assert deployment_from_table(table, where="t.toml [deployment]").runtime.slug == "vllm-v0"


@pytest.mark.parametrize(
    ("hardware", "stack", "part"),
    [("tpu-v4", "vllm-v1", "stack part"), ("cpu-xeon-2vcpu", "sglang", "stack part")],
)
def test_a_gpu_stack_on_a_tpu_or_cpu_names_the_stack_part(
    hardware: str, stack: str, part: str
) -> None:
    with pytest.raises(ValueError, match=rf"stack '{stack}' runs on gpu.*{part}"):
        Deployment(target="llama-68m", hardware=hardware, runtime=stack)


def test_tensorrt_llm_on_an_amd_card_names_the_device_part() -> None:
    with pytest.raises(ValueError, match=r"nvidia devices only.*'mi300x' is amd.*device part"):
        compose(load_stack("tensorrt-llm"), load_hardware("mi300x"))


def test_every_device_part_names_cards_that_exist_once() -> None:
    slugs = {hw.slug for hw in list_hardware()}
    parts = list_device_parts()
    stacks = {s.slug for s in list_stacks()}
    assert {s for p in parts for s in p.stacks} <= stacks
    # A card is named once by a part for any stack, and at most once more for each stack.
    named = [(c, s) for p in parts for c in p.cards for s in (p.stacks or [None])]
    assert {c for c, _ in named} <= slugs and len(named) == len(set(named))
    assert all(p.cards for p in parts if p.stacks)
    assert any(not p.cards and p.kind == "gpu" for p in parts)


KW = {"context": 64, "new_tokens": 1, "dtype": "bfloat16"}


@pytest.mark.parametrize(
    ("stack", "hardware", "profile", "model"),
    [
        ("vllm-v1", "h100-sxm", "vllm-h100", "llama-3.1-8b"),
        ("hf-transformers", "a100-80gb", "pytorch-eager-a100", "llama-2-7b"),
        ("llama.cpp", "rtx-3090", "llama-cpp-rtx3090", "llama-2-7b"),
    ],
)
def test_a_stack_on_its_measured_device_prices_plain_decoding_as_the_old_profile(
    stack: str, hardware: str, profile: str, model: str
) -> None:
    m, hw = load_model(model), load_hardware(hardware)
    old, new = load_runtime(profile), compose(load_stack(stack), hw)
    for name in ("compute_efficiency", "memory_efficiency", "layer_overhead_s"):
        assert getattr(new, name) == getattr(old, name), name
    assert new.pass_overhead_s == old.pass_overhead_s
    for batch in (1, 8):  # on graph sizes (or no graph list): nothing padded, no eager launch
        a = step_cost(m, hw, batch=batch, runtime=old, **KW)
        b = step_cost(m, hw, batch=batch, runtime=new, **KW)
        assert b.time_s == pytest.approx(a.time_s, rel=1e-12)


def test_the_gpt_fast_stack_keeps_the_profiles_device_numbers() -> None:
    """On the A100 the gpt-fast stack composes the profile's kernel fractions; its host terms
    are its own fit (models/measured/plain-decode, specsim.calibrate.fixed_costs)."""
    a100 = load_hardware("a100-80gb")
    old, new = load_runtime("gpt-fast"), compose(load_stack("gpt-fast-stack"), a100)
    for name in ("compute_efficiency", "memory_efficiency"):
        assert getattr(new, name) == getattr(old, name), name
    assert compose(load_stack(str(stacks_dir() / "gpt-fast-stack.toml")), a100) == new


def test_runtime_profile_slugs_keep_naming_the_profile() -> None:
    assert not is_stack("gpt-fast") and is_stack("sglang") and is_stack("gpt-fast-stack")
    assert is_stack(str(stacks_dir() / "gpt-fast-stack.toml"))
    dep = Deployment(target="llama-2-7b", hardware="a100-80gb", runtime="gpt-fast")
    assert dep.runtime is not None and dep.runtime.stack_profile is None
    assert dep.runtime == load_runtime("gpt-fast")  # the profile's numbers, as before
    on_a40 = Deployment(target="llama-2-7b", hardware="a40", runtime="gpt-fast").runtime
    assert on_a40 == load_runtime("gpt-fast")  # on every card: no device part composed


def test_the_gpt_fast_stack_is_named_by_its_slug() -> None:
    dep = Deployment(target="llama-2-7b", hardware="a40", runtime="gpt-fast-stack")
    st = dep.runtime.stack_profile if dep.runtime is not None else None
    assert st is not None and st.slug == "gpt-fast-stack"
    assert dep.runtime is not None and dep.runtime.memory_efficiency == 0.7872  # A40's part


def test_no_shipped_stack_shares_a_slug_with_a_runtime_profile() -> None:
    profiles = {p.slug for p in list_runtimes()}
    assert not profiles & {s.slug for s in list_stacks()}


def test_a_name_that_is_both_a_profile_and_a_stack_is_an_error(tmp_path: Path) -> None:
    """A user's runtime profile named like a shipped stack: the name is refused, naming both
    files, rather than silently meaning one of them."""
    (tmp_path / "runtime").mkdir()
    text = (stacks_dir().parent / "runtime" / "gpt-fast.toml").read_text(encoding="utf-8")
    (tmp_path / "runtime" / "sglang.toml").write_text(
        text.replace('slug = "gpt-fast"', 'slug = "sglang"'), encoding="utf-8"
    )
    with searched_first([tmp_path]):
        with pytest.raises(
            ValueError,
            match=r"'sglang' names both the runtime profile .*"
            r"sglang.toml and the stack .*stacks/sglang.toml",
        ):
            Deployment(target="llama-2-7b", hardware="a40", runtime="sglang")
    assert is_stack("sglang")  # outside the block the name is the stack again


def _stack(**changes: object) -> StackProfile:
    return dataclasses.replace(load_stack("vllm-v1"), **changes)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"graph_sizes": [1, 4, 2]}, r"strictly increasing, got 4 then 2 at index 2"),
        ({"graph_sizes": [1, 1]}, r"strictly increasing"),
        ({"graph_sizes": [0, 2]}, r"graph_sizes\[0\] must be an integer >= 1"),
        ({"graph_sizes": []}, r"non-empty list"),
        ({"verify": "batch-expansion"}, r"batch-expansion stack cannot verify a token tree"),
        ({"verify": "tree"}, r"'verify' must be one of"),
        ({"graph_unit": "rows"}, r"'graph_unit' must be one of"),
        ({"rejection_s_per_token": -1e-6}, r"'rejection_s_per_token' must be finite"),
        ({"vendors": ["acme"]}, r"'vendors' must be one of"),
        ({"assumptions": ["speed"]}, r"'assumptions' must be one of"),
        ({"kinds": []}, r"'kinds' must be a non-empty list"),
        ({"weight_kernels": "marlin"}, r"'weight_kernels' must be one of"),
    ],
)
def test_bad_stack_profiles_are_named(changes: dict[str, object], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        _stack(**changes)


def test_an_unknown_stack_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no stack profile 'vllm-v9' \(known: gpt-fast"):
        load_stack("vllm-v9")


def test_a_runtime_profile_refuses_a_stack_that_is_not_one() -> None:
    base = load_runtime("gpt-fast")
    with pytest.raises(TypeError, match=r"'stack_profile' is built by"):
        dataclasses.replace(base, stack_profile="sglang")  # type: ignore[arg-type]
    assert isinstance(base, RuntimeProfile) and base.drafting() is base


def test_the_cli_names_a_stack_on_any_card(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "--model", "llama-2-7b", "--hardware", "a40", "--runtime", "vllm-v0"]
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["runtime"] == "vllm-v0" and out["stack_time_s"] > 0
    assert main(["cost", "--model", "llama-68m", "--hardware", "tpu-v4", "--runtime", "sglang"])
    assert "--runtime: " in capsys.readouterr().err


def test_a_bad_stack_file_is_named_with_the_bad_field(tmp_path: Path) -> None:
    text = (stacks_dir() / "sglang.toml").read_text(encoding="utf-8")
    bad = tmp_path / "my-stack.toml"
    bad.write_text(text.replace("graph_sizes = [1, 2, 3,", "graph_sizes = [1, 3, 2,"))
    with pytest.raises(ValueError, match=rf"{bad}: field 'graph_sizes' must be strictly"):
        Deployment(target="llama-68m", hardware="a40", runtime=str(bad))
    tree = tmp_path / "tree-stack.toml"
    tree.write_text(text.replace('verify = "multi-query"', 'verify = "batch-expansion"'))
    with pytest.raises(ValueError, match=rf"{tree}: field 'trees' is true, but a batch-expansion"):
        load_stack(tree)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"vendor": "acme"}, r"'vendor' must be one of"),
        ({"kind": "fpga"}, r"'kind' must be one of"),
        ({"cards": "a40"}, r"'cards' must be a non-empty list"),
    ],
)
def test_bad_device_parts_are_named(changes: dict[str, object], match: str) -> None:
    part = device_part_for(load_hardware("a40"))
    with pytest.raises((ValueError, TypeError), match=match):
        dataclasses.replace(part, **changes)


def test_a_device_part_with_a_fraction_above_one_is_named() -> None:
    with pytest.raises(ValueError, match=r"'memory_efficiency' must be in \(0, 1\], got 1.5"):
        dataclasses.replace(device_part_for(load_hardware("a40")), memory_efficiency=1.5)


def test_a_stack_with_kernels_of_its_own_skips_the_device_parts_format_tables() -> None:
    """The A100 part's int4 work (Marlin's, swept by rows) prices vLLM's int4; the gpt-fast
    stack runs tinygemm, so it keeps the per-row default its README's batch-1 rates fit."""
    a100, m = load_hardware("a100-80gb"), load_model("llama-2-7b")
    part = device_part_for(a100)
    assert part.format_dequant_ops == {"int4": 0.0}
    vllm, gpt_fast = (
        compose(load_stack("vllm-v1"), a100),
        compose(load_stack("gpt-fast-stack"), a100),
    )
    assert vllm.format_dequant_ops == part.format_dequant_ops
    assert gpt_fast.format_dequant_ops is None and gpt_fast.format_memory_factor is None

    def v4(rt: object) -> float:
        kw = dict(batch=1, context=105, weights="int4", group_size=32, runtime=rt)
        return float(
            step_cost(m, a100, new_tokens=5, **kw).time_s  # type: ignore[arg-type]
            / step_cost(m, a100, new_tokens=1, **kw).time_s  # type: ignore[arg-type]
        )

    assert v4(vllm) < 1.1 < 1.5 < v4(gpt_fast)
    legacy = step_cost(m, a100, batch=1, context=105, new_tokens=1, weights="int4", group_size=32)
    own = step_cost(
        m, a100, batch=1, context=105, new_tokens=1, weights="int4", group_size=32, runtime=gpt_fast
    )
    # the kernels alike (the host terms differ: the stack's are fitted on plain decode steps,
    # models/measured/plain-decode; the profile keeps its one-row anchor)
    for part in ("dequant_time_s", "memory_time_s", "compute_time_s"):
        assert float(getattr(own, part)) == pytest.approx(float(getattr(legacy, part)), rel=1e-9)
