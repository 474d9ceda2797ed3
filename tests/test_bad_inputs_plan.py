"""Bad or extreme inputs to ``specsim plan``: each a one-line error naming the input, or a
correct answer, never a traceback.

By root cause (the fix is one check where the input enters):

- **capacity**: a row is NOT STABLE whenever the rate exceeds what its own tree serves at
  full batch in closed form (:func:`specsim.plan.limits.serveable_rate`), however short the
  run or small ``--max-batch``; ratios print as ratios, intervals of positive quantities
  stay at or above 0, a hardware card without a default profile says so;
- **pricing**: a draft placed on a device of its own is billed for it
  (:func:`specsim.plan.evaluation.devices`), a model used past its ``max_position`` is
  refused, each option's lookahead counted (:func:`specsim.plan.answer.check_positions`),
  a price past :data:`specsim.plan.options.MAX_PRICE` is refused;
- **unused inputs**: what a closed batch or a preset would ignore is refused
  (:class:`specsim.plan.Load`, :class:`specsim.plan.PlanRequest`), named by the flag or
  the plan TOML's key it came from (``specsim.cli.plan``), a plan TOML's run keys are
  type-checked and its acceptance paths found beside it, an acceptance CSV's repeated
  cell is an error (:func:`specsim.proposers.tables.load_acceptance`), an acceptance file
  with no source is named by its path and flagged, and a run too short for an interval
  prints the estimate with a note (:class:`specsim.plan.Estimate`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_bad_inputs_hardening import Cli, _write
from test_bad_inputs_hardening import test_cli_bad_input as one_line_error

from specsim.cards import load_hardware, load_model
from specsim.cli import main
from specsim.cost.deployment import Deployment
from specsim.plan import (
    Estimate,
    Load,
    OptionSpec,
    PlanAnswer,
    PlanRequest,
    plan,
    request_from_toml,
)
from specsim.plan.render import NO_INTERVAL, OPEN_ABOVE, cell, render_text
from specsim.plan.verdict import times

ROOT = Path(__file__).resolve().parents[1]
SMALL = "plan --model llama-2-7b --hardware h100-sxm --draft llama-68m --alpha 0.7"
VICUNA = "plan --model vicuna-7b-v1.3 --hardware h100-sxm --heads eagle-vicuna-7b-v1.3"
XEON = ROOT / "models" / "calibrated" / "cpu-xeon-2vcpu.toml"
PLAN_TOML = """{top}
[deployment]
target = "llama-2-7b"
hardware = "h100-sxm"
[[options]]
kind = "draft"
card = "llama-68m"
{option}
[load]
{load}
"""
ACCEPT_CSV = "depth,rank,accept\n1,0,0.7\n2,0,0.6\n"
TREE_CSV = "depth,rank,accept\n1,0,0.8\n1,1,0.6\n1,2,0.5\n2,0,0.75\n2,1,0.5\n3,0,0.7\n3,1,0.4\n"
TREE_CSV += "4,0,0.7\n5,0,0.6\n6,0,0.6\n"  # llama-68m's best tree at batch 4 is 5 deep
TREE = "plan --model llama-2-7b --hardware h100-sxm --draft llama-68m --acceptance {tmp}/t.csv"
# At the limit: each option's lookahead counts, as the engine counts a chain's k. The last
# block verifies the tree's depth d past the request's end, and the draft drafts d - 1 past:
# the flags with the last length that reaches max_position exactly, the tree planned there,
# and the refusal one length more (the served load's longest request grows by 2 there).
AT_THE_LIMIT = {
    "draft-tree": (
        f"{TREE} --batch 4 --prompt 1800 --output 244",
        "tree of 31 nodes, depth 5",
        "draft llama-68m: the load's longest request reaches position 2049 (prompt plus output "
        "2045, plus 4 more drafted by its tree of 31 nodes, depth 5), past llama-68m's "
        "max_position 2048",
    ),
    "draft-tree-served": (
        f"{TREE} --rate 1 --output 10 --prompt 1361",
        "tree of 32 nodes, depth 5",
        "draft llama-68m: the load's longest request reaches position 2050 (prompt plus output "
        "2046, plus 4 more drafted by its tree of 32 nodes, depth 5), past llama-68m's "
        "max_position 2048",
    ),
    "heads-chain-target": (
        f"{VICUNA} --batch 4 --prompt 1800 --output 243",
        "chain k = 5",
        "the target under heads eagle-vicuna-7b-v1.3: the load's longest request reaches "
        "position 2049 (prompt plus output 2044, plus 5 more verified for its chain k = 5), "
        "past vicuna-7b-v1.3's max_position 2048",
    ),
}


def _one_more(argv: str) -> str:
    head, n = argv.rsplit(" ", 1)
    return f"{head} {int(n) + 1}"


def _toml(*, top: str = "", load: str = "batch = 4", option: str = "alpha = 0.7") -> str:
    return PLAN_TOML.format(top=top, load=load, option=option)


CASES = [
    # pricing --------------------------------------------------------------------------
    *(
        Cli(f"price-{p}", f"{SMALL} --batch 4 --price-per-gpu-hour={p}", "--price-per-gpu-hour")
        for p in ("1e300", "-2", "nan", "inf", "0")
    ),
    Cli(
        "draft-past-its-max-position",
        f"{SMALL} --batch 4 --prompt 3000 --output 500",
        "draft llama-68m: the load's longest request reaches position 3500 (prompt plus "
        "output), past llama-68m's max_position 2048",
    ),
    *(  # one length past the limit (AT_THE_LIMIT), within it on prompt plus output alone
        Cli(f"{name}-past-the-limit-by-its-lookahead", _one_more(argv), said, {"t.csv": TREE_CSV})
        for name, (argv, _, said) in AT_THE_LIMIT.items()
    ),
    # unused inputs --------------------------------------------------------------------
    Cli("batch-max-batch-negative", f"{SMALL} --batch 4 --max-batch -1", "--max-batch"),
    Cli("batch-max-batch-below", f"{SMALL} --batch 4 --max-batch 2", "--max-batch: a closed"),
    Cli("batch-requests", f"{SMALL} --batch 4 --requests 10", "--requests: a closed batch"),
    Cli("batch-precise", f"{SMALL} --batch 4 --precise", "--precise: a closed batch"),
    Cli("rate-max-batch-zero", f"{SMALL} --rate 1 --max-batch 0", "--max-batch"),
    *(
        Cli(
            f"workload-with-{flag}",
            f"{SMALL} --rate 1 --workload azure-code-2023 --{flag} 100",
            f"--{flag}: the azure-code-2023 preset gives the lengths",
        )
        for flag in ("prompt", "output")
    ),
    *(
        Cli(
            f"toml-{key}",
            "plan --config {tmp}/p.toml",
            f"p.toml: {key}: expected",
            {"p.toml": _toml(top=f"{key} = {value}", load="rate_per_s = 1.0")},
        )
        for key, value in (
            ("precise", '"no"'),
            ("seed", "-5"),
            ("seed", "1.5"),
            ("max_batch", '"8"'),
            ("max_batch", "0"),
        )
    ),
    Cli(
        "toml-max-batch-in-a-closed-batch",
        "plan --config {tmp}/p.toml",
        "p.toml: max_batch: a closed batch",
        {"p.toml": _toml(top="max_batch = 8")},
    ),
    Cli(
        "toml-preset-with-lengths",
        "plan --config {tmp}/p.toml",
        "prompt_tokens: the azure-code-2023 preset gives the lengths",
        {
            "p.toml": _toml(
                load='rate_per_s = 1.0\nworkload = "azure-code-2023"\nprompt_tokens = 99'
            )
        },
    ),
    # a value the command line made unused is named where it was given: the file's key
    *(
        Cli(
            f"toml-{key}-under-a-batch-flag",
            "plan --config {tmp}/p.toml --batch 4",
            f"{{tmp}}/p.toml{table}: {key}: a closed",
            {"p.toml": _toml(top=top, load=load)},
            not_said=f"--{key.replace('_', '-')}",
        )
        for key, table, top, load in (
            ("requests", " [load]", "", "rate_per_s = 1.0\nrequests = 50"),
            ("max_batch", "", "max_batch = 8", "rate_per_s = 1.0"),
            ("precise", "", "precise = true", "rate_per_s = 1.0"),
        )
    ),
    Cli(
        "toml-lengths-under-a-preset-flag",
        "plan --config {tmp}/p.toml --workload azure-code-2023",
        "{tmp}/p.toml [load]: prompt_tokens: the azure-code-2023 preset gives the lengths",
        {"p.toml": _toml(load="rate_per_s = 1.0\nprompt_tokens = 99")},
        not_said="--prompt",
    ),
    Cli(
        "toml-requests-replaced-by-the-flag",
        "plan --config {tmp}/p.toml --batch 4 --requests 9",
        "--requests: a closed batch",
        {"p.toml": _toml(load="rate_per_s = 1.0\nrequests = 50")},
    ),
    Cli(
        "acceptance-csv-repeated-cell",
        f"{SMALL.replace('--alpha 0.7', '--acceptance {tmp}/a.csv')} --batch 4",
        "a.csv: row 4: depth 1, rank 0 given twice (first in row 2)",
        {"a.csv": ACCEPT_CSV + "1,0,0.9\n"},
    ),
]


@pytest.mark.parametrize("case", [pytest.param(k, id=k.id) for k in CASES])
def test_cli_bad_input(
    case: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one_line_error(case, tmp_path, capsys, monkeypatch)


def _text(argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv.split()) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", AT_THE_LIMIT)
def test_a_lookahead_that_reaches_the_limit_is_planned(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The deepest position the option's lookahead reaches is the card's max_position: the
    plan runs, on the tree whose depth the refusal one position further counts."""
    argv, tree, _ = AT_THE_LIMIT[name]
    (tmp_path / "t.csv").write_text(TREE_CSV)
    verdict = _text(argv.replace("{tmp}", str(tmp_path)), capsys).splitlines()[0]
    assert verdict.startswith("Turn on") and f"with {tree}:" in verdict, verdict


