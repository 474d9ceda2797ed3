"""Attention kinds of a model card: sliding windows, chunks, DeepSeek's sparse attention.

A model card's optional ``[attention]`` table (:class:`AttentionKind`) says that some or
all of its decoder layers do not attend to the whole context; without it every layer is
global (causal over every earlier token), as before. Three kinds:

* ``kind = "sliding-window"``: a local layer's query at position ``p`` attends to the
  ``window`` positions ``p - window + 1 .. p`` (Gemma 3: 1024; the mask of
  ``google-deepmind/gemma`` ``gemma/gm/nn/_modules.py``, ``cache_positions > positions -
  sliding_window_size``), and holds only those keys and values;
* ``kind = "chunked"``: a local layer's query attends to the positions of its own chunk of
  ``window`` tokens, ``window * (p // window) .. p`` (Llama 4's iRoPE local layers:
  ``create_chunked_attention_mask`` in ``meta-llama/llama-models``
  ``models/llama4/model.py``), and holds only the current chunk's keys and values;
* ``kind = "sparse"``: DeepSeek Sparse Attention (DeepSeek-V3.2): in every layer a
  lightning indexer of ``index_heads`` heads of ``index_head_dim`` scores every earlier
  token (its own small keys, ``index_bytes_per_token`` per token and layer, cached beside
  the latent), and the main attention reads only the ``top_k`` best of them.

``global_every`` (windowed and chunked kinds): layer ``i`` (from 0) is global when ``(i + 1)
% global_every == 0``, local otherwise: Gemma 3's pattern of five local layers and one
global (``GEMMA3_ATTENTION_PATTERN``, 6) and Llama 4's NoPE layers every fourth
(``nope_layer_interval = 4``); omitted, every layer is local. The cost of these layers is
:mod:`specsim.cost.attention`.

>>> a = AttentionKind.from_table(
...     {"kind": "sliding-window", "window": 1024, "global_every": 6}, where="x.toml")
>>> a.local_layers(62), a.global_layers(62)
(52, 10)
>>> AttentionKind.from_table({"kind": "chunked"}, where="x.toml")
Traceback (most recent call last):
...
ValueError: x.toml: missing key(s) ['window'] in [attention] (kind 'chunked')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from specsim.cards.checks import check_int, check_str

__all__ = ["ATTENTION_KINDS", "AttentionKind"]

ATTENTION_KINDS = ("sliding-window", "chunked", "sparse")
"""The kinds of an ``[attention]`` table (module docstring)."""

_NEEDS = {
    "sliding-window": ("window",),
    "chunked": ("window",),
    "sparse": ("top_k", "index_heads", "index_head_dim", "index_bytes_per_token"),
}
_OPTIONAL = {"sliding-window": ("global_every",), "chunked": ("global_every",), "sparse": ()}


@dataclass(frozen=True, kw_only=True)
class AttentionKind:
    """The ``[attention]`` table of a model card (module docstring); sizes in tokens."""

    kind: str
    window: int = 0
    global_every: int = 0
    top_k: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    index_bytes_per_token: int = 0

    @classmethod
    def from_table(cls, table: object, *, where: str) -> AttentionKind:
        """The ``[attention]`` table of the card ``where``, validated; errors name the key."""
        if not isinstance(table, Mapping):
            raise TypeError(f"{where}: field 'attention' must be a table, got {table!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {unknown} in [attention]; known keys: {sorted(known)}"
            )
        check_str(where, "attention.kind", table.get("kind"), ATTENTION_KINDS)
        kind = str(table["kind"])
        missing = sorted(set(_NEEDS[kind]) - set(table))
        if missing:
            raise ValueError(f"{where}: missing key(s) {missing} in [attention] (kind {kind!r})")
        allowed = {"kind", *_NEEDS[kind], *_OPTIONAL[kind]}
        foreign = sorted(set(table) - allowed)
        if foreign:
            raise ValueError(
                f"{where}: key(s) {foreign} in [attention] do not apply to kind {kind!r} "
                f"(it takes {sorted(allowed - {'kind'})})"
            )
        for key in (*_NEEDS[kind], *_OPTIONAL[kind]):
            if key in table:  # a global layer every 1 layer would be no local layer at all
                low = 2 if key == "global_every" else 1
                check_int(where, f"attention.{key}", table[key], minimum=low)
        return cls(**table)

    @property
    def windowed(self) -> bool:
        """A sliding-window or chunked kind: local layers with at most ``window`` keys."""
        return self.kind != "sparse"

    def global_layers(self, layers: int) -> int:
        """Layers of the ``layers`` that attend to the whole context (0 for ``sparse``: its
        every layer selects ``top_k`` keys)."""
        if not self.windowed or not self.global_every:
            return 0
        return layers // self.global_every

    def local_layers(self, layers: int) -> int:
        """Layers of the ``layers`` that read at most ``window`` keys (all of a sparse
        card's: each reads at most ``top_k``)."""
        return layers - self.global_layers(layers)

    def indexer_params(self, d_model: int, q_lora_rank: int) -> int:
        """Weights of one layer's lightning indexer (DeepSeek-V3.2-Exp ``inference/model.py``,
        class ``Indexer``): the query up-projection from the query latent (``wq_b``,
        ``q_lora_rank x index_heads * index_head_dim``), the key projection (``wk``,
        ``d_model x index_head_dim``) and its LayerNorm (weight and bias), and the per-head
        weights (``weights_proj``, ``d_model x index_heads``); 0 for the windowed kinds."""
        if self.windowed:
            return 0
        h, d = self.index_heads, self.index_head_dim
        return q_lora_rank * h * d + d_model * d + 2 * d + d_model * h
