"""The specsim command: help for every subcommand, the report's sampling demo, clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specsim.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    assert "usage: specsim " + name in capsys.readouterr().out


def test_no_subcommand_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_report_prints_the_two_token_demo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # One quick study keeps this fast; tests/test_report.py runs the whole report.
    args = ["report", "--out", str(tmp_path), "--study", "bill", "--blocks", "20000", "--seed", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "acceptance sum min(p, q)       0.6" in out
    assert "correction norm(max(0, p - q)) (1, 0)" in out
    assert "rejected B corrected to A      1.0000" in out
    assert f"report: {(tmp_path / 'index.html').resolve()}" in out


def test_console_script_runs_as_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specsim", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("specsim ")
