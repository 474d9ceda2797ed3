"""A plan option's acceptance in engines' forms, for every kind: per-position rates and a
mean accepted length at k, as flags and as plan TOML keys; a card's kind says its card's
own was replaced; one form an option, and the flags bound without ambiguity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cli import main
from specsim.cost.deployment import Deployment
from specsim.plan import OptionSpec, request_from_toml
from specsim.plan.options import build_option
from specsim.policies.tree_optimizer import chain_tree, tree_tokens

BASE = ["plan", "--model", "vicuna-7b-v1.3", "--hardware", "h100-sxm", "--batch", "4"]


def _dep(target: str) -> Deployment:
    return Deployment(target=load_model(target), hardware=load_hardware("h100-sxm"))


@pytest.mark.parametrize(
    ("kind", "card", "target"),
    [
        ("heads", "eagle-vicuna-7b-v1.3", "vicuna-7b-v1.3"),
        ("parallel", "pard-llama-3.2-1b-llama-3.1-8b", "llama-3.1-8b"),
        ("selfspec", "layerskip-llama-2-7b-e8", "llama-2-7b"),
        ("draft", "llama-68m", "llama-2-7b"),
        ("ngram", None, "llama-2-7b"),
    ],
)
def test_every_kind_takes_both_forms(kind: str, card: str | None, target: str) -> None:
    rates = (0.8, 0.6, 0.3)
    spec = OptionSpec(kind=kind, card=card, acceptance_per_position=rates)
    o = build_option(spec, _dep(target), where="w")
    assert o.proposer is not None and o.measured
    acc = o.proposer.acceptance
    assert acc.max_depth == 3 and tree_tokens(chain_tree(3), acc) == pytest.approx(2.7)
    assert "measured per depth" in o.acceptance_source
    replaced = "replaces the published acceptance" in o.acceptance_source
    assert replaced == (kind in ("heads", "parallel", "selfspec"))
    spec = OptionSpec(kind=kind, card=card, accept_length=2.9, accept_length_k=3)
    o = build_option(spec, _dep(target), where="w")
    assert o.proposer is not None and not o.measured
    assert tree_tokens(chain_tree(3), o.proposer.acceptance) == pytest.approx(2.9)
    assert "i.i.d. assumed from one mean accepted length at k" in o.acceptance_source


def test_one_form_an_option_and_a_length_needs_its_k() -> None:
    card = "eagle-vicuna-7b-v1.3"
    with pytest.raises(ValueError, match="^acceptance, acceptance_per_position: give one"):
        OptionSpec(kind="heads", card=card, acceptance="a.csv", acceptance_per_position=(0.5,))
    with pytest.raises(ValueError, match="^accept_length, accept_length_k: give both"):
        OptionSpec(kind="heads", card=card, accept_length=2.0)
    with pytest.raises(ValueError, match=r"^accept_length: expected .* in \[1, k \+ 1\]"):
        OptionSpec(kind="heads", card=card, accept_length=9.0, accept_length_k=3)


def test_rates_deeper_than_the_card_drafts_are_refused() -> None:
    spec = OptionSpec(
        kind="heads", card="medusa-vicuna-7b-v1.3", acceptance_per_position=(0.5,) * 6
    )
    with pytest.raises(ValueError, match="measured to depth 6, but head card .* at most 5 deep"):
        build_option(spec, _dep("vicuna-7b-v1.3"), where="w")


def test_toml_keys_name_their_file(tmp_path: Path) -> None:
    cfg = tmp_path / "p.toml"
    head = '[deployment]\ntarget = "vicuna-7b-v1.3"\nhardware = "h100-sxm"\n[load]\nbatch = 4\n'
    opt = '[[options]]\nkind = "heads"\ncard = "medusa-vicuna-7b-v1.3"\n'
    cfg.write_text(head + opt + "accept_length = 2.9\naccept_length_k = 3\n", encoding="utf-8")
    (spec,) = request_from_toml(cfg).options
    assert (spec.accept_length, spec.accept_length_k) == (2.9, 3)
    o = build_option(spec, _dep("vicuna-7b-v1.3"), where="w")
    assert f"(given in {cfg})" in o.acceptance_source
    cfg.write_text(head + opt + 'acceptance_from = "me"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"#1: acceptance_from: not a key of a plan TOML"):
        request_from_toml(cfg)
    cfg.write_text(head + opt + "acceptance_per_position = [0.5, 0.7]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"#1: acceptance_per_position \(given in .*position 2"):
        request_from_toml(cfg)


def _assumed(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, str]:
    assert main([*BASE, *extra, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out)["assumed"]["acceptance"])


def test_flags_replace_a_cards_acceptance(capsys: pytest.CaptureFixture[str]) -> None:
    got = _assumed(
        capsys, "--heads", "eagle-vicuna-7b-v1.3", "--acceptance-per-position", "0.8,0.6,0.4"
    )
    said = got["heads eagle-vicuna-7b-v1.3"]
    assert "(given on the command line), measured per depth to depth 3" in said
    assert said.endswith("replaces the published acceptance of heads card eagle-vicuna-7b-v1.3")
    # beside a draft the flag binds to the draft; the heads keep their card's
    got = _assumed(
        capsys,
        *("--model", "llama-2-7b", "--draft", "llama-68m", "--accept-length", "2.5@4"),
        *("--selfspec", "layerskip-llama-2-7b-e8"),
    )
    assert "mean accepted length 2.5 at k = 4" in got["draft llama-68m"]
    assert got["selfspec layerskip-llama-2-7b-e8"].startswith("proposer card layerskip")


def test_an_acceptance_file_replaces_a_cards(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "a.csv"
    path.write_text("# source: my traffic\ndepth,rank,accept\n1,0,0.7\n2,0,0.6\n", encoding="utf-8")
    got = _assumed(capsys, "--heads", "medusa-vicuna-7b-v1.3", "--acceptance", str(path))
    said = "my traffic; replaces the published acceptance of heads card medusa-vicuna-7b-v1.3"
    assert got["heads medusa-vicuna-7b-v1.3"] == said


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--heads", "eagle-vicuna-7b-v1.3", "--ngram", "--accept-length", "2.9@3"],
            "--accept-length: binds to the --draft options, else to the one option that takes "
            "it, and 2 do (heads eagle-vicuna-7b-v1.3, ngram)",
        ),
        (
            ["--ngram", "--alpha", "0.5", "--accept-length", "2@3"],
            "--alpha, --accept-length: give one acceptance form",
        ),
        (["--ngram", "--accept-length", "2.9"], "--accept-length: expected L@K"),
        (["--ngram", "--accept-length", "5@3"], "--accept-length: expected a mean accepted"),
        (["--ngram", "--acceptance-per-position", "0.5,0.6"], "--acceptance-per-position: posi"),
        (
            [
                "--heads",
                "medusa-vicuna-7b-v1.3",
                "--acceptance-per-position",
                "0.5,0.4,0.3,0.2,0.1,0.1",
            ],
            "--acceptance-per-position is measured to depth 6, but head card",
        ),
    ],
)
def test_bad_forms_are_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim plan: error: ") and message in err, err
    assert "Traceback" not in err


def test_a_plan_deeper_than_a_lengths_k_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE, "--model", "llama-3.1-8b", "--parallel", "pard-llama-3.2-1b-llama-3.1-8b"]
    assert main([*argv, "--accept-length", "2.9@3"]) == 0
    assert "past the k = 3 its mean accepted length was measured at" in capsys.readouterr().out
    assert main([*argv, "--accept-length", "2.9@3", "--k", "3"]) == 0
    assert "past the k = 3" not in capsys.readouterr().out
