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

import copy
import inspect
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import torch
import transformers

from specsim.measure.presets import QUANT_FORMATS

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
        t5: dict[str, Any] = dict(
            vocab_size=v,
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
            **_special_ids(v),
        )
        return transformers.T5Config(**t5)
    if card.architecture != "decoder":
        raise ValueError(
            f"card {card.slug!r}: architecture {card.architecture!r} is neither "
            "'decoder' nor 'encoder-decoder'"
        )
    if not card.gated_mlp:
        if card.heads * card.head_dim != card.d_model or card.kv_heads != card.heads:
            raise ValueError(
                f"card {card.slug!r}: a GPT-style (ungated) model needs heads * head_dim == "
                f"d_model and kv_heads == heads, got {card.heads} * {card.head_dim} vs "
                f"{card.d_model} and kv_heads {card.kv_heads}"
            )
        return transformers.GPT2Config(
            vocab_size=v,
            n_positions=max(card.max_position, min_positions),
            n_embd=card.d_model,
            n_layer=card.layers,
            n_head=card.heads,
            n_inner=card.d_ff,
            activation_function=_GPT_ACTIVATIONS.get(card.activation or "", "gelu_new"),
            tie_word_embeddings=card.tied_embeddings,
            use_cache=True,
            **_special_ids(v),
        )
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


# Weight formats ----------------------------------------------------------------------------
INT4_GROUP_SIZES = (32, 64, 128, 256)
"""Group sizes torch's packed int4 kernels take (``_weight_int4pack_mm*``)."""


def int4_supported(device: str | torch.device = "cpu") -> str:
    """Empty if this torch build runs packed int4 matmuls on ``device`` (tried on a 32 x 64
    weight, not assumed; torch 2.13's CPU build does), else why not."""
    dev = torch.device(device)
    try:
        layer = _Int4Linear(torch.nn.Linear(64, 32, bias=False, device=dev), group_size=32)
        layer(torch.ones(1, 64, device=dev))
    except (AttributeError, RuntimeError, NotImplementedError) as exc:
        return f"torch {torch.__version__} cannot run packed int4 on {dev.type}: {exc}"
    return ""


class _Int4Linear(torch.nn.Module):
    """A linear layer with int4 weights in groups (one scale and zero point per group of
    ``group_size`` inputs, gpt-fast's ``WeightOnlyInt4Linear`` layout), multiplied by torch's
    packed int4 kernel: the weight is dequantized inside the kernel, the activations stay in
    their dtype. Asymmetric rounding: ``w = (q - 8) * scale + zero``, ``q`` in 0..15."""

    def __init__(self, linear: torch.nn.Linear, *, group_size: int) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        n, k = w.shape
        if k % group_size:
            raise ValueError(f"group_size: {group_size} does not divide in_features {k}")
        groups = w.reshape(n, k // group_size, group_size)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = (high - low).clamp(min=1e-6) / 15
        q = ((groups - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        cpu = w.device.type == "cpu"
        dtype = linear.weight.dtype if not cpu else torch.float32
        self.on_cpu, self.group_size, self.out_features = cpu, group_size, n
        sz = torch.stack([scale.reshape(n, -1).t(), (low + 8 * scale).reshape(n, -1).t()], -1)
        self.scales_and_zeros = sz.to(dtype).contiguous()
        if cpu:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        else:  # CUDA: uint8 nibbles, the kernel's inner tiling 8 (untested: no GPU here)
            nib = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
            packed = torch.ops.aten._convert_weight_to_int4pack(nib, 8)
        self.packed = packed
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        op = (
            torch.ops.aten._weight_int4pack_mm_for_cpu
            if self.on_cpu
            else torch.ops.aten._weight_int4pack_mm
        )
        y = op(
            flat.to(self.scales_and_zeros.dtype),
            self.packed,
            self.group_size,
            self.scales_and_zeros,
        ).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


class _Int8Linear(torch.nn.Module):
    """Weight-only int8 with a scale per output channel (gpt-fast's ``WeightOnlyInt8Linear``),
    for the GPU, where torch's dynamic quantization (CPU kernels only) does not run."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127
        self.weight = (w / scale[:, None]).round().to(torch.int8)
        self.scales = scale.to(linear.weight.dtype)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight.to(x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias


def _linearized(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with GPT-2's ``Conv1D`` (``x @ W + b``, W of shape (in, out)) replaced by the
    equal ``nn.Linear``, so that quantization finds them."""
    from transformers.pytorch_utils import Conv1D

    for name, child in list(model.named_children()):
        if isinstance(child, Conv1D):
            w = child.weight.detach()
            lin = torch.nn.Linear(w.shape[0], w.shape[1], device=w.device, dtype=w.dtype)
            with torch.no_grad():
                lin.weight.copy_(w.t())
                lin.bias.copy_(child.bias.detach())
            setattr(model, name, lin)
        else:
            _linearized(child)
    return model


def _replace_linears(model: torch.nn.Module, make: Any) -> None:
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, make(child))
        else:
            _replace_linears(child, make)


def quantize_weights(model: Any, weights: str, *, group_size: int = 128) -> tuple[Any, str]:
    """A copy of ``model`` whose linear layers hold ``weights`` (:data:`QUANT_FORMATS`), and
    the method used; ``model`` itself when the format is the model's own dtype.

    - ``int8`` of a float32 model on the CPU: :func:`torch.ao.quantization.quantize_dynamic`
      (int8 weights per tensor, activations quantized per pass, int8 GEMMs): ``"dynamic"``;
      elsewhere weight-only int8 (:class:`_Int8Linear`): ``"weight-only"``.
    - ``int4``: weight-only, groups of ``group_size`` (:class:`_Int4Linear`, torch's packed
      int4 kernels): ``"weight-only"``; a ValueError where the build lacks them
      (:func:`int4_supported`).

    Every ``nn.Linear`` is converted, the LM head included (as gpt-fast's quantize.py
    does; for int4 only those with a multiple of 16 outputs, as the kernel needs); GPT-2's
    ``Conv1D`` projections are first turned into ``nn.Linear``.
    """
    if weights not in QUANT_FORMATS:
        raise ValueError(f"weights: unknown format {weights!r}; expected one of {QUANT_FORMATS}")
    dtype = next(model.parameters()).dtype
    own = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if weights in own:
        if own[weights] != dtype:
            raise ValueError(f"weights: {weights!r} differs from the model's dtype {dtype}")
        return model, "none"
    device = next(model.parameters()).device
    if weights == "int4":
        if group_size not in INT4_GROUP_SIZES:
            raise ValueError(f"group_size: int4 takes {INT4_GROUP_SIZES}, got {group_size!r}")
        why = int4_supported(device)
        if why:
            raise ValueError(f"weights: int4: {why}")
    out = _linearized(copy.deepcopy(model))
    if weights == "int4":  # the packed kernel needs out_features divisible by 16
        _replace_linears(
            out,
            lambda lin: (
                _Int4Linear(lin, group_size=group_size) if lin.out_features % 16 == 0 else lin
            ),
        )
        return out.eval(), "weight-only"
    if device.type != "cpu" or dtype != torch.float32:  # dynamic int8: float32 CPU kernels
        _replace_linears(out, _Int8Linear)
        return out.eval(), "weight-only"
    with warnings.catch_warnings():
        # torch.ao.quantization warns that it is deprecated; it still runs in torch 2.13,
        # and it is the dynamic int8 path this measurement asks for.
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(out, {torch.nn.Linear}, dtype=torch.qint8)
    return q.eval(), "dynamic"
