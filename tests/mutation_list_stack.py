"""The mutation check's entries for a stack profile's speculative-path terms
(:mod:`specsim.cost.stack_terms`, the roofline's use of them, the drafting profile); run by
``tests/mutations.py`` with the others. Not collected by pytest; importing it runs nothing.
"""

from __future__ import annotations

from mutation_list import Mutation  # beside this script: on the path

TERMS = "specsim/cost/stack_terms.py"
ROOF = "specsim/cost/roofline.py"
TESTS = ("tests/cost/test_stack_terms.py",)
SERVING = ("tests/sim/serving/test_stack_serving.py",)
EDGES = ("tests/sim/serving/test_stack_edges.py",)
BORROW = ("tests/cards/test_borrowed_kernels.py",)

STACK: tuple[Mutation, ...] = (
    Mutation(
        "stack-sequence",
        TERMS,
        "host = seqs * sc.sequence_s + eager_s",
        "host = eager_s",
        "stack: host work per scheduled sequence",
        TESTS,
    ),
    Mutation(
        "stack-graph-padding",
        TERMS,
        "rows = _ratio(T * padded, x)",
        "rows = T",
        "stack: rows padded up to the next captured graph size",
        TESTS,
    ),
    Mutation(
        "stack-graph-exact",
        TERMS,
        "inside = inside & (padded == x)",
        "inside = inside",
        "stack: without padding only the captured sizes replay a graph",
        TESTS,
    ),
    Mutation(
        "stack-eager",
        TERMS,
        "eager_s = sc.eager_s * eager",
        "eager_s = 0.0 * eager",
        "stack: eager launches off the graph path",
        TESTS,
    ),
    Mutation(
        "stack-batch-expansion",
        TERMS,
        "seqs, R_read = T, R * _ratio(T, B)",
        "seqs, R_read = T, R",
        "stack: batch expansion reads the cached context once per expanded sequence",
        TESTS,
    ),
    Mutation(
        "stack-rejection",
        TERMS,
        "host = host + drafts * sc.rejection_s + sc.speculation_s",
        "host = host + sc.speculation_s",
        "stack: the rejection sampler per new token of a verification",
        TESTS,
    ),
    Mutation(
        "stack-speculation",
        TERMS,
        "host = host + drafts * sc.rejection_s + sc.speculation_s",
        "host = host + drafts * sc.rejection_s",
        "stack: the fixed cost of having speculation configured",
        TESTS,
    ),
    Mutation(
        "stack-rejection-chunks",
        TERMS,
        "drafts = T if verified is None else verified",
        "drafts = T",
        "stack: the rejection sampler sees a mixed pass's verified tokens, not its prefill chunks",
        EDGES,
    ),
    Mutation(
        "cardcost-chunk-verified",
        "specsim/sim/costs/costs.py",
        "batch=n + nc, verify=ver, verified=T)",
        "batch=n + nc, verify=ver)",
        "simulator: chunks beside a verification (closed form) pay no rejection sampler",
        EDGES,
    ),
    Mutation(
        "chunks-thin-verified",
        "specsim/sim/serving/chunk_drain.py",
        "verify=ver, verified=int(pos.sum()))",
        "verify=ver)",
        "simulator: chunks beside a verification (from passes) pay no rejection sampler",
        EDGES,
    ),
    Mutation(
        "stack-tree-refusal",
        TERMS,
        'if st.verify == "batch-expansion":',
        "if False:",
        "stack: a batch-expansion stack refuses a token tree",
        TESTS,
    ),
    Mutation(
        "roofline-stack-host",
        ROOF,
        "time = roof + (T * co.allreduce_per_token_s + co.fixed_s) + host",
        "time = roof + (T * co.allreduce_per_token_s + co.fixed_s)",
        "roofline: the stack's host seconds in the pass time",
        TESTS,
    ),
    Mutation(
        "roofline-stack-rows",
        ROOF,
        "dense = mx(rows * co.dense_compute_s, rows * co.dense_memory_s + weights_s)",
        "dense = mx(T * co.dense_compute_s, T * co.dense_memory_s + weights_s)",
        "roofline: the weight GEMMs run the padded rows",
        TESTS,
    ),
    Mutation(
        "drafting-step-cost",
        "specsim/cards/runtime.py",
        "pass_overhead_s=st.draft_step_overhead_s,",
        "pass_overhead_s=self.pass_overhead_s,",
        "stack: a draft step's host cost replaces the pass's",
        TESTS,
    ),
    Mutation(
        "cardcost-uniform-verify",
        "specsim/sim/costs/card_deployment.py",
        "time_energy(tl, T, S, R, batch=b, verify=gamma > 0)",
        "time_energy(tl, T, S, R, batch=b)",
        "simulator: a uniform iteration's pass is a verification (the stack's speculative terms)",
        SERVING,
    ),
    Mutation(
        "cardcost-mixed-verify",
        "specsim/sim/costs/costs.py",
        "batch=float(b), verify=True",
        "batch=float(b)",
        "simulator: a mixed iteration's pass is a verification",
        SERVING,
    ),
    Mutation(
        "cardcost-block-verify",
        "specsim/sim/costs/card_deployment.py",
        "new_tokens=pos, context=context, verify=verify)",
        "new_tokens=pos, context=context)",
        "simulator: a stream's blocks with gamma > 0 are verifications",
        SERVING,
    ),
    Mutation(
        "cardcost-draft-profile",
        "specsim/sim/costs/costs.py",
        "kernel(self.drafting().drafting())",
        "kernel(self.drafting())",
        "simulator: draft steps run under the stack's drafting profile",
        SERVING,
    ),
    Mutation(
        "proposer-draft-profile",
        "specsim/cost/drafting.py",
        "r = work.deployment.drafting().resolved()",
        "r = work.deployment.resolved()",
        "drafting rule: every proposer's steps run under the stack's drafting profile",
        SERVING + ("tests/proposers/test_drafting_rule.py",),
    ),
    Mutation(
        "vfactor-verify",
        "specsim/cost/derived.py",
        "t_v = grid(new_tokens=verification_positions(g), verify=True).time_s",
        "t_v = grid(new_tokens=verification_positions(g)).time_s",
        "v(gamma): the gamma + 1 token pass is a verification",
        SERVING,
    ),
    Mutation(
        "c-draft-profile",
        "specsim/cost/derived.py",
        "return d_dep.drafting()  # a draft step runs under its stack's drafting profile",
        "return d_dep",
        "c: the draft step runs under the stack's drafting profile",
        SERVING,
    ),
    Mutation(
        "tree-chains-only",
        "specsim/policies/tree_optimizer.py",
        "    if refusal:  # the stack verifies chains only",
        "    if False:  # the stack verifies chains only",
        "tree optimizer: a stack that cannot verify trees searches chains only",
        SERVING,
    ),
    Mutation(
        "borrow-nearest",
        "specsim/cards/stack_files.py",
        "peers.sort(key=lambda c: (abs(math.log(c.mem_bandwidth / hw.mem_bandwidth)), c.slug))",
        "peers.sort(key=lambda c: c.slug)",
        "kernel tables: borrowed from the nearest card of the generation by bandwidth",
        BORROW,
    ),
    Mutation(
        "borrow-same-generation",
        "specsim/cards/stack_files.py",
        "if c.generation == hw.generation and c.kind == hw.kind and c.slug != hw.slug",
        "if c.generation is not None and c.kind == hw.kind and c.slug != hw.slug",
        "kernel tables: borrowed only within the card's generation",
        BORROW,
    ),
)
