"""llama.cpp's outputs read by the calibration: the committed llama-bench JSON and
llama-speculative-simple logs (models/measured/llama.cpp), and files of other formats or
versions refused by name (specsim.calibrate.engine_llamacpp, engine_outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.calibrate.engine_llamacpp import forced_run, read_speculative_log
from specsim.calibrate.engine_outputs import read_all_outputs, read_engine_output

MEASURED = Path(__file__).resolve().parents[2] / "models" / "measured" / "llama.cpp"
SPEC = MEASURED / "speculative"

LOG = """0.00.017.906 W llama_context: n_ctx_seq (256) > n_ctx_train (128)


The quick brown fox
And the free,

0.00.113.161 I encoded    8 tokens in    0.001 seconds, speed: 6220.840 t/s
0.00.113.163 I decoded   98 tokens in    0.086 seconds, speed: 1139.032 t/s
0.00.113.163 I
0.00.113.164 I n_draft   = 4
0.00.113.164 I n_predict = 98
0.00.113.164 I n_drafted = 260
0.00.113.165 I n_accept  = 32
0.00.113.165 I accept    = 12.308%
0.00.113.165 I
0.00.113.165 I draft:
"""


def test_a_log_gives_steps_accept_length_and_step_time(tmp_path: Path) -> None:
    path = tmp_path / "spec.log"
    path.write_text(LOG)
    log = read_speculative_log(path)
    assert (log.n_draft, log.n_predict, log.n_drafted, log.n_accept) == (4, 98, 260, 32)
    assert log.steps == 66 and log.accept_len == pytest.approx(98 / 66)
    run = forced_run(log)
    assert run.k == 4 and run.batch == 1 and run.context == pytest.approx(8 + 49)
    assert run.step_s == pytest.approx(0.086 / 66)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([{"n_prompt": 0, "n_gen": 32, "n_depth": 64, "avg_ts": 4000.0}]))
    runs, forced = read_all_outputs([path, bench])  # a speculative log beside a plain run
    assert forced == [run] and [(r.context, r.step_s) for r in runs] == [(80, 1 / 4000)]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("n_accept  = 32", "accepted  = 32"), r"no 'n_accept' line"),
        (lambda t: t.replace("decoded   98", "decoded   97"), "decoded 97 tokens but n_predict"),
        (lambda t: t.replace("n_drafted = 260", "n_drafted = 400"), "exceeds 66 steps"),
        (lambda t: t.replace("n_draft   = 4", "n_draft   = 0"), "not a speculative run"),
    ],
)
def test_a_log_of_another_version_or_inconsistent_counts_is_refused(
    tmp_path: Path, edit: object, message: str
) -> None:
    path = tmp_path / "other.log"
    path.write_text(edit(LOG))  # type: ignore[operator]
    with pytest.raises(ValueError, match=rf"other\.log: .*{message}"):
        read_speculative_log(path)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("| model | size | params | backend | threads | test | t/s |\n| --- |", "md"),
        ("build_commit,build_number,cpu_info,avg_ts\n", "csv"),
    ],
)
def test_llama_bench_text_outputs_are_refused_asking_for_json(
    tmp_path: Path, text: str, kind: str
) -> None:
    path = tmp_path / "bench.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"bench\.txt: llama-bench's -o {kind} output"):
        read_engine_output(path)


def test_the_committed_llama_bench_runs_are_read_as_plain_decoding() -> None:
    path = MEASURED / "llama-bench" / "target-f32.json"
    recs = json.loads(path.read_text())
    runs = read_engine_output(path)
    assert len(runs) == len(recs) and {r.batch for r in runs} == {1}
    for run, rec in zip(runs, recs, strict=True):
        assert run.step_s == pytest.approx(1 / rec["avg_ts"])
        assert run.context == rec["n_depth"] + rec["n_gen"] / 2
    assert {r["build_commit"] for r in recs} == {"0c1e570"}


def test_every_committed_speculative_log_is_read_and_adds_up() -> None:
    logs = sorted(SPEC.glob("*.log"))
    assert len(logs) >= 8
    for path in logs:
        log = read_speculative_log(path)
        k = int(path.stem.split("-k")[1].split("-")[0])
        assert log.n_draft == k and 1 <= log.accept_len <= k + 1
        assert log.accept_pct == pytest.approx(100 * log.n_accept / log.n_drafted, abs=1e-3)
