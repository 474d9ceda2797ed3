"""Multi-token-prediction (MTP) modules: one target block reused as a draft (DeepSeek-V3).

DeepSeek-V3's MTP module (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437,
Section 2.2, Figure 3) is one transformer block of the target's own kind (MLA attention
and, DeepSeek-V3's MTP layer being past its dense layers, a routed-expert FFN) after a
projection ``M`` of the concatenation of the target's last hidden state and the next
token's embedding (``2d -> d``, the ``eh_proj`` of the released weights) and two RMSNorms;
its output goes through the target's final norm and LM head ("shared embedding and output
head"). For a draft deeper than one token the engines reuse the one module
autoregressively (vLLM's ``deepseek_mtp`` with ``num_speculative_tokens > 1``), so every
depth costs the same step. A head card of ``kind = "mtp"`` (:class:`specsim.cards.HeadCard`)
says which target the module was trained for and its acceptance by depth;
:class:`specsim.proposers.Heads` prices it here.

Cost of one step over the depth-``d`` frontier (``w`` new positions per sequence after
``c + d - 1`` cached tokens): one pass of the target's deployment (its hardware, stack,
formats, tensor and expert parallelism) over :func:`mtp_block_card`, the target's shape
with one decoder layer (an MoE layer when the target has experts, so the distinct experts
its tokens touch and the EP all-to-all are priced as in any MoE pass) and the LM head, with
``M`` priced as ``2 d`` more rows of the LM head: the same weights read (``2 d^2``) and the
same flops per token (``2 * 2 d^2``); the one difference, ``2 d`` more logits per token of
activations written, is below 0.1% of that step's bytes at DeepSeek-V3's shape. The two
input norms (``2 d`` weights) are not counted. The module's KV cache is that of one layer
(:func:`mtp_kv_bytes_per_token`).

>>> from specsim.cards import load_model
>>> block = mtp_block_card(load_model("deepseek-v3"))
>>> block.layers, block.moe_layers, block.vocab - 129_280
(1, 1, 14336)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from specsim.cards import ModelCard
from specsim.cost.deployment import Deployment
from specsim.cost.memory import footprint
from specsim.proposers.protocol import DraftCost, reshaped_card
from specsim.proposers.work import frontier_passes

__all__ = [
    "mtp_block_card",
    "mtp_module_params",
    "mtp_deployment",
    "mtp_draft_costs",
    "mtp_memory_bytes",
    "mtp_kv_bytes_per_token",
]


def mtp_block_card(target: ModelCard) -> ModelCard:
    """The card one MTP step is priced with: ``target`` with one decoder layer (routed
    experts when ``target`` has them) and ``2 d`` extra LM-head rows standing for the
    projection ``M`` (module docstring); every other field the target's."""
    moe = None if target.moe is None else {**target.moe, "dense_layers": 0}
    return reshaped_card(
        target,
        {"layers": 1, "moe": moe, "vocab": target.vocab + 2 * target.d_model},
        slug=f"{target.slug}-mtp-block",
        name=f"{target.name}, one MTP block (one layer, projection, shared LM head)",
    )


def mtp_module_params(target: ModelCard) -> int:
    """Weights of the MTP module itself (resident beside the target): one decoder layer of
    the target's last kind (all its routed experts), the projection ``2 d^2`` and three
    RMSNorms (token, hidden and the module's own final norm; ``3 d``). The embedding and
    the LM head are the target's and are not counted."""
    block = mtp_block_card(target)
    moe = block.moe_spec
    routed = 0 if moe is None else moe.experts * block.routed_expert_params
    d = target.d_model
    return block.fixed_layer_params + routed + 2 * d * d + 3 * d


def mtp_deployment(deployment: Deployment) -> Deployment:
    """Where one MTP step runs: the target's deployment (its hardware, stack, formats, tensor
    and expert parallelism) with :func:`mtp_block_card` as its model."""
    return dataclasses.replace(deployment, target=mtp_block_card(deployment.target))


def mtp_draft_costs(
    deployment: Deployment,
    widths: Sequence[int],
    *,
    batch: int,
    context: NDArray[np.int64],
) -> DraftCost:
    """Per element of ``context``: step ``d`` runs the MTP block over the depth-``d``
    frontier of every sequence, ``widths[d - 1]`` new positions each after
    ``context + d - 1`` tokens, each attending to that context and itself, on the target's
    deployment (its formats and parallelism; module docstring)."""
    return frontier_passes(mtp_deployment(deployment), widths, batch=batch, context=context)


def mtp_memory_bytes(deployment: Deployment) -> float:
    """The MTP module's weights per device (:func:`mtp_module_params`), in the deployment's
    weight format (routed experts in their own when it stores them so), over its
    tensor-parallel devices."""
    target = deployment.target
    fm = deployment.formats()
    block = mtp_block_card(target)
    moe = block.moe_spec
    routed = 0 if moe is None else moe.experts * block.routed_expert_params
    expert_bytes = fm.weights if fm.expert_weights is None else fm.expert_weights
    rest = mtp_module_params(target) - routed
    return (rest * fm.weights + routed * expert_bytes) / deployment.tensor_parallel


def mtp_kv_bytes_per_token(deployment: Deployment) -> float:
    """The MTP module's KV-cache bytes per device for one cached token of one sequence:
    one layer's (latent for MLA targets)."""
    block = mtp_block_card(deployment.target)
    fp = footprint(block, tensor_parallel=deployment.tensor_parallel, formats=deployment.formats())
    return fp.kv_bytes_per_token
