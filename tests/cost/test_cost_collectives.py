"""Tensor-parallel collectives (issue 14, section 3): known answers, TP=1, shares."""

from __future__ import annotations

import dataclasses
import math

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cli import main
from specsim.cost import step_cost
from specsim.cost.collectives import (
    allreduce_bandwidth_factor,
    allreduce_steps,
    allreduce_time,
    alltoall_time,
)

H100 = load_hardware("h100-sxm")
SMALL = load_model("llama-3.2-1b")


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_ring_allreduce_known_answer(p: int) -> None:
    # Ring: 2 (p - 1) steps of n / p bytes (Thakur et al. 2005; Patarasuk & Yuan 2009).
    n, beta, alpha = 64e6, 2e11, 5e-6
    want = 2 * (p - 1) * (alpha + (n / p) / beta)
    got = allreduce_time(n, p, bandwidth=beta, latency_s=alpha, algorithm="ring")
    assert got == pytest.approx(want, rel=1e-12)
    # nccl-tests' bus bandwidth: busbw = algbw * 2 (p - 1) / p, algbw = n / t; with no latency
    # the ring's busbw is the link bandwidth.
    t = allreduce_time(n, p, bandwidth=beta, latency_s=0.0, algorithm="ring")
    assert (n / t) * 2 * (p - 1) / p == pytest.approx(beta, rel=1e-12)


def test_tree_allreduce_known_answer() -> None:
    # Binomial reduce + broadcast: 2 ceil(log2 p) steps of the whole message.
    for p, steps in ((2, 2), (3, 4), (8, 6), (16, 8)):
        assert allreduce_steps(p, "tree") == steps
        assert allreduce_time(1e6, p, bandwidth=1e10, latency_s=1e-6, algorithm="tree") == (
            pytest.approx(steps * (1e-6 + 1e6 / 1e10), rel=1e-12)
        )
    # Latency-bound messages favour the tree at many devices, large ones the ring.
    kw = {"bandwidth": 1e11, "latency_s": 1e-5}
    assert allreduce_time(8e3, 16, algorithm="tree", **kw) < allreduce_time(8e3, 16, **kw)
    assert allreduce_time(1e9, 16, algorithm="tree", **kw) > allreduce_time(1e9, 16, **kw)


def test_one_device_has_no_collective_time() -> None:
    for alg in ("ring", "tree", "per-allreduce"):
        assert allreduce_steps(1, alg) == 0.0 and allreduce_bandwidth_factor(1, alg) == 0.0
        assert (
            allreduce_time(1e9, 1, bandwidth=1.0, latency_s=1.0, algorithm=alg, overhead_s=1.0)
            == 0.0
        )
        hw = dataclasses.replace(H100, collective_algorithm=alg, collective_overhead_s=1e-5)
        cost = step_cost(SMALL, hw, batch=1, context=128, new_tokens=1, tensor_parallel=1)
        assert cost.allreduce_time_s == 0.0


def test_model_matches_the_formula_and_share_rises_with_devices() -> None:
    for alg in ("ring", "tree", "per-allreduce"):
        hw = dataclasses.replace(H100, collective_algorithm=alg, collective_overhead_s=2e-6)
        shares = []
        for tp in (1, 2, 4, 8, 16):
            c = step_cost(SMALL, hw, batch=1, context=128, new_tokens=1, tensor_parallel=tp)
            # 2 all-reduces of d_model activations (bf16) per layer, one token.
            one = allreduce_time(
                SMALL.d_model * 2.0,
                tp,
                bandwidth=hw.interconnect_bandwidth,
                latency_s=hw.interconnect_latency_s,
                algorithm=alg,
            )
            want = 2 * SMALL.layers * one + 2e-6 * (tp - 1)
            assert c.allreduce_time_s == pytest.approx(want, rel=1e-9)
            shares.append(c.allreduce_time_s / c.time_s)
        assert shares[0] == 0.0
        assert all(b > a for a, b in zip(shares, shares[1:], strict=False)), (alg, shares)


def test_card_rejects_an_unknown_algorithm() -> None:
    with pytest.raises(ValueError, match="collective_algorithm.*'butterfly'"):
        dataclasses.replace(H100, collective_algorithm="butterfly")
    with pytest.raises(ValueError, match="algorithm: unknown all-reduce algorithm 'x'"):
        allreduce_steps(4, "x")


def test_cli_shows_the_collectives_share(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--tensor-parallel", "16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("all-reduce"))
    share = float(line.split("(")[1].split("%")[0])
    c = step_cost(SMALL, H100, batch=1, context=512, new_tokens=1, tensor_parallel=16)
    assert math.isclose(share, round(100 * c.allreduce_time_s / c.time_s, 1), abs_tol=0.051)
    assert share > 10


@pytest.mark.parametrize("p", [2, 4, 8])
def test_alltoall_known_answers(p: int) -> None:
    # Each of p devices holds n bytes, a 1/p share for every device, its own included
    # (Thakur et al. 2005): the ring's pairwise exchange sends the p - 1 other shares in
    # p - 1 steps; Bruck's algorithm sends half the message in each of ceil(log2 p) steps;
    # per-allreduce pays one latency and the ring's bytes.
    n, beta, alpha = 64e6, 2e11, 5e-6
    ring = (p - 1) * (alpha + (n / p) / beta)
    tree = math.ceil(math.log2(p)) * (alpha + (n / 2) / beta)
    one = alpha + (p - 1) * (n / p) / beta
    for algorithm, want in (("ring", ring), ("tree", tree), ("per-allreduce", one)):
        got = alltoall_time(n, p, bandwidth=beta, latency_s=alpha, algorithm=algorithm)
        assert got == pytest.approx(want, rel=1e-12), algorithm
