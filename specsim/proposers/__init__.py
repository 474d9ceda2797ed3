"""Proposers: where the drafted tokens come from, what they cost, and how often they are accepted.

A **proposer** (:class:`ProposerProtocol`, :mod:`specsim.proposers.protocol`) says how it
drafts and what it costs on a :class:`~specsim.cost.deployment.Deployment`
(ARCHITECTURE.md). The kinds that ship:

- :class:`DraftModel`: a smaller language model (a model card) that drafts one
  depth of a token tree per step, batched over that depth's frontier, on the target's
  hardware and stack (:meth:`specsim.cost.deployment.Deployment.on_model`) or on a
  deployment of its own (``draft_deployment``);
- :class:`Heads`: prediction heads on the target (a head card,
  :class:`specsim.cards.HeadCard`): Medusa-like heads evaluated once per pass
  (``kind = "parallel"``; Cai et al., ICML 2024, Section 2.1.1) or an
  EAGLE-like one-layer head or MTP module stepped once per depth on the target's
  features (``kind = "autoregressive"``; Li et al., ICML 2024, Section 4);
- :class:`KVBudget` and :class:`StreamingSelfSpec`: any draft, or the target itself,
  attending to a fixed KV budget per draft step for long context
  (:mod:`specsim.proposers.budget`; MagicDec, TriForce); an MTP module is a head card of
  ``kind = "mtp"`` (:mod:`specsim.proposers.mtp`);
- :class:`NGram`: prompt lookup with no model at all: no accelerator work, a measured
  host-CPU search per pass (:mod:`specsim.proposers.lookup`); its acceptance is measured
  from text (:mod:`specsim.proposers.ngram`).

A new proposer is one module with a class that has the protocol's members; nothing else
changes (``docs/proposers.md``). A chain is the tree of width one everywhere. Every kind
states what it runs over how many positions (:class:`~specsim.cost.drafting.DraftWork`,
:mod:`specsim.proposers.work`) and one rule prices it under the deployment's drafting
profile (:func:`specsim.cost.drafting.price_draft`): a draft step pays the stack's
draft-step host cost, never its per-pass cost.

**Acceptance by depth and rank** (:class:`RankAcceptance`) is Sequoia's
positional model (Chen et al., "Sequoia", 2024, Section 3.1): the
probability that the rank-``r`` child (rank 0 first) of an accepted node at
depth ``d`` is accepted, given that its earlier siblings were rejected,
depends only on ``(d, r)``: ``accept[d - 1][r]``. A token tree is given by
``parents``: node ``i``'s parent index, ``-1`` for the children of the root
(the last emitted token), in topological order (:func:`check_tree`, the one
validator, :func:`specsim.cost.shape.check_tree`).

>>> acc = RankAcceptance(accept=((0.6, 0.3), (0.5, 0.2)))
>>> acc.conditional(1, 1), acc.conditional(3, 0), acc.conditional(1, 5)
(0.3, 0.5, 0.0)
>>> round(acc.marginal(1, 1), 3)
0.12
"""

from specsim.proposers.budget import KVBudget, StreamingSelfSpec
from specsim.proposers.kinds import DraftModel, Heads
from specsim.proposers.lookup import LOOKUP_COST, LookupCost, NGram, fit_lookup_cost
from specsim.proposers.parallel import ParallelDraft
from specsim.proposers.protocol import (
    MEMBERS,
    OPTIONAL,
    DraftCost,
    Proposer,
    ProposerProtocol,
    check_proposer,
    kv_bytes_per_token_of,
    prefill_cost_of,
    ragged_draft_cost_of,
)
from specsim.proposers.registry import CARD_KINDS, KINDS, ProposerKind, build_proposer
from specsim.proposers.selfspec import SelfSpeculation, early_exit_card
from specsim.proposers.tables import (
    RankAcceptance,
    check_tree,
    frontier_widths,
    load_acceptance,
    tree_depths,
    verify_shape,
)

__all__ = [
    "RankAcceptance",
    "DraftCost",
    "DraftModel",
    "Heads",
    "NGram",
    "ParallelDraft",
    "SelfSpeculation",
    "KVBudget",
    "StreamingSelfSpec",
    "early_exit_card",
    "LookupCost",
    "LOOKUP_COST",
    "fit_lookup_cost",
    "Proposer",
    "ProposerProtocol",
    "MEMBERS",
    "OPTIONAL",
    "check_proposer",
    "ragged_draft_cost_of",
    "prefill_cost_of",
    "kv_bytes_per_token_of",
    "check_tree",
    "tree_depths",
    "frontier_widths",
    "verify_shape",
    "load_acceptance",
    "KINDS",
    "CARD_KINDS",
    "ProposerKind",
    "build_proposer",
]
