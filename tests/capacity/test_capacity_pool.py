"""A capacity search on a process pool gives the rows of one process; the warm-up rule.

The rows (their values, order and run numbers) must not depend on the number of
workers: every run is a function of its key and the seed, and the searches are
replayed in their fixed order from the pool's results. Checked on a small
speculative configuration whose search has all three parts (both modes' bisections
and replica walks, and the crossover), and on an error met inside a worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.capacity.planner import SLO, Search, judge, search_capacity, smallest_deployment
from specsim.capacity.pool import check_workers, default_workers
from specsim.capacity.statistics import FAILS, HOLDS
from specsim.policies.lookahead import FixedGamma
from specsim.report.studies import study_config
from specsim.sim import PlainCost, PoissonWorkload, ServingConfig

SLO_SMALL = SLO(tpot_p99_s=0.02, ttft_p99_s=0.15)
SEARCH_SMALL = Search(
    rate_min=2.0,
    rate_max=128.0,
    precision=0.2,
    requests=300,
    max_requests=600,
    confidence=0.8,
    batches=None,
    crossover_precision=0.3,
)


def small_config() -> ServingConfig:
    """Short requests on a cheap pass-time model: a whole search in about a second."""
    return ServingConfig(
        workload=PoissonWorkload(
            rate_per_s=1.0, requests=10, prompt_tokens=(16, 64), output_tokens=(2, 12)
        ),
        cost=PlainCost(c=0.1, step_s=0.01),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=3),
        max_batch=8,
        max_gamma=3,
    )


def searched(workers: int, **kw: Any) -> tuple[pd.DataFrame, list[tuple[int, int, str]]]:
    calls: list[tuple[int, int, str]] = []
    rows = search_capacity(
        small_config(),
        slo=SLO_SMALL,
        search=SEARCH_SMALL,
        rate_per_s=100.0,
        seed=5,
        workers=workers,
        progress=lambda *c: calls.append(c),
        **kw,
    )
    return pd.DataFrame(rows), calls


def test_two_workers_give_the_rows_of_one() -> None:
    one, calls_one = searched(1)
    two, calls_two = searched(2)
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    three, calls_three = searched(3)  # more workers than searches at once
    pd.testing.assert_frame_equal(one, three, check_exact=True)
    assert calls_three == calls_one
    # Every part ran: both modes' bisections, a replica walk, the crossover's runs.
    assert set(one["search"].dropna()) == {"capacity", "replicas", "crossover"}
    assert set(one["kind"]) == {"probe", "answer", "crossover"}
    runs = one.loc[one["kind"] == "probe", "run"]
    assert runs.tolist() == sorted(runs) and runs.nunique() == runs.max() + 1
    # Progress: the same reports, counting up to the runs, labelled by search.
    assert calls_one == calls_two
    done = [c[0] for c in calls_one]
    assert done == list(range(1, runs.nunique() + 1)) + [runs.nunique()] * (
        len(done) - runs.nunique()
    )
    assert all(d <= t for d, t, _ in calls_one) and calls_one[-1][:2] == (done[-1], done[-1])
    assert calls_one[0][2].startswith(" capacity speculative ")


def test_smallest_deployment_on_two_workers() -> None:
    configs = {
        1: small_config(),
        2: dataclasses.replace(small_config(), cost=PlainCost(c=0.1, step_s=0.005)),
    }
    rows = [
        pd.DataFrame(
            smallest_deployment(
                configs,
                slo=SLO_SMALL,
                search=SEARCH_SMALL,
                rate_per_s=100.0,
                seed=2,
                modes=("plain",),
                workers=w,
            )
        )
        for w in (1, 2)
    ]
    pd.testing.assert_frame_equal(rows[0], rows[1], check_exact=True)


class Refusing(IIDAcceptance):
    """An acceptance process that refuses long outputs: the error is met inside a run."""

    def sample(self, rng: np.random.Generator, n: int) -> Any:
        if n > 10:
            raise ValueError(f"refusing an output of {n} tokens")
        return super().sample(rng, n)


def test_an_error_in_a_worker_is_the_error_of_one_process() -> None:
    cfg = dataclasses.replace(small_config(), acceptance=Refusing(alpha=0.7))
    messages = []
    for w in (1, 2):
        with pytest.raises(ValueError, match="refusing an output") as err:
            search_capacity(
                cfg, slo=SLO_SMALL, search=SEARCH_SMALL, rate_per_s=100.0, seed=5, workers=w
            )
        messages.append(str(err.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_worker_counts_are_named(workers: Any) -> None:
    error = ValueError if isinstance(workers, int) and not isinstance(workers, bool) else TypeError
    with pytest.raises(error, match="workers: expected an integer"):
        search_capacity(
            small_config(),
            slo=SLO_SMALL,
            search=SEARCH_SMALL,
            rate_per_s=100.0,
            seed=5,
            workers=workers,
        )
    with pytest.raises(error, match="workers: expected an integer >= 1, got "):
        check_workers(workers)


def test_default_workers_is_what_the_machine_offers_up_to_two() -> None:
    assert 1 <= default_workers() <= 2
    assert check_workers(np.int64(3)) == 3


def test_study_config_workers_and_warmup() -> None:
    assert study_config("capacity").workers == 0  # 0: what the machine offers, up to 2
    assert study_config("capacity", {"workers": 2}).workers == 2
    with pytest.raises(ValueError, match="workers"):
        study_config("capacity", {"workers": -1})
    with pytest.raises(ValueError, match="warmup"):
        study_config("capacity", {"warmup": 0.9})


# Warm-up --------------------------------------------------------------------------------------
def table(ttft: np.ndarray) -> pd.DataFrame:
    arrival = np.arange(ttft.shape[0], dtype=float)
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "first_token_s": arrival + ttft,
            "finish_s": arrival + ttft + 0.1,
            "output_tokens": 2,
        }
    )


def test_warmup_leaves_out_the_first_arrivals() -> None:
    # 1000 requests, the first 50 to arrive slow (a queue that is still filling would be the
    # other way round; what matters is which ones are left out), listed in reverse order.
    ttft = np.where(np.arange(1000) < 50, 3.0, 1.0)
    reverse = table(ttft).iloc[::-1]
    slo = SLO(tpot_p99_s=0.2, ttft_p99_s=2.0)
    row = judge(reverse, slo)  # 5% by default: exactly the slow ones
    assert (row["requests"], row["warmup_requests"], row["outcome"]) == (1000, 50, HOLDS)
    assert row["goodput_fraction"] == 1.0 and row["ttft_p99_s"] == 1.0
    kept = judge(reverse, slo, warmup=0.0, batches=None)
    assert (kept["warmup_requests"], kept["outcome"]) == (0, FAILS)
    assert kept["goodput_fraction"] == pytest.approx(0.95)
    assert judge(reverse, slo, warmup=0.049)["warmup_requests"] == 49  # ceil(0.049 * 1000)


@pytest.mark.parametrize("warmup", [-0.1, 1.0, True, "5%"])
def test_bad_warmup_is_named(warmup: Any) -> None:
    with pytest.raises(ValueError, match="warmup"):
        judge(table(np.ones(10)), SLO(tpot_p99_s=0.2, ttft_p99_s=2.0), warmup=warmup)
    with pytest.raises(ValueError, match="warmup"):
        Search(warmup=warmup)
    with pytest.raises(ValueError, match="none after the warm-up"):
        judge(table(np.ones(1)), SLO(tpot_p99_s=0.2, ttft_p99_s=2.0), warmup=0.5)
