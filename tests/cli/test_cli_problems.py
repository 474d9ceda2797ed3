"""``specsim problems``: what it prints, its options, and that the committed set is its output."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.cli import SUBCOMMANDS, main
from specsim.problems import TEMPLATES, generate, render_latex, render_markdown

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "problems" / "set-seed-1.md"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["problems", *argv]) == 0
    return capsys.readouterr().out


def test_registered() -> None:
    assert "problems" in SUBCOMMANDS


def test_statements_only_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "--seed", "3")
    assert out.startswith("# Problem set, seed 3\n")
    assert out.count("\n### Problem ") == len(TEMPLATES)
    assert "## Answer key" not in out and "**Answers**" not in out
    assert out == render_markdown(generate(3))


def test_answers_append_the_worked_key(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "--seed", "3", "--answers")
    assert "## Answer key" in out
    assert out.count("\n### Solution ") == len(TEMPLATES)
    assert out.count("**Answers**, rounded as shown:") == len(TEMPLATES)
    assert out == render_markdown(generate(3), answers=True)


def test_same_seed_same_output_different_seed_different(capsys: pytest.CaptureFixture[str]) -> None:
    a = run(capsys, "--seed", "8", "--answers")
    b = run(capsys, "--seed", "8", "--answers")
    c = run(capsys, "--seed", "9", "--answers")
    assert a == b
    assert a != c


def test_level_filter(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "--seed", "2", "--level", "2", "--answers")
    n2 = sum(t.level == 2 for t in TEMPLATES)
    assert out.count("\n### Problem 2.") == n2
    assert "Problem 1." not in out and "Problem 3." not in out
    assert "`specsim problems --seed 2 --level 2 --answers`" in out
    both = run(capsys, "--seed", "2", "--level", "3", "--level", "1")
    assert "Problem 2." not in both and "Problem 1.1" in both and "Problem 3.1" in both


def test_latex_format(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "--seed", "4", "--format", "latex", "--answers")
    assert out.startswith("\\documentclass")
    assert out.rstrip().endswith("\\end{document}")
    assert out == render_latex(generate(4), answers=True)


def test_bad_seed_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["problems", "--seed", "-5"]) == 2
    err = capsys.readouterr().err
    assert "specsim problems: error: --seed" in err and "-5" in err


def test_bad_level_is_refused_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["problems", "--level", "4"])
    assert exc.value.code == 2
    assert "--level" in capsys.readouterr().err


def test_committed_set_is_the_commands_output(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "--seed", "1", "--answers")
    assert COMMITTED.read_text(encoding="utf-8") == out, (
        "regenerate: specsim problems --seed 1 --answers > docs/problems/set-seed-1.md"
    )


def test_json_holds_the_set_and_its_answers(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["problems", "--seed", "3", "--json", "--answers"]) == 0
    record = json.loads(capsys.readouterr().out)
    ps = generate(3)
    assert record["seed"] == 3 and len(record["problems"]) == len(ps.problems)
    bill = next(p for p in record["problems"] if p["key"] == "buried_bill")
    assert bill["number"] == "2.4" and bill["answers"][1]["text"] == "1.469"
    assert main(["problems", "--seed", "3", "--json"]) == 0
    assert "answers" not in json.loads(capsys.readouterr().out)["problems"][0]
