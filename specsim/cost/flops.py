"""Hardware-free and ridge quantities of a pass: its flops, and the tokens at the ridge point.

Two flops per weight a token reads (layers, final norm and LM head: the input
embedding is a look-up, not a product), so a 6.74B-parameter Llama 2 7B with its
0.13B-parameter embedding costs 2 x 6.61 GFLOP per token at context 0:

>>> from specsim.cards import load_model
>>> round(pass_flops(load_model("llama-2-7b"), context=0) / 1e9, 1)
13.2
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, profile_of_card
from specsim.cost.checks import check_model, check_runtime, int_array
from specsim.cost.formats import Formats
from specsim.cost.model import DEFAULT_CONTEXT, ModelLike, RuntimeLike, encoder_tokens
from specsim.cost.results import FloatArray
from specsim.cost.roofline import attention_terms
from specsim.cost.shape import chain_sums

__all__ = ["pass_flops", "ridge_tokens"]


def pass_flops(
    model: ModelLike,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    new_tokens: ArrayLike = 1,
    encoder_length: int | None = None,
) -> FloatArray | float:
    """Floating-point operations of homogeneous passes (hardware-independent), broadcasting."""
    model = check_model(model)
    B = int_array("batch", batch, 1)
    ctx = int_array("context", context, 0)
    new = int_array("new_tokens", new_tokens, 1)
    T, S, _ = chain_sums(B, B * ctx, new, encoder_tokens(model, encoder_length))
    # 2 flops per weight read per token (decode_params: layers, final norm, LM head; for an
    # MoE model the top-k routed experts), plus attention's flops per (query, key) pair and
    # layer (4 * head_dim per head; MLA's absorbed form), as in specsim.cost.roofline.
    per_pair = attention_terms(model, 1.0)[0]
    out = T * (2.0 * model.decode_params) + S * (model.layers * per_pair)
    return float(out) if np.ndim(out) == 0 else np.asarray(out)


def ridge_tokens(hardware: HardwareCard, dtype: str, *, runtime: RuntimeLike = None) -> float:
    """Tokens per pass at which the weight GEMMs turn compute-bound.

    Reading ``W`` weights costs ``W * bytes / (bandwidth * memory_efficiency)``;
    multiplying them by ``n`` tokens costs ``2 W n / (peak * compute_efficiency)``;
    they are equal at ``n* = bytes * peak * ce / (2 * bandwidth * me)``, the
    accelerator's ridge point (Williams et al. 2009) in tokens; the efficiencies are the
    ``runtime`` profile's (None: the card's own).
    """
    rt = check_runtime(runtime, hardware) or profile_of_card(hardware)
    ridge = (hardware.peak(dtype) * rt.compute_efficiency) / (
        hardware.mem_bandwidth * rt.memory_efficiency
    )
    return Formats.of(dtype).weights * ridge / 2.0
