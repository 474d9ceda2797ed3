"""The input checks of the cost model (specsim.cost.checks): each names the field, the value
and the card, in plain numbers (issue 13, "Silently wrong today")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost import (
    Deployment,
    PassShape,
    cost_coefficient,
    ops_coefficient,
    pass_aggregates_cost,
    pass_cost,
    pass_flops,
    step_cost,
    step_cost_grid,
    verification_factor,
)
from specsim.cost.checks import (
    check_draft_pair,
    check_hardware,
    check_model,
    check_positions,
    check_tensor_parallel,
    int_array,
)

ROOT = Path(__file__).resolve().parents[2]
NUMPY_REPR = re.compile(r"\bnp\.\w+\(|array\(|dtype")


def message(info: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(info.value)
    assert not NUMPY_REPR.search(text), f"a numpy repr in: {text}"
    return text


# Plain values in messages ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "minimum", "shown"),
    [
        (np.int64(0), 1, "got 0"),
        (np.array([4, 0, 2]), 1, "got 0 at index (1,)"),
        (np.float64(1.5), 1, "got 1.5"),
        (float("nan"), 0, "got nan"),
        (np.array([[1, 2], [3, -1]]), 0, "got -1 at index (1, 1)"),
    ],
)
def test_int_array_shows_plain_values(value: Any, minimum: int, shown: str) -> None:
    with pytest.raises(ValueError) as info:
        int_array("batch", value, minimum)
    text = message(info)
    assert text.startswith("batch: expected finite integer(s) >= ") and text.endswith(shown)


def test_int_array_type_error_shows_plain_values() -> None:
    with pytest.raises(TypeError) as info:
        int_array("context", np.str_("long"), 0)
    assert message(info) == "context: expected integer(s), got 'long'"
    with pytest.raises(TypeError, match=r"^gamma: expected integer\(s\), got \[True\]$"):
        int_array("gamma", np.array([True]), 0)


# Cards or slugs -------------------------------------------------------------------------
def test_a_slug_or_a_path_is_loaded_and_a_card_passes_through() -> None:
    m, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    assert check_model(m) is m and check_hardware(hw) is hw
    assert check_model("llama-2-7b") == m
    assert check_model(ROOT / "models" / "lm" / "llama-2-7b.toml") == m
    assert check_hardware("a100-80gb") == hw
    by_slug = step_cost("llama-2-7b", "a100-80gb", batch=2, context=100, new_tokens=3)
    assert by_slug == step_cost(m, hw, batch=2, context=100, new_tokens=3)
    grid = step_cost_grid("llama-2-7b", "a100-80gb", batch=[1, 2], context=100, new_tokens=1)
    assert grid.time_s[1] == step_cost(m, hw, batch=2, context=100, new_tokens=1).time_s
    assert pass_flops("llama-2-7b", context=100) == pass_flops(m, context=100)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        (
            {"model": None},
            "model: expected a ModelCard or a card slug or .toml path (load_model('llama-2-7b')), "
            "got NoneType None",
        ),
        (
            {"model": 7},
            "model: expected a ModelCard or a card slug or .toml path "
            "(load_model('llama-2-7b')), got int 7",
        ),
        (
            {"hardware": None},
            "hardware: expected a HardwareCard or a card slug or .toml path "
            "(load_hardware('a100-80gb')), got NoneType None",
        ),
        (
            {"model": "HW"},
            "model: expected a ModelCard or a card slug or .toml path "
            "(load_model('llama-2-7b')), got HardwareCard 'a100-80gb'",
        ),
    ],
)
def test_anything_but_a_card_or_a_slug_is_a_type_error(kw: dict, expected: str) -> None:
    args = {"model": "llama-2-7b", "hardware": "a100-80gb", **kw}
    if args["model"] == "HW":
        args["model"] = load_hardware("a100-80gb")
    with pytest.raises(TypeError) as info:
        step_cost(args["model"], args["hardware"], batch=1, context=1, new_tokens=1)
    assert message(info) == expected


def test_an_unknown_slug_names_the_argument() -> None:
    with pytest.raises(ValueError, match=r"^model: .*'llama-9'") as info:
        step_cost("llama-9", "a100-80gb", batch=1, context=1, new_tokens=1)
    assert "slug_or_path" not in message(info)
    with pytest.raises(ValueError, match=r"^hardware: .*'h300'"):
        step_cost("llama-2-7b", "h300", batch=1, context=1, new_tokens=1)


# Tensor parallelism ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("slug", "tp", "heads"),
    [("llama-2-7b", 3, 32), ("llama-2-7b", 64, 32), ("llama-2-7b", 1000, 32), ("llama-68m", 8, 12)],
)
def test_tensor_parallel_must_divide_the_heads(slug: str, tp: int, heads: int) -> None:
    expected = f"tensor_parallel: {tp} does not divide the {heads} attention heads of {slug}"
    with pytest.raises(ValueError) as info:
        step_cost(slug, "a100-80gb", batch=1, context=64, new_tokens=1, tensor_parallel=tp)
    assert message(info) == expected
    with pytest.raises(ValueError, match=re.escape(expected)):
        step_cost_grid(
            slug,
            "a100-80gb",
            batch=1,
            context=64,
            new_tokens=1,
            tensor_parallel=np.array([1, tp, 2]),
        )
    with pytest.raises(ValueError, match=re.escape(expected)):
        pass_cost(slug, "a100-80gb", PassShape.chain(context=64, new=1), tensor_parallel=tp)
    with pytest.raises(ValueError, match=re.escape(expected)):
        pass_aggregates_cost(
            slug, "a100-80gb", batch=1, tokens=1, context_tokens=64, pairs=65, tensor_parallel=tp
        )


def test_key_value_heads_are_split_whole_or_replicated() -> None:
    m70 = load_model("llama-2-70b")  # 64 heads, 8 KV heads
    for tp in (1, 2, 4, 8, 16, 32, 64):  # 16 and up: each device holds a KV head replica
        assert check_tensor_parallel(m70, tp).tolist() == float(tp)
    qwen = load_model("qwen2.5-7b")  # 28 heads, 4 KV heads: 7 and 14 divide the heads only
    for tp in (7, 14):
        with pytest.raises(ValueError) as info:
            check_tensor_parallel(qwen, tp)
        assert message(info) == (
            f"tensor_parallel: {tp} neither divides the 4 key/value heads of qwen2.5-7b nor is "
            "a multiple of them (each device holds whole key/value heads)"
        )
    assert check_tensor_parallel(qwen, np.array([1, 2, 4, 28])).tolist() == [1, 2, 4, 28]
    with pytest.raises(
        ValueError,
        match=r"^tensor_parallel: expected finite integer\(s\) >= 1, "
        r"got 0$",
    ):
        check_tensor_parallel(qwen, np.int64(0))


# Positions ------------------------------------------------------------------------------
def test_a_context_beyond_max_position_is_refused() -> None:
    m7 = load_model("llama-2-7b")  # max_position 4096
    with pytest.raises(ValueError) as info:
        step_cost(m7, "a100-80gb", batch=1, context=100_000, new_tokens=1)
    assert message(info) == "context: 100000 + 1 new tokens exceeds llama-2-7b's max_position 4096"
    step_cost(m7, "a100-80gb", batch=1, context=4095, new_tokens=1)  # the last position: fine
    with pytest.raises(ValueError, match=r"^context: 4092 \+ 5 new tokens exceeds"):
        step_cost(m7, "a100-80gb", batch=1, context=4092, new_tokens=5)
    with pytest.raises(ValueError) as info:
        step_cost(m7, "a100-80gb", batch=3, context=[10, 4095, 20], new_tokens=[1, 2, 1])
    assert message(info) == (
        "context: 4095 + 2 new tokens exceeds llama-2-7b's max_position 4096 (element (1,))"
    )
    with pytest.raises(ValueError) as info:
        step_cost_grid(
            m7,
            "a100-80gb",
            batch=1,
            context=np.array([[0], [4000]]),
            new_tokens=np.array([1, 200]),
            check_positions=True,
        )
    assert message(info).endswith(
        "4000 + 200 new tokens exceeds llama-2-7b's max_position 4096 (element (1, 1))"
    )


def test_grids_check_positions_by_default() -> None:
    # llama-68m has max_position 2048: a cost at its target's longer contexts is refused,
    # and only an explicit check_positions=False extrapolates past it.
    kw: dict[str, Any] = {"batch": 1, "context": [128, 4096], "new_tokens": 1}
    with pytest.raises(
        ValueError,
        match=r"^context: 4096 \+ 1 new tokens exceeds llama-68m's "
        r"max_position 2048 \(element \(1,\)\)$",
    ):
        step_cost_grid("llama-68m", "a100-80gb", **kw)
    grid = step_cost_grid("llama-68m", "a100-80gb", check_positions=False, **kw)
    assert grid.time_s.shape == (2,)
    assert step_cost_grid("llama-68m", "a100-80gb", batch=1, context=2047, new_tokens=1).time_s > 0


def test_derived_quantities_check_positions_by_default() -> None:
    m68, m7, hw = load_model("llama-68m"), load_model("llama-2-7b"), load_hardware("a100-80gb")
    with pytest.raises(ValueError, match=r"^context: 2048 \+ 1 new tokens exceeds llama-68m's"):
        cost_coefficient(m68, Deployment(target=m7, hardware=hw), context=2048)
    with pytest.raises(ValueError, match=r"^context: 4092 \+ 5 new tokens exceeds llama-2-7b's"):
        verification_factor(m7, hw, 4, context=4092)
    with pytest.raises(ValueError, match=r"^context: 3000 \+ 1 new tokens exceeds llama-68m's"):
        ops_coefficient(m68, m7, context=3000)
    assert ops_coefficient(m68, m7, context=3000, check_positions=False) > 0
    assert verification_factor(m7, hw, 4, context=4091) > 1


def test_a_tree_reaches_context_plus_its_depth() -> None:
    m7, hw = load_model("llama-2-7b"), load_hardware("a100-80gb")
    parents = [-1, 0, 0, 1, 1, 2, 2]  # 7 nodes, 3 deep: positions up to context + 3
    assert pass_cost(m7, hw, PassShape.tree(context=4093, parents=parents)).tokens == 7
    with pytest.raises(ValueError, match=r"^context: 4094 \+ 3 new tokens exceeds"):
        pass_cost(m7, hw, PassShape.tree(context=4094, parents=parents))


def test_encoder_decoder_positions_are_relative_and_not_checked() -> None:
    t5 = load_model("t5-xxl")  # max_position 512: the pre-training input length, not a limit
    check_positions(t5, context=4096, new_tokens=8)
    assert step_cost(t5, "tpu-v4", batch=1, context=1024, new_tokens=1).tokens == 1


# Draft and target -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "draft", "expected"),
    [
        (
            "llama-2-7b",
            "llama-3.1-8b",
            "draft: vocab 128,256 of llama-3.1-8b differs from vocab 32,000 of target llama-2-7b "
            "(family 'llama-3' vs 'llama-2'): a draft must share its target's tokenizer",
        ),
        (
            "t5-xxl",
            "llama-68m",
            "draft: architecture 'decoder' of llama-68m differs from 'encoder-decoder' of target "
            "t5-xxl",
        ),
        (
            "llama-68m",
            "llama-2-7b",
            "draft: draft llama-2-7b for target llama-68m is larger than its target "
            "(6,740,000,000 > 68,000,000 parameters): it would slow decoding down",
        ),
    ],
)
def test_a_draft_that_cannot_serve_its_target(target: str, draft: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        check_draft_pair(load_model(target), load_model(draft))
    assert message(info) == expected


@pytest.mark.parametrize(
    ("target", "draft"),
    [
        # studies, configs, docs and problem sets
        ("llama-2-7b", "llama-68m"),
        ("llama-2-7b", "llama-160m"),
        ("llama-2-13b", "llama-160m"),
        ("llama-2-70b", "llama-2-7b"),
        ("llama-2-70b", "llama-68m"),
        ("llama-3.1-70b", "llama-3.2-1b"),
        ("llama-3.1-70b", "llama-3.1-8b"),
        ("llama-3.1-8b", "llama-3.2-1b"),
        ("t5-xxl", "t5-small"),
        ("t5-xxl", "t5-base"),
        ("t5-xxl", "t5-large"),
        ("gpt-like-97m", "gpt-like-6m"),
        # one tokenizer, embedding tables padded to different sizes
        ("qwen2.5-7b", "qwen2.5-0.5b"),
        ("qwen2.5-72b", "qwen2.5-0.5b"),
        # self-drafting: c = 1, used to isolate v(gamma)
        ("t5-xxl", "t5-xxl"),
        ("gpt-like-6m", "gpt-like-6m"),
    ],
)
def test_the_pairs_in_use_are_admitted(target: str, draft: str) -> None:
    check_draft_pair(target, draft)


def test_card_cost_reads_slugs_as_cards_and_names_a_bad_argument() -> None:
    from specsim.sim import CardCost

    by_slug = CardCost(
        deployment=Deployment(target="llama-2-7b", hardware="a100-80gb", runtime="gpt-fast"),
        draft="llama-68m",
    )
    by_card = CardCost(
        deployment=Deployment(
            target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"), runtime="gpt-fast"
        ),
        draft=load_model("llama-68m"),
    )
    assert by_slug.target == by_card.target and by_slug.hardware == by_card.hardware
    assert by_slug.draft == by_card.draft and by_slug.drafting() == by_card.drafting()
    with pytest.raises(TypeError, match="^CardCost deployment: expected a specsim.cost"):
        CardCost(deployment="llama-2-7b", draft=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^CardCost draft_deployment: expected"):
        CardCost(deployment=by_slug.deployment, draft="llama-68m", draft_deployment=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^draft: expected a ModelCard"):
        CardCost(deployment=by_slug.deployment, draft=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hardware"):
        CardCost(deployment=Deployment(target="llama-2-7b", hardware="no-such-gpu"), draft=None)
