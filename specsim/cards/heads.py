"""Head cards: prediction heads trained on one target (Medusa, EAGLE, multi-token prediction).

A head card (``models/heads/<slug>.toml``) says which target the heads were
trained on (``target``, a model-card slug; using the heads with another target
is an error, :class:`specsim.proposers.Heads`), how they draft (``kind``:
``"parallel"``, all heads evaluated once per pass on the last position, as
Medusa's heads, Cai et al. 2024, Section 2.1.1; ``"autoregressive"``, one step
per tree depth on the target's features, as EAGLE's head, Li et al. 2024,
Section 4; ``"mtp"``, a multi-token-prediction module: one block of the target's own
kind plus a projection, sharing its embedding and LM head, reused once per depth and
priced from the target's shape, :mod:`specsim.proposers.mtp`, DeepSeek-AI 2024,
arXiv:2412.19437, Section 2.2), what one evaluation costs as a fraction of one target decoder layer
(``layer_fraction``), how deep the heads reach (``max_depth``) and their
acceptance by depth and rank (``accept[d - 1][r]``: the rank-``r`` candidate's
acceptance at depth ``d`` given the earlier candidates were rejected, Sequoia's
positional model). Every number cites its source in ``sources``.

Optional fields: ``weights_per_eval``, the weights one evaluation reads (the
head's own and any target weights it runs, such as a shared LM head), from the
architecture; when given, :class:`specsim.proposers.Heads` checks that
``layer_fraction`` is that count over the target's decoder layer
(:attr:`specsim.cards.ModelCard.decode_layer_params`). ``assumed_depths``: the
depths whose rows of ``accept`` are assumptions, not published numbers (the card's
comments say what was assumed and why). A row with one rank means only the top
candidate's acceptance is known: the heads then draft chains (a second candidate
has acceptance 0 in :class:`specsim.proposers.RankAcceptance`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsim.cards.checks import card_label, check_float, check_int, check_sources, check_str
from specsim.cards.files import HEAD_KINDS, SearchPath, build_card, card_paths, find_card, read_toml
from specsim.cards.proposer_cards import accept_rows, assumed_depths

__all__ = ["HEAD_KINDS", "HeadCard", "load_head", "list_heads"]


@dataclass(frozen=True, kw_only=True)
class HeadCard:
    """Prediction heads on one target: cost per evaluation and acceptance by depth and rank."""

    slug: str
    name: str
    kind: str
    target: str
    layer_fraction: float
    max_depth: int
    accept: tuple[tuple[float, ...], ...]
    sources: dict[str, str] | list[str] = field(hash=False)
    notes: str = ""
    weights_per_eval: int | None = None
    assumed_depths: tuple[int, ...] = ()
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "head", self.slug)
        for name in ("slug", "name", "target"):
            check_str(where, name, getattr(self, name))
        check_str(where, "kind", self.kind, HEAD_KINDS)
        check_float(where, "layer_fraction", self.layer_fraction, strict=True)
        check_int(where, "max_depth", self.max_depth, minimum=1)
        if self.kind == "mtp" and self.layer_fraction != 1.0:
            raise ValueError(
                f"{where}: field 'layer_fraction' is {self.layer_fraction}, but kind 'mtp' "
                "runs one whole target layer (priced from the target's shape): give 1"
            )
        check_sources(where, self.sources)
        rows = accept_rows(where, self.accept)
        if len(rows) > self.max_depth:
            raise ValueError(
                f"{where}: field 'accept' has {len(rows)} depths but max_depth is {self.max_depth}"
            )
        object.__setattr__(self, "accept", rows)
        if self.weights_per_eval is not None:
            check_int(where, "weights_per_eval", self.weights_per_eval, minimum=1)
        depths = assumed_depths(where, self.assumed_depths, len(rows))
        object.__setattr__(self, "assumed_depths", depths)

    def check_layer_fraction(self, layer_params: int, *, rel: float = 1e-3) -> None:
        """With ``weights_per_eval``, check ``layer_fraction`` against it over one target
        decoder layer of ``layer_params`` weights (within ``rel``); an error names the card."""
        if self.weights_per_eval is None:
            return
        implied = self.weights_per_eval / layer_params
        if not math.isclose(self.layer_fraction, implied, rel_tol=rel):
            raise ValueError(
                f"{card_label(self.source_path, 'head', self.slug)}: field 'layer_fraction' is "
                f"{self.layer_fraction}, but weights_per_eval {self.weights_per_eval} over the "
                f"target's decoder layer of {layer_params} weights is {implied:.4f}"
            )


def _build(data: dict[str, Any], path: Path) -> HeadCard:
    return build_card(HeadCard, data, path, label="head")


def load_head(slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None) -> HeadCard:
    """Load a head card by slug or from a ``.toml`` path: looked up as every card is
    (:func:`specsim.cards.files.find_card`), in ``heads/`` (or directly) under each folder of
    ``search_path`` and of ``SPECSIM_CARDS``, then in the shipped ``models/heads/``.

    >>> card = load_head("medusa-vicuna-7b-v1.3")
    >>> card.target, card.kind, card.max_depth
    ('vicuna-7b-v1.3', 'parallel', 5)
    """
    path = find_card("heads", slug_or_path, search_path)
    return _build(read_toml(path), path)


def list_heads(*, search_path: SearchPath = None) -> list[HeadCard]:
    """Every head card found, sorted by slug (the first of each slug wins)."""
    return [_build(read_toml(p), p) for p in card_paths("heads", search_path)]
