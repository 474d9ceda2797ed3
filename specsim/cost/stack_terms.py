"""The speculative path's own costs in a stack: the one place each is priced.

A runtime profile made from a stack profile (:mod:`specsim.cards.stack`) adds to a pass,
beyond the roofline of :mod:`specsim.cost.roofline`:

* **per-sequence host work**: ``sequence_overhead_s`` per sequence the stack schedules
  (under batch expansion, ``k + 1`` per verified sequence);
* **graph padding**: a stack that captured CUDA graphs at ``graph_sizes`` (of the batch or
  of the new tokens, ``graph_unit``) runs a pass at the next captured size, its weight
  GEMMs and LM head over the padded rows (``rows = T * size / x``), so the verify cost is a
  staircase in the batch; with ``graph_padding`` false only the captured sizes themselves
  replay. A pass off the graph path (above the largest size, or a size not captured without
  padding) runs eagerly and pays ``layers * eager_layer_overhead_s`` more. A stack without
  ``graph_sizes`` pads nothing and has no graph path to fall off: an eager stack's launch
  cost is its ``layer_overhead_s``, as is that of one that captures every shape it runs;
* **batch expansion** (``verify = "batch-expansion"``, vLLM V0's ``BatchExpansionTop1Scorer``):
  a verification pass scores each sequence as ``n = T / batch`` sequences of one new token,
  each reading the whole cached context: the cached-token reads ``R`` become ``n * R``
  (exact for passes whose sequences verify equally many positions), the rows and the
  attention pairs stay those of the multi-query pass;
* on verification passes only, the **rejection sampler**, ``rejection_s_per_token`` per new
  token that verifies a draft (a prefill chunk riding in the pass is never sampled against a
  draft: its tokens are not charged), and the fixed cost of **having speculation
  configured**, ``speculation_overhead_s`` per pass (the proposer's scheduling and
  bookkeeping that a plain decode of the same stack does not pay).

The host cost of a draft step is not here: it is the drafting profile's pass cost
(:meth:`specsim.cards.RuntimeProfile.drafting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.cards import RuntimeProfile

__all__ = ["StackCosts", "StackTerms", "stack_costs", "stack_terms", "check_stack_tree"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackCosts:
    """A stack's per-pass constants on one model (seconds; ``eager_s`` over all layers)."""

    sequence_s: float
    graph_sizes: tuple[float, ...]
    graph_tokens: bool
    graph_padding: bool
    eager_s: float
    expand: bool
    rejection_s: float
    speculation_s: float


class StackTerms:
    """What a stack changes in passes (numbers or arrays): the GEMM ``rows`` (padded), the
    cached tokens read ``R`` (expanded), and the stack's host seconds ``host_s``, of which
    ``eager_s`` is the eager launches' part."""

    __slots__ = ("rows", "R", "host_s", "eager_s")

    def __init__(self, rows: Any, R: Any, host_s: Any, eager_s: Any) -> None:
        self.rows, self.R, self.host_s, self.eager_s = rows, R, host_s, eager_s


def stack_costs(rt: RuntimeProfile, layers: int) -> StackCosts | None:
    """The constants of ``rt``'s stack for a model of ``layers`` decoder layers; None for a
    profile without a stack (nothing is added to its passes)."""
    st = rt.stack_profile
    if st is None:
        return None
    return StackCosts(
        sequence_s=st.sequence_overhead_s,
        graph_sizes=tuple(float(s) for s in st.graph_sizes or ()),
        graph_tokens=st.graph_unit == "tokens",
        graph_padding=st.graph_padding,
        eager_s=layers * st.eager_layer_overhead_s,
        expand=st.verify == "batch-expansion",
        rejection_s=st.rejection_s_per_token,
        speculation_s=st.speculation_overhead_s,
    )


def _graph(sc: StackCosts, x: Any) -> tuple[Any, Any]:
    """``(padded size, off the graph path)`` of passes of graph key ``x`` (numbers or arrays)."""
    if not sc.graph_sizes:  # no list of sizes: every pass runs as it is (no padding)
        return x, np.zeros(np.shape(x), dtype=bool) if np.ndim(x) else False
    sizes = np.asarray(sc.graph_sizes)
    i = np.searchsorted(sizes, x, side="left")  # the first size >= x
    inside = i < sizes.size
    padded = np.where(inside, sizes[np.minimum(i, sizes.size - 1)], x)
    if not sc.graph_padding:  # only the captured sizes themselves replay
        inside = inside & (padded == x)
        padded = np.where(inside, padded, x)
    if np.ndim(x) == 0:
        return float(padded), not bool(inside)
    return padded, ~inside


def _ratio(a: Any, b: Any) -> Any:
    """``a / b``, and 0 where an array ``b`` is 0 (an empty pass of a grid: no sequences, no
    rows), so a grid's empty entries give 0 rather than NaN and a warning."""
    if np.ndim(b) == 0:
        return a / b
    b = np.asarray(b, dtype=np.float64)
    return np.divide(a, b, out=np.zeros(np.broadcast_shapes(np.shape(a), b.shape)), where=b > 0)


def stack_terms(
    sc: StackCosts, *, T: Any, R: Any, batch: Any, verify: bool, verified: Any = None
) -> StackTerms:
    """The :class:`StackTerms` of passes of ``T`` new tokens over ``batch`` sequences that read
    ``R`` cached tokens; ``verify``: they are speculative verification passes, of which
    ``verified`` new tokens verify drafts (None: all ``T``; fewer when prefill chunks ride in
    the pass). ``batch`` None means one new token per sequence (``batch = T``, plain
    decoding)."""
    B = T if batch is None else batch
    seqs, R_read = B, R
    if verify and sc.expand:  # each sequence scored as n sequences of one new token
        seqs, R_read = T, R * _ratio(T, B)
    x = T if sc.graph_tokens else seqs
    padded, eager = _graph(sc, x)
    rows = _ratio(T * padded, x)
    eager_s = sc.eager_s * eager
    host = seqs * sc.sequence_s + eager_s
    if verify:
        drafts = T if verified is None else verified  # the tokens the rejection sampler sees
        host = host + drafts * sc.rejection_s + sc.speculation_s
    return StackTerms(rows, R_read, host, eager_s)


def check_stack_tree(rt: RuntimeProfile | None, *, parents: tuple[int, ...] | None) -> None:
    """A ValueError when a token tree (``parents``; None or a chain written as a tree pass)
    is verified on a stack that cannot verify one: a batch-expansion stack (each expanded
    sequence is one chain), or one without tree masks."""
    st = None if rt is None else rt.stack_profile
    if st is None or parents is None or parents == tuple(range(-1, len(parents) - 1)):
        return
    if st.verify == "batch-expansion":
        raise ValueError(
            f"runtime: stack {st.slug!r} verifies by batch expansion, which cannot verify a "
            "token tree (use a chain, or a multi-query stack with tree masks)"
        )
    if not st.trees:
        raise ValueError(
            f"runtime: stack {st.slug!r} has no tree attention mask: it verifies chains only"
        )
