"""The answer without an acceptance: where an option starts to pay, and what the shipped
cards publish for similar pairs.

A draft model has no published acceptance for a given target, so a user deciding whether
to try one has none to give. The plan then answers the question it can: the **break-even**
acceptance, the i.i.d. per-token acceptance ``alpha*`` at which a chain of ``k`` drafted
tokens gives as many tokens per second as no speculation, on the plan's own closed form at
the load's batch (:func:`specsim.policies.tree_optimizer.evaluate_tree`, what the table
prices a closed batch with; a served load uses the batch its plain run implies). For each
``k`` in :data:`KS` the root is found by Brent's method on the tokens-per-second gain
(monotone in ``alpha``: the drafting and verification times do not depend on it), and the
answer is the lowest ``alpha*`` over ``k``, with that ``k`` and the mean accepted length
there, ``(1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan et al. 2023, Section 3.1, Eq. 1;
:func:`specsim.theory.numeric.expected_tokens`). If no ``k`` pays even when every drafted
token is accepted, the option can never pay there; if a ``k`` pays at ``alpha = 0``, it
always does.

**Similar pairs** are the shipped head and proposer cards with a published acceptance
table whose target is of the same model family as the option's target (the model cards'
``family``, e.g. ``llama-3``): the same tokenizer and training lineage, whatever the
proposer. Each is reduced to the i.i.d. acceptance with the same mean accepted length on a
chain of the break-even ``k`` (its own deepest depth where shorter), quoted with the
card's ``sources`` entry for its acceptance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specsim.cards import load_model
from specsim.cards.heads import HeadCard, list_heads
from specsim.cards.proposer_cards import list_proposer_cards
from specsim.cost.deployment import Deployment
from specsim.plan.limits import Shifted
from specsim.plan.option_acceptance import has_acceptance
from specsim.plan.options import OptionSpec
from specsim.policies.tree_optimizer import chain_tree, evaluate_tree, tree_tokens
from specsim.proposers import KINDS as PROPOSER_KINDS
from specsim.proposers import Proposer, RankAcceptance
from specsim.theory.numeric import expected_tokens

__all__ = ["KS", "BreakEven", "Published", "break_even", "needs_break_even", "published"]

KS = tuple(range(1, 9))
"""The chain lengths the break-even search tries."""
DEFAULT_K = 4
"""The chain length the published cards are compared at where no ``k`` breaks even."""


@dataclass(frozen=True, kw_only=True)
class Published:
    """A shipped card's acceptance for a similar pair: its i.i.d. equivalent ``alpha`` and
    mean accepted length on a chain of ``k``, and the card's source for it."""

    card: str
    kind: str
    target: str
    alpha: float
    accepted_length: float
    k: int
    source: str


@dataclass(frozen=True, kw_only=True)
class BreakEven:
    """Where an option without an acceptance starts to pay (module docstring), at ``batch``
    sequences of ``context`` tokens: ``status`` is ``"pays above"`` (``alpha`` the lowest
    break-even over :data:`KS`, at chain ``k``), ``"never"`` (no ``k`` pays at acceptance 1)
    or ``"always"`` (chain ``k`` pays at acceptance 0); ``per_k`` the break-even of each
    ``k`` (None: never at that ``k``); ``published`` the similar pairs of ``family``."""

    label: str
    kind: str
    batch: int
    context: int
    status: str
    alpha: float | None
    k: int | None
    accepted_length: float | None
    per_k: dict[int, float | None]
    family: str
    published: tuple[Published, ...]

    @property
    def published_range(self) -> tuple[float, float] | None:
        """The lowest and highest published i.i.d. acceptance (None: no similar pair)."""
        if not self.published:
            return None
        alphas = [p.alpha for p in self.published]
        return min(alphas), max(alphas)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["per_k"] = {str(k): v for k, v in self.per_k.items()}
        rng = self.published_range
        out["published_range"] = None if rng is None else list(rng)
        return out


def needs_break_even(spec: OptionSpec) -> bool:
    """Whether ``spec`` has no acceptance at all (a draft model given neither an alpha nor
    a file; the n-gram lookup keeps its sample corpus's)."""
    kind = PROPOSER_KINDS[spec.kind]
    return kind.needs_acceptance and spec.kind != "ngram" and not has_acceptance(spec)


