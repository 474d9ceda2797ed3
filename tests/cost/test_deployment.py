"""The deployment: built from TOML, from the shared CLI flags and from Python, and reaching
every price the tree optimizer and the single-stream tree simulator put on a tree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specsim.cards import load_hardware, load_model, load_runtime
from specsim.cli import main
from specsim.cost import footprint, step_cost
from specsim.cost.deployment import Deployment, deployment_from_table, load_deployment
from specsim.policies.tree_optimizer import best_trees, optimize_tree
from specsim.proposers import DraftModel, RankAcceptance

TARGET, HW = load_model("llama-2-7b"), load_hardware("a100-80gb")
ACC = RankAcceptance(accept=((0.75, 0.35, 0.2), (0.7, 0.3, 0.15), (0.65, 0.3)))
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "models" / "measured" / "ngram" / "accept-sample.toml")


def test_a_table_a_file_and_python_build_the_same_deployment(tmp_path: Path) -> None:
    table = {"target": "llama-2-7b", "hardware": "a100-80gb", "weights": "int4", "kv": "fp8"}
    dep = deployment_from_table(table, where="t")
    path = tmp_path / "run.toml"
    path.write_text(
        '[deployment]\ntarget = "llama-2-7b"\nhardware = "a100-80gb"\n'
        'weights = "int4"\nkv = "fp8"\n'
    )
    py = Deployment(target=TARGET, hardware=HW, weights="int4", kv="fp8")
    assert load_deployment(path) == dep == py
    assert dep.formats().weight_format == "int4" and dep.formats().kv_format == "float8"


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"tensor_paralel": 2}, r"run.toml \[deployment\]: unknown key\(s\) \['tensor_paralel'\]"),
        ({"runtime": "nope"}, r"run.toml \[deployment\]: runtime: no runtime card 'nope'"),
        ({"tensor_parallel": 3}, "tensor_parallel: 3 does not divide the 32 attention heads"),
        ({"draft_placement": "beside"}, r"draft_placement: expected one of \['shared'"),
        ({"kv": "int3"}, "kv: unknown"),
        ({"tensor_parallel": 1.5}, "tensor_parallel: expected int"),
    ],
)
def test_bad_tables_name_the_file_and_the_key(
    tmp_path: Path, extra: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        deployment_from_table(
            {"target": "llama-2-7b", "hardware": "a100-80gb", **extra},
            where="run.toml [deployment]",
        )


def test_a_file_without_the_table_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text("[other]\nx = 1\n")
    with pytest.raises(ValueError, match=r"run.toml: expected a \[deployment\] table"):
        load_deployment(path)


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0, capsys.readouterr().err
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_cost_and_tree_share_the_flags_and_a_file_under_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--model", "llama-2-7b", "--hardware", "a100-80gb", "--weights", "int4"]
    flags += ["--group-size", "64", "--kv", "fp8", "--tensor-parallel", "2"]
    cost = _json(["cost", *flags, "--json"], capsys)
    dep = Deployment(target=TARGET, hardware=HW, weights="int4", group_size=64, kv="fp8")
    want = step_cost(
        TARGET, HW, batch=1, context=512, new_tokens=1, **(dep.keywords() | {"tensor_parallel": 2})
    )
    assert cost["time_s"] == pytest.approx(want.time_s, rel=1e-12)
    tree = _json(["tree", *flags, "--ngram", "--acceptance", EXAMPLE, "--json"], capsys)
    assert (tree["weights"], tree["kv"], tree["tensor_parallel"]) == ("int4", "float8", 2)
    # A file gives the deployment; a flag given beside it overrides its key.
    path = tmp_path / "dep.toml"
    path.write_text(
        '[deployment]\ntarget = "llama-2-7b"\nhardware = "a100-80gb"\nweights = "int4"\n'
        'group_size = 64\nkv = "fp8"\ntensor_parallel = 4\n'
    )
    again = _json(["cost", "--deployment", str(path), "--tensor-parallel", "2", "--json"], capsys)
    assert again["time_s"] == cost["time_s"]


LLAMA_A100 = ["--model", "llama-2-7b", "--hardware", "a100-80gb"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hardware", "a100-80gb"], "--model: required"),
        ([*LLAMA_A100, "--kv", "int3"], "--kv: "),
        ([*LLAMA_A100, "--tensor-parallel", "3"], "--tensor-parallel: "),
        (
            ["--model", "llama-2-7b", "--hardware", "h100-sxm", "--runtime", "pytorch-eager-a100"],
            "--runtime: ",
        ),
    ],
)
def test_bad_flags_are_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("cost", "tree"):
        extra = ["--ngram", "--acceptance", EXAMPLE] if command == "tree" else []
        assert main([command, *argv, *extra]) == 2
        assert message in capsys.readouterr().err


def test_the_draft_is_priced_on_the_targets_stack_with_its_own_weights() -> None:
    draft = DraftModel(card=load_model("llama-160m"), acceptance=ACC)
    base = Deployment(target=TARGET, hardware=HW, runtime=load_runtime("gpt-fast"))
    eager = Deployment(target=TARGET, hardware=HW, runtime=load_runtime("pytorch-eager-a100"))
    on = draft.deployment(eager)
    assert (on.target, on.runtime, on.hardware) == (draft.card, eager.runtime, HW)
    tree = (-1, 0, 0, 1)
    slow = draft.draft_cost(tree, deployment=eager, batch=2, context=300).time_s
    fast = draft.draft_cost(tree, deployment=base, batch=2, context=300).time_s
    # The profiles share their kernels' efficiencies and differ in host time: per draft step
    # (three: the frontier at depths 0, 1, 2), 12 layers' overhead and one pass's.
    e, f = eager.runtime, base.runtime
    assert e is not None and f is not None
    step = 12 * (e.layer_overhead_s - f.layer_overhead_s) + e.pass_overhead_s - f.pass_overhead_s
    assert slow - fast == pytest.approx(3 * step, rel=1e-9)
    # Int4 weights are the target's own; a KV format reaches the draft's cache.
    q = Deployment(target=TARGET, hardware=HW, weights="int4", kv="fp8")
    assert draft.deployment(q).formats().weight_format == draft.card.dtype
    assert draft.deployment(q).formats().kv_format == "float8"
    assert (
        draft.draft_cost(tree, deployment=q, batch=8, context=4000).time_s
        < draft.draft_cost(tree, deployment=base, batch=8, context=4000).time_s
    )
    # Shared devices split the draft as the target; its own device holds it whole.
    two = Deployment(target=TARGET, hardware=HW, tensor_parallel=2)
    own = Deployment(target=TARGET, hardware=HW, tensor_parallel=2, draft_placement="own-device")
    assert draft.deployment(two).tensor_parallel == 2 and draft.deployment(own).tensor_parallel == 1
    fp = footprint(draft.card, tensor_parallel=2, formats=draft.deployment(two).formats())
    assert draft.memory_bytes(two) == fp.weights_bytes == draft.memory_bytes(own) / 2


def test_an_eager_stack_makes_drafting_dearer_and_the_best_tree_shallower() -> None:
    draft = DraftModel(card=load_model("llama-160m"), acceptance=ACC)
    trees = best_trees(ACC, budget=24, max_depth=8)
    plans = {}
    for rt in ("gpt-fast", "pytorch-eager-a100"):
        dep = Deployment(target=TARGET, hardware=HW, runtime=load_runtime(rt))
        plans[rt] = optimize_tree(
            proposer=draft, deployment=dep, batch=1, budget=24, max_depth=8, candidates=trees
        ).best
    fast, eager = plans["gpt-fast"], plans["pytorch-eager-a100"]
    assert eager.time_s > 3 * fast.time_s
    assert eager.draft_s / eager.time_s > fast.draft_s / fast.time_s + 0.1
    assert eager.depth < fast.depth and eager.parents != fast.parents


def test_specsim_tree_under_an_eager_int4_fp8_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = tmp_path / "acc.toml"
    acc.write_text(f'source = "test"\naccept = {[list(row) for row in ACC.accept]}\n')
    base = ["tree", *LLAMA_A100, "--draft", "llama-160m", "--acceptance", str(acc), "--json"]
    base += ["--budget", "24", "--max-depth", "8"]
    eager_flags = ["--runtime", "pytorch-eager-a100"]
    quant_flags = [*eager_flags, "--weights", "int4", "--kv", "fp8", "--tensor-parallel", "2"]
    plain = _json([*base, "--runtime", "gpt-fast"], capsys)
    eager = _json([*base, *eager_flags], capsys)
    quant = _json([*base, *quant_flags], capsys)
    best: dict[str, dict[str, float]] = {
        k: v["best"] for k, v in (("plain", plain), ("eager", eager), ("quant", quant))
    }
    assert best["eager"]["time_s"] > 3 * best["plain"]["time_s"]
    assert best["eager"]["depth"] < best["plain"]["depth"]
    assert best["quant"]["verify_s"] != best["eager"]["verify_s"]
    assert quant["runtime"] == "pytorch-eager-a100" and quant["weights"] == "int4"


def test_an_overlapped_placement_is_refused_where_drafting_is_priced_serialized() -> None:
    from specsim.policies.tree_optimizer import evaluate_tree
    from specsim.sim.stream.tree_stream import TreeStreamConfig

    over = Deployment(target=TARGET, hardware=HW, draft_placement="overlapped")
    draft = DraftModel(card=load_model("llama-68m"), acceptance=ACC)
    with pytest.raises(ValueError, match="evaluate_tree: deployment draft_placement 'overlapped'"):
        evaluate_tree((-1,), proposer=draft, deployment=over, batch=1)
    with pytest.raises(ValueError, match="single-stream tree simulator: deployment draft_pl"):
        TreeStreamConfig(parents=(-1,), proposer=draft, deployment=over, tokens=5)


def test_the_draft_placement_flag_reaches_the_draft(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = tmp_path / "acc.toml"
    acc.write_text(f'source = "test"\naccept = {[list(row) for row in ACC.accept]}\n')
    base = ["tree", *LLAMA_A100, "--draft", "llama-160m", "--acceptance", str(acc), "--json"]
    base += ["--budget", "6", "--max-depth", "3", "--tensor-parallel", "2", "--batch", "4"]
    shared = _json(base, capsys)
    own = _json([*base, "--draft-placement", "own-device"], capsys)
    assert own["draft_placement"] == "own-device" and shared["draft_placement"] == "shared"
    # The same trees verify alike; the draft on one device of its own drafts at another speed.
    s, o = shared["chain"], own["chain"]
    assert s["parents"] == o["parents"] and s["verify_s"] == o["verify_s"]
    assert s["draft_s"] != o["draft_s"]
