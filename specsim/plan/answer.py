"""``specsim plan``'s answer: every option evaluated, the verdict, the limits, the what-ifs.

:func:`plan` runs the question of a :class:`~specsim.plan.options.PlanRequest` through
:mod:`specsim.plan.evaluation` (the table), :mod:`specsim.plan.limits` (where each option
stops paying, what would change the answer) and :mod:`specsim.plan.verdict` (the
sentence), and returns a :class:`PlanAnswer` whose :meth:`~PlanAnswer.as_dict` is the JSON
output and whose text and HTML forms are :mod:`specsim.plan.render`'s.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.cards import ModelCard
from specsim.cost.shape import tree_depths
from specsim.plan.breakeven import KS, BreakEven, break_even, needs_break_even
from specsim.plan.evaluation import Row, best_plan, closed_row, plan_name, serve, served_row
from specsim.plan.fidelity import fidelity_coverage
from specsim.plan.fixed import chains_only, fixed_notes, option_notes
from specsim.plan.limits import Limit, serveable_rate, speedup_at, stops_paying, what_changes
from specsim.plan.options import Option, PlanRequest, build_option
from specsim.plan.served_limit import served_stop
from specsim.plan.verdict import (
    Verdict,
    break_even_sentence,
    choose,
    row_card,
    sentence,
    weak_assumptions,
)
from specsim.policies.tree_optimizer import evaluate_tree
from specsim.proposers import Proposer
from specsim.sim.workload.workload import preset_workload

__all__ = ["PlanAnswer", "plan"]

NONE = "no speculation"


@dataclass(frozen=True, kw_only=True)
class PlanAnswer:
    """What :func:`plan` found: the verdict, one row per option (no speculation first), each
    speculative option's :class:`~specsim.plan.limits.Limit`, the what-ifs of the best
    speculative option, what was assumed, and the batch and context the trees were chosen
    for; ``break_evens``: each option given no acceptance (a draft model without an alpha
    or a file), where it would start to pay (:mod:`specsim.plan.breakeven`), instead of a
    row."""

    verdict: Verdict
    rows: tuple[Row, ...]
    limits: dict[str, Limit]
    whatifs: list[dict[str, Any]]
    assumed: dict[str, Any]
    weak: list[str]
    batch: int
    context: int
    serveable_rate_per_s: float | None
    seconds: float
    break_evens: dict[str, BreakEven] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (the ``--json`` output; a non-finite bound is None)."""
        return {
            "verdict": self.verdict.sentence,
            "choice": self.verdict.choice,
            "speculate": self.verdict.speculate,
            "options": [r.as_dict() for r in self.rows],
            "stops_paying": {k: dataclasses.asdict(v) for k, v in self.limits.items()},
            "what_would_change": self.whatifs,
            "assumed": self.assumed,
            "weak_assumptions": self.weak,
            "batch": self.batch,
            "context": self.context,
            "serveable_rate_per_s": self.serveable_rate_per_s,
            "break_even": {k: v.as_dict() for k, v in self.break_evens.items()},
            "seconds": self.seconds,
        }


def _context(request: PlanRequest) -> int:
    """Cached tokens per sequence mid-decode: the mean prompt plus half the mean output."""
    load = request.load
    if load.workload is None:
        prompt, output = load.lengths
        return round(prompt + output / 2)
    w = preset_workload(load.workload, requests=2)
    return round(w.prompt.mean + w.output.mean / 2)


def _rows(
    request: PlanRequest, options: list[Option], context: int, *, first: Proposer
) -> tuple[list[Row], int]:
    """The table: no speculation first (served beside ``first``), then each option at its
    best tree; and the batch the trees were chosen for."""
    plain_opt = Option(NONE, "none", None, "no drafting", measured=True)
    if request.load.batch is not None:
        b = request.load.batch
        plans = [best_plan(o, request, batch=b, context=context) for o in options]
        trees = {o.label: p.best.parents for o, p in zip(options, plans, strict=True)}
        check_positions(request, options, trees=trees)
        dep = request.deployment
        none = (
            plans[0].none
            if plans
            else evaluate_tree((), proposer=first, deployment=dep, batch=b, context=context)
        )
        rows = [closed_row(plain_opt, none, request)]
        rows += [closed_row(o, p.best, request) for o, p in zip(options, plans, strict=True)]
        return rows, b
    plain = served_row(plain_opt, serve(request, first, (), plain=True), request, tree=())
    b = max(1, round(plain.extra["mean_batch"]))
    rows = [plain]
    for o in options:
        tree = best_plan(o, request, batch=b, context=context).best.parents
        if not tree:  # no tree pays at this batch: the option is no speculation here
            same = dataclasses.replace(plain, label=o.label, kind=o.kind, measured=o.measured)
            rows.append(dataclasses.replace(same, acceptance_source=o.acceptance_source))
            continue
        check_positions(request, [o], trees={o.label: tree})
        if o.proposer is None:  # pragma: no cover - build_option always gives one
            raise ValueError(f"{o.label}: no proposer")
        rows.append(served_row(o, serve(request, o.proposer, tree), request, tree=tree))
    return rows, b


