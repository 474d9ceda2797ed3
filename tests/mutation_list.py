"""The mutation check's list (run by ``tests/mutations.py``): one-line cost bugs in the cost
model and the proposers (the simulator's: ``tests/mutation_list_sim.py``).

Each :class:`Mutation` names a file of the package, the exact snippet to change (it must
occur exactly once there), its replacement, the cost term it removes or breaks, and the
test files that must catch it. Not collected by pytest; importing it runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """A one-line bug: in ``path``, ``original`` (exactly once) becomes ``replacement``."""

    name: str
    path: str
    original: str
    replacement: str
    breaks: str
    tests: tuple[str, ...]
    timeout_s: float | None = None  # where the expected failure is a hang: stop sooner


ROOF = "specsim/cost/roofline.py"
COST_TESTS = ("tests/cost/test_cost.py",)
MOE_TESTS = ("tests/cost/test_moe_cost.py",)
KINDS = "specsim/proposers/kinds.py"
WORK = "specsim/proposers/work.py"
DRAFTING = "specsim/cost/drafting.py"
RULE_TESTS = ("tests/proposers/test_drafting_rule.py",)

COST: tuple[Mutation, ...] = (
    # The roofline's terms.
    Mutation(
        "roofline-weights",
        ROOF,
        '"dense_weights_s": L * x.w_layer / W,',
        '"dense_weights_s": 0.0,',
        "roofline: the layers' weight bytes read once per pass",
        COST_TESTS,
    ),
    Mutation(
        "roofline-kv-bytes",
        ROOF,
        '"attention_cached_s": L * kv / W,',
        '"attention_cached_s": 0.0,',
        "roofline: reading the cached KV entries",
        COST_TESTS,
    ),
    Mutation(
        "roofline-attention-flops",
        ROOF,
        "return 4.0 * model.head_dim * model.heads / tp, 2.0 * model.q_dim / tp",
        "return 2.0 * model.head_dim * model.heads / tp, 2.0 * model.q_dim / tp",
        "roofline: attention flops per (query, key) pair halved",
        COST_TESTS,
    ),
    Mutation(
        "roofline-layer-overhead",
        ROOF,
        "overhead = L * rt.layer_overhead_s + rt.pass_overhead_s",
        "overhead = rt.pass_overhead_s",
        "roofline: the stack's per-layer launch overhead",
        COST_TESTS + ("tests/cost/test_runtime.py",),
    ),
    Mutation(
        "roofline-allreduce",
        "specsim/cost/moe.py",
        "ring = n * allreduce_bandwidth_factor(tp, alg) * nbytes / hw.interconnect_bandwidth",
        "ring = 0.0",
        "tensor parallelism: the all-reduces' bandwidth term",
        ("tests/cost/test_cost_collectives.py",),
    ),
    Mutation(
        "energy-dynamic-power",
        ROOF,
        "energy = (co.idle_w + co.dynamic_w * util) * time",
        "energy = co.idle_w * time",
        "energy: the utilisation-driven power above idle",
        COST_TESTS + ("tests/cost/test_cost_sources.py", "tests/sim/test_cost_bugs.py"),
    ),
    # Mixture of experts and multi-head latent attention.
    Mutation(
        "moe-distinct-experts",
        "specsim/cost/moe.py",
        "return experts_touched(T, experts=moe.experts, top_k=moe.top_k)",
        "return 0.0 * T + moe.top_k",
        "MoE: a pass reads the distinct experts its tokens touch (not one token's top k)",
        MOE_TESTS,
    ),
    Mutation(
        "moe-routing-skew",
        "specsim/cost/moe.py",
        "return experts_touched_load(T, load=load, top_k=moe.top_k)",
        "return experts_touched(T, experts=moe.experts, top_k=moe.top_k)",
        "MoE: a skewed card's passes read the experts its load touches (not uniform routing's)",
        ("tests/cost/test_moe_routing.py",),
    ),
    Mutation(
        "moe-routing-profile-spread",
        "specsim/cost/moe.py",
        "cv = count_cv(mean=profile.mean_tokens, std=profile.std_tokens)",
        "cv = profile.std_tokens / profile.mean_tokens",
        "MoE: a measured profile's spread has the per-iteration sampling noise removed",
        ("tests/cost/test_moe_routing.py",),
    ),
    Mutation(
        "moe-expert-bytes",
        ROOF,
        "weights_s = weights_s + co.expert_weights_s * touched",
        "weights_s = weights_s + co.expert_weights_s",
        "MoE: the routed experts' weight bytes scale with the experts touched",
        MOE_TESTS,
    ),
    Mutation(
        "moe-alltoall-combine",
        "specsim/cost/moe.py",
        "_alltoall(hw, float(ep), n=2.0 * model.moe_layers, nbytes=moe.top_k * d / ep),",
        "_alltoall(hw, float(ep), n=1.0 * model.moe_layers, nbytes=moe.top_k * d / ep),",
        "expert parallelism: a dispatch and a combine all-to-all per MoE layer (combine dropped)",
        MOE_TESTS,
    ),
    Mutation(
        "alltoall-bandwidth",
        "specsim/cost/collectives.py",
        "    return (p - 1.0) / p\n",
        "    return 1.0\n",
        "all-to-all: each device sends (p - 1) / p of what it holds (its own share stays)",
        ("tests/cost/test_cost_collectives.py",) + MOE_TESTS,
    ),
    Mutation(
        "mla-kv-bytes",
        "specsim/cost/memory.py",
        "per_layer = float(mla.kv_width) * formats.kv",
        "per_layer = float(mla.kv_lora_rank) * formats.kv",
        "MLA: the cache holds the latent and the rotary key (rotary key dropped)",
        ("tests/cost/test_mla.py",),
    ),
    Mutation(
        "mla-attention-flops",
        ROOF,
        "per_head = mla.kv_width + mla.kv_lora_rank",
        "per_head = mla.kv_width",
        "MLA: each head scores latent plus rotary key and sums the latent (sum dropped)",
        ("tests/cost/test_mla.py",),
    ),
    # The pass shape.
    Mutation(
        "shape-gamma-plus-one",
        "specsim/cost/shape.py",
        "    return gamma + 1\n",
        "    return gamma\n",
        "pass shape: a chain verifies gamma + 1 positions (the bonus/correction position)",
        ("tests/cost/test_pass_shape.py",),
    ),
    Mutation(
        "shape-tree-pairs",
        "specsim/cost/shape.py",
        "own = float(sum(_depths(self.parents)))",
        "own = 0.0",
        "pass shape: a tree's attention pairs among its own nodes",
        ("tests/cost/test_pass_shape.py",),
    ),
    # The resolved deployment (specsim.cost.resolved): formats resolved once, remembered.
    Mutation(
        "resolved-group-size",
        "specsim/cost/deployment.py",
        "            group_size=self.group_size,\n",
        "            group_size=None,\n",
        "resolved deployment: the formats resolved with the deployment's group size",
        ("tests/cost/test_resolved.py",),
    ),
    Mutation(
        "resolved-memo-formats",
        "specsim/cost/deployment.py",
        "id(deployment.runtime), fm, tp, ep, e)",
        "id(deployment.runtime), tp, ep, e)",
        "resolved deployment: the remembered value tells formats apart",
        ("tests/cost/test_resolved.py",),
    ),
)

PROPOSERS: tuple[Mutation, ...] = (
    Mutation(
        "draft-model-depth-context",
        WORK,
        "c = np.stack([ctx + (d - 1) for d, _ in steps])",
        "c = np.stack([ctx for d, _ in steps])",
        "draft model: step d runs after the d - 1 tokens drafted before it",
        ("tests/proposers/test_proposers.py", "tests/sim/test_cost_bugs.py"),
    ),
    Mutation(
        "heads-layer-fraction",
        KINDS,
        "return dep, self.card.layer_fraction / deployment.target.layers",
        "return dep, 1.0 / deployment.target.layers",
        "heads: a head costs its card's fraction of a target layer",
        ("tests/proposers/test_heads.py", "tests/proposers/test_proposers.py"),
    ),
    Mutation(
        "ngram-free",
        "specsim/proposers/lookup.py",
        "return DraftCost(time, idle_watts(deployment) * time, np.zeros(ctx.shape))",
        "return DraftCost(time, idle_watts(deployment) * time, np.ones(ctx.shape))",
        "n-gram: prompt lookup has no model, so no accelerator work (no flops)",
        ("tests/proposers/test_proposers.py",),
    ),
    Mutation(
        "ngram-lookup-cost",
        "specsim/proposers/lookup.py",
        "time = rounds * self.cost.seconds(context=ctx, nodes=len(tree)) if tree else 0.0 * ctx",
        "time = 0.0 * ctx",
        "n-gram: no model, but the host's lookup over the context every pass",
        ("tests/proposers/test_proposers.py",),
    ),
    Mutation(
        "ngram-lookup-threads",
        "specsim/proposers/lookup.py",
        "rounds = math.ceil(check_batch(batch) / self.threads)",
        "rounds = 1",
        "n-gram: a batch's lookups run ceil(batch / threads) rounds on the host",
        ("tests/proposers/test_proposers.py",),
    ),
    Mutation(
        "parallel-one-pass-k",
        "specsim/proposers/parallel.py",
        'return depth if self.pass_positions == "tree-depth" else self.k',
        "return depth",
        "parallel draft: a block drafter's one pass runs all k positions",
        ("tests/proposers/test_proposer_parallel.py",),
    ),
    Mutation(
        "parallel-pass-positions",
        "specsim/proposers/parallel.py",
        "tokens, pairs, cached = chain_sums(b, b * ctx.astype(np.float64), n)",
        "tokens, pairs, cached = chain_sums(b, b * ctx.astype(np.float64), 1)",
        "parallel draft: the one pass covers n new positions (not one step)",
        ("tests/proposers/test_proposer_parallel.py",),
    ),
    Mutation(
        "selfspec-draft-layers",
        "specsim/proposers/selfspec.py",
        "return early_exit_card(target, self.card.draft_layers(target.layers))",
        "return early_exit_card(target, target.layers)",
        "self-speculation: a draft step runs E of the target's L layers",
        ("tests/proposers/test_proposer_selfspec.py",),
    ),
    Mutation(
        "mtp-projection",
        "specsim/proposers/mtp.py",
        '"vocab": target.vocab + 2 * target.d_model}',
        '"vocab": target.vocab}',
        "MTP: each step also runs the 2d -> d projection (priced as 2d LM-head rows)",
        ("tests/proposers/test_mtp.py",),
    ),
    Mutation(
        "mtp-depth-context",
        WORK,  # frontier_work: MTP, draft models, self-spec
        "c = np.stack([ctx + (d - 1) for d, _ in steps])",
        "c = np.stack([ctx + 0 * (d - 1) for d, _ in steps])",
        "MTP: step d attends to the context and the d - 1 tokens drafted before it",
        ("tests/proposers/test_mtp.py",),
    ),
    # The one drafting rule (specsim.cost.drafting): what each kind runs, priced alike.
    Mutation(
        "rule-draft-model-steps",
        KINDS,
        "            frontier_widths(parents),\n            batch=check_batch(batch),",
        "            (sum(frontier_widths(parents)),),\n            batch=check_batch(batch),",
        "drafting rule: a draft model runs one draft step per depth (each its host cost)",
        RULE_TESTS,
    ),
    Mutation(
        "rule-eagle-steps",
        KINDS,
        'widths = (1,) if self.card.kind == "parallel" else fronts',
        "widths = (1,)",
        "drafting rule: an EAGLE head or MTP module steps once per depth",
        RULE_TESTS,
    ),
    Mutation(
        "rule-medusa-once",
        KINDS,
        'widths = (1,) if self.card.kind == "parallel" else fronts',
        "widths = fronts",
        "drafting rule: Medusa heads are evaluated once per pass (one draft step)",
        RULE_TESTS,
    ),
    Mutation(
        "rule-mtp-block",
        KINDS,
        "return mtp_deployment(dep), 1.0",
        "return dep, 1.0 / dep.target.layers",
        "drafting rule: an MTP step runs the module's block, not 1/L of the target's pass",
        ("tests/proposers/test_mtp.py",),
    ),
    Mutation(
        "rule-pard-one-step",
        "specsim/proposers/parallel.py",
        "shape = (1, *ctx.shape)  # one draft step, per context",
        "shape = (n, *ctx.shape)  # one draft step, per context",
        "drafting rule: a parallel drafter's pass is one draft step",
        RULE_TESTS,
    ),
    Mutation(
        "rule-selfspec-formats",
        "specsim/proposers/selfspec.py",
        "return dataclasses.replace(target, target=self.draft_model(target.target))",
        "return target.on_model(self.draft_model(target.target))",
        "drafting rule: self-speculation drafts in the deployment's formats and parallelism",
        RULE_TESTS,
    ),
    Mutation(
        "rule-streaming-devices",
        "specsim/proposers/budget.py",
        "acceptance=self.acceptance,\n            tensor_parallel=deployment.tensor_parallel,",
        "acceptance=self.acceptance,\n            tensor_parallel=1,",
        "drafting rule: the target drafting for itself runs on all its devices",
        RULE_TESTS,
    ),
    Mutation(
        "rule-kv-budget-ragged",
        "specsim/proposers/budget.py",
        "return ragged_draft_cost_of(self.proposer, trees, kept, deployment=deployment)",
        "return ragged_draft_cost_of(self.proposer, trees, contexts, deployment=deployment)",
        "drafting rule: a budgeted draft's ragged steps read the budget, as its homogeneous ones",
        RULE_TESTS,
    ),
    Mutation(
        "rule-host-scaled",
        DRAFTING,
        "host = np.broadcast_to(r.step_host_s(B), T.shape).astype(np.float64)",
        "host = np.zeros(T.shape)",
        "drafting rule: a head's step pays the stack's whole draft-step host cost, not its share",
        RULE_TESTS,
    ),
    Mutation(
        "rule-separate-sequences",
        "specsim/cards/runtime.py",
        "            draft_stack = st\n",
        "            draft_stack = replace(st, sequence_overhead_s=0.0)\n",
        "drafting rule: a separate draft worker's step pays its per-sequence host work",
        RULE_TESTS + ("tests/cost/test_drafting.py",),
    ),
    Mutation(
        "rule-pard-prefill",
        "specsim/proposers/parallel.py",
        "return priced(one_pass_work(self.deployment(deployment), tokens, context, prefill=True))",
        "return priced(None)",
        "PARD: the draft's own KV prefill over the prompt is priced",
        RULE_TESTS,
    ),
    Mutation(
        "kv-budget-min",
        "specsim/proposers/budget.py",
        "return np.minimum(ctx, budget)",
        "return ctx",
        "KV budget: a budgeted draft step reads min(context, budget) cached tokens",
        ("tests/proposers/test_kv_budget.py",),
    ),
)
