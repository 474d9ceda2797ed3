"""What the user fixed about each option, said in the answer: the lookahead it was given
(:mod:`specsim.plan.lookahead`) and the draft model's own deployment
(:mod:`specsim.plan.draft_runs`), under ``assumed`` (:func:`option_notes`), and what of
them deserves a warning (:func:`fixed_notes`: a draft that is the target itself at the same
format; a tree wider than the acceptance's ranks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specsim.cost.deployment import Deployment
from specsim.plan.draft_runs import same_as_target
from specsim.plan.evaluation import plan_name
from specsim.plan.options import Option, OptionSpec, spec_label

__all__ = ["chains_only", "fixed_notes", "option_notes"]


def chains_only(spec: OptionSpec) -> None:
    """A ValueError for a fixed tree on an option given no acceptance: its break-even
    (:mod:`specsim.plan.breakeven`) is for chains of an i.i.d. acceptance."""
    if spec.tree is not None:
        raise ValueError(
            f"tree: {spec_label(spec)} cannot use tree = {spec.tree!r}: it has no acceptance, so "
            "the plan gives its break-even, which is for chains of an i.i.d. acceptance; fix "
            "a chain (k) or give an acceptance by depth and rank (--acceptance FILE)"
        )


def _describe(dep: Deployment) -> str:
    d = dep.describe()
    return (
        f"{d['model']} on {d['hardware']} x{d['tensor_parallel']} (weights {d['weights']}, "
        f"KV {d['kv']}), stack {d['runtime'] or 'none'}"
    )


def option_notes(options: Sequence[Option], deployment: Deployment) -> dict[str, Any]:
    """``lookahead``: each option's fixed tree, in words; ``drafts``: each draft model's own
    deployment, where one was given (or where it is the target's own card)."""
    ahead = {
        o.label: f"{plan_name(o.fixed)}, fixed by {o.lookahead} (not searched)"
        for o in options
        if o.fixed is not None
    }
    drafts = {}
    for o in options:
        own = getattr(o.proposer, "draft_deployment", None)
        card = getattr(o.proposer, "card", None)
        where = getattr(o.proposer, "deployment", None)
        if o.kind == "draft" and callable(where) and (own is not None or card == deployment.target):
            drafts[o.label] = _describe(where(deployment))
    return {"lookahead": ahead, "drafts": drafts}


def fixed_notes(options: Sequence[Option], deployment: Deployment) -> list[str]:
    """The weak-assumption lines of what was fixed (module docstring)."""
    out = []
    for o in options:
        if o.proposer is None:  # pragma: no cover - build_option always gives one
            continue
        line = same_as_target(o.proposer, deployment, label=o.label)
        if line:
            out.append(line)
        if not o.fixed:
            continue
        acc = o.proposer.acceptance
        wide = max(acc.rank_of(o.fixed)) + 1
        if wide > acc.ranks:
            out.append(
                f"{o.label}: its {o.lookahead} puts up to {wide} candidates under a node, but "
                f"its acceptance has {acc.ranks} rank(s): the others are never accepted, "
                "verified for nothing"
            )
    return out
