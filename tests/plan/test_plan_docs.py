"""docs/plan.md shows what its commands print: each ``specsim plan`` block is run and its
output compared with the ``text`` block after it (the timing line left out). When the
model changes, rerun the command and paste its output."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from specsim.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plan.md"
_PAIR = re.compile(r"```sh\n(specsim plan [^\n]*)\n```\n\n```text\n(.*?)\n```", re.S)
_TIMING = re.compile(r"^\(\d+(\.\d+)? s\)$")


def examples() -> list[tuple[str, str]]:
    return _PAIR.findall(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_its_three_questions() -> None:
    assert len(examples()) >= 4


@pytest.mark.slow
@pytest.mark.parametrize(("command", "shown"), examples(), ids=lambda s: s[:60])
def test_each_example_prints_what_the_page_shows(
    command: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(shlex.split(command)[1:]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not _TIMING.match(ln)]
    assert "\n".join(lines).strip() == shown.strip(), f"docs/plan.md is stale for: {command}"


def test_the_readme_quotes_the_verdict_the_page_shows() -> None:
    readme = (PAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    first = re.search(r"## The answer, in one command\n\n```sh\n\.venv/bin/(.*?)\n```", readme)
    quoted = re.search(r"opens with the verdict[^\n]*\n\n```text\n(.*?)\n```", readme)
    assert first and quoted
    shown = dict(examples())
    assert first.group(1) in shown, "the README's plan command is not one of docs/plan.md's"
    assert quoted.group(1) == shown[first.group(1)].splitlines()[0]
