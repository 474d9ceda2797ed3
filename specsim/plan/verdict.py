"""The verdict: which option to run, said in one sentence, and the assumptions to doubt.

:func:`choose` picks from the table alone: among the options whose queue is stable (or a
closed batch) and that meet the latency targets (p99 TPOT and TTFT at most the targets, by
their point estimates), the one with the most goodput when an SLO is given, else, under a
request rate, the lowest median TPOT, and in a closed batch the most tokens per second. A
speculative option wins only by a margin its interval supports: its median TPOT interval
lies wholly below no speculation's (served), or its closed-form throughput is higher (a
closed batch); otherwise speculation stays off, and the sentence says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specsim.cards.stack_files import format_source
from specsim.cost.deployment import Deployment
from specsim.plan.breakeven import BreakEven
from specsim.plan.evaluation import Row
from specsim.plan.fidelity import fidelity_flags
from specsim.plan.limits import Limit
from specsim.plan.option_acceptance import beyond_measured
from specsim.plan.options import NO_SOURCE, PlanRequest, spec_label
from specsim.proposers.tables import tree_depths

__all__ = [
    "Verdict",
    "break_even_sentence",
    "break_even_text",
    "choose",
    "meets_slo",
    "row_card",
    "sentence",
    "weak_assumptions",
]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The chosen option's label (None: no option meets the SLO, or, with no option given an
    acceptance, the answer turns on the acceptance), whether it speculates, and the
    sentence."""

    choice: str | None
    speculate: bool
    sentence: str


def meets_slo(row: Row, request: PlanRequest) -> bool | None:
    """Whether ``row``'s p99 latencies meet the targets (None: no target given)."""
    checks = []
    if request.slo_tpot_p99_s is not None:
        checks.append(row.tpot_p99_s.value <= request.slo_tpot_p99_s)
    if request.slo_ttft_p99_s is not None and row.ttft_p99_s is not None:
        checks.append(row.ttft_p99_s.value <= request.slo_ttft_p99_s)
    return None if not checks else all(checks)


def _better(row: Row, plain: Row, *, served: bool) -> bool:
    if served:
        return row.tpot_p50_s.high < plain.tpot_p50_s.low
    return row.throughput_tokens_per_s.value > plain.throughput_tokens_per_s.value


def choose(rows: Sequence[Row], request: PlanRequest) -> Row | None:
    """The row to run (module docstring); ``rows[0]`` is no speculation. None: no row is
    stable and meets the SLO."""
    served = request.load.rate_per_s is not None
    ok = [r for r in rows if r.stable is not False and meets_slo(r, request) is not False]
    if not ok:
        return None
    slo = meets_slo(rows[0], request) is not None and served

    def key(r: Row) -> tuple[float, float]:
        good = -(r.goodput_requests_per_s or 0.0) if slo else 0.0
        if served:
            return good, r.tpot_p50_s.value
        return good, -r.throughput_tokens_per_s.value

    best = min(ok, key=key)
    plain = rows[0]
    if best is not plain and plain in ok and not _better(best, plain, served=served):
        return plain
    return best


def times(x: float) -> str:
    """A ratio as a ratio: ``2.40x``, ``3.1e+05x`` past a thousand."""
    return f"{x:.2f}x" if abs(x) < 1000 else f"{x:.3g}x"


def _ratios(row: Row, plain: Row, *, rate: bool = False) -> str:
    """TPOT, throughput and energy against no speculation; at a fixed arrival rate
    (``rate``) with both stable, throughput is the arrival rate for both, and is said so."""
    tpot = plain.tpot_p50_s.value / row.tpot_p50_s.value
    thr = row.throughput_tokens_per_s.value / plain.throughput_tokens_per_s.value
    if rate and row.stable is not False and plain.stable is not False:
        shown = "throughput the arrival rate (both keep up with it)"
    else:
        shown = f"throughput {times(thr)}"
    text = f"TPOT {times(tpot)} better, {shown}"
    if row.energy_per_token_j is not None and plain.energy_per_token_j is not None:
        e = row.energy_per_token_j.value / plain.energy_per_token_j.value - 1.0
        text += f", energy per token {e:+.0%}"
    return text


def _limit_text(limit: Limit | None) -> str:
    if limit is None or not limit.pays:
        return "it pays at no batch tried"
    c = None if limit.served is None else limit.served.crossing
    if c is not None and c.kind == "crosses":
        return f"speculation stops paying above about {c.at:.3g} req/s (served)"
    if c is not None and c.kind == "never" and limit.served is not None:
        return f"it still pays at {limit.served.rates[-1]:.3g} req/s, the highest served (served)"
    if limit.batch is None:
        return f"it still pays at batch {limit.largest}, the largest tried that fits"
    return (
        f"speculation stops paying above about {limit.rate_per_s:.3g} req/s (batch {limit.batch}, "
        "Little's law)"
    )


