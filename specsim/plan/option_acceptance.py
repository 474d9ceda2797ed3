"""Where a plan option's acceptance comes from, in the forms it may be given.

One of: ``alpha`` (an assumed i.i.d. chain acceptance; draft and n-gram options only),
``acceptance`` (a file of acceptance by depth and rank), ``acceptance_per_position`` (the
per-position rates vLLM reports, measured per depth) or ``accept_length`` with
``accept_length_k`` (SGLang's or TensorRT-LLM's mean accepted length at a lookahead:
i.i.d. assumed), the last two converted by :mod:`specsim.proposers.engine_forms`. A head,
parallel or self-speculation option given any but an alpha plans with it in place of its
card's published acceptance, and says so. ``acceptance_from`` names where the form was
given (:data:`COMMAND_LINE`, or a plan TOML's path).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from specsim.proposers import KINDS as PROPOSER_KINDS
from specsim.proposers.engine_forms import (
    accept_length_acceptance,
    alpha_from_accept_length,
    per_position_acceptance,
)

__all__ = [
    "COMMAND_LINE",
    "FLAGS",
    "FORMS",
    "check_forms",
    "given_acceptance",
    "has_acceptance",
    "beyond_measured",
    "replaced_card",
]

FORMS = ("alpha", "acceptance", "acceptance_per_position", "accept_length")
"""The acceptance forms an option takes, one at most (``accept_length`` with its ``k``)."""

FLAGS = {
    "alpha": "--alpha",
    "acceptance": "--acceptance",
    "acceptance_per_position": "--acceptance-per-position",
    "accept_length": "--accept-length",
}
"""Each form's command-line flag."""

COMMAND_LINE = "given on the command line"
"""What the output says of a form given by a flag."""


class Spec(Protocol):
    """The fields of :class:`specsim.plan.options.OptionSpec` read here (read-only)."""

    @property
    def kind(self) -> str: ...

    @property
    def card(self) -> str | None: ...

    @property
    def alpha(self) -> float | None: ...

    @property
    def acceptance(self) -> str | None: ...

    @property
    def acceptance_per_position(self) -> tuple[float, ...] | None: ...

    @property
    def accept_length(self) -> float | None: ...

    @property
    def accept_length_k(self) -> int | None: ...

    @property
    def acceptance_from(self) -> str | None: ...


def has_acceptance(spec: Spec) -> bool:
    """Whether any acceptance form is given."""
    return any(getattr(spec, f) is not None for f in FORMS)


def _name(spec: Spec, form: str) -> str:
    """How an error names ``form``: its flag when a flag gave it, else its key and where."""
    if spec.acceptance_from == COMMAND_LINE:
        return FLAGS[form]
    return form if spec.acceptance_from is None else f"{form} ({spec.acceptance_from})"


def check_forms(spec: Spec) -> None:
    """One form at most, each valid, an alpha only where the kind needs an acceptance: else
    a ValueError naming the keys."""
    given = [f for f in FORMS if getattr(spec, f) is not None]
    if len(given) > 1:
        raise ValueError(
            f"{', '.join(given)}: give one acceptance form (an alpha, a file, per-position "
            "rates or a mean accepted length), not several"
        )
    if (spec.accept_length is None) != (spec.accept_length_k is None):
        raise ValueError(
            "accept_length, accept_length_k: give both, the mean accepted length (tokens per "
            "step, the bonus token included) and the lookahead k it was measured at"
        )
    if spec.alpha is not None and not PROPOSER_KINDS[spec.kind].needs_acceptance:
        raise ValueError(
            f"alpha: kind {spec.kind!r}: an assumed alpha applies to draft and ngram options "
            "only; give its card's kind a measured acceptance (a file, per-position rates, "
            "or a mean accepted length at k)"
        )
    if spec.acceptance_per_position is not None:
        per_position_acceptance(
            spec.acceptance_per_position, given="", name=_name(spec, "acceptance_per_position")
        )
    if spec.accept_length is not None and spec.accept_length_k is not None:
        alpha_from_accept_length(
            spec.accept_length, spec.accept_length_k, name=_name(spec, "accept_length")
        )


def given_acceptance(spec: Spec) -> tuple[Any, bool]:
    """The ``acceptance`` value of ``spec``'s proposer table (an alpha, a file's absolute
    path, a converted table; None: none given) and whether it is measured."""
    by = spec.acceptance_from or "given to the plan"
    if spec.alpha is not None:
        return float(spec.alpha), False
    if spec.acceptance is not None:
        return os.path.abspath(spec.acceptance), True
    if spec.acceptance_per_position is not None:
        name = _name(spec, "acceptance_per_position")
        return per_position_acceptance(spec.acceptance_per_position, given=by, name=name), True
    if spec.accept_length is not None and spec.accept_length_k is not None:
        name = _name(spec, "accept_length")
        table = accept_length_acceptance(
            spec.accept_length, spec.accept_length_k, given=by, name=name
        )
        return table, False
    return None, True


def replaced_card(spec: Spec) -> str:
    """What a card's kind given an acceptance says of its card's own (empty otherwise)."""
    if PROPOSER_KINDS[spec.kind].needs_acceptance or not has_acceptance(spec):
        return ""
    return f"; replaces the published acceptance of {spec.kind} card {spec.card}"


def beyond_measured(spec: Spec, depth: int) -> str:
    """What a tree ``depth`` deep rests on past the lookahead a mean accepted length was
    measured at (empty within it, or for any other form)."""
    k = spec.accept_length_k
    if k is None or depth <= k:
        return ""
    return (
        f"its tree is {depth} deep, past the k = {k} its mean accepted length was measured "
        f"at: the deeper depths rest on the i.i.d. assumption alone (--k {k} holds it there)"
    )
