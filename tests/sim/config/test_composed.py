"""Composed simulate configs: ``[deployment]``, ``[proposer]``, ``[tree]`` and ``[slo]``
reach the one serving engine (specsim.sim.config.config_compose)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from specsim.capacity.planner import SLO, Search, search_capacity
from specsim.capacity.walk import TWIN, serve_judged
from specsim.cards import read_toml
from specsim.cli import main
from specsim.cost import Deployment
from specsim.proposers import DraftModel, Heads, NGram, ParallelDraft, SelfSpeculation
from specsim.sim.config.config import config_from_dict, load_config, with_value
from specsim.sim.config.config_compose import simulate_run
from specsim.sim.serving.tree_serving import TreeServingConfig
from specsim.sim.serving.tree_serving_dynamic import DynamicTreeServingConfig
from specsim.sweep.run import run_sweep
from specsim.sweep.spec import spec_from_dict

ROOT = Path(__file__).resolve().parents[3]
COMPOSED = ROOT / "studies" / "configs" / "serving-composed.toml"
SAMPLE = ROOT / "models" / "measured" / "ngram" / "accept-sample.toml"
SHRINK = ["--set", "workload.requests=30"]
PRINTED = (
    "mean_acceptance_length",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "plain_ttft_p99_s",
    "plain_tpot_p50_s",
    "plain_tpot_p99_s",
    "goodput_requests_per_s",
    "slo_attainment",
    "plain_goodput_requests_per_s",
    "energy_j_per_token",
    "plain_energy_j_per_token",
    "speedup",
)


def _json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(["simulate", str(COMPOSED), *SHRINK, *extra, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_the_composed_example_prints_every_quantity_finite(
    capsys: pytest.CaptureFixture[str],
) -> None:
    m = _json(capsys)
    for key in PRINTED:
        assert isinstance(m[key], int | float) and math.isfinite(m[key]), key
    per = m["acceptance_rate_per_position"]
    assert len(per) == 5 and all(0.0 <= p <= 1.0 for p in per)  # the head's 5 depths
    assert 1.0 < m["mean_acceptance_length"] <= 6.0  # the root and at most 5 nodes
    assert main(["simulate", str(COMPOSED), *SHRINK]) == 0
    text = capsys.readouterr().out
    for key in (*PRINTED, "acceptance_rate_per_position"):
        assert f"\n{key} " in text, key


def test_each_table_reaches_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_config(COMPOSED)
    cfg = spec.config
    assert isinstance(cfg, DynamicTreeServingConfig) and isinstance(cfg.proposer, Heads)
    dep = cfg.deployment
    assert (dep.weights, dep.kv, cfg.replicas, cfg.kv_block_tokens) == ("int4", "fp8", 2, 16)
    base = _json(capsys)
    changes = (
        "deployment.runtime=gpt-fast",
        "deployment.weights=fp16",
        "deployment.tensor_parallel=2",
        "replicas=1",
    )
    for change in changes:
        other = _json(capsys, "--set", change)
        assert other["tpot_p50_s"] != base["tpot_p50_s"], change
        assert other["energy_j_per_token"] != base["energy_j_per_token"], change


def test_a_bad_set_names_the_flag_the_file_and_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(COMPOSED), "--set", "replicas=many"]) == 2
    err = capsys.readouterr().err
    assert "--set replicas" in err and f"{COMPOSED}.replicas" in err and "'many'" in err


def _run(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "run.toml"
    path.write_text("", encoding="utf-8")
    return config_from_dict(data, where=str(path), base=ROOT)


def _tree_run(proposer: dict[str, Any], target: str, tree: dict[str, Any]) -> dict[str, Any]:
    return {
        "mode": "serving",
        "seed": 1,
        "max_batch": 8,
        "plain_twin": False,
        "deployment": {"target": target, "hardware": "h100-sxm"},
        "proposer": proposer,
        "tree": tree,
        "workload": {
            "kind": "poisson",
            "rate_per_s": 10.0,
            "requests": 6,
            "prompt_tokens": 64,
            "output_tokens": 32,
        },
    }


@pytest.mark.parametrize(
    ("proposer", "target", "kind"),
    [
        ({"kind": "draft", "card": "llama-68m", "acceptance": 0.7}, "llama-2-7b", DraftModel),
        (
            {"kind": "draft", "card": "llama-68m", "acceptance": str(SAMPLE)},
            "llama-2-7b",
            DraftModel,
        ),
        ({"kind": "heads", "card": "eagle-vicuna-7b-v1.3"}, "vicuna-7b-v1.3", Heads),
        ({"kind": "ngram", "acceptance": str(SAMPLE), "n": 3}, "llama-2-7b", NGram),
        (
            {"kind": "parallel", "card": "pard-llama-3.2-1b-llama-3.1-8b"},
            "llama-3.1-8b",
            ParallelDraft,
        ),
        ({"kind": "selfspec", "card": "layerskip-llama-2-7b-e8"}, "llama-2-7b", SelfSpeculation),
    ],
    ids=["draft-alpha", "draft-file", "heads", "ngram", "parallel", "selfspec"],
)
def test_every_proposer_kind_serves_a_static_tree(
    tmp_path: Path, proposer: dict[str, Any], target: str, kind: type
) -> None:
    spec = _run(
        tmp_path, _tree_run(proposer, target, {"kind": "static", "shape": "chain", "depth": 3})
    )
    assert isinstance(spec.config, TreeServingConfig) and isinstance(spec.config.proposer, kind)
    assert spec.config.parents == (-1, 0, 1)
    m = simulate_run(spec.config, np.random.default_rng(0)).metrics()
    assert m["requests"] == 6 and 1.0 <= m["mean_acceptance_length"] <= 4.0


def test_a_chain_alpha_of_zero_and_one_give_the_known_lengths(tmp_path: Path) -> None:
    for alpha, length in ((0.0, 1.0), (1.0, 4.0)):
        draft = {"kind": "draft", "card": "llama-68m", "acceptance": alpha}
        data = _tree_run(draft, "llama-2-7b", {"kind": "static", "shape": "chain", "depth": 3})
        spec = _run(tmp_path, data)
        m = simulate_run(spec.config, np.random.default_rng(0)).metrics()
        assert m["tokens_per_pass"] == length


def test_tree_shapes_and_parents(tmp_path: Path) -> None:
    draft = {"kind": "draft", "card": "llama-68m", "acceptance": str(SAMPLE)}
    for tree, parents in (
        ({"kind": "static", "shape": "k-ary", "k": 2, "depth": 2}, (-1, -1, 0, 0, 1, 1)),
        ({"kind": "static", "parents": [-1, 0, 0]}, (-1, 0, 0)),
    ):
        spec = _run(tmp_path, _tree_run(draft, "llama-2-7b", tree))
        assert spec.config.parents == parents


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        (
            {"proposer": {"kind": "heads", "card": "eagle-vicuna-7b-v1.3", "alpha": 1}},
            "[proposer]: unknown key(s) ['alpha']",
        ),
        ({"proposer": {"kind": "medusa"}}, "[proposer].kind: expected one of"),
        (
            {"tree": {"kind": "dynamic", "budget": 8, "depth": 3}},
            "[tree]: unknown key(s) ['depth']",
        ),
        ({"tree": {"kind": "static", "shape": "star", "depth": 2}}, "[tree].shape"),
        (
            {"deployment": {"target": "vicuna-7b-v1.3", "hardware": "h100-sxm", "wieghts": "int4"}},
            "[deployment]: unknown key(s) ['wieghts']",
        ),
        ({"deployment": {"target": "llama-2-7b", "hardware": "h100-sxm"}}, "vicuna-7b-v1.3"),
        ({"max_gamma": 4}, "unknown key(s) ['max_gamma']"),
        ({"slo": {"ttft_s": 0.0, "tpot_s": 0.1}}, "slo.ttft_s"),
    ],
)
def test_bad_tables_name_the_key_the_table_and_the_file(
    tmp_path: Path, patch: dict[str, Any], fragment: str
) -> None:
    data = copy.deepcopy(read_toml(COMPOSED)) | patch
    path = tmp_path / "bad.toml"
    with pytest.raises(ValueError) as err:
        config_from_dict(data, where=str(path), base=ROOT)
    assert fragment in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("name", ["serving.toml", "stream-cards.toml"])
def test_a_chain_config_takes_a_deployment_table(tmp_path: Path, name: str) -> None:
    chain = read_toml(ROOT / "studies" / "configs" / name)
    dep = chain["deployment"]
    spec = _run(tmp_path, chain)
    cost = spec.config.cost
    assert cost.deployment == Deployment(target=dep["target"], hardware=dep["hardware"])  # type: ignore[union-attr]
    assert cost.draft.slug == chain["cost"]["draft"]  # type: ignore[union-attr]
    fp8 = with_value(spec, "deployment.kv", "fp8", where="test")
    assert fp8.config.cost.formats().kv_format == "float8"  # type: ignore[union-attr]
    assert cost.formats().kv_format != "float8"  # type: ignore[union-attr]
    # The old form, what runs where in [cost]: an error that says where each key goes now.
    old = {k: v for k, v in chain.items() if k != "deployment"}
    old["cost"] = {**chain["cost"], "target": dep["target"], "hardware": dep["hardware"]}
    with pytest.raises(ValueError, match=r"\[cost\]\.target: .*write \[deployment\] target"):
        _run(tmp_path, old)
    old["cost"] = {**chain["cost"], "draft_hardware": dep["hardware"]}
    with pytest.raises(ValueError, match=r"\[cost\]\.draft_hardware: .*\[draft_deployment\]"):
        _run(tmp_path, {**old, "deployment": dep})
    with pytest.raises(ValueError, match=r"kind = 'cards' takes its target.*\[deployment\]"):
        _run(tmp_path, {**old, "cost": {"kind": "cards", "draft": chain["cost"]["draft"]}})


def test_a_draft_deployment_table_places_the_draft(tmp_path: Path) -> None:
    chain = read_toml(ROOT / "studies" / "configs" / "stream-cards.toml")
    over = {**chain["deployment"], "draft_placement": "overlapped"}
    own = {"hardware": "h100-sxm", "weights": "int4"}
    spec = _run(tmp_path, {**chain, "deployment": over, "draft_deployment": own})
    cost = spec.config.cost
    assert cost.overlapped and cost.drafting().hardware.slug == "h100-sxm"  # type: ignore[union-attr]
    assert cost.drafting().target.slug == "llama-68m"  # type: ignore[union-attr]
    assert cost.formats(draft=True).weight_format == "int4"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"draft_placement: 'shared' disagrees"):
        _run(
            tmp_path,
            {**chain, "deployment": over, "draft_deployment": {**own, "draft_placement": "shared"}},
        )
    with pytest.raises(ValueError, match=r"\[draft_deployment\]: unknown key"):
        _run(tmp_path, {**chain, "deployment": over, "draft_deployment": {"gpu": "h200"}})


def test_a_sweep_over_whole_proposer_tables(tmp_path: Path) -> None:
    heads = [
        {"kind": "heads", "card": c} for c in ("eagle-vicuna-7b-v1.3", "medusa-vicuna-7b-v1.3")
    ]
    data = _tree_run(heads[0], "vicuna-7b-v1.3", {"kind": "static", "shape": "chain", "depth": 3})
    spec = spec_from_dict(
        {"config": data, "grid": {"proposer": heads}, "sweep": {"metrics": ["num_drafts"]}}
    )
    run_sweep(spec, tmp_path / "p.csv")
    df = pd.read_csv(tmp_path / "p.csv")
    assert [json.loads(p)["card"] for p in df["proposer"]] == [h["card"] for h in heads]
    with pytest.raises(
        ValueError, match=r"point 0 .*\[proposer\]: unknown key\(s\) \['card'\] for kind 'ngram'"
    ):
        bad = spec_from_dict({"config": data, "grid": {"proposer.kind": ["ngram"]}})
        run_sweep(bad, tmp_path / "bad.csv")


def test_a_sweep_over_the_deployment_weights(tmp_path: Path) -> None:
    data = _tree_run(
        {"kind": "heads", "card": "eagle-vicuna-7b-v1.3"},
        "vicuna-7b-v1.3",
        {"kind": "dynamic", "budget": 8, "max_depth": 5},
    )
    spec = spec_from_dict(
        {
            "config": data,
            "grid": {"deployment.weights": ["fp16", "int4"]},
            "sweep": {"metrics": ["tpot_p50_s", "mean_acceptance_length"]},
        },
        base_dir=str(ROOT),
    )
    res = run_sweep(spec, tmp_path / "w.csv")
    df = pd.read_csv(tmp_path / "w.csv")
    assert res.rows == 2 and list(df["deployment.weights"]) == ["fp16", "int4"]
    fp16, int4 = df["tpot_p50_s"]
    assert int4 < fp16  # a quarter of the weight bytes to read per decoding pass
    with pytest.raises(ValueError, match="deployment.wieghts"):
        bad = spec_from_dict({"config": data, "grid": {"deployment.wieghts": ["int4"]}})
        run_sweep(bad, tmp_path / "bad.csv")


CAPACITY_SLO = SLO(tpot_p99_s=0.02, ttft_p99_s=0.15)
CAPACITY_SEARCH = Search(
    rate_min=2.0,
    rate_max=128.0,
    precision=0.2,
    requests=300,
    max_requests=600,
    confidence=0.8,
    batches=None,
    crossover_precision=0.3,
)


def _capacity_tree(tmp_path: Path) -> Any:
    draft = {"kind": "draft", "card": "llama-68m", "acceptance": 0.8}
    data = _tree_run(draft, "llama-2-7b", {"kind": "static", "shape": "chain", "depth": 3})
    data["deployment"]["hardware"] = "a100-80gb"
    data["workload"] |= {"prompt_tokens": [16, 64], "output_tokens": [2, 12]}
    return _run(tmp_path, data).config


def test_plain_decoding_of_a_tree_config_is_its_plain_twin(tmp_path: Path) -> None:
    cfg = _capacity_tree(tmp_path)
    kw: dict[str, Any] = {"slo": CAPACITY_SLO, "search": CAPACITY_SEARCH, "seed": 5}
    both = serve_judged(cfg, TWIN, 40.0, 300, 1, **kw)
    alone = serve_judged(cfg, "plain", 40.0, 300, 1, **kw)
    key = ("plain", 40.0, 300, 1)
    assert pd.Series(both[key][0]).equals(pd.Series(alone[key][0])) and alone[key][1] == 0.0
    assert both[("speculative", 40.0, 300, 1)][1] == 3.0  # a chain of 3 nodes every pass


def test_the_capacity_search_takes_a_tree_config(tmp_path: Path) -> None:
    rows = pd.DataFrame(
        search_capacity(
            _capacity_tree(tmp_path),
            slo=CAPACITY_SLO,
            search=CAPACITY_SEARCH,
            rate_per_s=50.0,
            seed=5,
            workers=1,
        )
    )
    probes = rows[rows["kind"] == "probe"]
    gamma = probes.groupby("mode")["mean_gamma"].agg(["min", "max"])
    assert gamma.loc["plain"].tolist() == [0.0, 0.0]
    assert gamma.loc["speculative", "min"] > 0
    answers = rows[rows["kind"] == "answer"].set_index("mode")
    assert (answers["max_rate_per_replica"] > 0).all()
    assert set(rows["kind"]) == {"probe", "answer", "crossover"}
    empty = dataclasses.replace(_capacity_tree(tmp_path), parents=())
    with pytest.raises(ValueError, match="a tree with nodes"):
        search_capacity(
            empty, slo=CAPACITY_SLO, search=CAPACITY_SEARCH, rate_per_s=50.0, seed=5, workers=1
        )