def sentence(
    rows: Sequence[Row],
    request: PlanRequest,
    *,
    limits: dict[str, Limit],
    serveable_rate: float | None,
) -> Verdict:
    """The verdict in one sentence (module docstring); ``serveable_rate``: what the
    deployment serves without speculation, said when the plain queue is not stable."""
    load, plain = request.load.describe(), rows[0]
    best = choose(rows, request)
    if plain.stable is False:
        head = (
            f"NOT STABLE: at {load} the queue grows without bound even without speculation; "
            f"{request.deployment.target.slug} on {request.deployment.hardware.slug} serves "
            f"about {serveable_rate or 0:.3g} req/s"
        )
        if best is None:
            return Verdict(
                choice=None, speculate=False, sentence=f"{head}, and no option here is stable."
            )
        return Verdict(
            choice=best.label,
            speculate=True,
            sentence=f"{head}; {best.label} with {best.plan} keeps it stable "
            f"({_ratios(best, plain)}).",
        )
    if best is None:
        targets = _targets(request)
        close = min(rows, key=lambda r: r.tpot_p99_s.value)
        p99 = close.tpot_p99_s.value * 1e3
        return Verdict(
            choice=None,
            speculate=False,
            sentence=f"No option meets the SLO ({targets}) at {load}: the closest is "
            f"{close.label} ({close.plan}) with p99 TPOT {p99:.3g} ms.",
        )
    if best is plain:
        return _off(rows, request, limits=limits)
    rate = request.load.rate_per_s is not None
    return Verdict(
        choice=best.label,
        speculate=True,
        sentence=f"Turn on {best.label} with {best.plan}: {_ratios(best, plain, rate=rate)}, "
        f"at {load}; "
        f"{_limit_text(limits.get(best.label))}.",
    )


def _off(rows: Sequence[Row], request: PlanRequest, *, limits: dict[str, Limit]) -> Verdict:
    """Speculation off: why, from the option closest to paying."""
    load, plain = request.load.describe(), rows[0]
    spec = [r for r in rows[1:] if r.stable is not False]
    text = f"Keep speculation off at {load}"
    if not spec:
        return Verdict(choice=plain.label, speculate=False, sentence=f"{text}.")
    top = max(spec, key=lambda r: plain.tpot_p50_s.value / r.tpot_p50_s.value)
    if not top.tree:
        text += f": no option's best tree drafts anything at this batch ({'; '.join(_why(limits))})"
    else:
        served = request.load.rate_per_s is not None
        why = "not a gain its interval supports" if served else "no more tokens per second"
        gives = _ratios(top, plain, rate=served)
        text += (
            f": the best option, {top.label} ({top.plan}), gives {gives}, {why} "
            f"({_limit_text(limits.get(top.label))})"
        )
    return Verdict(choice=plain.label, speculate=False, sentence=f"{text}.")


def _why(limits: dict[str, Limit]) -> list[str]:
    out = []
    for label, lim in limits.items():
        where = f"pays at batch {', '.join(map(str, lim.pays))}" if lim.pays else "never pays"
        out.append(f"{label} {where}")
    return out


def break_even_text(be: BreakEven, at: str) -> str:
    """Where an option without an acceptance starts to pay, and what similar pairs publish
    (:mod:`specsim.plan.breakeven`), as a clause."""
    head = f"no acceptance given for {be.label}: {at}"
    if be.status == "never":
        text = (
            f"{head} it never pays, even with every drafted token accepted (a chain of k = "
            f"{min(be.per_k)} to {max(be.per_k)})"
        )
    elif be.status == "always":
        text = f"{head} it pays at any acceptance (a chain of k = {be.k} with none accepted)"
    else:
        text = (
            f"{head} it pays if its per-token acceptance is above {be.alpha:.2f} (mean "
            f"accepted length {be.accepted_length:.3g} at k = {be.k})"
        )
    rng = be.published_range
    if rng is None:
        return f"{text}; the shipped cards publish no acceptance for a {be.family} target"
    cards = ", ".join(p.card for p in be.published)
    span = f"{rng[0]:.2f}" if rng[0] == rng[1] else f"{rng[0]:.2f} to {rng[1]:.2f}"
    return f"{text}; published for {be.family} targets: {span} ({cards}; sources below)"