@pytest.mark.parametrize(
    "argv",
    [
        f"{VICUNA} --requests 10 --rate 1e308",
        f"{VICUNA} --requests 10 --rate 2 --max-batch 1",
        f"plan --model llama-160m --hardware {XEON} --draft llama-68m --alpha 0.7 --rate 1000 "
        "--requests 10",
    ],
    ids=["rate-1e308", "max-batch-1", "cpu-rate-1000"],
)
def test_an_overload_is_not_stable_however_short_the_run(
    argv: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _text(argv, capsys)
    verdict, table = text.splitlines()[0], text.split("Best tree")[0]
    assert verdict.startswith("NOT STABLE") and verdict.endswith("no option here is stable.")
    notes = (NO_INTERVAL, OPEN_ABOVE)  # the notes under the table
    rows = [line for line in table.splitlines()[4:] if line.strip() and line not in notes]
    assert rows and all(line.rstrip().endswith("NOT STABLE") for line in rows), table
    assert not re.search(r"\d{16}", text), "a ratio printed as a long integer"
    assert not re.search(r"\[-\d", table), "a negative lower bound"
    assert "None" not in text


def test_an_option_is_stable_only_below_what_it_serves(capsys: pytest.CaptureFixture[str]) -> None:
    """17 req/s: above the 15.4 req/s plain decoding serves, below what EAGLE's chain serves;
    ten requests are too few for the engine's tests, the closed form decides both."""
    out = json.loads(_text(f"{VICUNA} --requests 10 --rate 17 --json", capsys))
    plain, heads = out["options"]
    assert plain["stable"] is False and "above the 15.4 req/s" in plain["stability_reason"]
    assert heads["stable"] is not False and "below the" in heads["stability_reason"]
    assert out["choice"] == heads["label"]
    assert out["verdict"].startswith("NOT STABLE") and "keeps it stable" in out["verdict"]


def _closed(tp: int, *, placement: str = "shared", price: float = 2.0) -> PlanAnswer:
    dep = Deployment(
        target=load_model("llama-2-70b"),
        hardware=load_hardware("h100-sxm"),
        tensor_parallel=tp,
        draft_placement=placement,  # type: ignore[arg-type]
    )
    spec = OptionSpec(kind="draft", card="llama-2-7b", alpha=0.7)
    req = PlanRequest(
        deployment=dep, options=(spec,), load=Load(batch=16), price_per_gpu_hour=price
    )
    return plan(req)


@pytest.mark.parametrize(
    ("tp", "placement", "gpus"), [(2, "shared", (2, 2)), (4, "own-device", (4, 5))]
)
def test_cost_per_token_bills_every_device(tp: int, placement: str, gpus: tuple[int, ...]) -> None:
    """$/M tokens = price x devices / 3600 / tokens per second x 1e6: the target's group, and
    a draft placed on a device of its own one more."""
    a = _closed(tp, placement=placement)
    for row, n in zip(a.rows, gpus, strict=True):
        assert row.cost_per_mtok is not None
        thr = row.throughput_tokens_per_s.value
        assert row.cost_per_mtok.value == pytest.approx(2.0 * n / 3600 / thr * 1e6, rel=1e-12)


def test_a_relative_acceptance_path_is_found_beside_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / "cfg", {"p.toml": _toml(option='acceptance = "a.csv"'), "a.csv": ACCEPT_CSV})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = tmp_path / "cfg" / "p.toml"
    assert request_from_toml(config).options[0].acceptance == str(tmp_path / "cfg" / "a.csv")
    assert _text(f"plan --config {config}", capsys).startswith("Turn on draft llama-68m")


