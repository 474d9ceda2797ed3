"""The served stop-paying search: a short rate sweep with the serving engine, its crossing
of 1 consistent with the speedups it measured, and labelled as served where it is printed."""

from __future__ import annotations

import math

import pytest

from specsim.cost.deployment import Deployment
from specsim.plan import Load, OptionSpec, PlanRequest, plan
from specsim.plan.options import build_option
from specsim.plan.render import limit_text
from specsim.plan.served_limit import RATE_FACTORS, served_stop

DEP = Deployment(target="vicuna-7b-v1.3", hardware="h100-sxm", runtime="vllm-h100")
HEADS = OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3")


def _request(**kw: object) -> PlanRequest:
    load = Load(rate_per_s=4.0, prompt_tokens=128, output_tokens=32, requests=40)
    return PlanRequest(deployment=DEP, options=(HEADS,), load=load, **kw)  # type: ignore[arg-type]


def test_a_closed_batch_has_no_served_search() -> None:
    req = PlanRequest(deployment=DEP, options=(HEADS,), load=Load(batch=4))
    with pytest.raises(ValueError, match="closed batch"):
        served_stop(build_option(HEADS, DEP, where="t"), req, tree=(-1, 0), top_rate=4.0)


@pytest.mark.slow
def test_the_crossing_follows_the_measured_speedups() -> None:
    req = _request()
    s = served_stop(build_option(HEADS, DEP, where="t"), req, tree=(-1, 0, 1), top_rate=8.0)
    assert s.rates == tuple(8.0 * f for f in RATE_FACTORS)
    assert all(math.isfinite(v) and v > 0 for v in s.speedups)
    above = [v > 1.0 for v in s.speedups]
    if all(above):
        assert s.crossing.kind == "never"
    elif not above[0]:
        assert s.crossing.kind == "always"
    else:
        assert s.crossing.kind == "crosses"
        assert s.crossing.low <= s.crossing.at <= s.crossing.high
    assert s.method.startswith("served: ")


@pytest.mark.slow
def test_precise_backs_the_limit_with_the_served_search_and_says_so() -> None:
    answer = plan(_request(precise=True))
    lim = answer.limits[answer.rows[1].label]
    assert answer.rows[1].tree  # EAGLE drafts at 4 req/s
    assert lim.served is not None
    assert "[served: median TPOT speedup" in limit_text(lim)
    default = plan(_request())
    assert default.limits[default.rows[1].label].served is None
