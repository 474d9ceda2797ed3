"""``specsim plan`` from the command line: the verdict first, --json, --html, --config, and
bad input answered in one line naming what was wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.cli import main

BASE = ["plan", "--model", "vicuna-7b-v1.3", "--hardware", "h100-sxm", "--batch", "8"]


def test_text_opens_with_the_verdict(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "plan.html"
    assert main([*BASE, "--heads", "eagle-vicuna-7b-v1.3", "--html", str(page)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(("Turn on ", "Keep speculation off"))
    assert any(line.startswith("Where each option stops paying") for line in out)
    assert any(line.startswith("What would change the answer") for line in out)
    text = page.read_text(encoding="utf-8")
    assert "class='verdict'" in text and out[0].split(":")[0] in text


def test_json_and_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text(
        '[deployment]\ntarget = "vicuna-7b-v1.3"\nhardware = "h100-sxm"\n'
        '[[options]]\nkind = "ngram"\n[load]\nbatch = 2\n',
        encoding="utf-8",
    )
    assert main(["plan", "--config", str(cfg), "--batch", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch"] == 4  # the flag replaces the file's batch
    assert [o["label"] for o in data["options"]] == ["no speculation", "ngram"]
    assert data["assumed"]["deployment"]["model"] == "vicuna-7b-v1.3"


def test_a_draft_without_acceptance_gets_its_break_even(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--draft", "llama-68m", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    be = data["break_even"]["draft llama-68m"]
    assert data["verdict"].startswith("No acceptance given for draft llama-68m: at batch 8,")
    assert f"above {be['alpha']:.2f}" in data["verdict"] and data["choice"] is None
    assert [o["label"] for o in data["options"]] == ["no speculation"]
    assert be["published"] and all(p["source"] for p in be["published"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--heads", "eagle-vicuna-7b-v1.3", "--model", "llama-2-7b"], "'llama-2-7b'"),
        (["--draft", "llama-3.2-1b"], "cannot draft for the target card 'vicuna-7b-v1.3'"),
        ([], "name at least one proposer"),
        (["--ngram", "--rate", "2"], "give a batch (--batch N) or a rate (--rate R)"),
        (
            ["--heads", "eagle-vicuna-7b-v1.3", "--alpha", "0.5"],
            "--alpha: an assumed alpha applies",
        ),
        (["--ngram", "--slo-tpot-p99", "-1"], "--slo-tpot-p99: expected a finite number > 0"),
        (["--ngram", "--draft-placement", "overlapped"], "--draft-placement: 'overlapped'"),
        (["--ngram", "--model", "llama-2-70b"], "model 'llama-2-70b' does not fit on 'h100-sxm'"),
    ],
)
def test_bad_input_is_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim plan: error: ") and message in err
    assert "Traceback" not in err