def test_two_requests_print_no_unbounded_interval_and_none_without_its_estimate() -> None:
    dep = Deployment(target=load_model("vicuna-7b-v1.3"), hardware=load_hardware("h100-sxm"))
    spec = OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3")
    req = PlanRequest(deployment=dep, options=(spec,), load=Load(rate_per_s=1.0, requests=2))
    a = plan(req)
    seen = 0
    for r in a.rows:
        for e in (r.tpot_p50_s, r.tpot_p99_s, r.ttft_p50_s, r.ttft_p99_s):
            assert isinstance(e, Estimate)
            seen += not e.bounded
            if e.bounded:
                assert e.low <= e.value <= e.high and min(abs(e.low), abs(e.high)) < float("inf")
        assert r.throughput_tokens_per_s.low >= 0
    text = render_text(a)
    assert seen and NO_INTERVAL in text
    assert "-inf" not in text and "[n/a]" in text


def test_a_huge_number_prints_as_a_number() -> None:
    assert cell(Estimate.exact(1e300), 1.0) == "1e+300"
    assert cell(Estimate(2.5e6, 2e6, 3e6), 1.0) == "2,500,000 [2,000,000, 3,000,000]"
    assert times(6.5e306) == "6.5e+306x" and times(2.404) == "2.40x"


