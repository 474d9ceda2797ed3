"""Workloads: length distributions with exact moments, arrival processes, traces, presets.

Moments are checked against enumeration of the distribution (exact) and against
samples with tolerances from the standard error (|z| <= 4.5); bad inputs name
the field and the value.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.sim.workload.arrivals import (
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    TraceWorkload,
    read_request_trace,
)
from specsim.sim.workload.workload import (
    PRESETS,
    Empirical,
    Fixed,
    Geometric,
    LogNormal,
    SyntheticWorkload,
    Uniform,
    Zipf,
    preset_workload,
    workload_dir,
)

Z = 4.5


def _z_mean(x: np.ndarray, mean: float) -> float:
    se = x.std(ddof=1) / math.sqrt(x.shape[0])
    return float((x.mean() - mean) / se) if se > 0 else float(x.mean() - mean)


# Length distributions: known answers and exact moments ------------------------------------
def test_fixed_and_uniform_known_moments() -> None:
    assert (Fixed(value=7).mean, Fixed(value=7).second_moment) == (7.0, 49.0)
    u = Uniform(low=3, high=8)
    k = np.arange(3, 9, dtype=float)
    assert u.mean == pytest.approx(k.mean()) and u.second_moment == pytest.approx((k * k).mean())
    assert Uniform(low=4, high=4).second_moment == 16.0


def test_geometric_moments_by_enumeration() -> None:
    g = Geometric(mean_tokens=5.0)
    p = 0.2
    k = np.arange(1, 2000, dtype=float)
    pmf = p * (1 - p) ** (k - 1)
    assert pmf.sum() == pytest.approx(1.0)
    assert g.mean == pytest.approx(pmf @ k) and g.second_moment == pytest.approx(pmf @ (k * k))
    assert Geometric(mean_tokens=1.0).second_moment == 1.0  # p = 1: always one token


@pytest.mark.parametrize(
    "dist",
    [
        LogNormal(median=40.0, sigma=1.2, high=2000),
        LogNormal(median=3.0, sigma=0.4, low=2, high=6),  # much mass cut to both ends
        Zipf(exponent=1.1, high=500),
        Zipf(exponent=2.5, low=5, high=50),
    ],
)
def test_tabled_distributions_sample_their_pmf(dist: LogNormal | Zipf) -> None:
    pmf = dist.pmf()
    assert pmf.shape == (dist.high - dist.low + 1,) and pmf.sum() == pytest.approx(1.0)
    n = 200_000
    x = dist.sample(np.random.default_rng(3), n)
    assert x.min() >= dist.low and x.max() <= dist.high
    counts = np.bincount(x - dist.low, minlength=pmf.shape[0])
    se = np.sqrt(n * pmf * (1 - pmf)) + 1e-12
    assert np.max(np.abs(counts - n * pmf) / se) <= 5.5  # every cell, a few hundred at most
    assert abs(_z_mean(x.astype(float), dist.mean)) <= Z
    var = dist.second_moment - dist.mean**2
    assert var > 0 and abs(_z_mean(x.astype(float) ** 2, dist.second_moment)) <= Z


def test_lognormal_is_the_rounded_lognormal() -> None:
    # With a cap far out of reach, the mass at k is the normal mass of [ln(k-1/2), ln(k+1/2)).
    d = LogNormal(median=10.0, sigma=0.5, high=100_000)
    from scipy.stats import norm

    k = 12
    want = norm.cdf((math.log(k + 0.5) - math.log(10)) / 0.5) - norm.cdf(
        (math.log(k - 0.5) - math.log(10)) / 0.5
    )
    assert d.pmf()[k - 1] == pytest.approx(want, rel=1e-12)
    # ... and the mean is close to the continuous one, exp(mu + sigma^2/2) (rounding is tiny).
    assert d.mean == pytest.approx(10 * math.exp(0.125), rel=2e-3)


def test_zipf_pmf_is_a_power_law() -> None:
    pmf = Zipf(exponent=1.5, low=2, high=9).pmf()
    k = np.arange(2, 10, dtype=float)
    assert pmf / pmf[0] == pytest.approx((k / 2) ** -1.5)


def test_empirical_moments_and_csv(tmp_path: Path) -> None:
    e = Empirical(values=(1, 4, 10), counts=(2.0, 1.0, 1.0))
    assert e.mean == pytest.approx((2 + 4 + 10) / 4)
    assert e.second_moment == pytest.approx((2 + 16 + 100) / 4)
    hist = tmp_path / "hist.csv"
    hist.write_text("tokens,count\n1,2\n4,1\n10,1\n")
    assert Empirical.from_csv(hist) == e
    plain = tmp_path / "plain.csv"
    plain.write_text("tokens\n5\n5\n7\n")
    assert Empirical.from_csv(plain).mean == pytest.approx(17 / 3)
    x = e.sample(np.random.default_rng(0), 50_000)
    assert set(np.unique(x)) == {1, 4, 10} and abs(_z_mean(x.astype(float), e.mean)) <= Z


# Bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Fixed(value=-3), "value"),
        (lambda: Fixed(value=0), "value"),
        (lambda: Uniform(low=-1, high=4), "low"),
        (lambda: Uniform(low=5, high=2), "high"),
        (lambda: Geometric(mean_tokens=0.5), "mean_tokens"),
        (lambda: LogNormal(median=-1.0, sigma=1.0, high=10), "median"),
        (lambda: LogNormal(median=5.0, sigma=0.0, high=10), "sigma"),
        (lambda: Zipf(exponent=1.0, low=0, high=10), "low"),
        (lambda: Empirical(values=(3, -2)), r"values\[1\]"),
        (lambda: Empirical(values=(3, 2), counts=(1.0,)), "counts"),
        (lambda: Empirical(values=()), "values"),
        (lambda: GammaArrivals(rate_per_s=1.0, cv=0.0), "cv"),
        (lambda: GammaArrivals(rate_per_s=1.0, cv=-0.5), "cv"),
        (lambda: PoissonArrivals(rate_per_s=0.0), "rate_per_s"),
        (lambda: OnOffArrivals(rate_on_per_s=1.0, mean_on_s=1.0, mean_off_s=-1.0), "mean_off_s"),
    ],
)
def test_bad_inputs_name_the_field(make: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()  # type: ignore[operator]


def test_unsorted_trace_names_the_request() -> None:
    with pytest.raises(ValueError, match=r"non-decreasing.*request 2 arrives at 0.5 s"):
        TraceWorkload(arrival_s=(0.0, 1.0, 0.5), prompt_tokens=(1, 1, 1), output_tokens=(1, 1, 1))
    with pytest.raises(ValueError, match="output_tokens must be >= 1; request 1 has -4"):
        TraceWorkload(arrival_s=(0.0, 1.0), prompt_tokens=(1, 1), output_tokens=(3, -4))


def test_request_trace_file(tmp_path: Path) -> None:
    good = tmp_path / "trace.csv"
    good.write_text("arrival_s,prompt_tokens,output_tokens,user\n0.0,10,5,a\n0.5,20,1,b\n")
    w = read_request_trace(good)
    assert w.arrival_s == (0.0, 0.5) and w.prompt_tokens == (10, 20) and w.output_tokens == (5, 1)
    bad = tmp_path / "unsorted.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n1.0,10,5\n0.5,20,1\n")
    with pytest.raises(ValueError, match=r"unsorted.csv: trace: arrival_s must be non-decreasing"):
        read_request_trace(bad)
    missing = tmp_path / "missing.csv"
    missing.write_text("arrival_s,prompt_tokens\n0.0,1\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['output_tokens'\]"):
        read_request_trace(missing)


# Arrivals -----------------------------------------------------------------------------------
def test_poisson_and_gamma_interarrival_moments() -> None:
    rng = np.random.default_rng(5)
    n = 100_000
    for proc in (
        PoissonArrivals(rate_per_s=4.0),
        GammaArrivals(rate_per_s=4.0, cv=2.5),
        GammaArrivals(rate_per_s=4.0, cv=0.3),
    ):
        t = proc.times(rng, n)
        assert t.shape == (n,) and np.all(np.diff(t) >= 0) and t[0] > 0
        gaps = np.diff(t, prepend=0.0)
        assert abs(_z_mean(gaps, proc.mean_interarrival_s)) <= Z
        # Variance: sample variance's standard error from the Gamma's fourth moment.
        shape = 1.0 / proc.interarrival_scv
        var = proc.interarrival_scv * proc.mean_interarrival_s**2
        se = var * math.sqrt((2 + 6 / shape) / n)
        assert abs(gaps.var(ddof=1) - var) <= Z * se


def test_gamma_with_cv_one_is_poisson_in_distribution() -> None:
    g = GammaArrivals(rate_per_s=2.0, cv=1.0)
    p = PoissonArrivals(rate_per_s=2.0)
    assert g.interarrival_scv == p.interarrival_scv == 1.0
    gaps = np.diff(g.times(np.random.default_rng(1), 50_000), prepend=0.0)
    # Exponential: P(gap > mean) = e^-1.
    share = float(np.mean(gaps > 0.5))
    assert abs(share - math.exp(-1)) <= Z * math.sqrt(math.exp(-1) * (1 - math.exp(-1)) / 50_000)


def test_on_off_rate_and_scv_agree_with_the_renewal_equations() -> None:
    lam, on, off = 3.0, 2.0, 4.0
    proc = OnOffArrivals(rate_on_per_s=lam, mean_on_s=on, mean_off_s=off)
    assert proc.rate_per_s == pytest.approx(lam * on / (on + off))
    # First and second moments of the time from an arrival (always in the on state) to the
    # next, from the first-step equations of the two-state chain (independent of the formula).
    r1, r2 = 1 / on, 1 / off
    a, q = lam + r1, r1 / (lam + r1)
    m_on = (r1 + r2) / (lam * r2)
    m_off = 1 / r2 + m_on
    m2_on = (2 / a**2 + 2 * q * m_off / a + q * (2 / r2**2 + 2 * m_on / r2)) / (lam / a)
    assert proc.mean_interarrival_s == pytest.approx(m_on)
    assert proc.interarrival_scv == pytest.approx(m2_on / m_on**2 - 1)
    gaps = np.diff(proc.times(np.random.default_rng(2), 100_000))
    assert abs(_z_mean(gaps, m_on)) <= Z


# Workloads ----------------------------------------------------------------------------------
def test_synthetic_workload_table_is_seeded() -> None:
    w = SyntheticWorkload(
        requests=50,
        arrivals=GammaArrivals(rate_per_s=5.0, cv=2.0),
        prompt=LogNormal(median=100.0, sigma=1.0, high=4096),
        output=Zipf(exponent=1.2, high=512),
    )
    a, b = w.sample(np.random.default_rng(9)), w.sample(np.random.default_rng(9))
    pd.testing.assert_frame_equal(a, b)
    assert list(a.columns) == ["arrival_s", "prompt_tokens", "output_tokens"] and len(a) == 50
    assert w.mean_prompt_tokens == pytest.approx(w.prompt.mean)
    with pytest.raises(ValueError, match="requests"):
        SyntheticWorkload(
            requests=0,
            arrivals=PoissonArrivals(rate_per_s=1.0),
            prompt=Fixed(value=1),
            output=Fixed(value=1),
        )


def test_presets_match_the_published_trace_statistics() -> None:
    # The Splitwise trace's medians (Patel et al., ISCA 2024): the files hold the trace.
    medians = {"azure-code-2023": (1469, 13), "azure-conversation-2023": (1020, 129)}
    for name, (prompt_median, output_median) in medians.items():
        p = PRESETS[name]
        for file, median in ((p.prompt_file, prompt_median), (p.output_file, output_median)):
            hist = pd.read_csv(workload_dir() / file)
            cum = np.cumsum(hist["count"]) / hist["count"].sum()
            assert hist["tokens"].to_numpy()[np.searchsorted(cum, 0.5)] == median
    w = preset_workload("azure-conversation-2023", requests=10, rate_per_s=2.0)
    assert w.arrivals.rate_per_s == 2.0 and w.output.mean == pytest.approx(211.126, abs=1e-3)
    assert preset_workload("azure-code-2023", requests=5, bursty=False).arrivals.cv == 1.0
    with pytest.raises(ValueError, match="unknown workload 'chat'"):
        preset_workload("chat", requests=1)


def test_a_synthetic_workload_is_served() -> None:
    from specsim.acceptance.processes import IIDAcceptance
    from specsim.policies.lookahead import FixedGamma
    from specsim.sim import PlainCost
    from specsim.sim.serving import ServingConfig, simulate_serving

    w = SyntheticWorkload(
        requests=30,
        arrivals=PoissonArrivals(rate_per_s=20.0),
        prompt=Uniform(low=4, high=16),
        output=Geometric(mean_tokens=6.0),
    )
    cfg = ServingConfig(
        workload=w,
        cost=PlainCost(c=0.1, step_s=0.01),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=2),
        max_batch=8,
        max_gamma=2,
    )
    req = simulate_serving(cfg, np.random.default_rng(4)).requests()
    assert len(req) == 30 and np.all(req["finish_s"] >= req["first_token_s"])


def test_with_rate_keeps_the_shape_and_mean_prompt_is_known() -> None:
    on_off = OnOffArrivals(rate_on_per_s=3.0, mean_on_s=2.0, mean_off_s=4.0)
    faster = on_off.with_rate(5.0)
    assert faster.rate_per_s == pytest.approx(5.0) and faster.mean_on_s == 2.0
    assert GammaArrivals(rate_per_s=1.0, cv=3.0).with_rate(2.0).cv == 3.0
    w = SyntheticWorkload(
        requests=3, arrivals=on_off, prompt=Uniform(low=2, high=6), output=Fixed(value=1)
    ).with_rate(0.5)
    assert w.arrivals.rate_per_s == pytest.approx(0.5) and w.mean_prompt_tokens == 4.0
    from specsim.sim.workload.arrivals import PoissonWorkload

    p = PoissonWorkload(rate_per_s=1.0, requests=2, prompt_tokens=(10, 20), output_tokens=1)
    assert p.with_rate(3.0).rate_per_s == 3.0 and p.mean_prompt_tokens == 15.0
    t = TraceWorkload(arrival_s=(0.0, 1.0), prompt_tokens=(4, 8), output_tokens=(1, 1))
    assert t.mean_prompt_tokens == 6.0


def test_toml_tables_build_the_new_kinds_once_registered() -> None:
    """The tables of docs/queueing.md build through the configuration boundary with the kinds
    proposed for specsim.sim.config.config.KINDS (fields are the classes' own)."""
    from specsim.config import coerce
    from specsim.sim.workload.arrivals import Arrivals
    from specsim.sim.workload.workload import Lengths, PresetWorkload, Workload

    kinds = {
        Workload: {"synthetic": SyntheticWorkload, "preset": PresetWorkload},
        Arrivals: {"poisson": PoissonArrivals, "gamma": GammaArrivals, "on-off": OnOffArrivals},
        Lengths: {
            "fixed": Fixed,
            "uniform": Uniform,
            "geometric": Geometric,
            "lognormal": LogNormal,
            "zipf": Zipf,
            "empirical": Empirical,
        },
    }
    table = {
        "kind": "synthetic",
        "requests": 2000,
        "arrivals": {"kind": "gamma", "rate_per_s": 8.0, "cv": 2.0},
        "prompt": {"kind": "lognormal", "median": 512, "sigma": 0.8, "high": 8192},
        "output": {"kind": "zipf", "exponent": 1.2, "high": 1024},
    }
    w = coerce(table, Workload, "workload", kinds=kinds)
    assert w.arrivals == GammaArrivals(rate_per_s=8.0, cv=2.0) and w.prompt.median == 512.0
    preset = coerce(
        {"kind": "preset", "name": "azure-code-2023", "requests": 4},
        Workload,
        "workload",
        kinds=kinds,
    )
    assert len(preset.sample(np.random.default_rng(0))) == 4
    with pytest.raises(ValueError, match="cv"):
        coerce(
            {**table, "arrivals": {"kind": "gamma", "rate_per_s": 1.0, "cv": 0}},
            Workload,
            "workload",
            kinds=kinds,
        )
    with pytest.raises(ValueError, match="name: unknown workload"):
        PresetWorkload(name="chat", requests=1)
