"""Disaggregated serving: the hand-over's time, the decode pool against a colocated run,
the metrics record, the TOML table and bad input."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, ServingConfig, simulate_serving
from specsim.sim.disagg import (
    AfterTransfer,
    DisaggConfig,
    KVLink,
    card_link,
    hand_over,
    simulate_disaggregated,
    target_kv_bytes_per_token,
)
from specsim.sim.disagg.from_toml import disagg_from_dict
from specsim.sim.workload.arrivals import PoissonWorkload, TraceWorkload

TARGET, SMALL, HW = load_model("llama-2-7b"), load_model("llama-68m"), load_hardware("h100-sxm")
IDEAL = KVLink(bandwidth=math.inf, latency_s=0.0)
WORKLOAD = PoissonWorkload(
    rate_per_s=6.0, requests=60, prompt_tokens=(64, 900), output_tokens=(2, 120)
)


def config(**kw: object) -> DisaggConfig:
    base: dict[str, object] = dict(
        workload=WORKLOAD,
        prefill_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW)),
        decode_cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=SMALL),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        link=card_link(HW, "interconnect"),
        max_batch=8,
        max_gamma=3,
    )
    base.update(kw)
    return DisaggConfig(**base)  # type: ignore[arg-type]


def tpot(req: pd.DataFrame) -> np.ndarray:
    sub = req[req["output_tokens"] > 1]
    return ((sub["finish_s"] - sub["first_token_s"]) / (sub["output_tokens"] - 1)).to_numpy()


def test_transfer_time_is_bytes_over_bandwidth_plus_latency() -> None:
    req = simulate_disaggregated(config(), np.random.default_rng(1)).requests()
    per_token = 2 * TARGET.layers * TARGET.kv_heads * TARGET.head_dim * 2  # fp16 keys, values
    want = req["prompt_tokens"].to_numpy() * per_token / HW.interconnect_bandwidth
    assert HW.interconnect_latency_s > 0
    np.testing.assert_array_equal(req["transfer_s"], want + HW.interconnect_latency_s)
    # The cache cannot arrive before its prefill ended and its transfer ran.
    gap = req["kv_ready_s"] - req["prefill_end_s"] - req["transfer_s"]
    assert (gap >= -1e-12).all()


def test_tensor_parallel_sends_a_shard_per_device() -> None:
    one = CardCost(deployment=Deployment(target=TARGET, hardware=HW))
    two = CardCost(deployment=Deployment(target=TARGET, hardware=HW, tensor_parallel=2))
    a = simulate_disaggregated(config(prefill_cost=one), np.random.default_rng(1)).requests()
    b = simulate_disaggregated(config(prefill_cost=two), np.random.default_rng(1)).requests()
    lat = HW.interconnect_latency_s
    np.testing.assert_allclose(b["transfer_s"] - lat, (a["transfer_s"] - lat) / 2, rtol=1e-12)


def test_link_queue_is_first_prefilled_first_sent() -> None:
    ready = np.array([1.0, 1.0, 0.5, 2.0])
    where = np.array([0, 0, 1, 0])
    xfer = np.array([0.3, 0.2, 0.4, 0.1])
    np.testing.assert_allclose(hand_over(ready, where, xfer), [1.3, 1.5, 0.9, 2.1])


def test_decode_pool_equals_a_colocated_run_fed_at_prefill_ends() -> None:
    """Ideal link, P = D = 1: the decode pool is a colocated serving run whose requests
    arrive when their prefills end and whose admission pass is the first decode step."""
    res = simulate_disaggregated(config(link=IDEAL), np.random.default_rng(2))
    req = res.requests()
    np.testing.assert_array_equal(req["kv_ready_s"], req["prefill_end_s"])
    order = np.argsort(req["kv_ready_s"].to_numpy(), kind="stable")
    fed = TraceWorkload(
        arrival_s=tuple(req["kv_ready_s"].to_numpy()[order].tolist()),
        prompt_tokens=tuple(req["prompt_tokens"].to_numpy()[order].tolist()),
        output_tokens=tuple(req["output_tokens"].to_numpy()[order].tolist()),
    )
    colocated = ServingConfig(
        workload=fed,
        cost=AfterTransfer(config().decode_cost),  # type: ignore[arg-type]
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_batch=8,
        max_gamma=3,
        plain_twin=False,
    )
    # The same acceptance draws: the workload's sample comes first in both runs' rng.
    rng = np.random.default_rng(2)
    WORKLOAD.sample(rng)
    col = simulate_serving(colocated, rng).requests_spec
    np.testing.assert_allclose(tpot(req.iloc[order]), tpot(col), rtol=1e-12)
    np.testing.assert_allclose(req["finish_s"].to_numpy()[order], col["finish_s"], rtol=1e-12)


def test_tpot_equals_a_colocated_decode_when_no_batch_is_shared() -> None:
    """Requests far apart: each decodes alone, so its TPOT is the colocated engine's (the
    admission pass differs, prefill or first step, but is not in TPOT)."""
    spaced = TraceWorkload(
        arrival_s=(0.0, 5.0, 10.0), prompt_tokens=(500, 80, 300), output_tokens=(40, 9, 77)
    )
    req = simulate_disaggregated(
        config(workload=spaced, link=IDEAL), np.random.default_rng(4)
    ).requests()
    colocated = ServingConfig(
        workload=spaced,
        cost=CardCost(deployment=Deployment(target=TARGET, hardware=HW), draft=SMALL),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_gamma=3,
        plain_twin=False,
    )
    col = simulate_serving(colocated, np.random.default_rng(4)).requests_spec
    np.testing.assert_allclose(tpot(req), tpot(col), rtol=1e-12)
    # TTFT differs by the transfer-free hand-over: the first step after the prefill.
    assert (req["first_token_s"] > col["first_token_s"]).all()


def test_metrics_record_has_both_pools_and_the_transfer() -> None:
    res = simulate_disaggregated(
        config(prefill_replicas=2, decode_replicas=2), np.random.default_rng(5)
    )
    m = res.metrics(ttft_target_s=0.5, tpot_target_s=0.02)
    for key in ("prefill_stable", "decode_stable", "transfer_p99_s", "goodput_requests_per_s"):
        assert key in m
    assert m["prefill_replicas"] == 2 and m["decode_replicas"] == 2
    assert m["energy_j"] == pytest.approx(m["prefill_energy_j"] + m["decode_energy_j"], rel=1e-12)
    assert m["tpot_speedup"] is not None and m["plain_tpot_p50_s"] > m["tpot_p50_s"]
    req = res.requests()
    assert set(req["prefill_replica"]) == {0, 1} and set(req["decode_replica"]) == {0, 1}
    ttft = req["first_token_s"] - req["arrival_s"]
    assert m["ttft_p99_s"] == pytest.approx(float(np.percentile(ttft, 99)), rel=1e-12)


@pytest.mark.parametrize(
    ("field", "value"), [("prefill_replicas", 0), ("decode_replicas", 0), ("decode_replicas", 1.5)]
)
def test_zero_replicas_error_names_the_key(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=f"disaggregation.{field}"):
        config(**{field: value})


def test_a_link_the_card_lacks_errors_naming_the_key() -> None:
    with pytest.raises(
        ValueError, match=r"disaggregation\.link: hardware card 'h100-sxm' states no network"
    ):
        card_link(HW, "network")
    with pytest.raises(ValueError, match=r"disaggregation\.link: expected one of"):
        card_link(HW, "pcie")
    net = card_link(HW, "network", network_bandwidth=5e10, network_latency_s=1e-5)
    assert (net.bandwidth, net.latency_s, net.name) == (5e10, 1e-5, "network")
    with pytest.raises(ValueError, match="link bandwidth"):
        KVLink(bandwidth=0.0, latency_s=0.0)


TOML = {
    "mode": "serving",
    "seed": 3,
    "max_gamma": 4,
    "max_batch": 16,
    "workload": {
        "kind": "poisson",
        "rate_per_s": 4.0,
        "requests": 40,
        "prompt_tokens": [64, 512],
        "output_tokens": [16, 64],
    },
    "acceptance": {"kind": "iid", "alpha": 0.7},
    "policy": {"kind": "fixed", "gamma": 3},
    "deployment": {"target": "llama-2-7b", "hardware": "h100-sxm"},
    "cost": {"kind": "cards", "draft": "llama-68m"},
    "disaggregation": {"prefill_replicas": 2, "decode_replicas": 3, "link": "interconnect"},
}


def test_toml_table_builds_the_pools() -> None:
    spec = disagg_from_dict(TOML)
    cfg = spec.config
    assert (cfg.prefill_replicas, cfg.decode_replicas, cfg.max_batch) == (2, 3, 16)
    assert cfg.prefill_cost.draft is None and cfg.decode_cost.draft is not None  # type: ignore[attr-defined]
    assert cfg.link.bandwidth == HW.interconnect_bandwidth
    res = simulate_disaggregated(cfg, np.random.default_rng(spec.seed))
    assert res.metrics()["decode_replicas"] == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prefill_replicas": 0}, r"disaggregation\.prefill_replicas"),
        ({"link": "network"}, r"disaggregation\.link"),
        ({"links": "interconnect"}, r"unknown key\(s\) \['links'\]"),
    ],
)
def test_toml_errors_name_the_key(change: dict[str, object], message: str) -> None:
    data = {**TOML, "disaggregation": {**TOML["disaggregation"], **change}}  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=message):
        disagg_from_dict(data)


def test_toml_refuses_colocated_replicas() -> None:
    with pytest.raises(ValueError, match=r"\['replicas'\] with \[disaggregation\]"):
        disagg_from_dict({**TOML, "replicas": 2})


def test_plain_policy_is_its_own_twin() -> None:
    res = simulate_disaggregated(config(policy=FixedGamma(gamma=0)), np.random.default_rng(6))
    m = res.metrics()
    assert m["speedup"] == 1.0 and m["mean_gamma"] == 0.0


def test_replace_keeps_checks() -> None:
    with pytest.raises(ValueError, match="disaggregation.decode_replicas"):
        dataclasses.replace(config(), decode_replicas=0)


def test_energy_counts_both_pools_with_and_without_speculation() -> None:
    res = simulate_disaggregated(config(), np.random.default_rng(7))
    m = res.metrics()
    pre = float(res.prefill.iterations_spec["energy_j"].sum())
    plain = res.decode.iterations_plain
    assert plain is not None
    want = (pre + float(plain["energy_j"].sum())) / m["tokens"]
    assert m["plain_energy_j_per_token"] == pytest.approx(want, rel=1e-12)
    assert m["energy_j_per_token"] == pytest.approx(m["energy_j"] / m["tokens"], rel=1e-12)


EXAMPLE = Path(__file__).parents[3] / "studies" / "configs" / "serving-disaggregated.toml"


def test_the_example_config_runs_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from specsim.cli import main

    small = ["--set", "workload.requests=80"]
    assert main(["simulate", str(EXAMPLE), *small, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["prefill_replicas"] == 1 and m["decode_replicas"] == 2 and m["requests"] == 80
    assert m["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # Llama-3.1-8B, 16-bit KV
    assert m["transfer_p99_s"] <= m["handover_p99_s"]
    more = ["--set", "disaggregation.decode_replicas=3", "--json"]
    assert main(["simulate", str(EXAMPLE), *small, *more]) == 0
    assert json.loads(capsys.readouterr().out)["decode_replicas"] == 3
    bad = ["--set", "disaggregation.decode_replicas=0"]
    assert main(["simulate", str(EXAMPLE), *bad]) == 2
    err = capsys.readouterr().err
    assert "--set disaggregation.decode_replicas" in err and "decode_replicas: expected" in err
    assert main(["simulate", str(EXAMPLE), "--events", "x.csv"]) == 2
    assert "--events: not available for a [disaggregation] config" in capsys.readouterr().err


def test_toml_prefill_tensor_parallel() -> None:
    data = {**TOML, "disaggregation": {**TOML["disaggregation"], "prefill_tensor_parallel": 2}}  # type: ignore[dict-item]
    cfg = disagg_from_dict(data).config
    assert cfg.prefill_cost.tensor_parallel == 2 and cfg.decode_cost.tensor_parallel == 1  # type: ignore[attr-defined]
    bad = {**TOML, "disaggregation": {**TOML["disaggregation"], "prefill_tensor_parallel": 3}}  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"disaggregation\.prefill_tensor_parallel"):
        disagg_from_dict(bad)


def test_toml_with_a_deployment_table() -> None:
    """A [deployment] gives the decode replica's target, hardware and formats (the draft in
    [cost]); the prefill replica keeps them without the draft."""
    data = {k: v for k, v in TOML.items() if k not in ("cost", "deployment")}
    data["deployment"] = {"target": "llama-2-7b", "hardware": "h100-sxm", "kv": "float8"}
    data["cost"] = {"draft": "llama-68m"}
    cfg = disagg_from_dict(data).config
    # 8-bit KV: half the bytes of the 16-bit cache cross the link.
    assert target_kv_bytes_per_token(cfg.prefill_cost) == TARGET.layers * 2 * 4096
    assert cfg.prefill_cost.draft is None  # type: ignore[attr-defined]
