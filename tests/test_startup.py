"""What a command imports when it starts: a fixed allow-list of heavy packages per command.

Each command runs in a fresh interpreter, and the test reads which of the heavy packages
(:data:`HEAVY`) were imported by the time it finished. A package outside the command's
allow-list fails the test, so a new module-level ``import scipy`` (or pandas, matplotlib,
sympy, torch) on a command's path is caught where it is added; a package that has to load
says why in :data:`ALLOWED`. The start-up time itself is measured, not tested:
``benchmarks/bench_startup.py`` (figures in ``docs/performance.md``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "pandas", "matplotlib", "sympy", "torch")
PLAN = (
    "plan --model llama-2-70b --hardware h100-sxm --tensor-parallel 4 --draft llama-2-7b "
    "--alpha 0.7 --ngram --batch 16"
)

# command -> the heavy packages it may import
ALLOWED: dict[str, frozenset[str]] = {
    "--help": frozenset(),
    # plain parameters: numpy and simpy draw and time the stream, nothing else
    "simulate --alpha 0.7 --gamma 4 --c 0.05 --tokens 1000 --json": frozenset(),
    # a stream config, as the plain parameters: the config loader reads its TOML and builds
    # the stream; the serving engine and the trace readers (pandas) load only for a serving
    # config or a trace file, scipy only where an interval or a test statistic is computed
    "simulate studies/configs/stream-plain.toml --set tokens=1000 --json": frozenset(),
    # a plan's evaluation and verdict are tables; a closed batch prints no interval
    PLAN: frozenset({"pandas"}),
}

PROBE = """
import contextlib, io, json, sys
from specsim.cli import main
out, code = io.StringIO(), 0
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code or 0
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.read())))
print(json.dumps({"code": code, "chars": len(out.getvalue()), "heavy": heavy}))
"""


def started(command: str, *, before: str = "") -> dict[str, object]:
    """``command``'s exit code, the size of what it printed and the heavy packages it
    imported, from a fresh interpreter (that first runs ``before``)."""
    done = subprocess.run(
        [sys.executable, "-c", before + PROBE, *command.split()],
        input=json.dumps(HEAVY),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("command", sorted(ALLOWED))
def test_a_command_imports_only_its_allowed_heavy_packages(command: str) -> None:
    got = started(command)
    assert got["code"] == 0 and got["chars"], got
    extra = set(got["heavy"]) - ALLOWED[command]  # type: ignore[call-overload]
    assert not extra, f"`specsim {command}` imported {sorted(extra)} (allowed: {ALLOWED[command]})"


def test_the_check_can_fail() -> None:
    """A heavy package imported on the way (here before the command) is reported."""
    assert started("--help", before="import scipy.stats\n")["heavy"] == ["scipy"]
