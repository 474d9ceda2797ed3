"""``specsim tree``: the optimizer from the command line, text and JSON, and its errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cli import COMMANDS, main
from specsim.cost import DEFAULT_CONTEXT
from specsim.cost.deployment import Deployment
from specsim.policies.tree_optimizer import optimize_tree
from specsim.proposers import LOOKUP_COST, DraftModel, load_acceptance

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "models" / "measured" / "ngram" / "accept-sample.toml")
BASE = [
    "tree",
    "--model",
    "llama-2-7b",
    "--hardware",
    "a100-80gb",
    "--budget",
    "12",
    "--max-depth",
    "6",
]


def test_tree_is_listed() -> None:
    assert "tree" in COMMANDS


def test_tree_prints_the_best_tree_and_the_comparisons(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--draft", "llama-68m", "--batch", "2", "--acceptance", EXAMPLE]) == 0
    out = capsys.readouterr().out
    for label in (
        "best tree",
        "best chain",
        "best k-ary",
        "no speculation",
        "tokens/s",
        "best tree parents:",
        "2-gram prompt lookup measured",
    ):
        assert label in out


def test_tree_json_matches_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main([*BASE, "--draft", "llama-68m", "--batch", "8", "--acceptance", EXAMPLE, "--json"])
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    o = optimize_tree(
        proposer=DraftModel(card=load_model("llama-68m"), acceptance=load_acceptance(EXAMPLE)),
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        batch=8,
        budget=12,
        max_depth=6,
    )
    assert got["best"]["parents"] == list(o.best.parents)
    assert got["best"]["tokens_per_s"] == pytest.approx(o.best.tokens_per_s)
    assert got["chain"]["tokens_per_pass"] == pytest.approx(o.chain.tokens_per_pass)
    assert set(got) >= {"best", "chain", "kary", "none", "acceptance_source"}


def test_ngram_needs_no_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--ngram", "--acceptance", EXAMPLE, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["proposer"] == "2-gram lookup" and got["context"] == DEFAULT_CONTEXT
    host = LOOKUP_COST.seconds(context=DEFAULT_CONTEXT, nodes=got["best"]["nodes"])
    assert got["best"]["draft_s"] == pytest.approx(float(host), rel=1e-12)  # batch 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--draft", "llama-68m"], "--acceptance: required"),
        (["--head", "medusa-vicuna-7b-v1.3"], "trained for target 'vicuna-7b-v1.3'"),
        (["--head", "nope"], "--heads?: .*no head card 'nope'"),
        (["--draft", "llama-68m", "--acceptance", "missing.toml"], "missing.toml"),
    ],
)
def test_tree_errors_are_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim tree: error:") and err.count("\n") == 1
    assert re.search(message, err), err


def test_a_bad_acceptance_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("marginal = [[0.7, 0.6]]\n", encoding="utf-8")
    assert main([*BASE, "--ngram", "--acceptance", str(bad)]) == 2
    assert "sum to 1.3, above one" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "card", "model"),
    [
        ("heads", "eagle-vicuna-7b-v1.3", "vicuna-7b-v1.3"),
        ("parallel", "pard-llama-3.2-1b-llama-3.1-8b", "llama-3.1-8b"),
        ("selfspec", "layerskip-llama-2-7b-e8", "llama-2-7b"),
    ],
)
def test_tree_takes_every_proposer_kind(
    kind: str, card: str, model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One flag per kind of the registry (specsim.proposers.KINDS); the tree found is the
    library's for the proposer that kind builds."""
    from specsim.proposers import KINDS, build_proposer

    argv = ["tree", "--model", model, "--hardware", "h100-sxm", "--budget", "12"]
    assert main([*argv, "--max-depth", "6", KINDS[kind].flag, card, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    o = optimize_tree(
        proposer=build_proposer(kind, card=card),
        deployment=Deployment(target=load_model(model), hardware=load_hardware("h100-sxm")),
        batch=1,
        context=DEFAULT_CONTEXT,
        budget=12,
        max_depth=6,
    )
    assert got["best"]["parents"] == list(o.best.parents)


def test_the_proposer_kinds_are_written_once() -> None:
    """The composed config, the plan and both CLIs read the one registry of kinds."""
    from specsim.plan import KINDS as PLAN_KINDS
    from specsim.proposers import KINDS
    from specsim.sim.config.config_compose import PROPOSER_KEYS

    assert tuple(PLAN_KINDS) == tuple(KINDS) == tuple(PROPOSER_KEYS)
    assert all(PROPOSER_KEYS[k] == KINDS[k].keys for k in KINDS)
