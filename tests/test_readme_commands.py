"""Every command of the README runs on a fresh clone as written there (issue 25).

The commands are read from the README's ``sh`` blocks, so a new README command is tested
without editing this file. Each runs in this process (``specsim.cli.main``, or the
module's ``main`` for ``python -m``) from the repository root, and must exit 0. Not run:
the commands that set up or run the test suite itself (``make ...``, ``pytest``), as the
Quick start says they take minutes.

The long ones run in a shrunk form, by these documented substitutions (:func:`shrunk`):

- every output goes to a temporary folder: ``--out`` (given or added for ``study`` and
  ``sweep``, whose default is under ``out/``) and the README's placeholders: ``DIR``
  (a fresh folder at each ``measure``, the latest one afterwards), ``CARD.toml`` and
  ``CARD`` (one card path), ``PROFILE.toml``; ``HARDWARE`` is ``cpu-epyc-2vcpu``;
- ``simulate --tokens N`` decodes 2,000 tokens; ``validate`` runs ``--quick``;
  ``study`` runs ``--fast`` with fewer requests (:data:`STUDY_SETS`: capacity on one
  accelerator at coarser precision, engine with two routers);
- ``sweep SPEC`` runs SPEC with ``tokens = 500`` in its ``[config]`` (a copy in the
  temporary folder);
- ``measure`` adds ``--quiet`` and, unless it builds corpora only or says it already,
  ``--shrink`` (:func:`specsim.measure.shrink`; for ``--preset real --stage alpha``,
  :data:`specsim.measure.realrun.SHRUNK`); the ``real`` preset's ``--work`` is one
  temporary folder;
- ``calibrate`` adds ``--force``: a shrunk measurement is too small for a fit the
  command trusts (and the card is marked untrusted).

The ``measure`` and ``calibrate`` commands run in one test, in README order: each
reads what the ones before it wrote. That test is skipped with a message naming the
extra when torch is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from specsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN = ("make", "pytest")
PLACEHOLDERS = ("DIR", "CARD.toml", "CARD", "PROFILE.toml", "HARDWARE")
NEEDS_TORCH = "needs the measure extra: pip install -e .[measure]"
STUDY_SETS = {
    "capacity": (
        "hardware=h200",
        "requests=200",
        "fast_max_requests=400",
        "precision=0.1",
        "crossover_precision=0.2",
    ),
    "engine": ("fast_requests=200", "routers=round-robin,least-outstanding"),
}
"""The study keys a shrunk study sets before the README's own ``--set`` (which win)."""


def readme_commands(path: Path = README) -> list[list[str]]:
    """argv of every command in the page's ``sh`` blocks (comments dropped), in order."""
    out, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh" and not inside
            continue
        words = shlex.split(line, comments=True) if inside else []
        if words:
            out.append(words)
    return out


def _runs(words: list[str]) -> bool:
    """Whether this test runs the command (not the suite's own set-up and runs)."""
    return not any(w == "make" or w.endswith("pytest") for w in words[:5])


def _chained(words: list[str]) -> bool:
    return words[0].endswith("specsim") and words[1] in ("measure", "calibrate")


def _set_out(argv: list[str], path: Path) -> list[str]:
    if "--out" in argv:
        argv[argv.index("--out") + 1] = str(path)
        return argv
    return [*argv, "--out", str(path)]


def shrunk(words: list[str], tmp: Path, state: dict[str, str]) -> list[str]:
    """The argv this test runs for one README command (the module docstring's rules);
    ``state`` carries the placeholders from one command to the next."""
    argv = words[3:] if words[0].endswith("python") else words[1:]  # after "-m specsim.x"
    sub = argv[0] if argv else ""
    if sub == "measure" and "DIR" in argv:
        state["DIR"] = str(tmp / f"measured-{len(state)}")
    state.setdefault("CARD.toml", str(tmp / "card.toml"))
    state.setdefault("CARD", state["CARD.toml"])
    state.setdefault("PROFILE.toml", str(tmp / "profile.toml"))
    state.setdefault("HARDWARE", "cpu-epyc-2vcpu")
    argv = [state.get(w, w) if w in PLACEHOLDERS else w for w in argv]
    if sub == "simulate" and "--tokens" in argv:
        argv[argv.index("--tokens") + 1] = "2000"
    if sub == "validate" and "--quick" not in argv:
        argv.append("--quick")
    if sub == "study":
        sets = [x for key in STUDY_SETS.get(argv[1], ()) for x in ("--set", key)]
        argv = _set_out([argv[0], argv[1], *sets, *argv[2:], "--fast"], tmp / f"study-{argv[1]}")
    if sub == "sweep":
        spec = tmp / Path(argv[1]).name
        text = (ROOT / argv[1]).read_text()
        spec.write_text(re.sub(r"(?m)^tokens = \d+", "tokens = 500", text, count=1))
        argv = _set_out([argv[0], str(spec), *argv[2:]], tmp / "sweep.csv")
    if sub == "measure":
        stages = argv[argv.index("--stage") + 1 :] if "--stage" in argv else ["alpha"]
        if "--shrink" not in argv and "alpha" in stages:
            argv.append("--shrink")
        argv.append("--quiet")
        if "--work" in argv:
            argv[argv.index("--work") + 1] = str(tmp / "real-work")
    if sub == "calibrate":
        argv.append("--force")
    return argv


def _run(words: list[str], argv: list[str]) -> int:
    if words[0].endswith("python"):
        return int(importlib.import_module(f"{words[2]}.__main__").main(argv))
    return main(argv)


COMMANDS = [w for w in readme_commands() if _runs(w)]
SINGLE = [w for w in COMMANDS if not _chained(w)]
CHAIN = [w for w in COMMANDS if _chained(w)]


def test_the_readme_has_its_commands() -> None:
    """The parser finds the block (a README reorganised into another fence would silently
    test nothing)."""
    subs = {w[1] for w in COMMANDS if w[0].endswith("specsim")}
    assert {"theory", "cost", "simulate", "validate", "study", "measure", "calibrate"} <= subs
    assert [w[1] for w in CHAIN][:4] == ["measure", "calibrate", "measure", "calibrate"]


@pytest.mark.slow
@pytest.mark.parametrize("words", SINGLE, ids=[" ".join(w[1:4]) for w in SINGLE])
def test_a_readme_command_runs(words: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = shrunk(words, tmp_path, {})
    assert _run(words, argv) == 0, argv


@pytest.mark.slow
@pytest.mark.measure
def test_the_readme_measure_calibrate_commands_run_in_turn(tmp_path: Path, monkeypatch) -> None:
    """``measure --out DIR``, ``calibrate DIR ... --out CARD.toml``, the rows preset and a
    profile on that card, the real-text corpora and the alpha stage on them: each command
    reads what the ones before it wrote."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip(NEEDS_TORCH)
    monkeypatch.chdir(ROOT)
    state: dict[str, str] = {}
    for words in CHAIN:
        argv = shrunk(words, tmp_path, state)
        assert _run(words, argv) == 0, argv
    assert Path(state["CARD.toml"]).is_file() and Path(state["PROFILE.toml"]).is_file()
    assert (Path(state["DIR"]) / "alpha-summary.csv").is_file()
