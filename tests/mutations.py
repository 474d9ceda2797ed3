"""The mutation check: one-line cost bugs, each of which some test must catch.

Run it from the repository root (``make mutations``)::

    python tests/mutations.py                  # every mutation; a table of the results
    python tests/mutations.py --list           # the list, nothing run
    python tests/mutations.py --only tree-kv-release --only stream-overlap-bonus
    python tests/mutations.py --markdown results.md   # also write the table as markdown

Each entry of :data:`MUTATIONS` names a file of the package, the exact snippet to change
(it must occur exactly once: an entry whose snippet a refactor moved or changed is
refused as stale, never skipped), its one-line replacement, the cost term it removes or
breaks, and the test files that should catch it. The script copies ``specsim/``,
``tests/``, ``pyproject.toml`` and ``conftest.py`` to a temporary folder (the cards,
studies, benchmarks and docs are linked, read-only), checks that the named tests pass
there unmutated (the baseline), then applies each mutation in turn to the copy, runs
only its named test files with ``pytest -x -q``, records caught or missed, the first
failing test and the time, and restores the file. The working tree is never edited.
A run that exceeds ``--timeout`` counts as caught (a hang fails the suite too) and is
marked so. The exit status is 1 when any mutation was missed, 2 when an entry is stale
or the baseline fails.

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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("specsim", "tests", "pyproject.toml", "conftest.py")
LINKED = ("models", "studies", "benchmarks", "docs")


@dataclass(frozen=True)
class Mutation:
    """A one-line bug: in ``path``, ``original`` (exactly once) becomes ``replacement``."""

    name: str
    path: str
    original: str
    replacement: str
    breaks: str
    tests: tuple[str, ...]
    timeout_s: float | None = None  # where the expected failure is a hang: stop sooner


ROOF = "specsim/cost/roofline.py"
COST_TESTS = ("tests/cost/test_cost.py",)

MUTATIONS: tuple[Mutation, ...] = (
    # The roofline's terms.
    Mutation(
        "roofline-weights",
        ROOF,
        "dense_weights_s=L * w_layer / W,",
        "dense_weights_s=0.0,",
        "roofline: the layers' weight bytes read once per pass",
        COST_TESTS,
    ),
    Mutation(
        "roofline-kv-bytes",
        ROOF,
        "attention_cached_s=L * kv / W,",
        "attention_cached_s=0.0,",
        "roofline: reading the cached KV entries",
        COST_TESTS,
    ),
    Mutation(
        "roofline-attention-flops",
        ROOF,
        "attn_flops = 4.0 * model.head_dim * model.heads / tp",
        "attn_flops = 2.0 * model.head_dim * model.heads / tp",
        "roofline: attention flops per (query, key) pair halved",
        COST_TESTS,
    ),
    Mutation(
        "roofline-layer-overhead",
        ROOF,
        "overhead = L * rt.layer_overhead_s + rt.pass_overhead_s",
        "overhead = rt.pass_overhead_s",
        "roofline: the stack's per-layer launch overhead",
        COST_TESTS + ("tests/cost/test_runtime.py",),
    ),
    Mutation(
        "roofline-allreduce",
        ROOF,
        "ring = n_allreduce * factor * d * ab / hw.interconnect_bandwidth",
        "ring = 0.0",
        "tensor parallelism: the all-reduces' bandwidth term",
        ("tests/cost/test_cost_collectives.py",),
    ),
    Mutation(
        "energy-dynamic-power",
        ROOF,
        "energy = (co.idle_w + co.dynamic_w * util) * time",
        "energy = co.idle_w * time",
        "energy: the utilisation-driven power above idle",
        COST_TESTS + ("tests/cost/test_cost_sources.py", "tests/sim/test_cost_bugs.py"),
    ),
    # The pass shape.
    Mutation(
        "shape-gamma-plus-one",
        "specsim/cost/shape.py",
        "    return gamma + 1\n",
        "    return gamma\n",
        "pass shape: a chain verifies gamma + 1 positions (the bonus/correction position)",
        ("tests/cost/test_pass_shape.py",),
    ),
    Mutation(
        "shape-tree-pairs",
        "specsim/cost/shape.py",
        "own = float(sum(_depths(self.parents)))",
        "own = 0.0",
        "pass shape: a tree's attention pairs among its own nodes",
        ("tests/cost/test_pass_shape.py",),
    ),
    # Proposers.
    Mutation(
        "draft-model-depth-context",
        "specsim/proposers/kinds.py",
        "        c = ctx + (d - 1)\n",
        "        c = ctx\n",
        "draft model: step d runs after the d - 1 tokens drafted before it",
        ("tests/proposers/test_proposers.py", "tests/sim/test_cost_bugs.py"),
    ),
    Mutation(
        "heads-layer-fraction",
        "specsim/proposers/kinds.py",
        "scale = self.card.layer_fraction / target.layers",
        "scale = 1.0 / target.layers",
        "heads: a head costs its card's fraction of a target layer",
        ("tests/proposers/test_heads.py", "tests/proposers/test_proposers.py"),
    ),
    Mutation(
        "ngram-free",
        "specsim/proposers/kinds.py",
        "        zero = np.zeros(_contexts(context).shape)\n",
        "        zero = np.ones(_contexts(context).shape)\n",
        "n-gram: prompt lookup has no model, so drafting costs nothing",
        ("tests/proposers/test_proposers.py",),
    ),
    # Chain serving.
    Mutation(
        "serving-draft-prefill",
        "specsim/sim/router.py",
        "pc = cost.prefill(tokens, draft=draft) if tokens.shape[0] else _NO_PASS",
        "pc = cost.prefill(tokens, draft=False) if tokens.shape[0] else _NO_PASS",
        "chain serving: the draft model's prefill of the admitted prompts",
        ("tests/sim/test_sim_serving.py",),
    ),
    Mutation(
        "serving-draft-steps",
        "specsim/sim/costs.py",
        "            for j in range(gamma):  # draft step j",
        "            for j in range(gamma - 1):  # draft step j",
        "chain serving: one draft step per drafted token (one dropped)",
        ("tests/sim/test_sim_serving.py", "tests/cost/test_cost_sources.py"),
    ),
    Mutation(
        "serving-verify-positions",
        "specsim/sim/costs.py",
        "T, S, R = chain_sums(b, sc, verification_positions(float(gamma)), te)",
        "T, S, R = chain_sums(b, sc, float(gamma), te)",
        "chain serving: the verification pass of gamma + 1 positions (fast path)",
        ("tests/sim/test_sim_serving.py", "tests/cost/test_cost_sources.py"),
    ),
    Mutation(
        "serving-kv-release",
        "specsim/sim/batch.py",
        "        self.used -= int(self.reserve[finished].sum())\n",
        "        self.used -= 0\n",
        "chain serving: a finished request frees its KV reservation (without it, admission "
        "waits forever for room: the run hangs)",
        ("tests/sim/test_cost_bugs.py", "tests/sim/test_sim_serving.py"),
        timeout_s=90.0,
    ),
    Mutation(
        "paged-recompute",
        "specsim/sim/router.py",
        "tokens = np.concatenate([req.prompt[adm], rebuild])",
        "tokens = req.prompt[adm]",
        "paged serving: a preempted request's cache is recomputed when it comes back",
        ("tests/sim/test_serving_paged.py",),
    ),
    Mutation(
        "paged-swap",
        "specsim/sim/paged.py",
        "return tokens * self.swap[1] / self.swap[0]",
        "return 0.0",
        "paged serving: swapping KV to the host and back costs link time",
        ("tests/sim/test_serving_paged.py",),
    ),
    Mutation(
        "chunked-prefill-chunks",
        "specsim/sim/costs.py",
        "tb = T + tc\n",
        "tb = T\n",
        "chunked prefill: the chunks' tokens in the shared pass",
        ("tests/sim/test_serving_chunked.py", "tests/sim/test_reference_serving.py"),
    ),
    # Tree serving.
    Mutation(
        "tree-kv-release",
        "specsim/sim/tree_batch.py",
        "                    done += 1\n                    used -= int(reserve[i])\n",
        "                    done += 1\n",
        "tree serving: a one-token request frees its KV reservation",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-draft-prefill",
        "specsim/sim/tree_batch.py",
        "t, e = t + d.time_s, e + d.energy_j",
        "t, e = t, e",
        "tree serving: the draft model's prefill",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-own-pairs",
        "specsim/sim/tree_batch.py",
        "pairs=float(n1 @ c) + own,",
        "pairs=float(n1 @ c),",
        "tree serving: the verification pass's pairs among each tree's own positions",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-draft-context",
        "specsim/sim/tree_serving.py",
        "context=int(round(float(ctx.sum()) / b)),",
        "context=0,",
        "tree serving: the draft priced at the batch's context, not at 0",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "dynamic-tree-draft-depth",
        "specsim/sim/tree_serving_dynamic.py",
        "c = np.asarray(contexts, dtype=np.float64)[:, None] + np.arange(depth)",
        "c = np.asarray(contexts, dtype=np.float64)[:, None] + 0.0 * np.arange(depth)",
        "dynamic tree serving: draft step d after the d - 1 drafted tokens",
        ("tests/sim/test_tree_serving_dynamic.py",),
    ),
    # The single stream.
    Mutation(
        "stream-overlap-bonus",
        "specsim/sim/stream.py",
        "e = a if (overlapped and g > 0 and a == g) else a + 1",
        "e = a + 1",
        "stream, overlapped: a fully accepted block's bonus gives way to the pre-drafted block",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "stream-overlap-timeline",
        "specsim/sim/stream.py",
        "ds = prev_d if prev_full else prev_v",
        "ds = prev_v",
        "stream, overlapped: after a full block, drafting continued during the pass",
        ("tests/sim/test_sim_stream.py",),
    ),
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
