"""Real transformer models with random weights, built from the shapes in model cards.

A card gives the architecture (layers, widths, heads, vocabulary...); a Hugging
Face model class of the same shape is built with random weights, never
downloaded: time and memory depend on shapes and kernels, not on what the
weights learned. The mapping:

- decoder cards with a gated MLP (SwiGLU, RMSNorm: Llama, Mistral...) become
  ``LlamaForCausalLM`` (``Qwen2ForCausalLM`` when the family is Qwen, for its
  biased q/k/v projections; also any card with ``qkv_bias``);
- decoder cards without a gated MLP (GPT-style) become ``GPT2LMHeadModel``
  (learned positions, LayerNorm, GELU MLP of width ``d_ff``, untied LM head when
  the card says so);
- encoder-decoder cards become ``T5ForConditionalGeneration`` (relative
  position buckets; gated-GELU MLP when the card says gated, else ReLU).
  transformers 5 always ties T5's LM head to its embedding, so an untied card
  (T5 v1.1) is built with one vocabulary matrix fewer: the same work per pass
  (a pass reads the LM head once either way) and slightly less memory.

Weights are drawn from a :class:`torch.Generator` seeded by an integer taken
from the caller's :class:`numpy.random.Generator`; torch's global random state
is saved and restored around construction (:func:`torch.random.fork_rng`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import torch
import transformers

# The weight formats live in specsim.measure.quantize; importable from here too.
from specsim.measure.quantize import QUANT_FORMATS, int4_supported, quantize_weights

__all__ = [
    "CardShape",
    "DTYPES",
    "torch_dtype",
    "hf_config",
    "build_model",
    "resolve_device",
    "synchronize",
    "cache_keyword",
    "QUANT_FORMATS",
    "int4_supported",
    "quantize_weights",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class CardShape(Protocol):
    """The fields of :class:`specsim.cards.ModelCard` this module reads (read-only)."""

    @property
    def slug(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def architecture(self) -> str: ...
    @property
    def layers(self) -> int: ...
    @property
    def encoder_layers(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def gated_mlp(self) -> bool: ...
    @property
    def vocab(self) -> int: ...
    @property
    def tied_embeddings(self) -> bool: ...
    @property
    def max_position(self) -> int: ...
    @property
    def norm(self) -> str: ...
    @property
    def qkv_bias(self) -> bool: ...
    @property
    def activation(self) -> str | None: ...


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a name in :data:`DTYPES`, or a ValueError naming it."""
    if name not in DTYPES:
        raise ValueError(f"dtype: {name!r} is not one of {sorted(DTYPES)}")
    return DTYPES[name]


def resolve_device(device: str) -> torch.device:
    """``cpu`` or ``cuda`` (``cuda:N``), checked against what this machine has."""
    if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"device: expected 'cpu' or 'cuda[:N]', got {device!r}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} requested but torch sees no CUDA device")
    return dev


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU, where calls block)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _special_ids(vocab: int) -> dict[str, Any]:
    # Ids 0-2 as in Llama's tokenizer. Generation never stops at EOS in the
    # harness (random models would emit it at random), so eos is left unset.
    return {"bos_token_id": 1 % vocab, "eos_token_id": None, "pad_token_id": 0}


def hf_config(
    card: CardShape, *, vocab: int | None = None, min_positions: int = 0
) -> transformers.PretrainedConfig:
    """A transformers config with the card's shapes.

    ``vocab`` overrides the card's vocabulary; ``min_positions`` raises the
    length of a learned position table (GPT-style) when the card's
    ``max_position`` is shorter than a measurement needs. Neither changes the
    per-token work of a pass beyond the LM head's width.
    """
    v = card.vocab if vocab is None else int(vocab)
    if v < 3:
        raise ValueError(f"vocab: need at least 3 tokens, got {v} for card {card.slug!r}")
    if card.architecture == "encoder-decoder":
        return _t5_config(card, vocab=v)
    if card.architecture != "decoder":
        raise ValueError(
            f"card {card.slug!r}: architecture {card.architecture!r} is neither "
            "'decoder' nor 'encoder-decoder'"
        )
    if not card.gated_mlp:
        return _gpt2_config(card, vocab=v, min_positions=min_positions)
    common: dict[str, Any] = dict(
        vocab_size=v,
        hidden_size=card.d_model,
        intermediate_size=card.d_ff,
        num_hidden_layers=card.layers,
        num_attention_heads=card.heads,
        num_key_value_heads=card.kv_heads,
        max_position_embeddings=max(card.max_position, min_positions),
        tie_word_embeddings=card.tied_embeddings,
        use_cache=True,
        **_special_ids(v),
    )
    if "qwen" in card.family.lower() or card.qkv_bias:
        if card.heads * card.head_dim != card.d_model:
            raise ValueError(
                f"card {card.slug!r}: Qwen2 needs heads * head_dim == d_model, got "
                f"{card.heads} * {card.head_dim} vs {card.d_model}"
            )
        return transformers.Qwen2Config(**common)
    return transformers.LlamaConfig(head_dim=card.head_dim, **common)


