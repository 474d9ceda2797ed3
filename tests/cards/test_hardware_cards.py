"""The accelerator cards of issue 23, section 3: datasheet numbers, sources, plausible units.

Each card's numbers come from its vendor's datasheet (the comment on each line says which
figure and how it was converted). These tests catch what a transcription slip would break:
a unit off by 1e3 (GB for bytes, TFLOPS for FLOP/s), a sparsity figure not halved (the ridge
point below is computed by hand from the dense datasheet figures), a number without its
source, and a card the cost model cannot run.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import pytest

from specsim.cards import load_hardware, load_model, load_runtime
from specsim.cost import step_cost
from specsim.cost.model import DEFAULT_CONTEXT

ROOT = Path(__file__).resolve().parents[2]
HARDWARE_DIR = ROOT / "models" / "hardware"

# slug: (dense bf16 TFLOPS, memory GB/s, ridge FLOP/byte = TFLOPS * 1e12 / (GB/s * 1e9)),
# each figure read off the datasheet and the ridge divided by hand (4 significant figures).
RIDGE = {
    "a40": (149.7, 696.0, 215.1),  # 149.7 TFLOPS / 696 GB/s
    "l40s": (362.05, 864.0, 419.0),  # 362.05 TFLOPS / 864 GB/s
    "b200": (2250.0, 7700.0, 292.2),  # 4.5 PFLOPS sparse / 2 over 7.7 TB/s
    "b300": (2250.0, 7700.0, 292.2),  # 4.5 PFLOPS sparse / 2 over 7.7 TB/s
    "gb200": (2500.0, 8000.0, 312.5),  # 5 PFLOPS sparse / 2 over 8 TB/s, one GPU
    "mi325x": (1307.4, 6000.0, 217.9),  # 1307.4 TFLOPS / 6 TB/s
    "mi355x": (2500.0, 8000.0, 312.5),  # 2.5 PFLOPS / 8 TB/s
    "rtx-5090": (209.5, 1792.0, 116.9),  # 209.5 TFLOPS (FP32 accumulate) / 1792 GB/s
    "gaudi-3": (1835.0, 3700.0, 495.9),  # 1835 TFLOPS / 3.7 TB/s
    "a10g": (125.0, 600.0, 208.3),  # the A10 datasheet's 125 TFLOPS / 600 GB/s
    "h20": (148.0, 4000.0, 37.0),  # 148 TFLOPS / 4.0 TB/s
}
NEW = tuple(RIDGE)

# Physical ranges wide enough for every accelerator on the market and narrow enough that a
# factor-1000 unit slip falls outside them.
RANGES = {
    "mem_bandwidth": (1e11, 2e13),  # bytes/s
    "mem_capacity": (8e9, 5e11),  # bytes
    "max_power_w": (50.0, 2000.0),  # W
}
PEAK_RANGE = (1e13, 1e17)  # FLOP/s


def _text(slug: str) -> str:
    return (HARDWARE_DIR / f"{slug}.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize("slug", NEW)
def test_card_loads_with_plausible_units(slug: str) -> None:
    card = load_hardware(slug)
    assert card.slug == slug and card.source_path == str(HARDWARE_DIR / f"{slug}.toml")
    for name, (lo, hi) in RANGES.items():
        value = getattr(card, name)
        assert lo <= value <= hi, f"{slug}: {name} = {value:g} outside [{lo:g}, {hi:g}]"
    for dtype, rate in card.peak_flops.items():
        assert PEAK_RANGE[0] <= rate <= PEAK_RANGE[1], f"{slug}: peak {dtype} = {rate:g}"
    assert 0 <= card.idle_power_w < card.max_power_w
    # a per-direction link is slower than local memory, and at least PCIe Gen4 x16
    assert 3e10 <= card.interconnect_bandwidth < card.mem_bandwidth
    assert 0 < card.interconnect_latency_s < 1e-4


@pytest.mark.parametrize("slug", NEW)
def test_card_cites_a_source_url(slug: str) -> None:
    sources = load_hardware(slug).sources
    urls = list(sources.values()) if isinstance(sources, dict) else list(sources)
    assert any(re.match(r"https://\S+\.\S+", u) for u in urls), f"{slug}: no source URL"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numeric_keys(data: dict[str, object]) -> set[tuple[str, str]]:
    """(table, key) of every number in a parsed card: top level (table "") and one table down."""
    out = {("", k) for k, v in data.items() if _is_number(v)}
    for table, value in data.items():
        if isinstance(value, dict):
            out |= {(table, k) for k, v in value.items() if _is_number(v)}
    return out


@pytest.mark.parametrize("slug", NEW)
def test_every_number_has_a_comment_on_its_line(slug: str) -> None:
    text = _text(slug)
    keys = _numeric_keys(tomllib.loads(text))
    assert len(keys) >= 8, f"{slug}: found only {sorted(keys)}"  # 6 top-level + peaks
    table = ""
    found = set()
    for line in text.splitlines():
        header = re.match(r"^\[([a-z_]+)\]", line)
        if header:
            table = header.group(1)
            continue
        assign = re.match(r"^([a-z0-9_]+)\s*=", line)
        if assign and (table, assign.group(1)) in keys:
            found.add((table, assign.group(1)))
            comment = line.split("#", 1)[1].strip() if "#" in line else ""
            assert len(comment) >= 10, f"{slug}: {line!r} carries no source comment"
    assert found == keys


@pytest.mark.parametrize("slug", NEW)
def test_assumed_numbers_say_so(slug: str) -> None:
    lines = {
        m.group(1): m.group(2) for m in re.finditer(r"^([a-z_]+) = .*?#(.*)$", _text(slug), re.M)
    }
    for key in ("idle_power_w", "interconnect_latency_s"):
        assert "assumption" in lines[key], f"{slug}: {key} is not a datasheet figure"
    assert "NOT calibrated" in lines["runtime"]


@pytest.mark.parametrize("slug", NEW)
def test_ridge_point_matches_the_datasheet_by_hand(slug: str) -> None:
    tflops, gbps, ridge = RIDGE[slug]
    card = load_hardware(slug)
    assert card.peak("bfloat16") == pytest.approx(tflops * 1e12, rel=1e-9)
    assert card.mem_bandwidth == pytest.approx(gbps * 1e9, rel=1e-9)
    assert card.peak("bfloat16") / card.mem_bandwidth == pytest.approx(ridge, rel=5e-4)
    # ridge_intensity scales it by the runtime's efficiencies
    prof = load_runtime(card.runtime or "")
    scaled = ridge * prof.compute_efficiency / prof.memory_efficiency
    assert card.ridge_intensity("bfloat16") == pytest.approx(scaled, rel=5e-4)


@pytest.mark.parametrize("slug", NEW)
def test_llama_8b_decode_at_batch_1_is_memory_bound(slug: str) -> None:
    """What ``specsim cost --model llama-3.1-8b --hardware SLUG`` computes (its defaults)."""
    model, card = load_model("llama-3.1-8b"), load_hardware(slug)
    cost = step_cost(model, card, batch=1, context=DEFAULT_CONTEXT, new_tokens=1)
    assert cost.bound == "memory" and cost.memory_time_s > 10 * cost.compute_time_s
    assert cost.dtype == "bfloat16" and cost.resident_bytes < card.mem_capacity
    # the pass reads at least every decode weight once at the effective bandwidth
    floor = cost.weight_bytes / (card.mem_bandwidth * card.memory_efficiency)
    assert floor <= cost.memory_time_s <= cost.time_s
    assert math.isfinite(cost.energy_j) and cost.energy_j > card.idle_power_w * cost.time_s


def test_gb200_is_one_gpu_not_the_superchip() -> None:
    card = load_hardware("gb200")
    assert "per GPU" in _text("gb200") and card.mem_capacity < 2e11  # 186 GB, not 372
