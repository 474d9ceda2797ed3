"""Where a plan's draft model runs: its own weight format, stack and tensor parallelism.

Without them a draft model is priced on the target's deployment with the draft as its model
(:meth:`specsim.cost.deployment.Deployment.on_model`: the target's hardware, stack and KV
format, the draft card's own weights). A draft option's ``weights``, ``runtime`` and
``tensor_parallel`` (``--draft-weights``, ``--draft-runtime``, ``--draft-tensor-parallel``)
replace those in the draft's own deployment
(:attr:`specsim.proposers.DraftModel.draft_deployment`), which prices its steps, its
prefill and its memory, and which the plan bills by its devices when it is placed
``own-device``. :func:`same_as_target` flags the draft that is the target itself at the
target's weight format: every drafted token then costs a target pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specsim.cost.deployment import Deployment
from specsim.proposers import Proposer

__all__ = ["DRAFT_KEYS", "check_draft_keys", "own_deployment", "same_as_target", "with_own"]

DRAFT_KEYS = {
    "weights": "--draft-weights",
    "runtime": "--draft-runtime",
    "tensor_parallel": "--draft-tensor-parallel",
}
"""A draft option's own deployment keys and the flags that set them."""


def check_draft_keys(kind: str, given: dict[str, Any]) -> None:
    """The draft-deployment keys ``given`` (those not None), of the right types, on a draft
    option only; a ValueError naming the key."""
    for key, value in given.items():
        if value is None:
            continue
        if kind != "draft":
            raise ValueError(
                f"{key}: a draft model's own deployment; kind {kind!r} runs on the target's, "
                "so it would not be used"
            )
        if key == "tensor_parallel":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"tensor_parallel: expected an integer >= 1, got {value!r}")
        elif not isinstance(value, str) or not value:
            raise ValueError(f"{key}: expected a name, got {value!r}")


def own_deployment(
    proposer: Proposer, deployment: Deployment, given: dict[str, Any], *, label: str
) -> Deployment | None:
    """The draft's own deployment from the target's and the keys ``given`` (None: none
    given, the draft priced as before). A ValueError beginning with the key, naming the
    option ``label``, for a value the deployment refuses, and for a draft sharing the
    target's devices over more of them than the target has."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return None
    base = getattr(proposer, "deployment", None)
    if not callable(base):  # pragma: no cover - check_draft_keys allows draft options only
        raise ValueError(f"{label}: not a draft model")
    tp = given.get("tensor_parallel")
    shared = deployment.draft_placement == "shared"
    if tp is not None and shared and tp > deployment.tensor_parallel:
        raise ValueError(
            f"tensor_parallel: {label}: a shared draft runs on the target's "
            f"{deployment.tensor_parallel} device(s), not {tp}; place it own-device "
            "(--draft-placement own-device) or give at most that"
        )
    start: Deployment = base(deployment)
    for key, value in given.items():  # one at a time: an error names its own key
        try:
            start = dataclasses.replace(start, **{key: value})
        except ValueError as exc:
            why = str(exc).removeprefix(f"{key}:").removeprefix(f"deployment {key}:").strip()
            raise ValueError(f"{key}: {label}: {why}") from None
    return start


def with_own(proposer: Proposer, own: Deployment | None) -> Proposer:
    """The draft proposer priced on its own deployment ``own`` (unchanged when None)."""
    if own is None:
        return proposer
    return dataclasses.replace(proposer, draft_deployment=own, dtype=None, tensor_parallel=None)  # type: ignore[type-var]


def same_as_target(proposer: Proposer, deployment: Deployment, *, label: str) -> str | None:
    """The weak-assumption line when the draft is the target's own card at the target's
    weight format (None otherwise)."""
    card = getattr(proposer, "card", None)
    own = getattr(proposer, "deployment", None)
    if card is None or not callable(own) or card.slug != deployment.target.slug:
        return None
    fmt = own(deployment).formats().weight_format
    if fmt != deployment.formats().weight_format:
        return None
    hint = "" if fmt == "int4" else "; did you mean --draft-weights int4?"
    return (
        f"{label}: the draft is the target itself at the same format: {card.slug} in {fmt} "
        f"drafts for {card.slug} in {fmt}, so each drafted token costs a target pass and "
        f"speculation cannot pay{hint}"
    )
