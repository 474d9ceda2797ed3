"""The proposer kinds, written once: what each is called (a config's ``[proposer].kind``, a
plan's option, a command-line flag), the card it takes, whether an acceptance comes with it,
its other keys, and how it is built.

Read by the composed simulate config (:mod:`specsim.sim.config.config_compose`), the plan's
options (:mod:`specsim.plan.options`) and the command line (``specsim plan``, ``specsim
tree``), so a new kind is one entry here and one module implementing the protocol.

>>> [k.name for k in KINDS.values()]
['draft', 'heads', 'ngram', 'parallel', 'selfspec']
>>> KINDS["heads"].flag, KINDS["heads"].card, KINDS["heads"].needs_acceptance
('--heads', True, False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from specsim.cards import load_head, load_model
from specsim.cards.files import SearchPath
from specsim.config import build
from specsim.proposers.kinds import DraftModel, Heads
from specsim.proposers.lookup import NGram
from specsim.proposers.parallel import ParallelDraft
from specsim.proposers.protocol import Proposer
from specsim.proposers.selfspec import SelfSpeculation
from specsim.proposers.tables import RankAcceptance

__all__ = ["CARD_KINDS", "KINDS", "ProposerKind", "build_proposer", "in_place_of_card"]

Make = Callable[[str, RankAcceptance | None, Mapping[str, Any], SearchPath], Proposer]


@dataclass(frozen=True, kw_only=True)
class ProposerKind:
    """One kind of proposer: its ``name`` (config and plan), its command-line ``flag``, what
    it is (``what``: the flag's help), whether it takes a ``card``, whether an acceptance
    must be given with it (``needs_acceptance``: its card carries none; a card's kind takes
    one too, in place of its card's published table, bounded at the card's depth), its
    config ``keys`` besides ``kind`` and how it is built
    (``make(card, acceptance, extra, search_path)``)."""

    name: str
    flag: str
    what: str
    card: bool
    needs_acceptance: bool
    keys: tuple[str, ...]
    make: Make


def in_place_of_card(acc: RankAcceptance, *, max_depth: int | None, card: str) -> RankAcceptance:
    """``acc`` given for a proposer whose ``card`` drafts at most ``max_depth`` deep, bounded
    there; an acceptance measured deeper than the card drafts is a ValueError naming both."""
    deepest = acc.max_depth
    if deepest is not None and max_depth is not None and deepest > max_depth:
        raise ValueError(
            f"acceptance: {acc.name} is measured to depth {deepest}, but {card} drafts at most "
            f"{max_depth} deep"
        )
    return dataclasses.replace(acc, max_depth=max_depth if deepest is None else deepest)


def _draft(card: str, acc: RankAcceptance | None, extra: Mapping[str, Any], sp: SearchPath) -> Any:
    assert acc is not None  # build_proposer checks that it is given
    return DraftModel(
        card=load_model(card, search_path=sp), acceptance=acc, dtype=extra.get("dtype")
    )


def _heads(card: str, acc: RankAcceptance | None, extra: Mapping[str, Any], sp: SearchPath) -> Any:
    head = load_head(card, search_path=sp)
    given = None
    if acc is not None:
        given = in_place_of_card(acc, max_depth=head.max_depth, card=f"head card {head.slug!r}")
    return Heads(card=head, dtype=extra.get("dtype"), given=given)


def _ngram(card: str, acc: RankAcceptance | None, extra: Mapping[str, Any], sp: SearchPath) -> Any:
    return build(NGram, {**extra, "acceptance": acc}, where="ngram")


def _parallel(
    card: str, acc: RankAcceptance | None, extra: Mapping[str, Any], sp: SearchPath
) -> Any:
    return _own(ParallelDraft.from_card(card, search_path=sp), acc)


def _selfspec(
    card: str, acc: RankAcceptance | None, extra: Mapping[str, Any], sp: SearchPath
) -> Any:
    return _own(SelfSpeculation.from_card(card, search_path=sp), acc)


P = TypeVar("P", ParallelDraft, SelfSpeculation)


def _own(proposer: P, acc: RankAcceptance | None) -> P:
    """``proposer`` (built from its card) with ``acc`` in place of the card's acceptance."""
    if acc is None:
        return proposer
    card = proposer.acceptance
    own = in_place_of_card(acc, max_depth=card.max_depth, card=card.name.removesuffix(": accept"))
    return dataclasses.replace(proposer, acceptance=own)


_DRAFT_KEYS = ("card", "acceptance", "dtype")
_NGRAM_KEYS = ("acceptance", "n", "threads", "overlap")

KINDS: Mapping[str, ProposerKind] = {
    k.name: k
    for k in (
        ProposerKind(
            name="draft",
            flag="--draft",
            what="a draft model card",
            card=True,
            needs_acceptance=True,
            keys=_DRAFT_KEYS,
            make=_draft,
        ),
        ProposerKind(
            name="heads",
            flag="--heads",
            what="a head card (models/heads/)",
            card=True,
            needs_acceptance=False,
            keys=("card", "acceptance", "dtype"),
            make=_heads,
        ),
        ProposerKind(
            name="ngram",
            flag="--ngram",
            what="n-gram prompt lookup",
            card=False,
            needs_acceptance=True,
            keys=_NGRAM_KEYS,
            make=_ngram,
        ),
        ProposerKind(
            name="parallel",
            flag="--parallel",
            what="a parallel-drafting proposer card (models/proposers/)",
            card=True,
            needs_acceptance=False,
            keys=("card", "acceptance"),
            make=_parallel,
        ),
        ProposerKind(
            name="selfspec",
            flag="--selfspec",
            what="a self-speculation proposer card (models/proposers/)",
            card=True,
            needs_acceptance=False,
            keys=("card", "acceptance"),
            make=_selfspec,
        ),
    )
}
"""Every proposer kind, by name, in the order the plan and the CLI list them."""

CARD_KINDS = tuple(name for name, k in KINDS.items() if k.card)
"""The kinds that take a card."""


def build_proposer(
    kind: str,
    *,
    card: str | None = None,
    acceptance: RankAcceptance | None = None,
    extra: Mapping[str, Any] | None = None,
    search_path: SearchPath = None,
) -> Proposer:
    """The proposer of ``kind`` from its ``card`` (a slug or path), its ``acceptance`` (for
    the kinds that need one) and its other keys ``extra``; a ValueError naming what is
    missing or unknown."""
    k = KINDS.get(kind)
    if k is None:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    if k.card != (card is not None):
        need = f"needs {k.what}" if k.card else "takes no card"
        raise ValueError(f"kind {kind!r}: {need} (card = {card!r})")
    if k.needs_acceptance and acceptance is None:
        raise ValueError(f"kind {kind!r}: needs an acceptance (an alpha or a file)")
    return k.make(card or "", acceptance, extra or {}, search_path)
