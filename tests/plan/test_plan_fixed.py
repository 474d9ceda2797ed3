"""What the user fixes about each option of ``specsim plan``: a chain of ``k`` or a named
tree (evaluated as given, said so in the output, refused where the option cannot draft or
the stack cannot verify it) and a draft model's own deployment (its weights, stack and
devices, priced; the target drafting for itself flagged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.cli import main
from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanAnswer, PlanRequest, plan, request_from_toml
from specsim.plan.evaluation import devices
from specsim.plan.lookahead import parse_tree
from specsim.plan.options import build_option
from specsim.policies.tree_optimizer import kary_tree

VICUNA = ["plan", "--model", "vicuna-7b-v1.3", "--hardware", "h100-sxm", "--batch", "4"]
QWEN = ["plan", "--model", "qwen2.5-7b", "--hardware", "h100-sxm", "--batch", "4"]


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_shapes() -> None:
    assert parse_tree("binary:2") == kary_tree(2, 6) == parse_tree("2-ary:2")
    assert parse_tree("3-ary:1") == (-1, -1, -1)
    assert parse_tree("-1,0,0,1") == (-1, 0, 0, 1)
    for bad in ("3-ary", "binary:x", "chain:3", ""):
        with pytest.raises(ValueError, match="tree: "):
            parse_tree(bad)


def test_k_is_used_for_every_option_and_said(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*VICUNA, "--heads", "eagle-vicuna-7b-v1.3", "--ngram", "--k", "2"]
    data = _json(args, capsys)
    assert [o["plan"] for o in data["options"][1:]] == ["chain k = 2", "chain k = 2"]
    assert all(w["tree"] == [-1, 0] for w in data["what_would_change"])
    ahead = data["assumed"]["lookahead"]
    assert ahead["ngram"] == "chain k = 2, fixed by k = 2 (not searched)"
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "fixed: as given, not searched" in text and "ngram: chain k = 2 [-1, 0] (fixed)" in text


def test_a_tree_is_used_and_a_narrow_acceptance_flagged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [*VICUNA, "--heads", "medusa-vicuna-7b-v1.3", "--heads", "eagle-vicuna-7b-v1.3"]
    data = _json([*args, "--tree", "binary:2"], capsys)
    assert all(o["tree"] == list(kary_tree(2, 6)) for o in data["options"][1:])
    flagged = [w for w in data["weak_assumptions"] if "never accepted" in w]
    assert len(flagged) == 1 and flagged[0].startswith("heads eagle-vicuna-7b-v1.3:")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (  # Medusa's card has heads for 5 depths
            ["--model", "vicuna-7b-v1.3", "--heads", "medusa-vicuna-7b-v1.3", "--k", "6"],
            "--k: heads medusa-vicuna-7b-v1.3 cannot use k = 6: that drafts 6 deep, past the 5",
        ),
        (  # vLLM V0 verifies by batch expansion: chains only
            ["--hardware", "a40", "--runtime", "vllm-v0", "--ngram", "--tree", "2-ary:2"],
            "--tree: ngram cannot use tree = '2-ary:2', a branching tree: runtime: stack",
        ),
        (
            ["--ngram", "--prompt", "3000", "--output", "1096", "--k", "8"],
            "the target under ngram: the load's longest request reaches position 4104",
        ),
        (["--ngram", "--k", "0"], "--k: expected an integer >= 1, got 0"),
        (["--ngram", "--tree", "3-ary"], "--tree: expected one of 'K-ary:D'"),
        (["--ngram", "--k", "2", "--tree", "binary:2"], "not allowed with argument --k"),
        (["--draft", "llama-68m", "--tree", "binary:2"], "--tree: draft llama-68m cannot use"),
        (["--ngram", "--draft-weights", "int4"], "--draft-weights: the draft model's own"),
        (
            ["--draft", "llama-68m", "--alpha", "0.6", "--draft-weights", "int3"],
            "--draft-weights: draft llama-68m: unknown format 'int3'",
        ),
        (
            ["--draft", "llama-68m", "--alpha", "0.6", "--draft-runtime", "nosuch"],
            "--draft-runtime: draft llama-68m: no runtime card 'nosuch'",
        ),
        (
            ["--draft", "llama-68m", "--alpha", "0.6", "--draft-tensor-parallel", "2"],
            "--draft-tensor-parallel: draft llama-68m: a shared draft runs on the target's 1",
        ),
        (
            ["--draft", "llama-68m", "--alpha", "0.6", "--draft-tensor-parallel", "0"],
            "--draft-tensor-parallel: expected an integer >= 1, got 0",
        ),
    ],
)
def test_refusals_name_the_flag_and_the_option(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["plan", "--model", "llama-2-7b", "--hardware", "h100-sxm", "--batch", "4"]
    try:
        code = main([*base, *extra])
    except SystemExit as exc:  # argparse's own refusal (two exclusive flags)
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_a_fixed_k_limits_the_break_even(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json([*QWEN, "--draft", "qwen2.5-0.5b", "--k", "3"], capsys)
    assert list(data["break_even"]["draft qwen2.5-0.5b"]["per_k"]) == ["3"]


def test_an_int4_draft_is_priced_below_its_fp16_self(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*QWEN, "--draft", "qwen2.5-7b", "--alpha", "0.8", "--k", "2"]
    same, int4 = _json(args, capsys), _json([*args, "--draft-weights", "int4"], capsys)
    assert int4["options"][1]["tpot_p50_s"]["value"] < same["options"][1]["tpot_p50_s"]["value"]
    assert int4["assumed"]["drafts"]["draft qwen2.5-7b"].startswith(
        "qwen2.5-7b on h100-sxm x1 (weights int4"
    )
    warned = [w for w in same["weak_assumptions"] if "the draft is the target itself" in w]
    assert len(warned) == 1 and warned[0].endswith("did you mean --draft-weights int4?")
    assert not any("the target itself" in w for w in int4["weak_assumptions"])


def test_own_device_draft_runs_over_its_own_devices() -> None:
    dep = Deployment(
        target="llama-2-70b", hardware="h100-sxm", tensor_parallel=4, draft_placement="own-device"
    )

    def own(**keys: int) -> OptionSpec:
        return OptionSpec(kind="draft", card="llama-2-7b", alpha=0.7, k=2, **keys)

    def ask(**keys: int) -> PlanAnswer:
        return plan(PlanRequest(deployment=dep, options=(own(**keys),), load=Load(batch=16)))

    two, one = ask(tensor_parallel=2), ask()
    assert two.assumed["drafts"]["draft llama-2-7b"].startswith("llama-2-7b on h100-sxm x2")
    assert one.assumed["drafts"] == {}
    # billed: four target devices and the draft's two, against four and one
    built = [build_option(spec, dep, where="option 1") for spec in (own(), own(tensor_parallel=2))]
    req = PlanRequest(deployment=dep, options=(own(),), load=Load(batch=16))
    assert [devices(o, req) for o in built] == [5, 6]


def test_a_plan_toml_fixes_them_top_level_or_per_option(tmp_path: Path) -> None:
    cfg = tmp_path / "plan.toml"
    text = (
        'tree = "binary:2"\n'  # top level: every option without its own
        '[deployment]\ntarget = "qwen2.5-7b"\nhardware = "h100-sxm"\n'
        '[[options]]\nkind = "ngram"\n'
        '[[options]]\nkind = "draft"\ncard = "qwen2.5-7b"\nalpha = 0.8\nk = 3\n'
        'weights = "int4"\n'
        "[load]\nbatch = 4\n"
    )
    cfg.write_text(text, "utf-8")
    req = request_from_toml(cfg)
    assert [(o.k, o.tree, o.weights) for o in req.options] == [
        (None, "binary:2", None),
        (3, None, "int4"),
    ]
    answer = plan(req)
    assert [r.plan for r in answer.rows[1:]] == ["tree of 6 nodes, depth 2", "chain k = 3"]
    cfg.write_text(text.replace("k = 3", 'k = 3\ntree = "binary:2"'), "utf-8")
    with pytest.raises(ValueError, match=r"\[\[options\]\] #2: k, tree: give one lookahead"):
        request_from_toml(cfg)
    cfg.write_text(text.replace("alpha = 0.8\n", "alpha = 0.8\nruntime = 3\n"), "utf-8")
    with pytest.raises(ValueError, match=r"#2.runtime: expected str, got 3"):
        request_from_toml(cfg)
    cfg.write_text("k = 0\n" + text.replace('tree = "binary:2"\n', ""), "utf-8")
    with pytest.raises(ValueError, match=r"plan.toml: k: expected an integer >= 1, got 0"):
        request_from_toml(cfg)


def test_heads_take_no_draft_deployment() -> None:
    with pytest.raises(ValueError, match="weights: a draft model's own deployment; kind 'heads'"):
        OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3", weights="int4")


def test_build_option_keeps_the_fixed_tree() -> None:
    dep = Deployment(target="vicuna-7b-v1.3", hardware="h100-sxm")
    o = build_option(OptionSpec(kind="ngram", tree="-1,0,0"), dep, where="option 1 (ngram)")
    assert o.fixed == (-1, 0, 0) and o.lookahead == "tree = '-1,0,0'"
