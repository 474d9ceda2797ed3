"""The single-stream tree simulator against the tree closed forms (``specsim validate``).

For a handful of token trees, :func:`specsim.sim.stream.tree_stream.simulate_tree_stream` decodes
requests pass by pass (sampling the acceptance walk: children tried in rank order,
SpecInfer's multi-step verification, Miao et al., ASPLOS 2024) and two of its
measured quantities are compared with :mod:`specsim.theory.token_trees`:

- **tokens per pass** against :func:`specsim.theory.expected_tokens_tree`,
  ``E = 1 + sum_v prod_{u on the path to v} a_u`` (Sequoia's positional model,
  Chen et al. 2024, arXiv:2402.12374, Section 3);
- the **discarded share**, verified positions off the accepted path over all
  positions verified, against the tree's operations bill: a pass verifies the root
  and ``n`` nodes and keeps ``E - 1`` nodes on average, so the share is
  ``1 - 1 / tree_positions_per_token = 1 - E / (n + 1)`` (the target part of
  Theorem 3.11 of Leviathan et al. 2023, generalized to trees by
  :func:`specsim.theory.tree_positions_per_token`).

The standard errors are those of per-pass means (passes are independent under the
positional model). A check passes when the closed form lies within ``Z_CHECK``
(4.5) standard errors of the simulated value, the rule of
:func:`specsim.validate.forms.check_grid`; ``pass_low``/``pass_high`` is that interval.

The trees (:func:`tree_cases`): a chain, a star, a binary tree and Sequoia's optimal
tree (:func:`specsim.policies.tree_optimizer.best_trees`) for a stated acceptance table (the one
``tests/sim/stream/test_sim_trees.py`` uses), and Sequoia's optimal tree for two measured
tables: the Medusa-1 heads' (``models/heads/medusa-vicuna-7b-v1.3.toml``, from the
Medusa repository's logged top-k accuracies) and the 2-gram prompt lookup's
(``models/measured/ngram/accept-sample.toml``, measured on the committed corpus
sample).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsim.cards import load_hardware, load_head, load_model
from specsim.cards.files import packaged_root
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import best_trees, chain_tree, kary_tree, tree_tokens
from specsim.proposers import NGram, RankAcceptance, load_acceptance
from specsim.sim.stream.tree_stream import TreeStreamConfig, simulate_tree_stream
from specsim.theory.token_trees import expected_tokens_tree, tree_positions_per_token

__all__ = [
    "TREE_COLUMNS",
    "Z_CHECK",
    "STATED_ACCEPTANCE",
    "tree_cases",
    "tree_check",
    "tree_checks",
    "tree_summary",
]

Z_CHECK = 4.5
TREE_COLUMNS = [
    "tree",
    "acceptance",
    "nodes",
    "passes",
    "quantity",
    "simulated",
    "se",
    "expected",
    "pass_low",
    "pass_high",
    "z",
    "pass",
]
"""The table's columns: the tree and where its acceptance comes from, its nodes, the passes
simulated, the quantity (``tokens_per_pass`` or ``discarded_share``), the simulated mean and
its standard error, the closed form (``expected``), the verdict's interval (the simulated
value +- ``Z_CHECK`` standard errors), ``z = (simulated - expected) / se`` and ``pass``
(``|z| <= Z_CHECK``)."""

STATED_ACCEPTANCE = RankAcceptance(
    accept=((0.75, 0.35, 0.2), (0.7, 0.3, 0.15), (0.65, 0.3)),
    source="stated for the check (not measured): the table of tests/sim/stream/test_sim_trees.py",
)
"""A stated (not measured) table, high enough that deep paths and later ranks are reached."""

_NGRAM_FILE = "measured/ngram/accept-sample.toml"
_TOKENS_PER_REQUEST = 2000  # within every shipped target's max_position with the tree


def _ngram_table() -> RankAcceptance:
    root = packaged_root()
    if root is None or not (root / _NGRAM_FILE).is_file():
        raise FileNotFoundError(f"models/{_NGRAM_FILE}: the measured n-gram table is missing")
    return load_acceptance(root / _NGRAM_FILE)


def _sequoia(acc: RankAcceptance, budget: int, depth: int) -> tuple[int, ...]:
    return max(best_trees(acc, budget=budget, max_depth=depth), key=lambda t: tree_tokens(t, acc))


def tree_cases() -> list[tuple[str, str, tuple[int, ...], RankAcceptance]]:
    """``(tree, acceptance, parents, table)`` for every tree checked (module docstring)."""
    stated, medusa = (
        STATED_ACCEPTANCE,
        RankAcceptance(
            accept=load_head("medusa-vicuna-7b-v1.3").accept,
            source="head card medusa-vicuna-7b-v1.3",
        ),
    )
    return [
        ("chain of 6", "stated", chain_tree(6), stated),
        ("star of 3", "stated", (-1, -1, -1), stated),
        ("binary, 14 nodes", "stated", kary_tree(2, 14), stated),
        ("Sequoia, 16 nodes", "stated", _sequoia(stated, 16, 8), stated),
        ("Sequoia, 16 nodes", "Medusa-1 heads (measured)", _sequoia(medusa, 16, 5), medusa),
        (
            "Sequoia, 12 nodes",
            "2-gram lookup (measured)",
            _sequoia(_ngram_table(), 12, 4),
            _ngram_table(),
        ),
    ]


def _row(
    tree: str,
    source: str,
    nodes: int,
    passes: int,
    quantity: str,
    mean: float,
    values: Any,
    expected: float,
    z: float,
) -> dict[str, Any]:
    """``mean``: the simulator's own summary; ``values``: its per-pass values, for the se."""
    v = np.asarray(values, dtype=np.float64)
    se = float(v.std(ddof=1) / math.sqrt(v.size))
    if se > 0.0:
        zval = (mean - expected) / se
    else:  # a degenerate walk (every pass alike): the value must be the form's exactly
        zval = 0.0 if math.isclose(mean, expected, rel_tol=1e-12, abs_tol=1e-12) else math.inf
    return {
        "tree": tree,
        "acceptance": source,
        "nodes": nodes,
        "passes": passes,
        "quantity": quantity,
        "simulated": mean,
        "se": se,
        "expected": expected,
        "pass_low": mean - z * se,
        "pass_high": mean + z * se,
        "z": zval,
        "pass": bool(abs(zval) <= z),
    }


