"""The mutation check: one-line cost bugs, each of which some test must catch.

Run it from the repository root (``make mutations``)::

    python tests/mutations.py                  # every mutation; a table of the results
    python tests/mutations.py --list           # the list, nothing run
    python tests/mutations.py --only tree-kv-release --only stream-overlap-bonus
    python tests/mutations.py --markdown results.md   # also write the table as markdown

Each entry of ``MUTATIONS`` (``tests/mutation_list.py`` and ``mutation_list_sim.py``, by
layer) names a file of the package, the exact snippet to change (it must occur exactly
once: an entry whose snippet a refactor moved or changed is refused as stale, never
skipped), its one-line replacement, the cost term it removes or breaks, and the test
files that should catch it. The script copies ``specsim/``, ``tests/``,
``pyproject.toml`` and ``conftest.py`` to a temporary folder (the cards, studies,
benchmarks and docs are linked, read-only), checks that the named tests pass there
unmutated (the baseline), then applies each mutation in turn to the copy, runs only its
named test files with ``pytest -x -q``, records caught or missed, the first failing test
and the time, and restores the file. The working tree is never edited. A run that
exceeds ``--timeout`` counts as caught (a hang fails the suite too) and is marked so; none
of the list is expected to hang (the two KV-release mutations, which once did, now end in
the serving engine's ValueError that nothing will ever be admitted:
``specsim.sim.serving.batch.Admission.check_progress``).
The exit status is 1 when any mutation was missed, 2 when an entry is stale or the
baseline fails.

Not collected by pytest (the name does not start with ``test_``); importing it runs
nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mutation_list import COST, PROPOSERS, Mutation  # beside this script: on the path
from mutation_list_cards import CARDS
from mutation_list_fixed import FIXED
from mutation_list_hardening import HARDENING
from mutation_list_kernels import KERNELS
from mutation_list_plan import PLAN
from mutation_list_sim import SIM
from mutation_list_stack import STACK

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("specsim", "tests", "pyproject.toml", "conftest.py")
LINKED = ("models", "studies", "benchmarks", "docs")
MUTATIONS: tuple[Mutation, ...] = (
    COST + PROPOSERS + SIM + STACK + KERNELS + FIXED + CARDS + HARDENING + PLAN
)


def check_entries(mutations: tuple[Mutation, ...], root: Path) -> None:
    """Refuse (SystemExit 2) any entry whose snippet is not found exactly once."""
    stale = []
    for m in mutations:
        file = root / m.path
        count = file.read_text().count(m.original) if file.is_file() else -1
        if count != 1:
            where = "the file is missing" if count < 0 else f"found {count} times"
            stale.append(f"  {m.name}: {m.original!r} in {m.path}: {where}")
    if stale:
        sys.exit("stale mutation entries (update tests/mutations.py):\n" + "\n".join(stale))


def copy_tree(dest: Path) -> None:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    for name in LINKED:
        if (ROOT / name).exists():
            (dest / name).symlink_to(ROOT / name)


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str, float]:
    """Run ``tests`` in ``tree``: ('passed' | 'failed' | 'timeout', first failure, seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE"]
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [*cmd, *tests], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"no result in {timeout:g} s", time.perf_counter() - t0
    took = time.perf_counter() - t0
    if out.returncode == 0:
        return "passed", "", took
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    first = lines[0].split(" ", 1)[1].split(" - ")[0] if lines else out.stdout[-300:]
    return "failed", first, took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], help="a mutation's name (repeat)")
    ap.add_argument("--list", action="store_true", help="print the list and exit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per test run")
    ap.add_argument("--markdown", type=Path, help="also write the results table here")
    args = ap.parse_args(argv)
    names = {m.name for m in MUTATIONS}
    unknown = sorted(set(args.only) - names)
    if unknown:
        ap.error(f"--only: no mutation named {', '.join(unknown)}; --list shows them")
    chosen = tuple(m for m in MUTATIONS if not args.only or m.name in args.only)
    check_entries(chosen, ROOT)
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}: {m.breaks}; caught by {', '.join(m.tests)}")
        return 0
    rows: list[tuple[Mutation, str, str, float]] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specsim-mutations-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        union = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        status, first, took = run_tests(tree, union, args.timeout)
        print(f"baseline ({len(union)} test files): {status} in {took:.1f} s", flush=True)
        if status != "passed":
            print(f"the unmutated tests do not pass ({first}): nothing can be judged")
            return 2
        for m in chosen:
            file = tree / m.path
            text = file.read_text()
            file.write_text(text.replace(m.original, m.replacement, 1))
            try:
                limit = args.timeout if m.timeout_s is None else min(args.timeout, m.timeout_s)
                status, first, took = run_tests(tree, m.tests, limit)
            finally:
                file.write_text(text)
            verdict = {"failed": "caught", "timeout": "caught (timeout)"}.get(status, "MISSED")
            rows.append((m, verdict, first, took))
            print(f"{m.name}: {verdict} {first} ({took:.1f} s)", flush=True)
    total = time.perf_counter() - t_all
    table = markdown(rows, total)
    print(table)
    if args.markdown is not None:
        args.markdown.write_text(table)
    return 1 if any(v == "MISSED" for _, v, _, _ in rows) else 0


def markdown(rows: list[tuple[Mutation, str, str, float]], total: float) -> str:
    """The results as a markdown table, with the total time."""
    out = [
        "| mutation | file | what it breaks | result | first failing test | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for m, verdict, first, took in rows:
        out.append(f"| `{m.name}` | `{m.path}` | {m.breaks} | {verdict} | `{first}` | {took:.1f} |")
    caught = sum(v != "MISSED" for _, v, _, _ in rows)
    out.append("")
    out.append(f"{caught} of {len(rows)} caught; {total:.0f} s in all, baseline included.")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
