"""The cost of a pass: time, operations, bytes moved and energy of real models on real hardware.

One noun per module, lowest first:

- :mod:`specsim.cost.shape`: the :class:`PassShape` of a verification pass
  (batch, each sequence's context and new positions, a chain or a token tree)
  and the three sums the roofline needs from it (:class:`PassSums`); the only
  place "gamma + 1" (:func:`verification_positions`) and the attention-pair
  formula (:func:`chain_pairs`) are written;
- :mod:`specsim.cost.quant`: the weight formats (bf16 to int4 and llama.cpp's
  blocks), their bytes per weight and dequantization work;
  :mod:`specsim.cost.formats`: :class:`Formats`, the compute dtype and the
  byte widths of weights, KV cache and activations of a pass;
- :mod:`specsim.cost.memory`: the memory :func:`footprint` per device (weights,
  KV bytes per token), read by the roofline and by serving admission alike;
- :mod:`specsim.cost.moe`: mixture-of-experts targets (the experts a pass touches,
  :func:`moe_routed_fraction`) and expert parallelism (:func:`check_expert_parallel`,
  the all-to-all dispatch and combine of :mod:`specsim.cost.collectives`);
- :mod:`specsim.cost.roofline`: the per-card constants (:class:`Roofline`) and
  the one formula for time and energy (:func:`time_energy`);
- :mod:`specsim.cost.deployment`: the :class:`~specsim.cost.deployment.Deployment`, the
  one value that says what runs where, and its builders;
  :mod:`specsim.cost.resolved`: the :class:`Resolved` deployment (formats, stack and
  parallelism resolved and checked once, :meth:`Deployment.resolved`) and the kernel on it,
  :func:`~specsim.cost.resolved.pass_terms` and :func:`~specsim.cost.resolved.pass_cost`,
  returning the records of :mod:`specsim.cost.results`;
- :mod:`specsim.cost.model`, :mod:`specsim.cost.aggregates`, :mod:`specsim.cost.grid`: the
  kernel's keyword wrappers for cards and keywords, :func:`step_cost`, :func:`pass_cost`,
  :func:`pass_aggregates_cost` and :func:`step_cost_grid` (many homogeneous passes at
  once; :func:`pass_grid` on a deployment);
- :mod:`specsim.cost.drafting`: the one drafting rule, :class:`DraftWork` priced by
  :func:`price_draft` under the deployment's drafting profile;
- :mod:`specsim.cost.derived`: c, v(gamma) and c-hat; :mod:`specsim.cost.frames`:
  tidy tables of them (pandas).

>>> from specsim.cards import load_hardware, load_model
>>> cost = step_cost(load_model("llama-2-7b"), load_hardware("a100-80gb"),
...                  batch=1, context=105, new_tokens=1, dtype="bfloat16")
>>> cost.bound
'memory'
"""

from specsim.cost.aggregates import pass_aggregates_cost
from specsim.cost.deployment import PLACEMENTS, Deployment, deployment_from_table, load_deployment
from specsim.cost.derived import cost_coefficient, draft_on, ops_coefficient, verification_factor
from specsim.cost.drafting import DraftCost, DraftWork, price_draft
from specsim.cost.flops import pass_flops, ridge_tokens
from specsim.cost.formats import Formats, resolve_formats
from specsim.cost.frames import DEFAULT_BATCHES, cost_coefficient_frame, verification_frame
from specsim.cost.grid import pass_grid, step_cost_grid
from specsim.cost.memory import Footprint, footprint, kv_heads_per_device
from specsim.cost.model import (
    DEFAULT_CONTEXT,
    DEFAULT_ENCODER_LENGTH,
    chain_shape,
    encoder_tokens,
    pass_cost,
    step_cost,
)
from specsim.cost.moe import check_expert_parallel, moe_routed_fraction
from specsim.cost.quant import KV_FORMATS, WEIGHT_FORMATS
from specsim.cost.resolved import Resolved, pass_terms
from specsim.cost.results import PassTerms, StepCost, StepCostGrid
from specsim.cost.roofline import Roofline, roofline, time_energy
from specsim.cost.shape import (
    PassShape,
    PassSums,
    chain_pairs,
    chain_pairs_exact,
    chain_sums,
    tree_pairs,
    verification_positions,
)

__all__ = [
    "check_expert_parallel",
    "moe_routed_fraction",
    "Deployment",
    "PLACEMENTS",
    "deployment_from_table",
    "draft_on",
    "load_deployment",
    "DEFAULT_CONTEXT",
    "DEFAULT_ENCODER_LENGTH",
    "DEFAULT_BATCHES",
    "PassShape",
    "PassSums",
    "verification_positions",
    "chain_pairs",
    "chain_pairs_exact",
    "chain_sums",
    "tree_pairs",
    "Formats",
    "resolve_formats",
    "WEIGHT_FORMATS",
    "KV_FORMATS",
    "Footprint",
    "footprint",
    "kv_heads_per_device",
    "Roofline",
    "roofline",
    "time_energy",
    "StepCost",
    "StepCostGrid",
    "PassTerms",
    "step_cost",
    "chain_shape",
    "pass_cost",
    "step_cost_grid",
    "pass_grid",
    "Resolved",
    "pass_terms",
    "DraftWork",
    "DraftCost",
    "price_draft",
    "pass_flops",
    "ridge_tokens",
    "pass_aggregates_cost",
    "encoder_tokens",
    "cost_coefficient",
    "verification_factor",
    "ops_coefficient",
    "verification_frame",
    "cost_coefficient_frame",
]
