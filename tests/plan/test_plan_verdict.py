"""The verdict follows from the table: the best row by the stated rule, a gain only when
its interval supports it, the SLO and the queue's stability respected."""

from __future__ import annotations

import dataclasses
import math

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost.deployment import Deployment
from specsim.plan import Estimate, Load, OptionSpec, PlanRequest, Row, choose, plan
from specsim.plan.limits import Limit
from specsim.plan.verdict import meets_slo, sentence


def _request(*, rate: float | None = 4.0, tpot: float | None = None) -> PlanRequest:
    dep = Deployment(target=load_model("vicuna-7b-v1.3"), hardware=load_hardware("h100-sxm"))
    load = Load(rate_per_s=rate) if rate is not None else Load(batch=4)
    return PlanRequest(
        deployment=dep,
        options=(OptionSpec(kind="ngram"),),
        load=load,
        slo_tpot_p99_s=tpot,
    )


def _row(label: str, tpot_ms: float, *, half: float = 0.1, stable: bool | None = True) -> Row:
    t = Estimate(tpot_ms / 1e3, (tpot_ms - half) / 1e3, (tpot_ms + half) / 1e3)
    thr = Estimate.exact(1000.0 / tpot_ms)
    return Row(
        label=label,
        kind="none" if label == "none" else "heads",
        tree=() if label == "none" else (-1, 0),
        plan="none" if label == "none" else "chain k = 2",
        tpot_p50_s=t,
        tpot_p99_s=t.scaled(1.2),
        ttft_p50_s=None,
        ttft_p99_s=None,
        throughput_tokens_per_s=thr,
        energy_per_token_j=Estimate.exact(0.5),
        accepted_length=Estimate.exact(1.0 if label == "none" else 2.0),
        goodput_requests_per_s=None,
        cost_per_mtok=None,
        stable=stable,
        stability_reason="",
        acceptance_source="test",
        measured=True,
    )


def test_the_lowest_median_tpot_wins_under_a_rate() -> None:
    rows = [_row("none", 8.0), _row("a", 4.0), _row("b", 3.0), _row("c", 5.0)]
    assert choose(rows, _request()) is rows[2]
    # the same rows with b's and a's numbers swapped: the choice follows the numbers
    swapped = [rows[0], _row("a", 3.0), _row("b", 4.0), rows[3]]
    assert choose(swapped, _request()) is swapped[1]


def test_a_gain_inside_the_noise_keeps_speculation_off() -> None:
    rows = [_row("none", 8.0, half=0.5), _row("a", 7.8, half=0.5)]
    assert choose(rows, _request()) is rows[0]
    rows = [_row("none", 8.0, half=0.05), _row("a", 7.8, half=0.05)]
    assert choose(rows, _request()) is rows[1]


def test_unstable_rows_and_rows_missing_the_slo_are_not_chosen() -> None:
    rows = [_row("none", 8.0), _row("a", 2.0, stable=False), _row("b", 4.0)]
    assert choose(rows, _request()) is rows[2]
    # p99 TPOT = 1.2 x median: only "b" (4.8 ms) meets a 5 ms target
    rows = [_row("none", 8.0), _row("b", 4.0), _row("c", 4.5)]
    assert choose(rows, _request(tpot=5e-3)) is rows[1]
    assert choose(rows, _request(tpot=1e-3)) is None


def test_the_sentences_of_the_bad_cases() -> None:
    lim = {"a": Limit(batch=None, rate_per_s=None, largest=64, pays=(1, 2))}
    plain = _row("none", 8.0, stable=False)
    v = sentence([plain, _row("a", 4.0, stable=False)], _request(), limits=lim, serveable_rate=3.2)
    assert v.sentence.startswith("NOT STABLE") and "about 3.2 req/s" in v.sentence
    assert v.choice is None
    v = sentence(
        [_row("none", 8.0), _row("a", 4.0)], _request(tpot=1e-3), limits=lim, serveable_rate=None
    )
    assert v.sentence.startswith("No option meets the SLO (p99 TPOT <= 1 ms)")


def test_a_closed_batch_verdict_is_the_table_s_best_throughput() -> None:
    req = dataclasses.replace(
        _request(rate=None),
        options=(OptionSpec(kind="heads", card="eagle-vicuna-7b-v1.3"), OptionSpec(kind="ngram")),
    )
    answer = plan(req)
    best = max(answer.rows, key=lambda r: r.throughput_tokens_per_s.value)
    assert answer.verdict.choice == best.label
    assert answer.verdict.speculate == (best.label != "no speculation")
    # the ratio printed is the table's
    ratio = best.throughput_tokens_per_s.value / answer.rows[0].throughput_tokens_per_s.value
    assert f"throughput {ratio:.2f}x" in answer.verdict.sentence
    # every row's closed form: TPOT is the pass time over the tokens it emits per sequence
    for r in answer.rows:
        per_seq = r.throughput_tokens_per_s.value / 4
        assert r.tpot_p50_s.value == pytest.approx(1 / per_seq, rel=1e-12)
        assert math.isclose(r.tpot_p50_s.low, r.tpot_p50_s.high)


def test_the_slo_is_checked_on_the_p99_not_the_median() -> None:
    # "a": median 4.5 ms meets a 5 ms target, its p99 (1.2 x: 5.4 ms) does not
    rows = [_row("none", 8.0), _row("a", 4.5)]
    req = _request(tpot=5e-3)
    assert rows[1].tpot_p50_s.value <= 5e-3 < rows[1].tpot_p99_s.value
    assert meets_slo(rows[1], req) is False
    assert choose(rows, req) is None
    v = sentence(rows, req, limits={}, serveable_rate=None)
    assert v.choice is None and v.sentence.startswith("No option meets the SLO")


def test_at_a_fixed_rate_throughput_is_said_to_be_the_arrival_rate() -> None:
    """Under a rate both stable rows serve what arrives: the sentence says so rather than
    print their throughput ratio as a result; a closed batch prints the ratio."""
    rows = [_row("none", 8.0), _row("b", 3.0)]
    limits = {"b": Limit(batch=None, rate_per_s=None, largest=64, pays=(1, 2))}
    at_rate = sentence(rows, _request(), limits=limits, serveable_rate=None).sentence
    assert "throughput the arrival rate (both keep up with it)" in at_rate
    assert "throughput 2.67x" not in at_rate
    closed = sentence(rows, _request(rate=None), limits=limits, serveable_rate=None).sentence
    assert "throughput 2.67x" in closed


def test_an_interval_open_above_is_explained_under_the_table() -> None:
    """200 requests cannot bound a p99 from above (368 are needed at 95%): the page prints
    ``inf`` and says why under the table; a table with every interval bounded has no note."""
    from specsim.plan.render import OPEN_ABOVE, render_text

    answer = plan(_request(rate=2.0))
    text = render_text(answer)
    assert any(math.isinf(r.tpot_p99_s.high) for r in answer.rows)  # type: ignore[union-attr]
    assert ", inf]" in text and OPEN_ABOVE in text
    closed = render_text(plan(_request(rate=None)))
    assert ", inf]" not in closed and OPEN_ABOVE not in closed
