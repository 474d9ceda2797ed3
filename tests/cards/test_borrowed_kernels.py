"""A card without a kernel table of its own borrows the nearest measured card's of its
architecture generation (``specsim.cards.stack_files.format_source``), or keeps the default."""

from __future__ import annotations

import dataclasses

import pytest

from specsim.cards import compose, list_hardware, load_hardware, load_stack
from specsim.cards.hardware import HardwareCard
from specsim.cards.stack_files import device_part_for, format_source, list_device_parts
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape

# Each shipped card's architecture generation, as its datasheet or whitepaper says (docs/stacks.md).
GENERATION = {
    "a100-40gb": "ampere",
    "a100-80gb": "ampere",
    "a40": "ampere",
    "a10g": "ampere",
    "rtx-3090": "ampere",
    "l4": "ada",
    "l40s": "ada",
    "rtx-4090": "ada",
    "h100-sxm": "hopper",
    "h200": "hopper",
    "h20": "hopper",
    "b200": "blackwell",
    "b300": "blackwell",
    "gb200": "blackwell",
    "rtx-5090": "rtx-blackwell",
    "mi300x": "cdna3",
    "mi325x": "cdna3",
    "mi355x": "cdna4",
    "gaudi-3": "gaudi3",
    "tpu-v4": "tpu-v4",
}


def _part(slug: str) -> dict[str, dict[str, float] | None]:
    part = {p.slug: p for p in list_device_parts()}[slug]
    return {"memory": part.format_memory_factor, "dequant": part.format_dequant_ops}


def test_every_shipped_card_names_its_generation() -> None:
    shipped = {c.slug: c.generation for c in list_hardware() if c.slug in GENERATION}
    assert shipped == GENERATION


@pytest.mark.parametrize("bad", [3, "", ["hopper"]])
def test_generation_must_be_a_string(bad: object) -> None:
    with pytest.raises(TypeError, match="'generation' must be a non-empty string"):
        dataclasses.replace(load_hardware("h200"), generation=bad)


def test_a_hopper_card_without_a_table_takes_the_h100s() -> None:
    h200, vllm = load_hardware("h200"), load_stack("vllm-v1")
    assert device_part_for(h200, "vllm-v1").format_dequant_ops is None  # nothing of its own
    got = format_source(h200, vllm)
    assert [(s.weight_format, s.part, s.card, s.generation) for s in got] == [
        ("int4", "h100-sxm", "h100-sxm", "hopper"),
        ("int8", "h100-sxm", "h100-sxm", "hopper"),
    ]
    rt, h100 = compose(vllm, h200), _part("h100-sxm")
    assert rt.format_dequant_ops == h100["dequant"]
    assert rt.format_memory_factor == h100["memory"]


def test_a_format_the_card_measured_is_its_own() -> None:
    """The H200's TensorRT-LLM part has its own fp8 factor; int4 and int8 come from the
    H100's part for the same stack."""
    rt = compose(load_stack("tensorrt-llm"), load_hardware("h200"))
    own, h100 = _part("h200-tensorrt-llm"), _part("h100-sxm-tensorrt-llm")
    assert own["memory"] is not None and h100["memory"] is not None
    assert rt.format_memory_factor == {
        "float8": own["memory"]["float8"],
        "int4": h100["memory"]["int4"],
        "int8": h100["memory"]["int8"],
    }


def test_the_nearest_card_by_bandwidth_lends() -> None:
    """An Ampere card of one's own with the A100-80GB's bandwidth takes the A100-80GB's
    TensorRT-LLM int4 entry, not the A100-40GB's (the A100 part's Marlin 0)."""
    mine = dataclasses.replace(load_hardware("a40"), slug="my-ampere", mem_bandwidth=2.0e12)
    got = {s.weight_format: s for s in format_source(mine, load_stack("tensorrt-llm"))}
    assert (got["int4"].card, got["int4"].part) == ("a100-80gb", "a100-80gb-tensorrt-llm")
    near_40 = dataclasses.replace(mine, mem_bandwidth=1.5e12)
    got = {s.weight_format: s for s in format_source(near_40, load_stack("tensorrt-llm"))}
    assert (got["int4"].card, got["int4"].part) == ("a100-40gb", "a100")


@pytest.mark.parametrize("slug", ["rtx-5090", "l40s", "rtx-4090", "l4", "mi300x"])
def test_no_measured_card_of_the_generation_keeps_the_default(slug: str) -> None:
    hw = load_hardware(slug)
    stack = load_stack("vllm-v1")
    assert format_source(hw, stack) == ()
    rt = compose(stack, hw)
    assert (rt.format_memory_factor, rt.format_dequant_ops) == (None, None)


def test_the_rtx_5090_does_not_borrow_from_datacenter_blackwell() -> None:
    """B200's TensorRT-LLM part measured fp8; the RTX 5090 (compute capability 12.0) is not
    its generation, B300 (10.3) is."""
    trt = load_stack("tensorrt-llm")
    assert format_source(load_hardware("rtx-5090"), trt) == ()
    assert [s.part for s in format_source(load_hardware("b300"), trt)] == ["b200-tensorrt-llm"]


def test_a_card_without_a_generation_or_a_stack_with_its_own_kernels_borrows_nothing() -> None:
    anon: HardwareCard = dataclasses.replace(load_hardware("h200"), slug="my-gpu", generation=None)
    assert format_source(anon, load_stack("vllm-v1")) == ()
    assert format_source(load_hardware("h200"), load_stack("gpt-fast-stack")) == ()
    rt = compose(load_stack("gpt-fast-stack"), load_hardware("h200"))
    assert rt.format_dequant_ops is None


def test_borrowing_makes_an_h200_verification_cost_about_a_step() -> None:
    """An 8-position int4 verification on the H200 costs what it costs on the H100 (Marlin's
    flat cost by rows), not the default per-row dequantization's 1.78 steps."""

    def ratio(slug: str) -> float:
        dep = Deployment(target="llama-2-7b", hardware=slug, runtime="vllm-v1", weights="int4")
        step = dep.pass_cost(PassShape.chain(context=512, new=1, batch=1)).time_s
        verify = dep.pass_cost(PassShape.chain(context=512, new=8, batch=1), verify=True)
        return verify.time_s / step

    assert ratio("h200") == pytest.approx(ratio("h100-sxm"), abs=0.03)
    assert ratio("h200") < 1.15 < ratio("rtx-5090")
