"""Batched tree and multi-draft verification against the chain's verify_batch, same tokens verified.

Run: .venv/bin/python benchmarks/bench_tree_sampling.py
Each verifier checks 8 drafted tokens per row for 64 rows, V = 32,000, float64: the
chain (gamma 8), a tree of 8 nodes (two children at the root, each with two, then one
more level: SpecInfer's multi-step speculative sampling, and greedy), two drafts of 4
tokens (SpecTr's k-sequential selection and multi-step sampling), and Medusa's typical
acceptance on the tree. Reported as ratios to verify_batch timed in the same run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_time, machine, table  # noqa: E402

from specsim.sampling import verify_batch  # noqa: E402
from specsim.sampling.multidraft import verify_multidraft_batch  # noqa: E402
from specsim.sampling.tree import sample_tree_tokens, verify_tree_batch  # noqa: E402
from specsim.sampling.typical import typical_tree_batch  # noqa: E402

BATCH, GAMMA, VOCAB = 64, 8, 32_000
TREE = [-1, -1, 0, 0, 1, 1, 2, 3]  # 8 nodes, depth 3
K, LENGTH = 2, 4  # two drafts of four tokens: 8 drafted tokens


def _rows(rng: np.random.Generator, *shape: int) -> np.ndarray:
    out = rng.random((*shape, VOCAB)) ** 4  # peaked rows, so that acceptance is not trivial
    out /= out.sum(-1, keepdims=True)
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    q, p = _rows(rng, BATCH, GAMMA), _rows(rng, BATCH, GAMMA + 1)
    toks = rng.integers(0, VOCAB, size=(BATCH, GAMMA))
    tree_toks, tree_law = sample_tree_tokens(TREE, q, rng)
    md_toks = rng.integers(0, VOCAB, size=(BATCH, K, LENGTH))
    md_q, md_p = _rows(rng, BATCH, K, LENGTH), _rows(rng, BATCH, K, LENGTH + 1)
    chain = best_time(lambda: verify_batch(toks, q, p, rng))
    runs = [
        (
            "tree, multi-step speculative sampling",
            best_time(lambda: verify_tree_batch(TREE, tree_toks, tree_law, p, rng)),
        ),
        (
            "tree, greedy",
            best_time(lambda: verify_tree_batch(TREE, tree_toks, None, p, rng, greedy=True)),
        ),
        (
            "tree, typical acceptance (not exact)",
            best_time(lambda: typical_tree_batch(TREE, tree_toks, p, rng, epsilon=0.09, delta=0.3)),
        ),
        (
            f"{K} drafts x {LENGTH}, k-sequential (SpecTr)",
            best_time(lambda: verify_multidraft_batch(md_toks, md_q, md_p, rng, method="kseq")),
        ),
        (
            f"{K} drafts x {LENGTH}, multi-step sampling",
            best_time(lambda: verify_multidraft_batch(md_toks, md_q, md_p, rng, method="mss")),
        ),
    ]
    print(
        f"## tree and multi-draft verification (batch {BATCH}, 8 drafted tokens per row, "
        f"V {VOCAB:,}, float64; {machine()})\n"
    )
    rows = [("chain verify_batch, gamma 8 (baseline)", f"{chain * 1e3:.1f} ms")]
    rows += [(name, f"{t * 1e3:.1f} ms ({t / chain:.2f}x the chain)") for name, t in runs]
    print(table(rows))


if __name__ == "__main__":
    main()
