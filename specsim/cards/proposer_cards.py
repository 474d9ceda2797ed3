"""Proposer cards: parallel drafting and self-speculation (``models/proposers/<slug>.toml``).

A proposer card is data, as every card is: what drafts, for which target, how deep, and
the acceptance by depth and rank measured for that pair (``accept[d - 1][r]``: the
rank-``r`` candidate's acceptance at depth ``d`` given the earlier candidates were
rejected, Sequoia's positional model; ``assumed_depths`` lists the rows that are
assumptions or derivations rather than published per-depth numbers, and the card's
comments say how each was obtained). Every number cites its source in ``sources``.
Two kinds, told apart by the field ``kind``:

- ``kind = "parallel"`` (:class:`ParallelDraftCard`): a draft model (``draft``, a model
  card slug) that proposes up to ``k`` tokens in one forward pass (PARD, An et al. 2025,
  arXiv:2504.18583; P-EAGLE; DFlash). ``pass_positions`` says how many positions that
  pass computes: ``"tree-depth"``, as many as the tree is deep (PARD's loop feeds the
  last token and ``depth - 1`` mask tokens, ``pard/pard_infer.py``); ``"k"``, always
  ``k`` (a block drafter trained on a fixed block). ``extra_params``: weights it adds
  beyond its model card (mask-token embeddings; 0 when the mask is an existing row).
- ``kind = "self-speculation"`` (:class:`SelfSpecCard`): the target itself with only
  its first ``exit_layer`` decoder layers (LayerSkip's early exit, Elhoushi et al., ACL
  2024) or with the layers ``skip_layers`` (0-based indices) skipped (Draft&Verify,
  SWIFT) drafts; ``exit_head_params`` counts the weights of an exit head of its own (0
  when the target's LM head is shared, as in LayerSkip).
- ``kind = "streaming-self-speculation"`` (:class:`StreamingSelfSpecCard`): the whole
  target drafting over a KV budget of ``budget`` cached tokens (MagicDec's StreamingLLM
  self-speculation, arXiv:2408.11049), its acceptance measured per context length
  (``contexts``, ``context_accept``: one per-token rate at each, the same at every depth).

Cards are looked up by slug in ``proposers/`` under each folder of the search path and
of ``SPECSIM_CARDS``, then in the shipped ``models/proposers/``; a ``.toml`` path is read
directly. A card's file is named after its slug.

>>> card = load_proposer_card("pard-llama-3.2-1b-llama-3.1-8b")
>>> card.kind, card.draft, card.target, card.k
('parallel', 'llama-3.2-1b', 'llama-3.1-8b', 12)
>>> load_proposer_card("layerskip-llama-2-7b-e8").exit_layer
8
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsim.cards.checks import card_label, check_int, check_sources, check_str
from specsim.cards.files import (
    PROPOSER_KINDS,
    SearchPath,
    build_card,
    card_dirs,
    card_paths,
    find_card,
    read_toml,
)

__all__ = [
    "PASS_POSITIONS",
    "PROPOSER_KINDS",
    "ParallelDraftCard",
    "ProposerCard",
    "SelfSpecCard",
    "StreamingSelfSpecCard",
    "accept_rows",
    "assumed_depths",
    "list_proposer_cards",
    "load_proposer_card",
    "proposer_card_dirs",
]

PASS_POSITIONS = ("tree-depth", "k")
SUBDIR = "proposers"


def accept_rows(where: str, accept: object) -> tuple[tuple[float, ...], ...]:
    """``accept`` as rows of probabilities, one row per depth; errors name depth and rank."""
    if not isinstance(accept, list | tuple) or not accept:
        raise TypeError(f"{where}: field 'accept' must be a list of rows, got {accept!r}")
    rows = []
    for d, row in enumerate(accept, start=1):
        if not isinstance(row, list | tuple) or not row:
            raise TypeError(f"{where}: field 'accept' depth {d}: expected a non-empty list")
        for r, a in enumerate(row):
            ok = isinstance(a, int | float) and not isinstance(a, bool)
            if not ok or not (math.isfinite(a) and 0.0 <= a <= 1.0):
                raise ValueError(
                    f"{where}: field 'accept' depth {d}, rank {r}: expected a probability "
                    f"in [0, 1], got {a!r}"
                )
        rows.append(tuple(float(a) for a in row))
    return tuple(rows)


def assumed_depths(where: str, assumed: object, depths: int) -> tuple[int, ...]:
    """``assumed`` as the sorted distinct depths (each in ``1..depths``) whose acceptance
    a card assumed rather than measured; errors name the field and the depth."""
    if not isinstance(assumed, list | tuple):
        raise TypeError(
            f"{where}: field 'assumed_depths' must be a list of depths, got {assumed!r}"
        )
    for d in assumed:
        check_int(where, "assumed_depths", d, minimum=1)
        if d > depths:
            raise ValueError(
                f"{where}: field 'assumed_depths' names depth {d}, but 'accept' has {depths} depths"
            )
    return tuple(sorted(set(assumed)))


def _check_common(card: ParallelDraftCard | SelfSpecCard, *, max_depth: int) -> str:
    """Checks shared by both kinds; returns how errors name the card."""
    where = card_label(card.source_path, "proposer", card.slug)
    for name in ("slug", "name", "target"):
        check_str(where, name, getattr(card, name))
    check_str(where, "kind", card.kind, PROPOSER_KINDS)
    check_sources(where, card.sources)
    rows = accept_rows(where, card.accept)
    if len(rows) > max_depth:
        raise ValueError(
            f"{where}: field 'accept' has {len(rows)} depths, deeper than the proposer drafts "
            f"({max_depth})"
        )
    object.__setattr__(card, "accept", rows)
    object.__setattr__(
        card, "assumed_depths", assumed_depths(where, card.assumed_depths, len(rows))
    )
    return where


@dataclass(frozen=True, kw_only=True)
class ParallelDraftCard:
    """A draft model that proposes up to ``k`` tokens in one pass (see the module docstring)."""

    slug: str
    name: str
    kind: str
    target: str
    draft: str
    k: int
    pass_positions: str
    accept: tuple[tuple[float, ...], ...]
    sources: dict[str, str] | list[str] = field(hash=False)
    extra_params: int = 0
    assumed_depths: tuple[int, ...] = ()
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "proposer", self.slug)
        check_int(where, "k", self.k, minimum=1)
        check_str(where, "draft", self.draft)
        check_str(where, "pass_positions", self.pass_positions, PASS_POSITIONS)
        check_int(where, "extra_params", self.extra_params, minimum=0)
        if self.kind != "parallel":
            raise ValueError(f"{where}: field 'kind' must be 'parallel', got {self.kind!r}")
        _check_common(self, max_depth=self.k)

    @property
    def max_depth(self) -> int:
        return self.k


@dataclass(frozen=True, kw_only=True)
class SelfSpecCard:
    """The target drafting with some of its own layers (see the module docstring).

    Exactly one of ``exit_layer`` (keep layers ``1..exit_layer``) and ``skip_layers``
    (0-based indices of skipped layers) is given; ``max_depth`` is the deepest draft the
    card's acceptance covers. That the draft keeps at least one layer of the target is
    checked against the target's card when the proposer is used
    (:meth:`draft_layers`).
    """

    slug: str
    name: str
    kind: str
    target: str
    max_depth: int
    accept: tuple[tuple[float, ...], ...]
    sources: dict[str, str] | list[str] = field(hash=False)
    exit_layer: int | None = None
    skip_layers: tuple[int, ...] = ()
    exit_head_params: int = 0
    assumed_depths: tuple[int, ...] = ()
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "proposer", self.slug)
        if self.kind != "self-speculation":
            raise ValueError(f"{where}: field 'kind' must be 'self-speculation', got {self.kind!r}")
        check_int(where, "max_depth", self.max_depth, minimum=1)
        check_int(where, "exit_head_params", self.exit_head_params, minimum=0)
        if not isinstance(self.skip_layers, list | tuple):
            raise TypeError(
                f"{where}: field 'skip_layers' must be a list of layer indices, got "
                f"{self.skip_layers!r}"
            )
        for i in self.skip_layers:
            check_int(where, "skip_layers", i, minimum=0)
        if len(set(self.skip_layers)) != len(self.skip_layers):
            raise ValueError(
                f"{where}: field 'skip_layers' lists a layer twice: {self.skip_layers}"
            )
        object.__setattr__(self, "skip_layers", tuple(sorted(self.skip_layers)))
        if (self.exit_layer is None) == (not self.skip_layers):
            raise ValueError(
                f"{where}: give exactly one of 'exit_layer' and 'skip_layers', got "
                f"exit_layer={self.exit_layer!r}, skip_layers={list(self.skip_layers)}"
            )
        if self.exit_layer is not None:
            check_int(where, "exit_layer", self.exit_layer, minimum=1)
        _check_common(self, max_depth=self.max_depth)

    def draft_layers(self, layers: int) -> int:
        """Decoder layers the draft runs of a target with ``layers``; an error names the card
        field that removes every layer or names a layer the target does not have."""
        where = card_label(self.source_path, "proposer", self.slug)
        if self.exit_layer is not None:
            if self.exit_layer > layers:
                raise ValueError(
                    f"{where}: field 'exit_layer' is {self.exit_layer}, but target "
                    f"{self.target!r} has {layers} layers"
                )
            return self.exit_layer
        bad = [i for i in self.skip_layers if i >= layers]
        if bad:
            raise ValueError(
                f"{where}: field 'skip_layers' names layer(s) {bad}, but target "
                f"{self.target!r} has layers 0..{layers - 1}"
            )
        if len(self.skip_layers) >= layers:
            raise ValueError(
                f"{where}: field 'skip_layers' removes every one of the target's {layers} "
                "layers: the draft must keep at least one"
            )
        return layers - len(self.skip_layers)


@dataclass(frozen=True, kw_only=True)
class StreamingSelfSpecCard:
    """The target drafting over a KV budget (see the module docstring).

    ``contexts`` (ascending, tokens) and ``context_accept`` (a probability at each) are the
    measured per-token acceptance by context length; :meth:`accept_at` reads it at any
    context (linear in log context between the measured ones, the nearest measured value
    outside them) and :meth:`accept_rows` gives that rate at each of ``max_depth`` depths.
    Every depth is a derivation from one per-token rate, so ``assumed_depths`` is all of
    them unless the card says otherwise.
    """

    slug: str
    name: str
    kind: str
    target: str
    budget: int
    max_depth: int
    contexts: tuple[int, ...]
    context_accept: tuple[float, ...]
    sources: dict[str, str] | list[str] = field(hash=False)
    assumed_depths: tuple[int, ...] = ()
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "proposer", self.slug)
        if self.kind != "streaming-self-speculation":
            raise ValueError(
                f"{where}: field 'kind' must be 'streaming-self-speculation', got {self.kind!r}"
            )
        for name in ("slug", "name", "target"):
            check_str(where, name, getattr(self, name))
        check_sources(where, self.sources)
        check_int(where, "budget", self.budget, minimum=1)
        check_int(where, "max_depth", self.max_depth, minimum=1)
        if not isinstance(self.contexts, list | tuple) or not self.contexts:
            raise TypeError(f"{where}: field 'contexts' must be a non-empty list of tokens")
        for c in self.contexts:
            check_int(where, "contexts", c, minimum=1)
            if c < self.budget:
                raise ValueError(
                    f"{where}: field 'contexts' has {c} tokens, below the KV budget "
                    f"{self.budget} (the draft would attend to the whole context there)"
                )
        if list(self.contexts) != sorted(set(self.contexts)):
            raise ValueError(f"{where}: field 'contexts' must be ascending, got {self.contexts}")
        rates = accept_rows(where, [[a] for a in self.context_accept])
        if len(rates) != len(self.contexts):
            raise ValueError(
                f"{where}: field 'context_accept' has {len(rates)} rates for "
                f"{len(self.contexts)} contexts"
            )
        object.__setattr__(self, "contexts", tuple(self.contexts))
        object.__setattr__(self, "context_accept", tuple(r[0] for r in rates))
        object.__setattr__(
            self, "assumed_depths", assumed_depths(where, self.assumed_depths, self.max_depth)
        )

    def accept_at(self, context: float) -> float:
        """The per-token acceptance at ``context`` tokens (class docstring)."""
        where = card_label(self.source_path, "proposer", self.slug)
        if not (isinstance(context, int | float) and math.isfinite(context) and context > 0):
            raise ValueError(f"{where}: context must be a positive number, got {context!r}")
        xs, ys = self.contexts, self.context_accept
        if context <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if context <= xs[i]:
                t = math.log(context / xs[i - 1]) / math.log(xs[i] / xs[i - 1])
                return ys[i - 1] + t * (ys[i] - ys[i - 1])
        return ys[-1]

    def accept_rows(self, context: float) -> tuple[tuple[float, ...], ...]:
        """``accept_at(context)`` at each of the ``max_depth`` depths (top candidate only)."""
        return ((self.accept_at(context),),) * self.max_depth


ProposerCard = ParallelDraftCard | SelfSpecCard | StreamingSelfSpecCard
"""Any kind of proposer card."""


def _build(data: dict[str, Any], path: Path) -> ProposerCard:
    kind = data.get("kind")
    if kind not in PROPOSER_KINDS:
        raise ValueError(
            f"{path}: field 'kind' must be one of {list(PROPOSER_KINDS)}, got {kind!r}"
        )
    cls: type[ParallelDraftCard] | type[SelfSpecCard] | type[StreamingSelfSpecCard]
    cls = {
        "parallel": ParallelDraftCard,
        "self-speculation": SelfSpecCard,
        "streaming-self-speculation": StreamingSelfSpecCard,
    }[kind]
    return build_card(cls, data, path, label="proposer")


def proposer_card_dirs(search_path: SearchPath = None) -> list[Path]:
    """Folders searched for proposer cards, in order: each folder of ``search_path`` and of
    :data:`~specsim.cards.ENV_VAR`, with its ``proposers/`` subfolder, then the shipped
    ``models/proposers/`` (:func:`specsim.cards.files.card_dirs`)."""
    return card_dirs("proposers", search_path)


def load_proposer_card(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> ProposerCard:
    """Load a proposer card by slug (looked up as every card is,
    :func:`specsim.cards.files.find_card`) or from a ``.toml`` path; its ``kind`` picks
    :class:`ParallelDraftCard`, :class:`SelfSpecCard` or :class:`StreamingSelfSpecCard`."""
    if not isinstance(slug_or_path, str | os.PathLike) or not os.fspath(slug_or_path):
        raise TypeError(f"proposer card: expected a slug or a .toml path, got {slug_or_path!r}")
    path = find_card("proposers", slug_or_path, search_path)
    return _build(read_toml(path), path)


def list_proposer_cards(*, search_path: SearchPath = None) -> list[ProposerCard]:
    """Every proposer card found, sorted by slug (the first of each slug wins)."""
    return [_build(read_toml(p), p) for p in card_paths("proposers", search_path)]
