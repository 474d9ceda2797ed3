"""Answers that must be right (exit 0) after the bad inputs of issue 35, and the API behind
its cases (``tests/test_bad_inputs_hardening.py`` holds the one-line errors): a forced
untrusted fit is written marked, ``problems --check`` grades the seed its file names, the
readers refuse nested input, the crossover study labels head cards by kind, the serving
simulator prices expert parallelism, the output check leaves no trace."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from test_bad_inputs_hardening import (  # beside this file: on the path
    DEEP_JSON,
    DEEP_TOML,
    FIT,
    ONE_BATCH_MS,
    ROOT,
    SAMPLES,
    _snapshot,
)

from specsim.cli import main


# Answers that must be right (exit 0), and the API behind the cases --------------------------
def test_a_forced_untrusted_fit_is_written_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --force the fit is written, and both the file and the output say why it is not
    to be trusted (the slip named), so that nothing downstream takes it for a measurement."""
    (tmp_path / "one.jsonl").write_text(ONE_BATCH_MS, encoding="utf-8")
    out = tmp_path / "s.toml"
    argv = ["calibrate", "--engine-output", str(SAMPLES / "vllm-serve-b4.json")]
    argv += [str(tmp_path / "one.jsonl"), *FIT.split(), "--out", str(out), "--force", "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert len(record["untrusted"]) == 1 and "milliseconds, not seconds" in record["untrusted"][0]
    assert record["worst_rel_error"] > 1.0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# UNTRUSTED, written with --force: its worst run")
    from specsim.cards.stack_files import load_stack

    st = load_stack(out)
    assert isinstance(st.sources, dict) and "milliseconds, not seconds" in st.sources["untrusted"]


def test_a_trusted_fit_carries_no_mark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.toml"
    argv = ["calibrate", "--engine-output", str(SAMPLES / "vllm-serve-b4.json")]
    argv += [str(SAMPLES / "sglang-one-batch.jsonl"), *FIT.split(), "--out", str(out), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["untrusted"] == []
    assert "UNTRUSTED" not in out.read_text(encoding="utf-8")


def test_problems_check_grades_against_the_seed_its_file_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "a.toml"
    answers.write_text('seed = 29\n["1.1"]\na = 0.35\n', encoding="utf-8")
    assert main(["problems", "--check", str(answers)]) == 0
    assert capsys.readouterr().out.startswith("# Grade, problem set seed 29")
    assert main(["problems", "--check", str(answers), "--seed", "3"]) == 2
    assert "seed = 29 in the file but --seed 3" in capsys.readouterr().err


def test_nested_input_is_refused_by_the_readers(tmp_path: Path) -> None:
    from specsim.calibrate.engine_records import read_records
    from specsim.cards import load_model, read_toml
    from specsim.cards.files import parse_toml
    from specsim.problems import parse_answers

    (tmp_path / "d.toml").write_text(DEEP_TOML, encoding="utf-8")
    (tmp_path / "d.json").write_text(DEEP_JSON, encoding="utf-8")
    deep = "nested too deeply"
    for call in (
        lambda: read_toml(tmp_path / "d.toml"),
        lambda: load_model(tmp_path / "d.toml"),
        lambda: parse_toml(DEEP_TOML, source="--x"),
        lambda: parse_answers(DEEP_TOML, source="answers", problems={}),
        lambda: read_records(tmp_path / "d.json"),
    ):
        with pytest.raises(ValueError, match=deep):
            call()


def test_crossover_labels_each_head_card_by_its_kind_for_its_own_target() -> None:
    """``heads=eagle3-llama-3.3-70b`` drafts for Llama-3.1-70B as an EAGLE head (not "Medusa
    heads"), beside the Medusa heads of the 7B target when both are listed."""
    from studies._crossover_config import Config, heads_of

    both = Config(heads=("medusa-vicuna-7b-v1.3", "eagle3-llama-3.3-70b"))
    got = {t: sorted(h) for t, h in heads_of(both).items()}
    assert got == {"vicuna-7b-v1.3": ["Medusa heads"], "llama-3.1-70b": ["EAGLE head"]}
    with pytest.raises(ValueError, match="two EAGLE head cards for 'vicuna-7b-v1.3'"):
        Config(heads=("eagle-vicuna-7b-v1.3", "eagle-vicuna-7b-v1.3"))


def test_the_serving_simulator_prices_expert_parallelism() -> None:
    """docs/moe.md no longer says the simulator serves MoE targets at expert_parallel = 1:
    its CardCost prices the deployment's EP (the all-to-all moves the pass time)."""
    from specsim.cost.deployment import Deployment
    from specsim.sim.costs.costs import CardCost

    times = []
    for ep in (1, 8):
        d = Deployment(target="deepseek-v3", hardware="h200", tensor_parallel=8, expert_parallel=ep)
        cost = CardCost(deployment=d, draft=None)
        times.append(cost.uniform_iteration(batch=16, context_sum=16 * 1024, gamma=0).time_s)
    assert times[0] != times[1]
    page = (ROOT / "docs" / "moe.md").read_text(encoding="utf-8")
    assert "simulate\n  with `expert_parallel = 1`" not in page
    assert not re.search(r"MoE targets simulate\s+with `expert_parallel = 1`", page)


@pytest.mark.skipif(os.name != "posix" or not Path("/proc").is_dir(), reason="needs /proc")
def test_the_output_check_sees_a_folder_that_makes_no_files() -> None:
    from specsim.cli.output import OutputError, check_file, check_folder

    with pytest.raises(OutputError, match=r"--html: cannot write into /proc \(creating a file"):
        check_file("/proc/x.html", option="--html")
    with pytest.raises(OutputError, match="--out: cannot write into /proc"):
        check_folder("/proc/x", option="--out")


def test_the_output_check_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    from specsim.cli.output import check_file

    (tmp_path / "sub").mkdir()
    before = _snapshot(tmp_path)
    assert check_file(tmp_path / "sub" / "x.csv", option="--x") == tmp_path / "sub" / "x.csv"
    assert _snapshot(tmp_path) == before  # the trial file removed, the folder's times kept
