"""The mutation check's list (run by ``tests/mutations.py``): one-line cost bugs, by layer.

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
UNIFORM = "specsim/sim/card_deployment.py"
ROUTER = "specsim/sim/router.py"
PAGED_TESTS = ("tests/sim/test_serving_paged.py",)

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
        ROOF,
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
)

PROPOSERS: tuple[Mutation, ...] = (
    Mutation(
        "draft-model-depth-context",
        KINDS,
        "        c = ctx + (d - 1)\n",
        "        c = ctx\n",
        "draft model: step d runs after the d - 1 tokens drafted before it",
        ("tests/proposers/test_proposers.py", "tests/sim/test_cost_bugs.py"),
    ),
    Mutation(
        "heads-layer-fraction",
        KINDS,
        "scale=self.card.layer_fraction / target.layers,",
        "scale=1.0 / target.layers,",
        "heads: a head costs its card's fraction of a target layer",
        ("tests/proposers/test_heads.py", "tests/proposers/test_proposers.py"),
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
)

SIM: tuple[Mutation, ...] = (
    # Chain serving.
    Mutation(
        "serving-draft-prefill",
        ROUTER,
        "pc = cost.prefill(tokens, draft=draft) if tokens.shape[0] else _NO_PASS",
        "pc = cost.prefill(tokens, draft=False) if tokens.shape[0] else _NO_PASS",
        "chain serving: the draft model's prefill of the admitted prompts",
        ("tests/sim/test_sim_serving.py",),
    ),
    Mutation(
        "serving-draft-steps",
        UNIFORM,
        "for j in range(gamma):  # draft step j: one token per sequence after j drafted",
        "for j in range(gamma - 1):  # draft step j: one token per sequence after j drafted",
        "chain serving: one draft step per drafted token (one dropped)",
        ("tests/sim/test_sim_serving.py", "tests/cost/test_cost_sources.py"),
    ),
    Mutation(
        "serving-verify-positions",
        UNIFORM,
        "T, S, R = chain_sums(b, sc, verification_positions(float(gamma)), te)",
        "T, S, R = chain_sums(b, sc, float(gamma), te)",
        "chain serving: the verification pass of gamma + 1 positions (fast path)",
        ("tests/sim/test_sim_serving.py", "tests/cost/test_cost_sources.py"),
    ),
    Mutation(
        "serving-kv-release",
        "specsim/sim/batch.py",
        "        self.used -= int(self.reserve[finished].sum())\n",
        "        self.used -= 0\n",
        "chain serving: a finished request frees its KV reservation (without it, admission "
        "waits forever for room: the run hangs)",
        ("tests/sim/test_cost_bugs.py", "tests/sim/test_sim_serving.py"),
        timeout_s=90.0,
    ),
    Mutation(
        "drain-kv-release",
        "specsim/sim/drain.py",
        "            admission.release(a[one])\n",
        "            pass\n",
        "chain serving's drain: a one-token request frees its KV reservation at its prefill",
        ("tests/sim/test_cost_bugs.py", "tests/sim/test_sim_serving.py"),
        timeout_s=60.0,
    ),
    Mutation(
        "paged-recompute",
        ROUTER,
        "tokens = np.concatenate([req.prompt[adm], rebuild])",
        "tokens = req.prompt[adm]",
        "paged serving: a preempted request's cache is recomputed when it comes back",
        PAGED_TESTS,
    ),
    Mutation(
        "paged-swap",
        "specsim/sim/paged.py",
        "return tokens * self.swap[1] / self.swap[0]",
        "return 0.0",
        "paged serving: swapping KV to the host and back costs link time",
        PAGED_TESTS,
    ),
    Mutation(
        "paged-swap-in",
        ROUTER,
        "return pc.time_s + swap_s, pc.energy_j or 0.0, int(one.sum())",
        "return pc.time_s, pc.energy_j or 0.0, int(one.sum())",
        "paged serving: a swapped-out request's KV comes back over the link before it runs",
        PAGED_TESTS,
    ),
    Mutation(
        "chunked-prefill-chunks",
        "specsim/sim/costs.py",
        "tb = T + tc\n",
        "tb = T\n",
        "chunked prefill: the chunks' tokens in the shared pass",
        ("tests/sim/test_serving_chunked.py", "tests/sim/test_reference_serving.py"),
    ),
    Mutation(
        "chunked-draft-prefill",
        "specsim/sim/costs.py",
        "t, e = t + ((tt + td) - tt), e + ((et + ed) - et)",
        "t, e = t, e",
        "chunked prefill: the draft model prefills each chunk too",
        ("tests/sim/test_serving_chunked.py", "tests/sim/test_reference_serving.py"),
    ),
    # Tree serving (on the serving engine).
    Mutation(
        "tree-kv-release",
        ROUTER,
        "            self.admission.release(adm[one])\n",
        "            pass\n",
        "tree serving: a one-token request frees its KV reservation",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-draft-prefill",
        "specsim/sim/tree_serving.py",
        "        return isinstance(self.config.proposer, DraftModel)\n",
        "        return False\n",
        "tree serving: the draft model's prefill",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-own-pairs",
        "specsim/sim/tree_batch.py",
        "pairs=float(n1 @ c) + own,",
        "pairs=float(n1 @ c),",
        "tree serving: the verification pass's pairs among each tree's own positions",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-draft-context",
        "specsim/sim/tree_serving.py",
        "mean = int(round(float(contexts.sum()) / b))",
        "mean = 0",
        "tree serving: the draft priced at the batch's context, not at 0",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "dynamic-tree-draft-depth",
        "specsim/sim/tree_serving_dynamic.py",
        "c = np.asarray(contexts, dtype=np.float64)[:, None] + np.arange(depth)",
        "c = np.asarray(contexts, dtype=np.float64)[:, None] + 0.0 * np.arange(depth)",
        "dynamic tree serving: draft step d after the d - 1 drafted tokens",
        ("tests/sim/test_tree_serving_dynamic.py",),
    ),
    Mutation(
        "dynamic-tree-draft-prefill",
        "specsim/sim/tree_serving_dynamic.py",
        "        return isinstance(self.config.proposer, DraftModel)\n",
        "        return False\n",
        "dynamic tree serving: the draft model's prefill",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "dynamic-tree-batched-draft",
        "specsim/sim/tree_serving_dynamic.py",
        "tokens=w.sum(axis=0),",
        "tokens=w.max(axis=0),",
        "dynamic tree serving: a depth's batched draft step runs every sequence's frontier",
        ("tests/sim/test_tree_serving_dynamic.py",),
    ),
    # The single stream.
    Mutation(
        "stream-overlap-bonus",
        "specsim/sim/stream.py",
        "e = a if (overlapped and g > 0 and a == g) else a + 1",
        "e = a + 1",
        "stream, overlapped: a fully accepted block's bonus gives way to the pre-drafted block",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "stream-overlap-timeline",
        "specsim/sim/stream.py",
        "ds = prev_d if prev_full else prev_v",
        "ds = prev_v",
        "stream, overlapped: after a full block, drafting continued during the pass",
        ("tests/sim/test_sim_stream.py",),
    ),
    # What the engines report.
    Mutation(
        "stability-backlog",
        "specsim/sim/stability.py",
        "    if t_backlog > crit_b:\n",
        "    if t_backlog > 2.0 * crit_b + 1e3:\n",
        "stability: completions falling behind arrivals flag the run (overload passes as stable)",
        ("tests/sim/test_stability.py",),
    ),
    Mutation(
        "metrics-mean-acceptance-length",
        "specsim/sim/engine_metrics.py",
        '"mean_acceptance_length": 1.0 + n_a / n_d if n_d else 1.0,',
        '"mean_acceptance_length": n_a / n_d if n_d else 1.0,',
        "engine metrics: the mean acceptance length counts the bonus token (off by one)",
        ("tests/sim/test_serving_engine.py",),
    ),
    Mutation(
        "metrics-draft-acceptance-rate",
        "specsim/sim/engine_metrics.py",
        '"draft_acceptance_rate": n_a / n_t if n_t else None,',
        '"draft_acceptance_rate": n_a / n_d if n_t else None,',
        "engine metrics: the draft acceptance rate is per drafted token, not per draft",
        ("tests/sim/test_serving_engine.py",),
    ),
)

MUTATIONS: tuple[Mutation, ...] = COST + PROPOSERS + SIM
