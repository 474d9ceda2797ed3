"""specsim.checks: the integer check and the size limits (issue 25)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from specsim.checks import LIMITS, check_int, check_size

ROOT = Path(__file__).resolve().parents[1]


def test_check_int_takes_python_and_numpy_integers() -> None:
    assert check_int(3, name="n") == 3 and type(check_int(np.int64(3), name="n")) is int
    assert check_int(0, name="n", minimum=0) == 0


@pytest.mark.parametrize("value", [True, 1.0, "1", None, np.float64(2.0)])
def test_check_int_refuses_what_is_not_an_integer(value: object) -> None:
    with pytest.raises(TypeError, match=r"^--batch: expected an integer, got "):
        check_int(value, name="--batch")


def test_check_int_names_the_minimum() -> None:
    with pytest.raises(ValueError, match=r"^requests: expected an integer >= 1, got 0$"):
        check_int(0, name="requests", minimum=1)


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_every_limit_is_taken_and_one_more_is_refused(limit: str) -> None:
    most = LIMITS[limit].most
    assert check_size(most, name="x", limit=limit) == most
    message = f"x: {most + 1:,} {LIMITS[limit].unit} is over the limit of {most:,}: "
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        check_size(most + 1, name="x", limit=limit)
    with pytest.raises(ValueError, match="x: expected an integer >= 1, got 0"):
        check_size(0, name="x", limit=limit)


def test_an_unknown_limit_is_a_programming_error_named() -> None:
    with pytest.raises(ValueError, match="limit: expected one of"):
        check_size(1, name="x", limit="bogus")


def test_every_limit_is_documented_for_users() -> None:
    page = (ROOT / "docs" / "reference" / "limits.md").read_text(encoding="utf-8")
    for name, lim in LIMITS.items():
        assert f"`{name}`" in page and f"{lim.most:,}" in page, name


def test_a_huge_pass_is_refused_before_anything_is_allocated() -> None:
    from specsim.cost import step_cost

    with pytest.raises(ValueError, match=r"^batch: 1,000,000,000 sequences is over the limit"):
        step_cost("llama-2-7b", "a100-80gb", batch=10**9, context=512, new_tokens=1)


def test_a_huge_tree_budget_is_refused_by_the_optimizer() -> None:
    from specsim.cards import load_hardware, load_model
    from specsim.cost import Deployment
    from specsim.policies.tree_optimizer import optimize_tree
    from specsim.proposers import NGram, load_acceptance

    acc = load_acceptance(ROOT / "models" / "measured" / "ngram" / "accept-sample.toml")
    with pytest.raises(ValueError, match=r"^budget: 100,000 nodes is over the limit of 1,024"):
        optimize_tree(
            proposer=NGram(acceptance=acc),
            deployment=Deployment(
                target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")
            ),
            batch=1,
            budget=100_000,
        )


def test_check_int_says_the_range_and_why() -> None:
    assert check_int(5, name="k", minimum=1, maximum=5) == 5
    with pytest.raises(ValueError, match=r"^k: expected an integer in 1\.\.5, got 6$"):
        check_int(6, name="k", minimum=1, maximum=5)
    with pytest.raises(ValueError, match=r"^k: expected an integer <= 5, got 6 \(heads\)$"):
        check_int(6, name="k", maximum=5, why="heads")
    with pytest.raises(TypeError, match=r"^k: expected an integer <= 5, got 1\.5 \(heads\)$"):
        check_int(1.5, name="k", maximum=5, why="heads")
