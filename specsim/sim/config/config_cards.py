"""A chain config's card-priced cost from its tables: ``[deployment]``, ``[cost]`` and
``[draft_deployment]`` become one :class:`~specsim.sim.costs.costs.CardCost`.

``[cost]`` of ``kind = "cards"`` says only which draft model drafts (``draft = "<slug>"``,
none for plain decoding); what runs where is the ``[deployment]`` table (the fields of
:class:`~specsim.cost.deployment.Deployment`), and a draft with a deployment of its own
(its hardware, stack, formats, tensor parallelism) is a ``[draft_deployment]`` table of
the same keys, whose ``target`` defaults to the draft and whose ``draft_placement`` to the
deployment's. The keys ``[cost]`` took before a deployment existed (``target``,
``hardware``, ``draft_hardware``, ...) are errors that say where each goes now.

>>> cost = card_cost_from_tables(
...     {"deployment": {"target": "llama-2-7b", "hardware": "a100-80gb"},
...      "cost": {"kind": "cards", "draft": "llama-68m"}}, where="run.toml")
>>> cost.deployment.target.slug, cost.draft.slug, cost.overlapped
('llama-2-7b', 'llama-68m', False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specsim.cost.checks import check_model
from specsim.cost.deployment import deployment_from_table
from specsim.sim.costs.costs import CardCost

__all__ = ["card_cost_from_tables", "MOVED_KEYS"]

_TARGET_KEYS = ("target", "hardware", "runtime", "dtype", "weights", "kv", "group_size")
MOVED_KEYS: dict[str, str] = {
    **{k: f"[deployment] {k}" for k in (*_TARGET_KEYS, "tensor_parallel")},
    "draft_hardware": "[draft_deployment] hardware (with [deployment] draft_placement = "
    "'overlapped')",
    "draft_weights": "[draft_deployment] weights",
    "draft_group_size": "[draft_deployment] group_size",
    "draft_runtime": "[draft_deployment] runtime",
}
"""Each ``[cost]`` key of the old card form and where it is written now."""


def _moved(cost: Mapping[str, Any], where: str) -> None:
    """A ValueError for the first old-style key in ``[cost]``, saying where it goes now."""
    for key in cost:
        if key in MOVED_KEYS:
            raise ValueError(
                f"{where} [cost].{key}: a card-priced cost takes what runs where from the "
                f"[deployment] table; write {MOVED_KEYS[key]} instead ([cost] keeps kind = "
                "'cards' and draft)"
            )
    unknown = sorted(set(cost) - {"kind", "draft"})
    if unknown:
        raise ValueError(
            f"{where} [cost]: unknown key(s) {unknown} for kind = 'cards'; allowed: "
            "['draft', 'kind']"
        )


def card_cost_from_tables(data: Mapping[str, Any], *, where: str) -> CardCost:
    """The :class:`CardCost` of a chain config's ``[deployment]``, ``[cost]`` (kind
    ``cards``, or none: no draft model) and optional ``[draft_deployment]`` tables (module
    docstring); a ValueError naming the file, the table and the key otherwise."""
    cost = data.get("cost", {"kind": "cards"})
    if not isinstance(cost, Mapping):
        raise ValueError(f"{where} [cost]: expected a table, got {cost!r}")
    if cost.get("kind", "cards") != "cards":
        raise ValueError(
            f"{where} [cost].kind: a [deployment] prices on cards (kind = 'cards'), got "
            f"{cost.get('kind')!r}"
        )
    _moved(cost, where)
    if "deployment" not in data:
        raise ValueError(
            f"{where} [cost]: kind = 'cards' takes its target, hardware and formats from a "
            "[deployment] table (target = ..., hardware = ...); add one"
        )
    dep = deployment_from_table(data["deployment"], where=f"{where} [deployment]")
    slug = cost.get("draft")
    if slug is not None and not isinstance(slug, str):
        raise ValueError(f"{where} [cost].draft: expected a model card slug, got {slug!r}")
    draft = None if slug is None else check_model(slug, name=f"{where} [cost].draft")
    table = data.get("draft_deployment")
    own = None
    if table is not None:
        if not isinstance(table, Mapping):
            raise ValueError(f"{where} [draft_deployment]: expected a table, got {table!r}")
        if draft is None:
            raise ValueError(f"{where} [draft_deployment]: given without [cost].draft")
        defaults = {"target": slug, "draft_placement": dep.draft_placement}
        own = deployment_from_table({**defaults, **table}, where=f"{where} [draft_deployment]")
    try:
        return CardCost(deployment=dep, draft=draft, draft_deployment=own)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