def break_even_sentence(
    verdict: Verdict, evens: Sequence[BreakEven], request: PlanRequest, *, measured: bool
) -> Verdict:
    """The verdict with each option given no acceptance said after it; with no option
    given one, the break-evens are the verdict."""
    load = request.load
    at = f"at batch {load.batch}," if load.batch is not None else ""
    if not at:
        at = f"at {load.describe()} (batch {evens[0].batch}, the plain run's mean; closed forms),"
    clauses = "; ".join(break_even_text(be, at) for be in evens)
    if measured:
        text = f"{verdict.sentence} Also, {clauses}."
        return Verdict(choice=verdict.choice, speculate=verdict.speculate, sentence=text)
    text = clauses[0].upper() + clauses[1:] + "."
    always = [be.label for be in evens if be.status == "always"]
    if always:
        return Verdict(choice=always[0], speculate=True, sentence=text)
    never = all(be.status == "never" for be in evens)
    return Verdict(choice=verdict.choice if never else None, speculate=False, sentence=text)


def _targets(request: PlanRequest) -> str:
    parts = []
    if request.slo_tpot_p99_s is not None:
        parts.append(f"p99 TPOT <= {request.slo_tpot_p99_s * 1e3:g} ms")
    if request.slo_ttft_p99_s is not None:
        parts.append(f"p99 TTFT <= {request.slo_ttft_p99_s * 1e3:g} ms")
    return ", ".join(parts)


def weak_assumptions(rows: Sequence[Row], request: PlanRequest) -> list[str]:
    """What the answer assumed that a measurement would be better for."""
    dep = request.deployment
    out: list[str] = []
    rt = dep.runtime
    if rt is None:
        own = dep.hardware.runtime
        named = "it names no default profile" if own is None else f"its default profile {own!r}"
        out.append(
            f"stack: no --runtime, so {dep.hardware.slug}'s own numbers ({named}), not a "
            f"profile fitted on {dep.hardware.slug}"
        )
    elif rt.fitted_on is not None and rt.fitted_on != dep.hardware.slug:
        out.append(
            f"stack: {rt.slug} was fitted on {rt.fitted_on}, used here on {dep.hardware.slug}"
        )
    out += borrowed_kernels(dep)
    specs = {spec_label(s): s for s in request.options}
    for r in rows[1:]:
        if not r.measured:
            out.append(
                f"{r.label}: {r.acceptance_source}; the +-0.1 what-ifs show how much it matters"
            )
            deeper = r.label in specs and beyond_measured(specs[r.label], tree_depth(r.tree))
            out += [f"{r.label}: {deeper}"] if deeper else []
        elif r.kind == "ngram" and "sample" in r.acceptance_source.lower():
            out.append(
                f"{r.label}: acceptance measured on the packaged sample corpus, not your traffic"
            )
        elif NO_SOURCE in r.acceptance_source:
            out.append(
                f"{r.label}: acceptance from {r.acceptance_source}; where it was measured "
                "is not known"
            )
        elif "assumed" in r.acceptance_source:
            out.append(
                f"{r.label}: some depths of its card's acceptance are assumed (see the card)"
            )
    if request.load.batch is not None:
        out.append(
            "a closed batch: closed forms, no queueing, no TTFT; give --rate to serve requests"
        )
        if request.slo_ttft_p99_s is not None:
            out.append("--slo-ttft-p99 is not checked in a closed batch (no arrivals)")
    return out + fidelity_flags(dep, [r.kind for r in rows], cards=[row_card(r) for r in rows])


def borrowed_kernels(dep: Deployment) -> list[str]:
    """One line per weight format of ``dep`` whose kernel tables its stack's profile borrows
    from another card's device part (:func:`specsim.cards.stack_files.format_source`)."""
    rt = dep.runtime
    if rt is None or rt.stack_profile is None:
        return []
    fm = dep.formats()
    used = {fm.weight_format, fm.expert_format or fm.weight_format}
    return [
        f"{s.weight_format} kernels on {dep.hardware.slug}: borrowed from the {s.part} part "
        f"(measured on {s.card}, same generation, {s.generation}); not measured on this card"
        for s in format_source(dep.hardware, rt.stack_profile)
        if s.weight_format in used
    ]


def row_card(row: Row) -> str | None:
    """The draft or head card of a row (its label is ``"<kind> <card>"``; None: plain
    decoding, or a proposer without a card)."""
    head = f"{row.kind} "
    return row.label[len(head) :] if row.kind != "none" and row.label.startswith(head) else None


def tree_depth(parents: Sequence[int]) -> int:
    """How deep the tree ``parents`` reaches (0: no tree)."""
    return max(tree_depths(parents), default=0)