def _t5_config(card: CardShape, *, vocab: int) -> transformers.T5Config:
    """An encoder-decoder card as a T5 config."""
    t5: dict[str, Any] = dict(
        vocab_size=vocab,
        d_model=card.d_model,
        d_kv=card.head_dim,
        d_ff=card.d_ff,
        num_layers=card.encoder_layers,
        num_decoder_layers=card.layers,
        num_heads=card.heads,
        feed_forward_proj="gated-gelu" if card.gated_mlp else "relu",
        tie_word_embeddings=card.tied_embeddings,
        decoder_start_token_id=0,
        use_cache=True,
        **_special_ids(vocab),
    )
    return transformers.T5Config(**t5)


def _gpt2_config(card: CardShape, *, vocab: int, min_positions: int) -> transformers.GPT2Config:
    """An ungated decoder card as a GPT-2 config (learned positions, no grouped KV)."""
    if card.heads * card.head_dim != card.d_model or card.kv_heads != card.heads:
        raise ValueError(
            f"card {card.slug!r}: a GPT-style (ungated) model needs heads * head_dim == "
            f"d_model and kv_heads == heads, got {card.heads} * {card.head_dim} vs "
            f"{card.d_model} and kv_heads {card.kv_heads}"
        )
    return transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=max(card.max_position, min_positions),
        n_embd=card.d_model,
        n_layer=card.layers,
        n_head=card.heads,
        n_inner=card.d_ff,
        activation_function=_GPT_ACTIVATIONS.get(card.activation or "", "gelu_new"),
        tie_word_embeddings=card.tied_embeddings,
        use_cache=True,
        **_special_ids(vocab),
    )


_GPT_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "relu": "relu"}

_CLASSES = {
    "t5": transformers.T5ForConditionalGeneration,
    "gpt2": transformers.GPT2LMHeadModel,
    "qwen2": transformers.Qwen2ForCausalLM,
    "llama": transformers.LlamaForCausalLM,
}


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    # Build directly in the target dtype: a 7B model in float32 first would
    # need twice the memory and a conversion pass.
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(
    card: CardShape,
    *,
    rng: np.random.Generator,
    dtype: str = "float32",
    device: str = "cpu",
    vocab: int | None = None,
    min_positions: int = 0,
) -> transformers.PreTrainedModel:
    """Build the card's model with random weights, in ``dtype`` on ``device``, in eval mode.

    The weights are Hugging Face's own initialisation (normal, std
    ``initializer_range``) drawn after seeding torch with
    ``rng.integers(2**63 - 1)`` inside :func:`torch.random.fork_rng`, so the
    same generator state gives the same weights and torch's global state is
    left as it was. ``vocab`` replaces the card's vocabulary (a draft must
    share its target's); ``min_positions`` as in :func:`hf_config`. Parameters
    never require gradients.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    tdtype = torch_dtype(dtype)
    dev = resolve_device(device)
    config = hf_config(card, vocab=vocab, min_positions=min_positions)
    cls = _CLASSES[config.model_type]
    seed = int(rng.integers(0, 2**63 - 1))
    devices = [dev] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), _default_dtype(tdtype), dev:
        torch.manual_seed(seed)
        model = cls(config)
    model.eval()
    model.requires_grad_(False)
    return model


def cache_keyword(model: torch.nn.Module) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers 5) or ``past_key_values``."""
    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise TypeError(f"{type(model).__name__}.forward takes no KV cache argument")