def _build(request: PlanRequest) -> tuple[list[Option], list[Option]]:
    """The options with an acceptance, and those given none (built at acceptance 0: their
    drafting cost and target check are what the break-even needs)."""
    options, probes = [], []
    for i, s in enumerate(request.options):
        where = f"option {i + 1} ({s.kind})"
        if needs_break_even(s):
            chains_only(s)
            probes.append(
                build_option(dataclasses.replace(s, alpha=0.0), request.deployment, where=where)
            )
        else:
            options.append(build_option(s, request.deployment, where=where))
    return options, probes


def plan(request: PlanRequest) -> PlanAnswer:
    """The answer to ``request`` (module docstring)."""
    start = time.perf_counter()
    dep = request.deployment
    options, probes = _build(request)
    check_positions(request, options + probes)
    fixed = {o.label: o.fixed for o in options + probes if o.fixed is not None}
    if fixed:  # the lookahead the user fixed, before any run: the engine would refuse it
        check_positions(request, options + probes, trees=fixed)
    context = _context(request)
    first = (options + probes)[0].proposer
    if first is None:  # pragma: no cover - build_option always gives one
        raise ValueError("options: no proposer")
    rows, batch = _rows(request, options, context, first=first)
    mean_out = request.load.mean_output_tokens
    limits = {o.label: stops_paying(o, dep, context=context, mean_output=mean_out) for o in options}
    rows, serveable = _capacities(request, options, rows, first=first)
    rate = request.load.rate_per_s
    if request.precise and rate is not None:
        limits = _served_limits(request, options, rows, limits, serveable=serveable)
    evens = {
        o.label: break_even(o.label, o.kind, o.proposer, dep, batch=batch, context=context, ks=ks)
        for o in probes
        if o.proposer is not None
        for ks in [KS if o.fixed is None else (len(o.fixed),)]
    }
    verdict = sentence(rows, request, limits=limits, serveable_rate=serveable)
    if evens:
        verdict = break_even_sentence(
            verdict, list(evens.values()), request, measured=bool(options)
        )
    weak = weak_assumptions(rows, request)
    weak[:0] = [
        f"{label}: no acceptance given, so no numbers but its break-even, which assumes an "
        "i.i.d. chain acceptance; give --alpha A (assumed) or --acceptance FILE (measured) "
        "to plan it"
        for label in evens
    ]
    weak[:0] = fixed_notes(options + probes, dep)
    return PlanAnswer(
        verdict=verdict,
        rows=tuple(rows),
        limits=limits,
        whatifs=_whatifs(request, options, rows, batch=batch, context=context),
        assumed=_assumed(request, rows, options, probes, batch=batch, context=context),
        weak=weak,
        batch=batch,
        context=context,
        serveable_rate_per_s=serveable,
        seconds=time.perf_counter() - start,
        break_evens=evens,
    )


def _whatifs(
    request: PlanRequest, options: list[Option], rows: list[Row], *, batch: int, context: int
) -> list[dict[str, Any]]:
    """The what-ifs of the chosen option, or of the one closest to paying (none: no option
    has an acceptance)."""
    if not options:
        return []
    best = choose(rows, request)
    pick = next((o for o in options if best is not None and o.label == best.label), None)
    if pick is None:  # speculation off: the what-ifs of the option closest to paying
        pick = max(options, key=lambda o: _speedup(o, request, batch, context))
    whatifs = what_changes(pick, request.deployment, batch=batch, context=context)
    for w in whatifs:  # does the what-if turn the best tree on or off (against as planned)?
        w["option"] = pick.label
        w["changes_answer"] = bool(w["tree"]) != bool(whatifs[0]["tree"])
    return whatifs


def _assumed(
    request: PlanRequest,
    rows: list[Row],
    options: list[Option],
    probes: list[Option],
    *,
    batch: int,
    context: int,
) -> dict[str, Any]:
    dep = request.deployment
    acceptance = {o.label: o.acceptance_source for o in options}
    acceptance |= {
        o.label: "none given: its break-even acceptance instead (i.i.d. chain, closed forms)"
        for o in probes
    }
    coverage = fidelity_coverage(dep, [r.kind for r in rows], [row_card(r) for r in rows])
    return {
        "deployment": dep.describe(),
        **option_notes(options + probes, dep),
        "card_stack": dep.runtime is None,
        "load": request.load.describe(),
        "requests": request.requests if request.load.rate_per_s is not None else None,
        "acceptance": acceptance,
        "method": _method(request, batch, context),
        "fidelity": {
            r.label: {"status": c.status, "families": list(c.families), "line": c.line}
            for r, c in zip(rows, coverage, strict=True)
        },
    }


