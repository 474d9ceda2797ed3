"""The tree table of ``specsim validate``: it passes on the simulator, fails on a wrong one,
and the CLI shows it, puts it in --json and fails the exit status with it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

import specsim.cli.validate as cli_validate
import specsim.sim.stream.tree_stream as sim_trees
from specsim.cli import main
from specsim.proposers import RankAcceptance
from specsim.theory.token_trees import expected_tokens_tree
from specsim.validate.tree_forms import (
    STATED_ACCEPTANCE,
    TREE_COLUMNS,
    Z_CHECK,
    tree_cases,
    tree_check,
    tree_checks,
    tree_summary,
)

_TRUE_SAMPLER = sim_trees.sample_tree_accepts


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return tree_checks(np.random.default_rng(16))


def test_the_simulator_passes_every_tree_check(table: pd.DataFrame) -> None:
    assert list(table.columns) == TREE_COLUMNS
    assert set(table["quantity"]) == {"tokens_per_pass", "discarded_share"}
    assert len(table) == 2 * len(tree_cases()) and tree_summary(table) == (12, 12)
    assert (table["z"].abs() <= Z_CHECK).all() and table["pass"].all()
    # The interval printed is the verdict's: the simulated value +- 4.5 standard errors.
    half = (table["pass_high"] - table["pass_low"]) / 2
    assert np.allclose(half, Z_CHECK * table["se"])
    inside = (table["pass_low"] <= table["expected"]) & (table["expected"] <= table["pass_high"])
    assert inside.all()
    assert (table["se"] > 0).all() and (table["passes"] > 20_000).all()


def test_the_cases_cover_the_shapes_and_the_measured_tables() -> None:
    cases = tree_cases()
    names = " ".join(c[0] for c in cases)
    assert all(k in names for k in ("chain", "star", "binary", "Sequoia"))
    sources = {c[1] for c in cases}
    assert any("Medusa" in s for s in sources) and any("gram" in s for s in sources)
    # Sequoia's tree is the best of the stated table's trees here (it beats the chain and
    # the binary tree of about the same size).
    seq = next(c for c in cases if c[0].startswith("Sequoia") and c[1] == "stated")
    exp = {c[0]: expected_tokens_tree(list(c[2]), c[3].node_table(c[2])) for c in cases[:4]}
    assert exp[seq[0]] > max(v for k, v in exp.items() if k != seq[0])


def _biased(scale: float) -> Callable[..., NDArray[np.int64]]:
    def sample(
        parents: Sequence[int], acceptance: RankAcceptance, *, passes: int, rng: np.random.Generator
    ) -> NDArray[np.int64]:
        wrong = RankAcceptance(
            accept=tuple(tuple(scale * a for a in row) for row in acceptance.accept)
        )
        return _TRUE_SAMPLER(parents, wrong, passes=passes, rng=rng)

    return sample


def _ranks_ignored(
    parents: Sequence[int], acceptance: RankAcceptance, *, passes: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """A wrong walk: every child tried with its depth's rank-0 acceptance."""
    flat = RankAcceptance(accept=tuple((row[0],) * len(row) for row in acceptance.accept))
    return _TRUE_SAMPLER(parents, flat, passes=passes, rng=rng)


def test_a_biased_simulator_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_trees, "sample_tree_accepts", _biased(0.95))
    bad = tree_checks(np.random.default_rng(16))
    ran, passed = tree_summary(bad)
    assert passed < ran
    stated = bad[(bad["acceptance"] == "stated") & (bad["quantity"] == "tokens_per_pass")]
    assert (stated["z"] < -Z_CHECK).all() and not stated["pass"].any()


def test_a_walk_that_ignores_the_rank_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_trees, "sample_tree_accepts", _ranks_ignored)
    rows = tree_check((-1, -1, -1), STATED_ACCEPTANCE, rng=np.random.default_rng(2), requests=10)
    assert not any(r["pass"] for r in rows) and all(abs(r["z"]) > Z_CHECK for r in rows)


def test_the_empty_tree_is_plain_decoding() -> None:
    rows = tree_check((), STATED_ACCEPTANCE, rng=np.random.default_rng(3), requests=1)
    assert [(r["simulated"], r["expected"], r["se"], r["pass"]) for r in rows] == [
        (1.0, 1.0, 0.0, True),
        (0.0, 0.0, 0.0, True),
    ]


def _fast_other_tables(monkeypatch: pytest.MonkeyPatch, trees: pd.DataFrame) -> None:
    """The CLI with the grid and the queueing table shrunk to one passing row each."""
    grid = pd.DataFrame(
        [
            {
                "alpha": 0.5,
                "gamma": 1,
                "c": 0.0,
                "quantity": "tokens_per_pass",
                "simulated": 1.5,
                "pass_low": 1.4,
                "pass_high": 1.6,
                "formula": 1.5,
                "z": 0.0,
                "ok": True,
            }
        ]
    )
    dropped = pd.DataFrame(
        [
            {
                "case": "x",
                "quantity": "tokens_per_pass",
                "simulated": 1.0,
                "formula": 1.0,
                "error_pct": 0.0,
            }
        ]
    )
    queue = pd.DataFrame(
        [
            {
                "check": "M/D/1",
                "formula": "f",
                "load": 0.5,
                "servers": 1,
                "requests": 10,
                "simulated": 0.5,
                "se": 0.1,
                "expected": 0.5,
                "expected_high": 0.5,
                "z": 0.0,
                "pass": True,
                "note": "",
            }
        ]
    )
    monkeypatch.setattr(cli_validate, "validation_tables", lambda rng, **kw: (grid, dropped))
    monkeypatch.setattr(cli_validate, "queueing_checks", lambda rng, **kw: queue)
    monkeypatch.setattr(cli_validate, "tree_checks", lambda rng, **kw: trees)


def test_the_cli_prints_a_line_and_the_table_on_verbose(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], table: pd.DataFrame
) -> None:
    _fast_other_tables(monkeypatch, table)
    assert main(["validate", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "12 of 12 tree checks pass (|z| <= 4.5). Every check: --verbose." in out
    assert "Sequoia, 16 nodes" not in out
    assert main(["validate", "--quick", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "pass interval (+-4.5 se)" in out and "Medusa-1 heads (measured)" in out
    assert main(["validate", "--quick", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["trees_failed"] == 0 and len(record["trees"]) == 12


def test_a_failed_tree_check_fails_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], table: pd.DataFrame
) -> None:
    wrong = table.copy()
    wrong.loc[0, ["z", "pass"]] = [9.0, False]
    _fast_other_tables(monkeypatch, wrong)
    assert main(["validate", "--quick"]) == 1
    out = capsys.readouterr().out
    assert "11 of 12 tree checks pass" in out and "FAIL" in out  # the table shows on failure
    assert main(["validate", "--quick", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["trees_failed"] == 1