def tree_check(
    parents: Sequence[int],
    acceptance: RankAcceptance,
    *,
    rng: np.random.Generator,
    requests: int,
    tree: str = "tree",
    source: str = "",
    z: float = Z_CHECK,
) -> list[dict[str, Any]]:
    """Two rows (:data:`TREE_COLUMNS`) for one tree: ``requests`` requests of 2,000 tokens
    simulated with ``acceptance`` (an n-gram proposer, microseconds a pass, on llama-2-7b
    and an A100-80GB: the check is of the walk, not of the costs), against the closed
    forms."""
    cfg = TreeStreamConfig(
        parents=tuple(parents),
        proposer=NGram(acceptance=acceptance),
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        tokens=_TOKENS_PER_REQUEST,
        requests=requests,
    )
    res = simulate_tree_stream(cfg, rng)
    n = res.nodes
    if n == 0:
        e_form, share_form = 1.0, 0.0
    else:
        table = acceptance.node_table(cfg.parents)
        e_form = expected_tokens_tree(list(cfg.parents), table)
        share_form = 1.0 - 1.0 / tree_positions_per_token(list(cfg.parents), table)
    m = res.metrics()
    discarded = (n - res.accepted) / (n + 1.0)  # per pass; every pass verifies n + 1 positions
    return [
        _row(
            tree,
            source,
            n,
            res.passes,
            "tokens_per_pass",
            m["tokens_per_pass"],
            res.emitted,
            e_form,
            z,
        ),
        _row(
            tree,
            source,
            n,
            res.passes,
            "discarded_share",
            m["discarded_share"],
            discarded,
            share_form,
            z,
        ),
    ]


def tree_checks(
    rng: np.random.Generator, *, quick: bool = True, z: float = Z_CHECK
) -> pd.DataFrame:
    """The tree table (:data:`TREE_COLUMNS`), two rows per tree of :func:`tree_cases`.
    ``quick``: 40 requests of 2,000 tokens per tree (25,000 to 70,000 passes, well under
    2 s of CPU in all); otherwise ten times as many."""
    requests = 40 if quick else 400
    rows: list[dict[str, Any]] = []
    for name, source, parents, acc in tree_cases():
        rows += tree_check(parents, acc, rng=rng, requests=requests, tree=name, source=source, z=z)
    return pd.DataFrame(rows, columns=TREE_COLUMNS)


def tree_summary(table: pd.DataFrame) -> tuple[int, int]:
    """(checks run, passed) of a :func:`tree_checks` table."""
    return int(table.shape[0]), int(table["pass"].astype(bool).sum())