@pytest.mark.parametrize(
    ("name", "text", "missing", "source_line"),
    [
        ("a.csv", ACCEPT_CSV, "'# source:' line", "# source: my traffic\n"),
        ("a.toml", "accept = [[0.7], [0.6]]\n", "source key", 'source = "my traffic"\n'),
    ],
    ids=["csv", "toml"],
)
def test_an_acceptance_file_without_a_source_is_named_by_its_path(
    name: str,
    text: str,
    missing: str,
    source_line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / name
    path.write_text(text)
    argv = f"{SMALL.replace('--alpha 0.7', f'--acceptance {path}')} --batch 4"
    said = f"{path} (no source given: the file has no {missing})"
    out = json.loads(_text(f"{argv} --json", capsys))
    assert out["assumed"]["acceptance"]["draft llama-68m"] == said
    weak = f"draft llama-68m: acceptance from {said}; where it was measured is not known"
    assert weak in out["weak_assumptions"]
    page = _text(argv, capsys)
    assert f"acceptance of draft llama-68m: {said}" in page and weak in page
    path.write_text(source_line + text)  # a source given is printed as given, not flagged
    out = json.loads(_text(f"{argv} --json", capsys))
    assert out["assumed"]["acceptance"]["draft llama-68m"] == "my traffic"
    assert not any("measured is not known" in w for w in out["weak_assumptions"])