def _gain(
    proposer: Proposer, deployment: Deployment, *, k: int, batch: int, context: int
) -> Callable[[float], float]:
    """Chain ``k``'s tokens per second over no speculation's, minus one, as a function of
    the i.i.d. acceptance (``proposer``'s own acceptance is 0: :class:`Shifted` sets it)."""

    def price(tree: tuple[int, ...], p: Proposer) -> float:
        plan = evaluate_tree(tree, proposer=p, deployment=deployment, batch=batch, context=context)
        return plan.tokens_per_s

    none = price((), proposer)

    def gain(alpha: float) -> float:
        return price(chain_tree(k), Shifted(proposer, alpha)) / none - 1.0

    return gain


def threshold(
    proposer: Proposer, deployment: Deployment, *, k: int, batch: int, context: int
) -> float | None:
    """The break-even acceptance of chain ``k`` (0.0: it pays at any; None: at none)."""
    gain = _gain(proposer, deployment, k=k, batch=batch, context=context)
    if gain(0.0) > 0.0:
        return 0.0
    if gain(1.0) <= 0.0:
        return None
    from scipy.optimize import brentq  # start-up: only a question without acceptance roots

    return float(brentq(gain, 0.0, 1.0, xtol=1e-9))


def break_even(
    label: str,
    kind: str,
    proposer: Proposer,
    deployment: Deployment,
    *,
    batch: int,
    context: int,
    ks: tuple[int, ...] = KS,
) -> BreakEven:
    """The option's :class:`BreakEven` (module docstring); ``proposer`` is the option's own,
    its acceptance replaced (its drafting cost is what matters); ``ks``: the chain lengths
    tried (a ``k`` the user fixed: that one alone)."""
    zero = Shifted(proposer, -1.0)  # every acceptance 0: each k's gain is set from there
    per_k = {k: threshold(zero, deployment, k=k, batch=batch, context=context) for k in ks}
    found = [(a, k) for k, a in per_k.items() if a is not None]
    alpha, k = min(found) if found else (None, None)
    status = "never" if alpha is None else ("always" if alpha == 0.0 else "pays above")
    length = None if alpha is None or k is None else float(expected_tokens(alpha, k))
    family = deployment.target.family
    return BreakEven(
        label=label,
        kind=kind,
        batch=batch,
        context=context,
        status=status,
        alpha=alpha,
        k=k,
        accepted_length=length,
        per_k=per_k,
        family=family,
        published=published(family, k=k or DEFAULT_K),
    )


def _source(sources: dict[str, str] | list[str]) -> str:
    if isinstance(sources, dict):
        return sources.get("accept") or "; ".join(sources.values())
    return "; ".join(sources)


def _iid(length: float, k: int) -> float:
    """The i.i.d. acceptance whose chain of ``k`` accepts ``length`` tokens a pass."""
    if length <= 1.0:
        return 0.0
    if length >= k + 1:
        return 1.0
    from scipy.optimize import brentq  # start-up: as in threshold

    return float(brentq(lambda a: float(expected_tokens(a, k)) - length, 0.0, 1.0, xtol=1e-9))


def published(family: str, *, k: int) -> tuple[Published, ...]:
    """The shipped cards' acceptances for targets of ``family`` (module docstring), each at
    a chain of ``k`` (or the card's deepest depth), lowest first."""
    out = []
    for card in [*list_heads(), *list_proposer_cards()]:
        accept = getattr(card, "accept", None)
        if accept is None:  # an acceptance that depends on the context, not a table
            continue
        try:
            target_family = load_model(card.target).family
        except (FileNotFoundError, ValueError):
            continue  # a card for a target this install has no card of
        if target_family != family:
            continue
        deepest = getattr(card, "max_depth", None)
        n = k if deepest is None else min(k, deepest)
        length = tree_tokens(chain_tree(n), RankAcceptance(accept=accept, max_depth=deepest))
        out.append(
            Published(
                card=card.slug,
                kind=f"heads, {card.kind}" if isinstance(card, HeadCard) else card.kind,
                target=card.target,
                alpha=_iid(length, n),
                accepted_length=length,
                k=n,
                source=_source(card.sources),
            )
        )
    return tuple(sorted(out, key=lambda p: (p.alpha, p.card)))
