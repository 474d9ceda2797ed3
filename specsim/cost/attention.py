"""Local and sparse attention layers: the keys each layer of a pass reads and holds.

A global layer's query at position ``p`` (from 0) sees the ``p + 1`` keys up to its own;
a pass over sequences with ``c_i`` cached tokens and ``n_i`` new positions reads each
sequence's cache once and forms the pairs of :mod:`specsim.cost.shape`. A model card's
``[attention]`` table (:class:`specsim.cards.attention.AttentionKind`) changes that:

* a **sliding-window** layer of window ``w``: a query sees ``min(p + 1, w)`` keys, a
  sequence's pass reads ``min(c, w - 1)`` cached tokens (those in its first query's window)
  and the layer holds ``min(context, w)`` tokens;
* a **chunked** layer of chunk ``C``: a query sees the ``(p mod C) + 1`` keys of its chunk, a
  pass reads the ``c mod C`` cached tokens of the current chunk, the layer holds at most
  ``C`` (the current chunk);
* **sparse** attention (DeepSeek-V3.2's DSA) in every layer: the lightning indexer scores
  every visible key (all the pairs, ``2 * index_heads * (index_head_dim + 1)`` flops each:
  the fp8 product of the ``index_heads`` query heads with the one index key, and the
  weighted sum over heads, ``fp8_index`` in ``inference/kernel.py`` of DeepSeek-V3.2-Exp),
  reading every cached index key (``index_bytes_per_token``) and writing and reading back
  the new ones; then each query attends to the ``min(p + 1, top_k)`` keys it selected,
  gathering them from the cache: ``min(c, top_k)`` cached tokens **per query** (the
  selections of a sequence's queries differ, so a verification pass of ``n`` new
  positions gathers ``n`` times: an ASSUMPTION that no gathered entry is reused between
  queries of a sequence). The indexer is computed on every tensor-parallel device (its
  projections are plain ``Linear`` layers in the reference code, not split: an
  ASSUMPTION for serving engines) and holds its keys whole on each, as the latent.

**From sums.** The roofline sees a pass only as sums over its sequences: ``T`` new
positions, ``S`` pairs, ``R`` cached tokens read, ``B`` sequences
(:class:`specsim.cost.shape.PassSums`). It is read as ``B`` equal sequences of ``c = R /
B`` cached tokens and ``n = T / B`` new positions. When the sums are those of such chains
(their pairs beyond the cache, ``S / B - n c``, are ``n (n + 1) / 2``) the pairs a local
layer drops are those the rule removes from a chain of positions ``c .. c + n - 1``:
``B (E(c + n) - E(c))`` with ``E(x)`` the pairs dropped below position ``x``,
``t (t + 1) / 2`` with ``t = max(x - w, 0)`` for a window (or ``top_k``),
``C (C q (q - 1) / 2 + q r)`` with ``x = q C + r`` for chunks. This is **exact** for a pass
of equal chains (a prefill of one prompt, a decode or chain verification step of equal
sequences, every pass of a grid of homogeneous passes) and, for chains of equal length but
different contexts, an upper bound for windows (the dropped pairs are convex in ``c``) and
the value at the mean context for chunks. Other sums (token trees, a prefill chunk riding
with decodes) are read as ``T`` queries each seeing ``S / T`` keys in the chunk of the
mean context: a window keeps ``min(S, w T)`` pairs (an upper bound, exact when every query
sees at least ``w`` keys or every one at most ``w``), chunks keep ``S - T C floor(c / C)``
(exact for equal sequences whose queries stay in one chunk), within ``[T, C T]``. A layer
below its window or first chunk costs exactly what a global one does.

The pass's cost (:func:`attention_time`) is the sum over layer groups of each group's
``max(compute, memory)``, the indexer a kernel of its own; its flops and bytes are given as
the equivalent pairs and cached tokens of the global layers, so that the roofline's totals
(:mod:`specsim.cost.roofline`) are unchanged in form. A card without ``[attention]`` never
enters this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.cards import ModelCard
from specsim.cost.formats import Formats
from specsim.cost.memory import footprint
from specsim.cost.shape import chain_pairs

__all__ = ["AttentionCosts", "attention_costs", "attention_time", "kv_bytes_held", "kv_held"]

_CHAIN_RTOL = 1e-9
"""Relative tolerance of the test that a pass's sums are those of equal chains."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionCosts:
    """A model's local or sparse layers on one device (module docstring).

    ``kind`` and ``size`` (the window, the chunk or ``top_k``, tokens); ``local_share``:
    the share of the layers that read at most ``size`` keys (1 for sparse attention);
    the indexer's seconds per pair and per cached index key over all layers
    (``index_compute_s``, ``index_memory_s``), its flops per pair and bytes per key over
    the main attention's (``index_pair_ratio``, ``index_byte_ratio``) and its bytes per
    key and layer (``index_kv_bytes``); all 0 without an indexer.
    """

    kind: str
    size: float
    local_share: float
    index_compute_s: float = 0.0
    index_memory_s: float = 0.0
    index_pair_ratio: float = 0.0
    index_byte_ratio: float = 0.0
    index_kv_bytes: float = 0.0


