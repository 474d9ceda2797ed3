"""The mutation check's entries for cost bugs that only a study or a docs page caught, or
nothing (issue 35): each now has a direct test. Run by ``tests/mutations.py`` with the
others. Not collected by pytest; importing it runs nothing.

Left for the plan's rewrite (their direct tests need the plan's code paths,
``specsim/plan/limits.py``): the stop-paying batch (``stops_paying``), the what-if shift and
the next card (``_next_card``), caught today by the docs-page comparison test only.
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
)
