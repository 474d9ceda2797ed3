"""``specsim theory``: formulas, values that match the twins, JSON, errors, the derivations doc."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from specsim import theory
from specsim.cli import SUBCOMMANDS, main


def test_registered() -> None:
    assert "theory" in SUBCOMMANDS


def test_text_output_has_formulas_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["theory", "--alpha", "0.2", "--gamma", "5", "--c", "0"]) == 0
    out = capsys.readouterr().out
    assert "(1 - alpha**(gamma + 1))/(1 - alpha)" in out  # Equation (1)
    assert "(1 - alpha)*(c_hat*gamma + gamma + 1)/(1 - alpha**(gamma + 1))" in out  # Thm 3.11
    assert "Thm 3.8" in out and "Cor. 3.9" in out
    assert "expected tokens per pass E    1.24992" in out
    assert "operations factor             4.80031" in out  # the buried bill
    assert "target calls per token 1/E    0.800051" in out
    assert "oracle bound 1/(1 - alpha)    1.25" in out
    assert "alpha > c, speculation pays" in out


def test_json_matches_the_twins(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--alpha", "0.8", "--gamma", "5", "--c", "0.05", "--c-hat", "0.02", "--v", "1.3"]
    assert main(["theory", *args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["inputs"] == {
        "alpha": 0.8,
        "gamma": 5,
        "c": 0.05,
        "c_hat": 0.02,
        "v": 1.3,
        "max_gamma": 64,
    }
    values = data["values"]
    assert values["expected_tokens"] == theory.expected_tokens(0.8, 5)
    assert values["tokens_variance"] == theory.tokens_variance(0.8, 5)
    assert values["walltime_speedup"] == theory.walltime_speedup(0.8, 5, 0.05, 1.3)
    assert values["walltime_speedup_v1"] == theory.walltime_speedup(0.8, 5, 0.05)
    assert values["ops_factor"] == theory.ops_factor(0.8, 5, 0.02)
    assert values["draft_calls_per_token"] == theory.draft_calls_per_token(0.8, 5)
    assert values["optimal_gamma"] == theory.optimal_gamma(0.8, 0.05) == 8
    assert math.isclose(sum(values["tokens_pmf"]), 1.0, rel_tol=1e-14)
    assert len(values["tokens_pmf"]) == 6
    latex = data["formulas"]["walltime_speedup"]["latex"]
    assert latex.startswith(r"\frac{1 - \alpha^{\gamma + 1}}")


def test_alpha_one_and_c_hat_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["theory", "--alpha", "1", "--gamma", "3", "--c", "0.1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["values"]["oracle_speedup_bound"] is None  # strict JSON: infinity is null
    assert data["values"]["expected_tokens"] == 4.0
    assert data["inputs"]["c_hat"] == 0.1  # defaults to --c
    assert data["values"]["ops_factor"] == pytest.approx((3 * 0.1 + 4) / 4, rel=1e-15)


def test_bad_input_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["theory", "--alpha", "1.5", "--gamma", "3", "--c", "0"]) == 2
    err = capsys.readouterr().err
    assert "specsim theory: error:" in err and "alpha must be a finite number in [0, 1]" in err
    assert main(["theory", "--alpha", "0.5", "--gamma", "-1", "--c", "0"]) == 2
    assert "gamma must be a non-negative integer, got -1.0" in capsys.readouterr().err
    assert main(["theory", "--alpha", "0.5", "--gamma", "2", "--c", "0", "--v", "0"]) == 2
    assert "--v: expected v >= 1 (verifying gamma + 1 positions" in capsys.readouterr().err
    assert main(["theory", "--alpha", "0.5"]) == 2
    assert "give --gamma, --c" in capsys.readouterr().err


def test_write_derivations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specsim.theory import derivations

    target = tmp_path / "docs" / "derivations.md"
    assert main(["theory", "--write-derivations", str(target)]) == 0
    assert f"wrote {target}" in capsys.readouterr().out
    derivations.check(target)


def test_a_free_draft_says_no_gamma_is_best(capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: this printed "best gamma in 0..64 (v = 1): 19", yet W rises at every gamma.
    assert main(["theory", "--alpha", "0.2", "--gamma", "3", "--c", "0"]) == 0
    out = capsys.readouterr().out
    assert "best gamma in 0..64 (v = 1): unbounded, W rises at every gamma towards 1.25" in out
    assert "no finite gamma is best; gamma = 19 gives W = 1.25" in out
    assert main(["theory", "--alpha", "0.2", "--gamma", "3", "--c", "0", "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert values["optimal_gamma_unbounded"] is True and values["optimal_gamma"] == 19
    assert values["speedup_supremum"] == 1.25
    assert main(["theory", "--alpha", "1", "--gamma", "3", "--c", "0", "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert values["optimal_gamma_unbounded"] is True and values["optimal_gamma"] == 64
    assert values["speedup_supremum"] is None  # infinite: every draft accepted, free drafts
    assert main(["theory", "--alpha", "0.8", "--gamma", "3", "--c", "0.05", "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert values["optimal_gamma_unbounded"] is False and values["optimal_gamma"] == 8
    assert values["speedup_supremum"] == values["optimal_walltime_speedup"]


_LIMITED = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from specsim.cli import main
sys.exit(main(["theory", "--alpha", "0.7", "--gamma", "4", "--c", "0.05",
               "--max-gamma", "1000000000", "--json"]))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="address-space limit checked on Linux")
def test_a_huge_max_gamma_needs_no_memory_for_it() -> None:
    # Regression: --max-gamma 10^9 allocated a float per gamma (24 GB); the search bisects.
    limit = 3 * 2**30  # the interpreter, numpy and sympy fit; a table of 10^9 floats does not
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(limit)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    values = json.loads(done.stdout)["values"]
    assert values["optimal_gamma"] == 6 and values["optimal_gamma_unbounded"] is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as on Linux")
def test_memory_does_not_grow_with_gamma_or_max_gamma() -> None:
    """`--gamma 10**9 --max-gamma 10**9` once allocated 24 GB; 1 GB of address space is plenty."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    argv = [
        "theory",
        "--alpha",
        "0.7",
        "--gamma",
        "1000000000",
        "--c",
        "0.05",
        "--max-gamma",
        "1000000000",
    ]
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "specsim", *argv, *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            preexec_fn=limit,
        )
        assert done.returncode == 0, done.stderr
    values = json.loads(done.stdout)["values"]
    assert values["tokens_pmf"] is None and values["optimal_gamma"] == 6
