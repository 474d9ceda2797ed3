"""The plan names a weight format whose kernels its card borrowed (a weak assumption)."""

from __future__ import annotations

import pytest

from specsim.cli import main
from specsim.cost.deployment import Deployment
from specsim.plan.verdict import borrowed_kernels


def test_the_borrowed_part_is_a_weak_assumption(capsys: pytest.CaptureFixture[str]) -> None:
    argv = "plan --model llama-3.1-8b --hardware h200 --runtime vllm-v1 --weights int4"
    assert main([*argv.split(), "--ngram", "--batch", "1"]) == 0
    weak = capsys.readouterr().out.split("Weak assumptions:")[1]
    assert (
        "! int4 kernels on h200: borrowed from the h100-sxm part (measured on h100-sxm, same "
        "generation, hopper); not measured on this card"
    ) in weak


@pytest.mark.parametrize(
    ("hardware", "weights"),
    [("h200", "bfloat16"), ("h100-sxm", "int4"), ("rtx-5090", "int4")],
)
def test_no_line_without_a_borrowed_format(hardware: str, weights: str) -> None:
    dep = Deployment(target="llama-3.1-8b", hardware=hardware, runtime="vllm-v1", weights=weights)
    assert borrowed_kernels(dep) == []


def test_no_line_without_a_stack() -> None:
    assert (
        borrowed_kernels(Deployment(target="llama-3.1-8b", hardware="h200", weights="int4")) == []
    )
