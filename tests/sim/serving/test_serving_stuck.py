"""A serving run in which a waiting request can never be admitted ends in a ValueError naming
the request and the capacity, never in a run that spins forever.

The leak is made by hand (``Admission.release`` frees nothing), as the mutations
``serving-kv-release`` and ``drain-kv-release`` of ``tests/mutation_list_sim.py`` do: then
the reservations pile up, the batch empties, and the next request waits for room that
nothing running will ever free. Each path that admits checks it: the stepped iteration,
the iteration under a token budget (chunked prefill) and the bulk drain.
"""

from __future__ import annotations

import numpy as np
import pytest
from serving_cases import serving_config

from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import FixedGamma, LoadAdaptive
from specsim.sim import PlainCost, TraceWorkload, simulate_serving
from specsim.sim.serving.batch import Admission, Requests, draw_requests

N = 6
WORK = TraceWorkload(
    arrival_s=tuple(0.1 * i for i in range(N)), prompt_tokens=(100,) * N, output_tokens=(20,) * N
)
AT_ONCE = TraceWorkload(arrival_s=(0.0,) * N, prompt_tokens=(100,) * N, output_tokens=(20,) * N)
COST = PlainCost(c=0.1, step_s=0.01)
# Room for two requests' reservations (prompt + output + lookahead of max_gamma 8 + 1).
ROOM = 2 * (100 + 20 + 9)


@pytest.mark.parametrize(
    ("policy", "budget", "work"),
    [
        (LoadAdaptive(alpha=0.7, max_gamma=4), None, WORK),  # the stepped iteration
        (FixedGamma(gamma=3), None, AT_ONCE),  # the bulk drain: every request has arrived
        (FixedGamma(gamma=3), 64, WORK),  # chunked prefill
    ],
    ids=["stepped", "drain", "chunked"],
)
def test_a_leaked_reservation_is_an_error_not_a_hang(
    monkeypatch: pytest.MonkeyPatch, policy: object, budget: int | None, work: TraceWorkload
) -> None:
    config = serving_config(
        COST,
        rate_per_s=1.0,
        workload=work,
        policy=policy,
        kv_capacity_tokens=ROOM,
        token_budget=budget,
        plain_twin=False,
    )
    simulate_serving(config, np.random.default_rng(0))  # without the leak, every request ends
    monkeypatch.setattr(Admission, "release", lambda self, finished: None)
    with pytest.raises(ValueError, match=r"request 2 needs 129 KV tokens .* capacity of 258"):
        simulate_serving(config, np.random.default_rng(0))


def _admission(used: int) -> Admission:
    table = WORK.sample(np.random.default_rng(0))
    out = table["output_tokens"].to_numpy()
    draws = draw_requests(IIDAcceptance(alpha=0.5), out, max_gamma=8, rng=np.random.default_rng(0))
    adm = Admission(
        Requests.build(table, draws, max_gamma=8), capacity=ROOM, max_batch=4, max_gamma=8
    )
    adm.arrive(0)
    adm.used = used
    return adm


def test_check_progress_says_what_waits_and_what_is_held() -> None:
    _admission(used=ROOM - 129).check_progress(0)  # it fits: nothing to say
    _admission(used=ROOM).check_progress(1)  # something runs: it will free room
    with pytest.raises(ValueError) as err:
        _admission(used=200).check_progress(0)
    assert str(err.value) == (
        "serving: request 0 needs 129 KV tokens and only 58 of the capacity of 258 are free; "
        "200 are still reserved with no request running (a finished request's reservation "
        "was never released): nothing will ever be admitted"
    )
