"""The crossover search and study: a crossing found where the closed form puts it, the study's
tables consistent with its rows, and bad settings refused.

The known answer: chain serving on :class:`specsim.sim.costs.plain.PlainCost` with a verification
factor that grows with the batch, ``v(gamma) = 1 + beta B gamma`` (a pass of ``B`` sequences and
``gamma + 1`` positions each turning compute-bound), has the throughput speedup of Theorem 3.8,
``E(alpha, gamma) / (gamma c + v)``, which is 1 at ``B* = (E - 1 - gamma c) / (beta gamma)``.
The simulated TPOT crossing's 95% interval must hold it (each request's TPOT is its own blocks'
rate; the batch's throughput also waits for its slowest sequence).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.crossover import closed_batch, crossing, replicate, summarize
from specsim.policies.lookahead import FixedGamma
from specsim.report.studies import load_study, run_study
from specsim.sim import ServingConfig, simulate_serving
from specsim.sim.costs.plain import PlainCost
from specsim.theory import expected_tokens

ALPHA, GAMMA, C, BETA, OUTPUT = 0.8, 3, 0.05, 0.01, 1024


def _at_batch(b: float, rng: np.random.Generator) -> dict[str, float]:
    batch = int(b)
    cost = PlainCost(c=C, v=tuple(1.0 + BETA * batch * g for g in range(GAMMA + 1)))
    cfg = ServingConfig(
        workload=closed_batch(batch, prompt=8, output=OUTPUT),
        cost=cost,
        acceptance=IIDAcceptance(alpha=ALPHA),
        policy=FixedGamma(gamma=GAMMA),
        max_gamma=GAMMA,
        max_batch=batch,
    )
    m = simulate_serving(cfg, rng).metrics()
    return {"speedup": float(m["speedup"]), "tpot_speedup": float(m["tpot_speedup"])}


def test_the_crossing_holds_the_closed_form() -> None:
    e = float(expected_tokens(ALPHA, GAMMA))
    known = (e - 1.0 - GAMMA * C) / (BETA * GAMMA)  # 60.07
    df = replicate(_at_batch, [40, 48, 56, 64, 72], replicates=3, rng=np.random.default_rng(7))
    agg = summarize(df, by=["x"], metrics=["speedup", "tpot_speedup"])
    c = crossing(agg["x"], agg["tpot_speedup"], agg["tpot_speedup_se"])
    assert c.kind == "crosses"
    # A request's last block is cut at its last token: at most one block (E tokens) of its
    # OUTPUT - 1 decoded ones, a relative bias E / (OUTPUT - 1) in the speedup; at the
    # crossing the speedup falls by beta gamma / E per unit of batch, so in batches:
    cut = e * e / ((OUTPUT - 1) * BETA * GAMMA)  # 0.28
    assert c.low - cut <= known <= c.high + cut, (c, known, cut)
    assert c.high - c.low < 8, c  # the interval says something
    # A wrong slope moves the answer out of the interval: the test can fail.
    assert not (c.low <= known * 1.1 <= c.high)
    # Throughput waits for the batch's slowest sequence (makespan; on PlainCost the tail
    # iterations cost a full pass): it crosses no later than the per-request TPOT.
    t = crossing(agg["x"], agg["speedup"], agg["speedup_se"])
    assert t.kind == "crosses" and t.at <= c.high


def test_crossing_conventions() -> None:
    assert crossing([1, 2], [0.9, 0.8], [0.0, 0.0]).kind == "always"
    never = crossing([1, 2], [1.3, 1.2], [0.01, 0.01])
    assert never.kind == "never" and math.isinf(never.at) and math.isinf(never.high)
    noisy = crossing([1, 2, 4], [1.3, 1.05, 0.8], [0.01, 0.1, 0.01])
    assert noisy.low < noisy.at < noisy.high
    with pytest.raises(ValueError, match="increasing"):
        crossing([2, 1], [1.0, 0.5], [0.0, 0.0])
    with pytest.raises(ValueError, match="one length"):
        crossing([1, 2], [1.0], [0.0])
    with pytest.raises(ValueError, match="replicates"):
        replicate(_at_batch, [1], replicates=1, rng=np.random.default_rng(0))


TINY = {
    "deployments": ("h100-sxm",),
    "targets": ("vicuna-7b-v1.3",),
    "drafts": ("llama-68m",),
    "draft_alphas": (0.6,),
    "tensor_parallel": (1,),
    "fast_gammas": (2,),
    "fast_batches": (1, 16, 256),
    "output": 64,
    "fast_rate_requests": 16,
}


def test_study_tables_follow_its_rows() -> None:
    study = load_study("crossover")
    out = run_study("crossover", overrides=TINY, seed=2, fast=True)
    df = out.data
    assert set(df["proposer"]) == {"draft model", "n-gram", "Medusa heads"}
    assert set(df["axis"]) == {"batch", "rate", "policy"}
    cross = study.crossings(df)
    env = study.envelope(df)
    for _, r in cross.iterrows():
        g = env[
            (env["proposer"] == r["proposer"])
            & (env["axis"] == r["axis"])
            & (env["metric"] == r["metric"])
        ].sort_values("x")
        y = g["mean"].to_numpy()
        if r["kind"] == "never":
            assert np.all(y > 1.0)
        elif r["kind"] == "always":
            assert y[0] <= 1.0
        else:
            assert g["x"].min() < r["at"] < g["x"].max()
    assert out.summary.count("against the batch the throughput speedup") == 3
    # At batch 256 the three engine rules turn speculation off (vLLM v0 from 32, the v1
    # schedule's last entry 0, SGLang's slot 64 has step 0 only) until the closed batch has
    # drained below their thresholds: almost no drafts, and nearly one speedup on the same draws.
    pol = df[(df["axis"] == "policy") & (df["x"] == 256)]
    off = pol[pol["rule"].str.startswith(("vLLM", "SGLang"))]
    assert off["mean_gamma"].max() < 0.01
    spread = off.groupby("replicate")["speedup"].agg(lambda v: v.max() / v.min() - 1.0)
    assert spread.max() < 0.01


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"drafts": ("llama-68m",)}, "one value per target"),
        ({"deployments": ("h100-sxm@",)}, "CARD@STACK"),
        ({"deployments": ("no-such-card",)}, "no-such-card"),
        ({"rate_max_batch": 0}, "rate_max_batch"),
        ({"batches": (4, 1)}, "increasing"),
        ({"replicates": 1}, "replicates"),
    ],
)
def test_bad_settings_are_errors(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_study("crossover").Config(**overrides)
