"""What a model keeps resident on each tensor-parallel device: weights and KV cache.

Both the cost model (whether a pass fits, :mod:`specsim.cost.roofline`) and
the serving simulator's admission (:meth:`specsim.sim.CardCost.kv_bytes_per_token`)
read this one function, so the two cannot disagree about what fits.

Tensor parallelism (Shoeybi et al., "Megatron-LM", 2019) splits the weights
and the attention heads over the devices. Key/value heads are split too, but
never below one per device: with more devices than KV heads (grouped-query
attention, Ainslie et al., EMNLP 2023), each device holds a replica of the
head its query heads read, as real tensor-parallel runtimes do.

Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Section 2.1.2; a model card's
``[mla]`` table) caches one latent of ``kv_lora_rank`` plus one rotary key of
``qk_rope_head_dim`` per token and layer, shared by all heads: every tensor-parallel
device needs all of it, so it is held whole on each (no split by heads). Routed experts
count with the other weights (``shape_params``): expert parallelism splits them over the
same devices (:mod:`specsim.cost.moe`), so a device holds ``shape_params / tp`` either way.

>>> from specsim.cards import load_model
>>> fp = footprint(load_model("llama-2-70b"), tensor_parallel=16, formats=Formats.of("float16"))
>>> fp.kv_bytes_per_token  # 8 KV heads over 16 devices: one replica each
40960.0
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.cards import ModelCard
from specsim.cost.formats import Formats

__all__ = ["Footprint", "footprint", "kv_heads_per_device"]


def kv_heads_per_device(model: ModelCard, tensor_parallel: float) -> float:
    """KV heads each device holds: ``kv_heads / tp``, but at least one (replicated)."""
    return max(model.kv_heads / tensor_parallel, 1.0)


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes one device holds for a model.

    ``weights_bytes``: all its weights (the shape's parameter count) over the
    devices; ``kv_bytes_per_token_layer``: the self-attention keys and values
    of one token in one decoder layer; ``kv_bytes_per_token``: the same over
    all decoder layers (what one token of one sequence costs in KV cache), with a
    sparse-attention card's indexer keys (held whole on each device, as the latent).
    Local (sliding-window, chunked) layers hold at most their window of tokens: a
    sequence's bytes at a given context are :func:`specsim.cost.attention.kv_bytes_held`.
    """

    weights_bytes: float
    kv_bytes_per_token_layer: float
    kv_bytes_per_token: float


def footprint(model: ModelCard, *, tensor_parallel: float, formats: Formats) -> Footprint:
    """Weights and KV cache per device of ``model`` on ``tensor_parallel`` devices."""
    mla = model.mla_spec
    if mla is not None:
        per_layer = float(mla.kv_width) * formats.kv
    else:
        per_layer = 2.0 * model.head_dim * kv_heads_per_device(model, tensor_parallel) * formats.kv
    weights = model.shape_params / tensor_parallel * formats.weights
    moe = model.moe_spec
    if formats.expert_weights is not None and moe is not None:  # experts in their own format
        routed = model.moe_layers * moe.experts * model.routed_expert_params / tensor_parallel
        weights += routed * (formats.expert_weights - formats.weights)
    kind = model.attention_spec  # sparse attention: its indexer's keys, every layer, every token
    index = 0.0 if kind is None or kind.windowed else float(kind.index_bytes_per_token)
    return Footprint(
        weights_bytes=weights,
        kv_bytes_per_token_layer=per_layer,
        kv_bytes_per_token=model.layers * (per_layer + index),
    )