def attention_costs(
    model: ModelCard, *, peak: float, bandwidth: float, pair_flops: float, kv_bytes: float
) -> AttentionCosts | None:
    """The :class:`AttentionCosts` of ``model`` at the achieved ``peak`` and ``bandwidth``,
    its main attention's flops per pair and layer ``pair_flops`` and KV bytes per token and
    layer ``kv_bytes`` (one device); None for a card whose every layer is global."""
    kind = model.attention_spec
    if kind is None:
        return None
    L = model.layers
    if kind.windowed:
        share = kind.local_layers(L) / L
        return AttentionCosts(kind=kind.kind, size=float(kind.window), local_share=share)
    flops = 2.0 * kind.index_heads * (kind.index_head_dim + 1)
    nbytes = float(kind.index_bytes_per_token)
    return AttentionCosts(
        kind=kind.kind,
        size=float(kind.top_k),
        local_share=1.0,
        index_compute_s=L * flops / peak,
        index_memory_s=L * nbytes / bandwidth,
        index_pair_ratio=flops / pair_flops,
        index_byte_ratio=nbytes / kv_bytes,
        index_kv_bytes=nbytes,
    )


def _dropped(x: Any, ac: AttentionCosts) -> Any:
    """Pairs a local layer drops from a chain of the positions below ``x`` (module
    docstring: ``E(x)``)."""
    size = ac.size
    if ac.kind == "chunked":
        q = np.floor(x / size)
        return size * (size * q * (q - 1.0) / 2.0 + q * (x - q * size))
    t = np.maximum(x - size, 0.0)
    return chain_pairs(0.0, t)


def _local_sums(ac: AttentionCosts, *, T: Any, S: Any, cached: Any, B: Any) -> tuple[Any, Any]:
    """``(pairs, cached tokens)`` one local layer of the pass reads (module docstring), the
    cached tokens before any stack expands them."""
    size = ac.size
    with np.errstate(divide="ignore", invalid="ignore"):  # B > 0 always; T may be 0 nowhere
        c, n = cached / B, T / B
        own = S / B - n * c
        chain = np.abs(own - chain_pairs(0.0, n)) <= _CHAIN_RTOL * (S / B + 1.0)
    chained = S - B * (_dropped(c + n, ac) - _dropped(c, ac))
    if ac.kind == "chunked":
        start = size * np.floor(c / size)  # where the mean context's chunk begins
        mean = np.clip(S - T * start, T, size * T)
        return np.where(chain, chained, mean), cached - B * start
    pairs = np.where(chain, chained, np.minimum(S, size * T))
    if ac.kind == "sparse":  # each query gathers its own selection from the cache
        return pairs, T * np.minimum(c, size)
    return pairs, np.minimum(cached, (size - 1.0) * B)


