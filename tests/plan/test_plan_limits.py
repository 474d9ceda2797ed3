"""The plan's limits written out by hand: the batch at which an option stops paying, the
what-if rows on acceptance, and the next hardware card up, each recomputed here from the
tree evaluator and the cards rather than read from the page."""

from __future__ import annotations

import dataclasses

import pytest

from specsim.cards import list_hardware
from specsim.cost import Deployment
from specsim.plan.limits import (
    BATCHES,
    Shifted,
    candidates,
    largest_batch,
    speedup_at,
    stops_paying,
    what_changes,
)
from specsim.plan.options import OptionSpec, build_option
from specsim.policies.tree_optimizer import evaluate_tree

CONTEXT, OUTPUT = 768, 256.0


def _option(alpha: float, hardware: str = "a100-80gb") -> tuple[object, Deployment]:
    dep = Deployment(target="llama-2-7b", hardware=hardware)
    spec = OptionSpec(kind="draft", card="llama-160m", alpha=alpha)
    return build_option(spec, dep, where="test"), dep


def _pays(proposer: object, dep: Deployment, batch: int) -> bool:
    """Whether any candidate tree beats no speculation at ``batch``, by hand."""
    kw = dict(proposer=proposer, deployment=dep, batch=batch, context=CONTEXT)
    none = evaluate_tree((), **kw).tokens_per_s  # type: ignore[arg-type]
    pool = candidates(proposer.acceptance)  # type: ignore[attr-defined]
    return any(evaluate_tree(t, **kw).tokens_per_s > none for t in pool)  # type: ignore[arg-type]


def test_the_stop_paying_batch_is_the_first_tried_past_the_last_that_pays() -> None:
    """At alpha 0.3 a 160M draft for Llama-2-7B on an A100 pays up to batch 64 and not at
    128: the limit is 128, and its rate is Little's law on a plain pass at 128."""
    option, dep = _option(0.3)
    p = option.proposer  # type: ignore[attr-defined]
    limit = stops_paying(option, dep, context=CONTEXT, mean_output=OUTPUT)  # type: ignore[arg-type]
    most = largest_batch(dep, p, context=CONTEXT)
    tried = [b for b in BATCHES if b <= most]
    pays = tuple(b for b in tried if _pays(p, dep, b))
    assert limit.pays == pays and limit.largest == tried[-1]
    assert pays and pays[-1] < tried[-1]
    assert limit.batch == next(b for b in tried if b > pays[-1])
    step = evaluate_tree((), proposer=p, deployment=dep, batch=limit.batch, context=CONTEXT)
    assert limit.rate_per_s == pytest.approx(limit.batch / (step.time_s * OUTPUT), rel=1e-12)


def test_an_option_paying_at_every_batch_has_no_stop() -> None:
    option, dep = _option(0.5)
    limit = stops_paying(option, dep, context=CONTEXT, mean_output=OUTPUT)  # type: ignore[arg-type]
    assert limit.batch is None and limit.rate_per_s is None
    assert limit.pays[-1] == limit.largest


def test_the_acceptance_what_ifs_shift_every_acceptance_both_ways() -> None:
    option, dep = _option(0.6)
    p = option.proposer  # type: ignore[attr-defined]
    rows = {r["what"]: r for r in what_changes(option, dep, batch=8, context=CONTEXT)}  # type: ignore[arg-type]
    base = rows["as planned"]["speedup"]
    for delta in (-0.1, 0.1):
        shifted = Shifted(p, delta)
        assert all(
            b == pytest.approx(min(1.0, max(0.0, a + delta)))
            for ra, rb in zip(p.acceptance.accept, shifted.acceptance.accept, strict=True)
            for a, b in zip(ra, rb, strict=True)
        )
        want, _ = speedup_at(shifted, dep, batch=8, context=CONTEXT)
        assert rows[f"acceptance {delta:+.1f}"]["speedup"] == pytest.approx(want, rel=1e-12)
    assert rows["acceptance -0.1"]["speedup"] < base < rows["acceptance +0.1"]["speedup"]


def test_the_next_card_is_the_slowest_faster_card_that_holds_the_batch() -> None:
    """The what-if card: of the cards with more memory bandwidth than the deployment's, the
    one with the least that takes the deployment and holds the batch's KV cache."""
    option, dep = _option(0.6)
    p = option.proposer  # type: ignore[attr-defined]
    rows = what_changes(option, dep, batch=8, context=CONTEXT)  # type: ignore[arg-type]
    got = [r for r in rows if r["what"].startswith("next card ")]
    bw = dep.hardware.mem_bandwidth
    want = None
    for hw in sorted(list_hardware(), key=lambda h: h.mem_bandwidth):
        if hw.mem_bandwidth <= bw:
            continue
        try:
            there = dataclasses.replace(dep, hardware=hw, runtime=None)
            if largest_batch(there, p, context=CONTEXT) >= 8:
                want = (hw, there)
                break
        except ValueError:
            continue
    assert want is not None and len(got) == 1
    hw, there = want
    assert hw.mem_bandwidth > bw
    assert got[0]["what"] == f"next card {hw.slug}"
    s, t = speedup_at(p, there, batch=8, context=CONTEXT)
    assert got[0]["speedup"] == pytest.approx(s, rel=1e-12) and got[0]["tree"] == list(t)
