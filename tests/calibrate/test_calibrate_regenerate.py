"""docs/calibration.md's ``specsim calibrate`` commands regenerate the committed cards,
profiles, residuals and runs from the committed traces (issue 25).

Each command is read from the page's ``sh`` blocks, so a new calibration command there is
checked here too. Its outputs go to a temporary folder under their own file names (so
slugs are the same); the card or profile is compared with the committed file key by key,
numbers within a relative 1e-4 (the page prints three or four digits) and numbers inside
text (the untrusted notes print four) within one unit of their last printed digit, and
the CSVs within a relative 1e-4. The figure (``--plot``) is drawn but not compared.
Commands for measurements not committed (the page's H200 profile) are left out.
"""

from __future__ import annotations

import math
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from specsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "calibration.md"
OUTPUTS = ("--out", "--residuals", "--runs", "--plot")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def calibrate_commands(page: Path = PAGE) -> list[list[str]]:
    """Every ``specsim calibrate`` command line of the page's ``sh`` blocks, as argv."""
    out, inside = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh" and not inside
            continue
        words = shlex.split(line) if inside else []
        if words and words[0].endswith("specsim") and words[1:2] == ["calibrate"]:
            out.append(words[1:])
    return out


def _redirect(argv: list[str], tmp: Path) -> tuple[list[str], dict[str, str]]:
    """argv with each output path moved into ``tmp`` (same file name); tmp path -> committed."""
    new, back = list(argv), {}
    for i, word in enumerate(argv[:-1]):
        if word in OUTPUTS:
            moved = str(tmp / Path(argv[i + 1]).name)
            new[i + 1], back[moved] = moved, argv[i + 1]
    return new, back


def _same_text(got: str, want: str) -> bool:
    """Equal but for printed numbers, each within one unit of its last printed digit."""
    if _NUMBER.sub("#", got) != _NUMBER.sub("#", want):
        return False
    for a, b in zip(_NUMBER.findall(got), _NUMBER.findall(want), strict=True):
        digits = b.lower().split("e")[0].lstrip("-+")
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        exponent = int(b.lower().split("e")[1]) if "e" in b.lower() else 0
        if abs(float(a) - float(b)) > 1.01 * 10.0 ** (exponent - decimals):
            return False
    return True


def _compare(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), where
        for key in want:
            _compare(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _compare(a, b, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-12), (where, got, want)
    elif isinstance(want, str):
        assert _same_text(got, want), (where, got, want)
    else:
        assert got == want, (where, got, want)


# The page also shows commands for measurements not committed yet (the H200 profile): only
# the commands whose card or profile is committed can be regenerated.
COMMANDS = [a for a in calibrate_commands() if (ROOT / a[a.index("--out") + 1]).exists()]


def test_the_page_has_the_card_and_profile_commands() -> None:
    outs = [argv[argv.index("--out") + 1] for argv in COMMANDS]
    assert "models/calibrated/cpu-epyc-2vcpu.toml" in outs
    assert "models/calibrated/cpu-xeon-2vcpu.toml" in outs
    assert sum(o.startswith("models/runtime/") for o in outs) == 3
    for path in Path(ROOT / "models" / "calibrated").glob("*.toml"):  # every committed card
        assert f"models/calibrated/{path.name}" in outs, path


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv", COMMANDS, ids=[Path(a[a.index("--out") + 1]).stem for a in COMMANDS]
)
def test_a_committed_calibration_regenerates(argv: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    moved, back = _redirect(argv, tmp_path)
    assert main(moved) == 0
    for new, old in back.items():
        if old.endswith(".png"):
            assert Path(new).stat().st_size > 0
            continue
        if old.endswith(".csv"):
            pd.testing.assert_frame_equal(
                pd.read_csv(new), pd.read_csv(ROOT / old), check_exact=False, rtol=1e-4
            )
            continue
        text = Path(new).read_text()
        for a, b in back.items():
            text = text.replace(a, b)
        _compare(tomllib.loads(text), tomllib.loads((ROOT / old).read_text()), old)