def attention_time(
    co: Any, *, T: Any, S: Any, R: Any, cached: Any, batch: Any
) -> tuple[Any, Any, Any]:
    """``(seconds, equivalent pairs, equivalent cached tokens)`` of the attention of passes
    with sums ``T``, ``S`` and ``R`` (``R`` the cached tokens read as the stack counts them,
    ``cached`` the same before a batch-expanding stack multiplied them) over ``batch``
    sequences (None: one new token each) on ``co``, a roofline whose model has local or
    sparse layers (``co.attention``). The equivalent sums give the flops and bytes through
    the roofline's per-pair and per-cached-token coefficients."""
    ac = co.attention
    if ac is None:  # pragma: no cover - the roofline calls this only for such models
        raise ValueError("attention_time: the roofline's model has only global layers")
    B = T if batch is None else batch
    pairs, kept = _local_sums(ac, T=T, S=S, cached=cached, B=B)
    if ac.kind == "sparse":
        reads = kept  # per query: not multiplied by a batch expansion's re-reads
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            reads = np.where(cached > 0, R * (kept / cached), R)
    g, local = 1.0 - ac.local_share, ac.local_share
    new = T * co.attention_new_s
    seconds = local * np.maximum(
        pairs * co.attention_compute_s, reads * co.attention_cached_s + new
    )
    if g:
        seconds = seconds + g * np.maximum(
            S * co.attention_compute_s, R * co.attention_cached_s + new
        )
    S_eq, R_eq = g * S + local * pairs, g * R + local * reads
    if ac.index_compute_s:  # the lightning indexer: every pair, every cached index key
        keys = R + 2.0 * T  # cached keys read, new ones written and read back
        seconds = seconds + np.maximum(S * ac.index_compute_s, keys * ac.index_memory_s)
        S_eq = S_eq + S * ac.index_pair_ratio
        R_eq = R_eq + keys * ac.index_byte_ratio
    return _plain(seconds), _plain(S_eq), _plain(R_eq)


def _plain(x: Any) -> Any:
    """A float for a 0-d result (one pass), the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


def kv_held(co: Any, *, tokens: Any, batch: Any) -> Any:
    """KV bytes one device holds for ``batch`` sequences holding ``tokens`` in all (a sum):
    every layer's ``tokens``, but a local layer at most ``size`` tokens a sequence (a window,
    or the chunk an engine keeps whole), plus a sparse card's index keys. ``batch`` None (the
    sequences not known): no local layer is capped, an upper bound."""
    per_token = co.layers * co.kv_bytes
    ac = co.attention
    if ac is None:
        return tokens * per_token
    B = tokens if batch is None else batch
    held = (1.0 - ac.local_share) * tokens
    held = held + ac.local_share * (
        tokens if ac.kind == "sparse" else np.minimum(tokens, ac.size * B)
    )
    return held * per_token + tokens * co.layers * ac.index_kv_bytes


def kv_bytes_held(
    model: ModelCard, *, context: Any, tensor_parallel: float, formats: Formats
) -> Any:
    """KV bytes one device holds for one sequence of ``context`` tokens (numbers or arrays):
    :func:`specsim.cost.memory.footprint`'s bytes per token and layer over every layer's
    tokens, a local layer holding at most its window (sliding) or chunk, plus a sparse card's
    index keys; ``context * kv_bytes_per_token`` for a card whose every layer is global.

    >>> from specsim.cards import load_model
    >>> g = load_model("gemma-3-27b")
    >>> f = Formats.of("bfloat16")
    >>> per_token = footprint(g, tensor_parallel=1, formats=f).kv_bytes_per_token
    >>> bool(kv_bytes_held(g, context=512, tensor_parallel=1, formats=f) == 512 * per_token)
    True
    >>> round(float(kv_bytes_held(g, context=131072, tensor_parallel=1, formats=f)) / 2**30, 2)
    10.41
    """
    fp = footprint(model, tensor_parallel=tensor_parallel, formats=formats)
    kind = model.attention_spec
    if kind is None or not kind.windowed:  # sparse: every layer holds every latent and key
        return context * fp.kv_bytes_per_token
    L = model.layers
    local = kind.local_layers(L)
    held = (L - local) * context + local * np.minimum(context, kind.window)
    return _plain(held * fp.kv_bytes_per_token_layer)
