"""Language-model cards: a model's shape, its stated size and default dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specsim.cards.attention import AttentionKind
from specsim.cards.checks import (
    DTYPE_BYTES,
    card_label,
    check_bool,
    check_float,
    check_int,
    check_sources,
    check_str,
)
from specsim.cards.experts import MLA, MoE

__all__ = ["ModelCard"]

ARCHITECTURES = ("decoder", "encoder-decoder")
NORMS = ("rmsnorm", "layernorm")


@dataclass(frozen=True, kw_only=True)
class ModelCard:
    """A language model's shape, stated size and default dtype.

    ``layers`` counts decoder layers; ``encoder_layers`` is 0 for decoder-only
    models. ``params`` is the total parameter count as the source states it;
    ``__post_init__`` checks it against :attr:`shape_params` within
    ``params_tolerance`` (relative). Position tables (learned absolute
    positions, T5's relative-position buckets) and layer biases other than the
    q/k/v biases of ``qkv_bias`` models are not counted: they are below 0.5% of
    every card here.

    ``moe`` (a ``[moe]`` table, :class:`~specsim.cards.experts.MoE`) makes the
    feed-forward layers after the first ``moe.dense_layers`` routed experts;
    ``mla`` (an ``[mla]`` table, :class:`~specsim.cards.experts.MLA`) makes the
    attention DeepSeek's multi-head latent attention. Both are None for dense cards,
    whose counts they leave unchanged.
    """

    slug: str
    name: str
    family: str
    architecture: str
    layers: int
    encoder_layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int
    gated_mlp: bool
    vocab: int
    params: int
    tied_embeddings: bool
    dtype: str
    max_position: int
    norm: str
    sources: dict[str, str] | list[str] = field(hash=False)
    qkv_bias: bool = False
    params_tolerance: float = 0.03
    hf_repo: str | None = None
    activation: str | None = None
    notes: str = ""
    moe: Mapping[str, Any] | None = field(default=None, hash=False)
    mla: Mapping[str, Any] | None = field(default=None, hash=False)
    attention: Mapping[str, Any] | None = field(default=None, hash=False)
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = card_label(self.source_path, "model", self.slug)
        for name in ("slug", "name", "family"):
            check_str(where, name, getattr(self, name))
        check_str(where, "architecture", self.architecture, ARCHITECTURES)
        check_str(where, "norm", self.norm, NORMS)
        check_str(where, "dtype", self.dtype, tuple(DTYPE_BYTES))
        for name in ("layers", "d_model", "heads", "kv_heads", "head_dim", "d_ff", "vocab"):
            check_int(where, name, getattr(self, name), minimum=1)
        for name in ("params", "max_position"):
            check_int(where, name, getattr(self, name), minimum=1)
        check_int(where, "encoder_layers", self.encoder_layers, minimum=0)
        for name in ("gated_mlp", "tied_embeddings", "qkv_bias"):
            check_bool(where, name, getattr(self, name))
        check_float(where, "params_tolerance", self.params_tolerance, strict=True)
        check_sources(where, self.sources)
        if (self.architecture == "decoder") != (self.encoder_layers == 0):
            raise ValueError(
                f"{where}: field 'encoder_layers' must be 0 exactly for architecture "
                f"'decoder', got {self.encoder_layers} with {self.architecture!r}"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"{where}: field 'kv_heads' must divide heads ({self.heads}), got {self.kv_heads}"
            )
        self._check_experts(where)
        shape = self.shape_params
        if abs(shape - self.params) > self.params_tolerance * self.params:
            raise ValueError(
                f"{where}: field 'params' = {self.params:,} disagrees with the count from the "
                f"shape, {shape:,} ({(shape / self.params - 1) * 100:+.1f}%, tolerance "
                f"{self.params_tolerance:.0%}); check layers, widths, vocab, gated_mlp and "
                "tied_embeddings"
            )

    def _check_experts(self, where: str) -> None:
        moe = None if self.moe is None else MoE.from_table(self.moe, where=where)
        mla = None if self.mla is None else MLA.from_table(self.mla, where=where)
        # Parsed once: the cost model reads them on every roofline it builds.
        object.__setattr__(self, "_moe", moe)
        object.__setattr__(self, "_mla", mla)
        if moe is not None and moe.dense_layers >= self.layers:
            raise ValueError(
                f"{where}: field 'moe.dense_layers' = {moe.dense_layers} leaves no MoE layer "
                f"among the {self.layers} layers"
            )
        if (moe is not None or mla is not None) and self.architecture != "decoder":
            raise ValueError(f"{where}: [moe] and [mla] are for decoder-only cards")
        kind = (
            None
            if self.attention is None
            else AttentionKind.from_table(self.attention, where=where)
        )
        object.__setattr__(self, "_attention", kind)
        if kind is not None and self.architecture != "decoder":
            raise ValueError(f"{where}: [attention] is for decoder-only cards")
        if kind is not None and not kind.windowed and (mla is None or not mla.q_lora_rank):
            raise ValueError(
                f"{where}: [attention] kind 'sparse' (DeepSeek's lightning indexer reads the "
                "query latent) needs an [mla] table with q_lora_rank > 0"
            )

    # Experts and latent attention ---------------------------------------------------------
    @property
    def moe_spec(self) -> MoE | None:
        """The card's routed experts (:class:`~specsim.cards.experts.MoE`), None if dense."""
        spec: MoE | None = self.__dict__.get("_moe")
        return spec

    @property
    def mla_spec(self) -> MLA | None:
        """The card's latent attention (:class:`~specsim.cards.experts.MLA`), None if none."""
        spec: MLA | None = self.__dict__.get("_mla")
        return spec

    @property
    def attention_spec(self) -> AttentionKind | None:
        """The card's attention kind (:class:`~specsim.cards.attention.AttentionKind`), None
        when every layer is global."""
        spec: AttentionKind | None = self.__dict__.get("_attention")
        return spec

    @property
    def moe_layers(self) -> int:
        """Decoder layers whose feed-forward is routed experts (0 for a dense card)."""
        moe = self.moe_spec
        return 0 if moe is None else self.layers - moe.dense_layers

    @property
    def routed_expert_params(self) -> int:
        """Weights of one routed expert of one MoE layer (0 for a dense card)."""
        moe = self.moe_spec
        return 0 if moe is None else moe.routed_expert_params(self.d_model, gated=self.gated_mlp)

    @property
    def fixed_layer_params(self) -> int:
        """Weights of all decoder layers that every token uses: attention, norms, dense MLPs,
        and in MoE layers the router and the shared experts (not the routed experts)."""
        moe = self.moe_spec
        if moe is None:
            return self.layers * self.decode_layer_params
        attn = self._self_attention_params + 2 * self._norm_params
        shared = moe.shared_experts * self.routed_expert_params
        dense = moe.dense_layers * (attn + self._mlp_params)
        return dense + self.moe_layers * (attn + moe.router_params(self.d_model) + shared)

    # Shapes -----------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection, ``heads * head_dim``."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection, ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def _norm_params(self) -> int:
        return self.d_model * (2 if self.norm == "layernorm" else 1)

    @property
    def _self_attention_params(self) -> int:
        mla, kind = self.mla_spec, self.attention_spec
        if mla is not None:
            index = 0 if kind is None else kind.indexer_params(self.d_model, mla.q_lora_rank)
            return mla.attention_params(self.d_model, self.heads) + index
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return 2 * self.d_model * self.q_dim + 2 * self.d_model * self.kv_dim + bias

    @property
    def _mlp_params(self) -> int:
        return (3 if self.gated_mlp else 2) * self.d_model * self.d_ff

    @property
    def decode_layer_params(self) -> int:
        """Weights one decoder layer reads in a decode pass.

        Self-attention, MLP and norms; for encoder-decoder models also the
        cross-attention query and output projections. The cross-attention key and
        value projections of the encoder output run once, at prefill, and their
        result is cached, so a decode pass does not read them (it reads the cached
        cross keys and values instead; see :mod:`specsim.cost`).
        """
        n = self._self_attention_params + self._mlp_params + 2 * self._norm_params
        if self.architecture == "encoder-decoder":
            n += 2 * self.d_model * self.q_dim + self._norm_params
        return n

    @property
    def shape_params(self) -> int:
        """Total parameter count computed from the shape (all weights resident in memory)."""
        embed = self.vocab * self.d_model * (1 if self.tied_embeddings else 2)
        moe = self.moe_spec
        if moe is not None:
            routed = self.moe_layers * moe.experts * self.routed_expert_params
            return embed + self.fixed_layer_params + routed + self._norm_params
        dec = self.layers * self.decode_layer_params + self._norm_params
        if self.architecture == "encoder-decoder":
            # Cross-attention key/value projections, skipped by decode_layer_params.
            dec += self.layers * 2 * self.d_model * self.kv_dim
            enc_layer = self._self_attention_params + self._mlp_params + 2 * self._norm_params
            dec += self.encoder_layers * enc_layer + self._norm_params
        return embed + dec

    @property
    def decode_params(self) -> int:
        """Parameters a decode pass reads: decoder layers, final norm and the LM head.

        For T5 this is the decoder's weights (with the cross-attention query and
        output projections) plus the untied LM head; the encoder runs once at
        prefill. The input embedding table is not counted when untied: a pass
        gathers only one row per token. For an MoE card, one token's: ``top_k`` routed
        experts per MoE layer (the model's "activated" parameters, LM head included).
        """
        moe = self.moe_spec
        if moe is not None:
            routed = self.moe_layers * moe.top_k * self.routed_expert_params
            return self.fixed_layer_params + routed + self._norm_params + self.vocab * self.d_model
        return (
            self.layers * self.decode_layer_params + self._norm_params + self.vocab * self.d_model
        )

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """Bytes of self-attention key/value cache per token over all decoder layers; for
        latent attention the latent and the rotary key (:attr:`MLA.kv_width`), and under
        sparse attention the indexer's keys (``index_bytes_per_token`` per layer). Local
        (windowed, chunked) layers are counted as global: the bytes of a token every layer
        still holds (:func:`specsim.cost.attention.kv_bytes_held` caps them by context)."""
        kind = self.attention_spec
        index = 0.0 if kind is None or kind.windowed else float(kind.index_bytes_per_token)
        if self.mla_spec is not None:
            return self.layers * (self.mla_spec.kv_width * bytes_per_element + index)
        return self.layers * 2 * self.kv_dim * bytes_per_element
