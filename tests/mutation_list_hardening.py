"""The mutation check's entries for cost bugs that only a study or a docs page caught, or
nothing (issue 35): each now has a direct test. Run by ``tests/mutations.py`` with the
others. Not collected by pytest; importing it runs nothing.

The plan's limits (``specsim/plan/limits.py``: the stop-paying batch, the what-if shift and
the next card), once caught by the docs-page comparison only, have direct tests in
``tests/plan/test_plan_limits.py``.
"""

from __future__ import annotations

from mutation_list import Mutation  # beside this script: on the path

HARDENING: tuple[Mutation, ...] = (
    Mutation(
        "ngram-idle-energy-tp",
        "specsim/proposers/lookup.py",
        "return deployment.hardware.idle_power_w * deployment.tensor_parallel",
        "return deployment.hardware.idle_power_w",
        "n-gram lookup: every device of a tensor-parallel group idles while the host searches",
        ("tests/proposers/test_ngram_energy.py",),
    ),
    Mutation(
        "crossover-se-ddof",
        "specsim/capacity/crossover.py",
        'out[f"{m}_se"] = g[m].std(ddof=1) / np.sqrt(n)',
        'out[f"{m}_se"] = g[m].std(ddof=0) / np.sqrt(n)',
        "crossover: the replicates' sample standard deviation (ddof = 1) in the standard error",
        ("tests/capacity/test_crossover_stderr.py",),
    ),
    Mutation(
        "moe-activations-all-experts",
        "specsim/cost/roofline.py",
        "ffn += model.moe_layers * (moe.top_k + moe.shared_experts) * moe.expert_ffn",
        "ffn += model.moe_layers * (moe.experts + moe.shared_experts) * moe.expert_ffn",
        "MoE: a token's activations pass through its top-k routed and shared experts only",
        ("tests/cost/test_moe_activations.py",),
    ),
    Mutation(
        "plan-stop-paying-batch",
        "specsim/plan/limits.py",
        "after = [b for b in tried if pays and b > pays[-1]]",
        "after = [b for b in tried if pays and b >= pays[-1]]",
        "plan: an option stops paying at the first batch tried past the last that pays",
        ("tests/plan/test_plan_limits.py",),
    ),
    Mutation(
        "plan-stop-paying-rate",
        "specsim/plan/limits.py",
        "rate = b / (steps[b] * mean_output)",
        "rate = b / steps[b]",
        "plan: the stop-paying rate is Little's law over a request's output tokens",
        ("tests/plan/test_plan_limits.py",),
    ),
    Mutation(
        "plan-what-if-shift",
        "specsim/plan/limits.py",
        "min(1.0, max(0.0, a + delta))",
        "min(1.0, max(0.0, a + abs(delta)))",
        "plan: the acceptance what-if shifts acceptance down as well as up",
        ("tests/plan/test_plan_limits.py",),
    ),
    Mutation(
        "plan-next-card-faster",
        "specsim/plan/limits.py",
        "        if hw.mem_bandwidth <= bw:\n            continue",
        "        if hw.mem_bandwidth < bw:\n            continue",
        "plan: the next card up has more memory bandwidth than the deployment's",
        ("tests/plan/test_plan_limits.py",),
    ),
    Mutation(
        "serving-position-lookahead",
        "specsim/sim/serving/simulate.py",
        "draft_new_tokens=out + max(reach - 1, 0),",
        "draft_new_tokens=out,",
        "serving: a run whose last drafts pass the draft's max_position is refused up front",
        ("tests/sim/serving/test_serving_positions.py",),
    ),
    Mutation(
        "tree-position-depth",
        "specsim/sim/serving/tree_batch.py",
        "new_tokens=out_tok + plan.reach,",
        "new_tokens=out_tok,",
        "tree serving: a request whose tree would verify past max_position is refused up front",
        ("tests/sim/serving/test_serving_positions.py",),
    ),
)
