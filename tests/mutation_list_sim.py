"""The mutation check's list, continued: one-line bugs in the simulator's engines and in what
they report (run by ``tests/mutations.py``; the entries' form: ``tests/mutation_list.py``).
Not collected by pytest; importing it runs nothing.
"""

from __future__ import annotations

from mutation_list import Mutation  # beside this file: the script's folder is on the path

UNIFORM = "specsim/sim/costs/card_deployment.py"
ROUTER = "specsim/sim/serving/router.py"
PAGED_TESTS = ("tests/sim/serving/test_serving_paged.py",)
DISAGG = "specsim/sim/disagg/"
DISAGG_TESTS = ("tests/sim/disagg/test_disagg_reference.py", "tests/sim/disagg/test_disagg.py")
DISAGG_PAGED = ("tests/sim/disagg/test_disagg_paged.py",)

SIM: tuple[Mutation, ...] = (
    # The context of a pass (docs/design.md): the cached tokens, one short of prompt + emitted.
    Mutation(
        "context-cached",
        "specsim/sim/serving/batch.py",
        "return self.off + self.ptr - 1",
        "return self.off + self.ptr",
        "every serving pass at the cached context (the last emitted token is not cached)",
        ("tests/sim/serving/test_reference_serving.py", "tests/sim/test_reference_timelines.py"),
    ),
    Mutation(
        "context-chain-uniform",
        "specsim/sim/serving/loop.py",
        "batch=batch.size, context_sum=batch.ctx_sum - batch.size, gamma=gam",
        "batch=batch.size, context_sum=batch.ctx_sum, gamma=gam",
        "chain serving's fast path at the cached contexts' sum (the -1 per sequence dropped)",
        ("tests/sim/serving/test_reference_serving.py",),
    ),
    # Chain serving.
    Mutation(
        "serving-draft-prefill",
        ROUTER,
        "pc = cost.prefill(tokens, draft=draft) if tokens.shape[0] else _NO_PASS",
        "pc = cost.prefill(tokens, draft=False) if tokens.shape[0] else _NO_PASS",
        "chain serving: the draft model's prefill of the admitted prompts",
        ("tests/sim/serving/test_sim_serving.py",),
    ),
    Mutation(
        "serving-draft-steps",
        UNIFORM,
        "for j in range(gamma):  # draft step j: one token per sequence after j drafted",
        "for j in range(gamma - 1):  # draft step j: one token per sequence after j drafted",
        "chain serving: one draft step per drafted token (one dropped)",
        ("tests/sim/serving/test_sim_serving.py", "tests/cost/test_cost_sources.py"),
    ),
    Mutation(
        "serving-verify-positions",
        UNIFORM,
        "T, S, R = chain_sums(b, sc, verification_positions(float(gamma)), te)",
        "T, S, R = chain_sums(b, sc, float(gamma), te)",
        "chain serving: the verification pass of gamma + 1 positions (fast path)",
        ("tests/sim/serving/test_sim_serving.py", "tests/cost/test_cost_sources.py"),
    ),
    Mutation(
        "serving-kv-release",
        "specsim/sim/serving/batch.py",
        "        self.used -= int(self.reserve[finished].sum())\n",
        "        self.used -= 0\n",
        "chain serving: a finished request frees its KV reservation (without it, the batch "
        "empties and the next request never fits: a ValueError, Admission.check_progress)",
        ("tests/sim/test_cost_bugs.py", "tests/sim/serving/test_sim_serving.py"),
    ),
    Mutation(
        "drain-kv-release",
        "specsim/sim/serving/drain.py",
        "            admission.release(a[one])\n",
        "            pass\n",
        "chain serving's drain: a one-token request frees its KV reservation at its prefill",
        ("tests/sim/test_cost_bugs.py", "tests/sim/serving/test_sim_serving.py"),
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
        "specsim/sim/serving/paged.py",
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
        "specsim/sim/costs/costs.py",
        "tb = T + tc\n",
        "tb = T\n",
        "chunked prefill: the chunks' tokens in the shared pass",
        (
            "tests/sim/serving/test_serving_chunked.py",
            "tests/sim/serving/test_reference_serving.py",
        ),
    ),
    Mutation(
        "chunked-draft-prefill",
        "specsim/sim/costs/costs.py",
        "t, e = t + ((tt + td) - tt), e + ((et + ed) - et)",
        "t, e = t, e",
        "chunked prefill: the draft model prefills each chunk too",
        (
            "tests/sim/serving/test_serving_chunked.py",
            "tests/sim/serving/test_reference_serving.py",
        ),
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
        "specsim/sim/serving/tree_serving.py",
        "        return bool(self.config.parents)\n",
        "        return False\n",
        "tree serving: the draft model's prefill",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-own-pairs",
        "specsim/sim/serving/tree_batch.py",
        "pairs=tree_pairs(float(n1 @ c), 1.0, own),",
        "pairs=tree_pairs(float(n1 @ c), 1.0, 0.0),",
        "tree serving: the verification pass's pairs among each tree's own positions",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "tree-draft-context",
        "specsim/sim/serving/tree_serving.py",
        "mean = int(round(float(contexts.sum()) / b))",
        "mean = 0",
        "tree serving: the draft priced at the batch's context, not at 0",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "dynamic-tree-draft-depth",
        "specsim/proposers/work.py",
        "c = np.asarray(contexts, dtype=np.float64)[:, None] + np.arange(depth)",
        "c = np.asarray(contexts, dtype=np.float64)[:, None] + 0.0 * np.arange(depth)",
        "dynamic tree serving: draft step d after the d - 1 drafted tokens",
        ("tests/sim/serving/test_tree_serving_dynamic.py",),
    ),
    Mutation(
        "dynamic-tree-draft-prefill",
        "specsim/sim/serving/tree_serving_dynamic.py",
        "        return True\n",
        "        return False\n",
        "dynamic tree serving: the draft model's prefill",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "dynamic-tree-batched-draft",
        "specsim/proposers/work.py",
        "tokens=w.sum(axis=0),",
        "tokens=w.max(axis=0),",
        "dynamic tree serving: a depth's batched draft step runs every sequence's frontier",
        ("tests/sim/serving/test_tree_serving_dynamic.py",),
    ),
    # The single stream.
    Mutation(
        "stream-overlap-bonus",
        "specsim/sim/stream/stream.py",
        "e = a if (overlapped and g > 0 and a == g) else a + 1",
        "e = a + 1",
        "stream, overlapped: a fully accepted block's bonus gives way to the pre-drafted block",
        ("tests/sim/test_cost_bugs.py",),
    ),
    Mutation(
        "stream-overlap-timeline",
        "specsim/sim/stream/stream.py",
        "ds = prev_d if prev_full else prev_v",
        "ds = prev_v",
        "stream, overlapped: after a full block, drafting continued during the pass",
        ("tests/sim/stream/test_sim_stream.py",),
    ),
    # Disaggregated prefill and decode.
    Mutation(
        "disagg-transfer-bandwidth",
        DISAGG + "link.py",
        "float(bytes_per_token) / self.bandwidth + self.latency_s",
        "0.0 / self.bandwidth + self.latency_s",
        "disaggregation: the KV hand-over's bytes over the link's bandwidth",
        DISAGG_TESTS,
    ),
    Mutation(
        "disagg-transfer-latency",
        DISAGG + "link.py",
        "float(bytes_per_token) / self.bandwidth + self.latency_s",
        "float(bytes_per_token) / self.bandwidth",
        "disaggregation: the KV hand-over's latency per transfer",
        DISAGG_TESTS,
    ),
    Mutation(
        "disagg-link-queue",
        DISAGG + "link.py",
        "free = max(free, float(ready_s[i])) + float(transfer_s[i])",
        "free = float(ready_s[i]) + float(transfer_s[i])",
        "disaggregation: transfers from one prefill replica share its link (one at a time)",
        DISAGG_TESTS,
    ),
    Mutation(
        "disagg-first-step",
        DISAGG + "first_step.py",
        "    return _plus(step, own)",
        "    return own",
        "disaggregation: the decode pool's first decode step after a transfer",
        DISAGG_TESTS,
    ),
    Mutation(
        "disagg-draft-prefill",
        DISAGG + "first_step.py",
        "    if not draft:\n        return step",
        "    if True:\n        return step",
        "disaggregation: the draft's prefill of the prompt on the decode pool",
        DISAGG_TESTS,
    ),
    Mutation(
        "disagg-recompute-chain",
        DISAGG + "first_step.py",
        "new = np.concatenate([fresh, rebuilt])",
        "new = np.concatenate([fresh, np.ones_like(rebuilt)])",
        "disaggregation: a cache preempted on the decode pool is rebuilt by a prefill of its "
        "tokens there (not priced as one first-step position)",
        DISAGG_PAGED,
    ),
    Mutation(
        "disagg-recompute-draft",
        DISAGG + "first_step.py",
        "drafted = np.concatenate([prompts, rebuilt])",
        "drafted = prompts",
        "disaggregation: the draft model's cache of a preempted request is rebuilt too",
        DISAGG_PAGED,
    ),
    Mutation(
        "disagg-recompute-seam",
        ROUTER,
        'resumed = getattr(cost, "prefill_resumed", None) if rebuild.shape[0] else None',
        "resumed = None",
        "disaggregation: the engine asks the decode pool's source to price a readmission's "
        "recompute apart from the first steps",
        DISAGG_PAGED,
    ),
    # What the engines report.
    Mutation(
        "stability-backlog",
        "specsim/sim/results/stability.py",
        "    if t_backlog > crit_b:\n",
        "    if t_backlog > 2.0 * crit_b + 1e3:\n",
        "stability: completions falling behind arrivals flag the run (overload passes as stable)",
        ("tests/sim/results/test_stability.py",),
    ),
    Mutation(
        "metrics-mean-acceptance-length",
        "specsim/sim/results/engine_metrics.py",
        '"mean_acceptance_length": 1.0 + n_a / n_d if n_d else 1.0,',
        '"mean_acceptance_length": n_a / n_d if n_d else 1.0,',
        "engine metrics: the mean acceptance length counts the bonus token (off by one)",
        ("tests/sim/serving/test_serving_engine.py",),
    ),
    Mutation(
        "metrics-draft-acceptance-rate",
        "specsim/sim/results/engine_metrics.py",
        '"draft_acceptance_rate": n_a / n_t if n_t else None,',
        '"draft_acceptance_rate": n_a / n_d if n_t else None,',
        "engine metrics: the draft acceptance rate is per drafted token, not per draft",
        ("tests/sim/serving/test_serving_engine.py",),
    ),
    # The seams: admission order, routing, the attention-pair formula.
    Mutation(
        "scheduler-fcfs-order",
        "specsim/sim/serving/scheduler.py",
        "            admitted.append(waiting.popleft())\n",
        "            admitted.append(waiting.pop())\n",
        "admission: first come, first served takes the head of the queue (not the newest)",
        ("tests/sim/serving/test_serving_scheduler.py",),
    ),
    Mutation(
        "scheduler-chunk-budget",
        "specsim/sim/serving/prefill.py",
        "        if left[0] <= 0 or not admission.fits(i):\n",
        "        if not admission.fits(i):\n",
        "chunked prefill: a prompt starts only while the iteration's token budget has room",
        ("tests/sim/serving/test_serving_scheduler.py",),
    ),
    Mutation(
        "router-round-robin-off-by-one",
        ROUTER,
        "        return request % len(loads)\n",
        "        return (request + 1) % len(loads)\n",
        "routing: round-robin sends request i to replica i mod replicas",
        ("tests/sim/serving/test_serving_replicas.py",),
    ),
    Mutation(
        "router-least-outstanding",
        ROUTER,
        "        keys = [r.outstanding for r in loads]\n",
        "        keys = [r.queued for r in loads]\n",
        "routing: least-outstanding counts every unfinished request, not only the waiting ones",
        ("tests/sim/serving/test_serving_replicas.py",),
    ),
    Mutation(
        "pairs-exact-chain",
        "specsim/cost/shape.py",
        "    return tree_pairs(context, new, batch * (new * (new + 1) // 2))\n",
        "    return tree_pairs(context, new, batch * (new * (new - 1) // 2))\n",
        "attention pairs: a chain's integer pair count (chunked prefill, the drains) counts "
        "each new position attending to itself",
        ("tests/cost/test_pass_shape.py", "tests/sim/serving/test_serving_chunked.py"),
    ),
    Mutation(
        "pairs-tree-own",
        "specsim/cost/shape.py",
        "    return new * context + own\n",
        "    return new * context\n",
        "attention pairs: a pass's pairs among its own new positions (chains, trees, frontiers)",
        ("tests/cost/test_pass_shape.py",),
    ),
    Mutation(
        "tree-proposer-own-prefill",
        "specsim/sim/costs/costs.py",
        "own = draft and self.proposer is not None",
        "own = False",
        "tree serving: a proposer's own KV prefill (PARD's draft, EAGLE's head) is priced",
        ("tests/sim/test_cost_bugs.py",),
    ),
)
