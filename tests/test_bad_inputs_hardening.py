"""Bad inputs of issue 35 outside ``specsim plan``: each a one-line error naming the input, or
a correct answer, never a traceback, and no file written or overwritten.

By root cause (the fix is one check where the input enters):

- **engine outputs**: a fit whose residuals show a unit slip is refused naming the slip (or
  written marked untrusted with ``--force``); fields that count are whole numbers; an error
  raised after reading names the file, the record and the fields; a ``benchmark.extra_info``
  that is not a table, an empty file, an empty list are each named for what they are
  (:mod:`specsim.calibrate.engine_records`, :mod:`specsim.calibrate.engine_trust`);
- **outputs**: an existing file is replaced only with ``--force``, checked before any work
  (``problems --html``, ``calibrate --residuals``, ``theory --write-derivations``), and a
  folder where no file can be made (``/proc``) is refused naming the flag
  (:mod:`specsim.cli.output`);
- **nested input**: TOML and JSON nested past the parser's recursion are refused by the reader
  (:func:`specsim.cards.files.parse_toml`, :func:`specsim.calibrate.engine_records.read_records`);
- **studies**: sizes, head cards for the targets, requests per rate run;
- ``problems --check`` grades against the seed its file names; ``report --plan`` of a bad
  config leaves no folder behind.

The CLI cases run ``specsim.cli.main`` in-process in a fresh temporary folder, as
``tests/test_bad_inputs.py`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "models" / "measured" / "engine-samples"
DEEP_TOML = "a = " + "[" * 100_000 + "]" * 100_000 + "\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000
BINARY = bytes(range(128, 256)) * 3


def _one_batch(*rows: dict[str, float]) -> str:
    """SGLang ``bench_one_batch`` JSON lines: batch 1, 4 and 16 at 128 + 128 tokens, with
    ``rows`` changing them in order."""
    base = [
        {"batch_size": b, "input_len": 128, "output_len": 128, "median_decode_latency": t}
        for b, t in ((1, 0.009), (4, 0.0095), (16, 0.011))
    ]
    changes = [*rows, *[{}] * (len(base) - len(rows))]
    return "\n".join(json.dumps({**r, **c}) for r, c in zip(base, changes, strict=True))


SERVE_B4 = (SAMPLES / "vllm-serve-b4.json").read_text(encoding="utf-8")
SERVE_SECONDS = SERVE_B4.replace('"median_tpot_ms": 10.0', '"median_tpot_ms": 0.010')
ONE_BATCH_MS = _one_batch({"median_decode_latency": 9.0}, {"median_decode_latency": 9.5})
ONE_BATCH_MS = ONE_BATCH_MS.replace(
    '"median_decode_latency": 0.011', '"median_decode_latency": 11.0'
)
FIT = "--stack vllm-v1 --hardware h100-sxm --model llama-2-7b"
LATENCY_BAD_INFO = json.dumps(
    [{"metric": {"name": "latency", "benchmark_values": [1.0]}, "benchmark": {"extra_info": 5}}]
)
PLAIN = """mode = "stream"
seed = 1
tokens = 200
[acceptance]
kind = "iid"
alpha = 0.7
[policy]
kind = "fixed"
gamma = 4
[cost]
kind = "plain"
c = 0.05
"""


@dataclass(frozen=True)
class Cli:
    """``specsim ARGV`` must exit 2 with one error line containing ``field`` (and not
    ``not_said``), writing nothing."""

    id: str
    argv: str
    field: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    not_said: str = ""


CASES = [
    # Item 4: engine outputs -------------------------------------------------------------
    Cli(
        "engine-seconds-in-median-tpot-ms",
        f"calibrate --engine-output {{tmp}}/serve.json {{tmp}}/one.jsonl {FIT} "
        "--out {tmp}/s.toml",
        "serve.json: its median_tpot_ms values look like seconds, not milliseconds",
        {"serve.json": SERVE_SECONDS, "one.jsonl": _one_batch()},
    ),
    Cli(
        "engine-ms-in-a-latency-field",
        f"calibrate --engine-output {SAMPLES}/vllm-serve-b4.json {{tmp}}/one.jsonl {FIT} "
        "--out {tmp}/s.toml",
        "one.jsonl: its median_decode_latency values look like milliseconds, not seconds",
        {"one.jsonl": ONE_BATCH_MS},
    ),
    Cli(
        "engine-batch-size-not-whole",
        f"calibrate --engine-output {{tmp}}/one.jsonl {FIT} --out {{tmp}}/s.toml",
        "one.jsonl record 0: field 'batch_size' must be a whole number >= 1, got 2.7",
        {"one.jsonl": _one_batch({"batch_size": 2.7})},
    ),
    Cli(
        "engine-length-not-whole",
        f"calibrate --engine-output {{tmp}}/one.jsonl {FIT} --out {{tmp}}/s.toml",
        "one.jsonl record 1: field 'input_len' must be a whole number",
        {"one.jsonl": _one_batch({}, {"input_len": 100.5})},
    ),
    Cli(
        "engine-length-astronomical",
        f"calibrate --engine-output {{tmp}}/one.jsonl {FIT} --out {{tmp}}/s.toml",
        "field 'input_len' is 1e+300 tokens, over the limit",
        {"one.jsonl": _one_batch({"input_len": 1e300})},
    ),
    Cli(
        "engine-context-past-max-position",
        f"calibrate --engine-output {{tmp}}/one.jsonl {FIT} --out {{tmp}}/s.toml",
        "one.jsonl record 0: batch 1 (batch_size) at a context of",
        {"one.jsonl": _one_batch({"input_len": 10_000_000})},
    ),
    Cli(
        "engine-extra-info-not-a-table",
        f"calibrate --engine-output {{tmp}}/lat.json {FIT} --out {{tmp}}/s.toml",
        "lat.json record 0: field 'benchmark.extra_info' must be a table",
        {"lat.json": LATENCY_BAD_INFO},
    ),
    Cli(
        "engine-empty-file",
        f"calibrate --engine-output {{tmp}}/e.json {FIT} --out {{tmp}}/s.toml",
        "e.json: the file is empty",
        {"e.json": ""},
        not_said="llama-bench",
    ),
    Cli(
        "engine-empty-list",
        f"calibrate --engine-output {{tmp}}/e.json {FIT} --out {{tmp}}/s.toml",
        "e.json: no decode run in it (an empty list of records)",
        {"e.json": "[]"},
        not_said="llama-bench",
    ),
    Cli(
        "engine-binary-file",
        f"calibrate --engine-output {{tmp}}/b.json {FIT} --out {{tmp}}/s.toml",
        "b.json: not a UTF-8 JSON file (byte 0 is 0x80)",
        {"b.json": BINARY},
    ),
    # Item 5: outputs ----------------------------------------------------------------------
    Cli(
        "problems-html-overwrites",
        "problems --html {tmp}/mine.html",
        "--html: {tmp}/mine.html already exists; pass --force",
        {"mine.html": "my notes"},
    ),
    Cli(
        "problems-pdf-overwrites",
        "problems --pdf {tmp}/mine.pdf",
        "--pdf: {tmp}/mine.pdf already exists; pass --force",
        {"mine.pdf": "my notes"},
    ),
    Cli(
        "calibrate-residuals-overwrites-before-the-fit-file",
        f"calibrate --engine-output {SAMPLES}/vllm-serve-b4.json {SAMPLES}/sglang-one-batch.jsonl "
        f"{FIT} --out {{tmp}}/s.toml --residuals {{tmp}}/mine.csv",
        "--residuals: {tmp}/mine.csv already exists; pass --force",
        {"mine.csv": "my data"},
    ),
    Cli(
        "theory-derivations-overwrites",
        "theory --write-derivations {tmp}/mine.md",
        "--write-derivations: {tmp}/mine.md already exists; pass --force",
        {"mine.md": "my notes"},
    ),
    Cli("explore-out-proc", "explore --out /proc/x", "--out: cannot write into /proc"),
    Cli("problems-html-proc", "problems --html /proc/x", "--html: cannot write into /proc"),
    Cli(
        "calibrate-out-proc",
        f"calibrate --engine-output {SAMPLES}/vllm-serve-b4.json {FIT} --out /proc/x",
        "--out: cannot write into /proc",
    ),
    Cli(
        "calibrate-residuals-proc",
        f"calibrate --engine-output {SAMPLES}/vllm-serve-b4.json {FIT} --out {{tmp}}/s.toml "
        "--residuals /proc/x",
        "--residuals: cannot write into /proc",
    ),
    Cli(
        "plan-html-proc",
        "plan --model llama-2-7b --hardware a100-80gb --draft llama-68m --alpha 0.7 --batch 4 "
        "--html /proc/x.html",
        "--html: cannot write into /proc",
    ),
    # Item 10: nested input ----------------------------------------------------------------
    Cli(
        "nested-simulate-config",
        "simulate {tmp}/d.toml",
        "d.toml: arrays or tables nested too deeply",
        {"d.toml": DEEP_TOML},
    ),
    Cli(
        "nested-plan-config",
        "plan --config {tmp}/d.toml",
        "d.toml: arrays or tables nested too deeply",
        {"d.toml": DEEP_TOML},
    ),
    Cli(
        "nested-card-in-cards",
        "cost --model deep --hardware a100-80gb --cards {tmp}/cards",
        "deep.toml: arrays or tables nested too deeply",
        {"cards/lm/deep.toml": DEEP_TOML},
    ),
    Cli(
        "nested-problems-check",
        "problems --check {tmp}/d.toml",
        "--check {tmp}/d.toml: arrays or tables nested too deeply",
        {"d.toml": DEEP_TOML},
    ),
    Cli(
        "nested-engine-output",
        f"calibrate --engine-output {{tmp}}/d.json {FIT} --out {{tmp}}/s.toml",
        "d.json: arrays or tables nested too deeply",
        {"d.json": DEEP_JSON},
    ),
    Cli(
        "nested-trace-sidecar",
        "calibrate {tmp}/tr --out {tmp}/c.toml --base a100-80gb",
        "passes.json: arrays or tables nested too deeply",
        {"tr/passes.csv": "a,b\n1,2\n", "tr/passes.json": DEEP_JSON},
    ),
    Cli(
        "nested-simulate-set-value",
        "simulate {tmp}/c.toml --set policy=" + "[" * 2000 + "]" * 2000,
        "--set policy: arrays or tables nested too deeply",
        {"c.toml": PLAIN},
    ),
    # Item 8: messages in other libraries' words --------------------------------------------
    Cli(
        "problems-check-binary",
        "problems --check {tmp}/b.toml",
        "--check {tmp}/b.toml: not a UTF-8 TOML file",
        {"b.toml": BINARY},
    ),
    # Item 7: studies ----------------------------------------------------------------------
    Cli(
        "frontier-gamma-over-the-size-limit",
        "study frontier --set gamma=100000 --out {tmp}/f",
        "gamma: 100,000 nodes is over the limit of 1,024",
    ),
    Cli(
        "crossover-head-for-neither-target",
        "study crossover --set heads=eagle3-llama-3.1-8b --out {tmp}/c",
        "heads: 'eagle3-llama-3.1-8b' was trained for 'llama-3.1-8b', which is not one of targets",
    ),
    Cli(
        "crossover-one-request-a-rate-run",
        "study crossover --set fast_rate_requests=1 --fast --out {tmp}/c",
        "fast_rate_requests: 1 requests a run is too few",
    ),
    Cli(
        "crossover-gamma-over-the-size-limit",
        "study crossover --set gammas=1,5000 --out {tmp}/c",
        "gammas: 5,000 nodes is over the limit of 1,024",
    ),
    # Also: a bad plan config for the report leaves no empty folder ---------------------------
    Cli(
        "report-plan-bad-config",
        "report --plan {tmp}/bad.toml --out {tmp}/rep",
        "bad.toml: unknown key(s) ['nonsense']",
        {"bad.toml": "nonsense = 1\n"},
    ),
    # Readers and remedies in the user's words ----------------------------------------------
    Cli(
        "binary-acceptance-csv",
        "tree --model llama-2-7b --hardware a100-80gb --draft llama-68m --acceptance {tmp}/acc.csv",
        "{tmp}/acc.csv: not a UTF-8 CSV file (byte 0 is 0x80)",
        {"acc.csv": BINARY},
    ),
    Cli(
        "streaming-card-as-a-parallel-draft",
        "plan --model llama-3.1-8b --hardware h100-sxm --batch 1 "
        "--parallel magicdec-llama-3.1-8b-streaming-512",
        "no command-line option takes it",
        not_said="SelfSpeculation.from_card",
    ),
    Cli(
        "parallel-card-as-self-speculation",
        "plan --model llama-3.1-8b --hardware h100-sxm --batch 1 "
        "--selfspec pard-llama-3.2-1b-llama-3.1-8b",
        "kind 'parallel', not self-speculation; a 'parallel' card is a parallel draft (--parallel",
    ),
]


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@pytest.mark.parametrize("case", [pytest.param(k, id=k.id) for k in CASES])
def test_cli_bad_input(
    case: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, case.files)
    before = _snapshot(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in case.argv.split()]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("specsim ") and "error:" in last, err
    named = case.field.replace("{tmp}", str(tmp_path))
    assert named in last, f"{named!r} not named in: {last}"
    assert not case.not_said or case.not_said not in last, last
    assert _snapshot(tmp_path) == before, "a file was written (or a folder made)"