def _served_limits(
    request: PlanRequest,
    options: list[Option],
    rows: list[Row],
    limits: dict[str, Limit],
    *,
    serveable: float | None,
) -> dict[str, Limit]:
    """Each option that drafts at the asked rate, its limit backed by the served search
    up to twice the Little's-law rate, at most the rate the deployment serves plainly
    (:mod:`specsim.plan.served_limit`; with neither, twice the asked rate)."""
    out = dict(limits)
    for o, r in zip(options, rows[1:], strict=True):
        lim, rate = limits[o.label], request.load.rate_per_s
        if not r.tree or rate is None:
            continue
        caps = [v for v in (2 * (lim.rate_per_s or math.inf), serveable) if v is not None]
        top = min(caps) if math.isfinite(min(caps)) else 2 * rate
        served = served_stop(o, request, tree=r.tree, top_rate=top)
        out[o.label] = dataclasses.replace(lim, served=served)
    return out


def _capacities(
    request: PlanRequest, options: list[Option], rows: list[Row], *, first: Proposer
) -> tuple[list[Row], float | None]:
    """The rows with the closed form's word on each queue, and the rate the deployment
    serves plainly (None: a closed batch). A row is NOT STABLE when the rate exceeds what
    its own tree serves at full batch (:func:`~specsim.plan.limits.serveable_rate`), however
    short the run that the engine's tests saw; otherwise the engine's verdict stands."""
    rate = request.load.rate_per_s
    if rate is None:
        return rows, None
    plain = serveable_rate(request, first)
    out = []
    for o, r in zip([None, *options], rows, strict=True):
        proposer = first if o is None else o.proposer
        cap = plain if not r.tree or proposer is None else serveable_rate(request, proposer, r.tree)
        if rate > cap and r.stable is not False:
            why = (
                f"overloaded: {rate:g} req/s is above the {cap:.3g} req/s it serves at full "
                "batch (closed form), whatever this run was long enough to show"
            )
            r = dataclasses.replace(r, stable=False, stability_reason=why)
        elif r.stable is None:  # the engine could not test it: the closed form's word
            why = f"{rate:g} req/s is below the {cap:.3g} req/s it serves at full batch"
            r = dataclasses.replace(
                r, stability_reason=f"{why} (closed form); {r.stability_reason}"
            )
        out.append(r)
    return out, plain


def check_positions(
    request: PlanRequest, options: list[Option], *, trees: dict[str, tuple[int, ...]] | None = None
) -> None:
    """A ValueError naming the model, unless the target and every draft model reach no
    position past their card's ``max_position`` on the load's longest request (served: the
    sampled requests a run serves, as ``specsim simulate`` checks them; a closed batch:
    its prompt plus output), as the serving engine refuses such a run. With ``trees`` (each
    option's drafted tree, by label), each option's own lookahead counts too, as the
    engine counts a chain's k: its last block verifies the tree's depth d positions past
    the request's end, and its draft model drafts to d - 1 past it (the deepest token is
    drafted, never fed to the draft)."""
    longest = _longest(request)
    target = request.deployment.target
    models: list[tuple[str, ModelCard, int, str]] = []
    if trees is None:
        models.append(("the target", target, 0, ""))
    for o in options:
        tree = () if trees is None else trees.get(o.label, ())
        d = max(tree_depths(tree), default=0)
        if d:
            why = f" {longest}, plus {d} more verified for its {plan_name(tree)}"
            models.append((f"the target under {o.label}", target, d, why))
        if isinstance(c := getattr(o.proposer, "card", None), ModelCard):
            why = f" {longest}, plus {d - 1} more drafted by its {plan_name(tree)}"
            models.append((o.label, c, max(d - 1, 0), why if d > 1 else ""))
    for who, card, extra, why in models:
        if card.architecture == "decoder" and longest + extra > card.max_position:
            raise ValueError(
                f"{who}: the load's longest request reaches position {longest + extra} "
                f"(prompt plus output{why}), past {card.slug}'s max_position "
                f"{card.max_position}; give shorter --prompt/--output or another model"
            )


def _longest(request: PlanRequest) -> int:
    """The load's longest request, prompt plus output, as :func:`check_positions` counts it."""
    load = request.load
    if load.rate_per_s is not None:
        table = load.served(requests=request.requests).sample(np.random.default_rng(request.seed))
        ends = table["prompt_tokens"].to_numpy() + table["output_tokens"].to_numpy()
        return int(ends.max())
    if load.workload is not None:
        w = preset_workload(load.workload, requests=2)
        return round(w.prompt.mean + w.output.mean)
    return sum(load.lengths)


def _speedup(option: Option, request: PlanRequest, batch: int, context: int) -> float:
    if option.proposer is None:  # pragma: no cover - build_option always gives one
        return 0.0
    dep, fixed = request.deployment, option.fixed
    return speedup_at(option.proposer, dep, batch=batch, context=context, fixed=fixed)[0]


def _method(request: PlanRequest, batch: int, context: int) -> str:
    if request.load.batch is not None:
        return (
            f"closed forms at batch {batch}, context {context} tokens (the tree optimizer's "
            "tokens per pass and card-priced pass and drafting times)"
        )
    return (
        f"served on the serving engine, {request.requests} requests (seed {request.seed}), "
        f"the same arrivals for every option; trees chosen for the plain run's mean batch "
        f"{batch} at context {context}; 95% intervals"
    )
