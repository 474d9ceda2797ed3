"""The specsim command: help for every subcommand, the report's sampling demo, clean errors."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from specsim.cli import COMMANDS, SUBCOMMANDS, build_parser, main, subcommand_parser

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("matplotlib", "scipy", "pandas", "simpy", "sympy", "seaborn", "torch", "dask")


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


def _imported_by(code: str) -> set[str]:
    """Top-level packages a fresh interpreter has imported after running ``code``."""
    probe = code + "\nimport sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(done.stdout.split())


def test_help_imports_no_subcommand_and_nothing_heavy() -> None:
    """`specsim --help` lists every subcommand from the table, importing none of them."""
    code = (
        "import contextlib, io, sys\n"
        "from specsim.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "assert not [m for m in sys.modules if m.startswith('specsim.cli.')], sys.modules\n"
    )
    heavy = _imported_by(code) & set(HEAVY)
    assert not heavy, f"specsim --help imported {sorted(heavy)}"
    assert "numpy" not in _imported_by(code)


def test_theory_numbers_need_no_sympy() -> None:
    """The numeric twins and the printed forms load without sympy (start-up)."""
    code = (
        "from specsim import theory\n"
        "theory.walltime_speedup(0.7, 4, 0.05), theory.CLOSED_FORMS['expected_tokens'].text\n"
        "theory.markov_tokens_per_pass(alphas=(0.9, 0.5), weights=(0.5, 0.5), persistence=0.5,"
        " gamma=3)\n"
    )
    heavy = _imported_by(code) & set(HEAVY)
    assert not heavy, f"specsim.theory's numbers imported {sorted(heavy)}"


def test_a_subcommand_imports_only_its_own_module() -> None:
    code = (
        "import contextlib, io, sys\n"
        "from specsim.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['cards', '--help'])\n"
        "print('CLI', *sorted(m for m in sys.modules if m.startswith('specsim.cli.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["CLI", "specsim.cli.cards"]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_the_help_table_matches_a_module_that_still_states_its_own(name: str) -> None:
    """A subcommand module may not keep a HELP line that disagrees with the table."""
    module = importlib.import_module(f"specsim.cli.{name}")
    assert getattr(module, "HELP", COMMANDS[name]) == COMMANDS[name]
    assert callable(module.add_arguments) and callable(module.run)


def test_parsers_for_the_reference() -> None:
    assert subcommand_parser("cards").prog == "specsim cards"
    assert "--json" in subcommand_parser("cards").format_help()
    for bad in ("nope", "--help"):
        with pytest.raises(ValueError, match="expected one of"):
            build_parser(bad)
        with pytest.raises(ValueError, match="expected one of"):
            subcommand_parser(bad)


def test_an_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nope"])
    assert exc.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_no_subcommand_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_report_prints_the_two_token_demo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # One quick study keeps this fast; tests/report/test_report.py runs the whole report.
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


class _ClosedPipe:
    """A stdout whose reader has gone away."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_quietly_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from specsim.cli import PIPE_CLOSED

    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["cost", "--model", "llama-68m", "--hardware", "a100-80gb"]) == PIPE_CLOSED
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_ends_quietly() -> None:
    """``specsim cost ... | head -1``: no traceback, no 'Exception ignored' at exit."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specsim",
            "cost",
            "--model",
            "llama-68m",
            "--hardware",
            "a100-80gb",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the command writes
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""


def test_seed_below_zero_is_named_for_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["problems", "--seed", "-2"],
        ["simulate", "--alpha", "0.7", "--gamma", "2", "--seed", "-2"],
    ):
        assert main(argv) == 2
        assert capsys.readouterr().err.endswith("error: --seed: expected an integer >= 0, got -2\n")


def test_report_fresh_folder_never_reuses_one_that_holds_files(tmp_path: Path) -> None:
    from specsim.cli.report import fresh_folder

    base = str(tmp_path / "rep")
    assert fresh_folder(base) == Path(base)
    Path(base).mkdir()
    assert fresh_folder(base) == Path(base)  # empty: fine
    (Path(base) / "index.html").write_text("earlier")
    assert fresh_folder(base) == Path(f"{base}-2")
    Path(f"{base}-2").mkdir()
    (Path(f"{base}-2") / "x").write_text("x")
    assert fresh_folder(base) == Path(f"{base}-3")


def test_report_default_folder_moves_on_and_json_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "specsim-report").mkdir()
    (tmp_path / "specsim-report" / "index.html").write_text("an earlier report")
    assert main(["report", "--study", "bill", "--blocks", "20000", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["output_folder"] == str((tmp_path / "specsim-report-2").resolve())
    assert [s["name"] for s in record["studies"]] == ["bill"]
    assert len(record["verdicts"]) == 3 and all(v["verdict"] for v in record["verdicts"])
    assert (tmp_path / "specsim-report" / "index.html").read_text() == "an earlier report"
    # An explicit --out that holds files is refused, then written with --force.
    out = str(tmp_path / "specsim-report")
    assert main(["report", "--out", out, "--study", "bill", "--blocks", "20000"]) == 2
    assert "--force" in capsys.readouterr().err
