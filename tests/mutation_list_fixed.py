"""The mutation check's entries for the stacks' fixed host costs fitted on published plain
decode steps (:mod:`specsim.calibrate.fixed_costs`, :mod:`specsim.calibrate.fixed_loso`,
:mod:`specsim.calibrate.plain_rows`) and the composition that carries each fitted term into
a pass; run by ``tests/mutations.py`` with the others. Not collected by pytest; importing it
runs nothing.
"""

from __future__ import annotations

from mutation_list import Mutation  # beside this script: on the path

FIT = "specsim/calibrate/fixed_costs.py"
LOSO = "specsim/calibrate/fixed_loso.py"
ROWS = "specsim/calibrate/plain_rows.py"
COMPOSE = "specsim/cards/stack_files.py"
TESTS = ("tests/calibrate/test_fixed_costs.py",)

FIXED: tuple[Mutation, ...] = (
    Mutation(
        "fixed-pass-term",
        COMPOSE,
        "pass_overhead_s=stack.pass_overhead_s,",
        "pass_overhead_s=0.0,",
        "fixed costs: the fitted per-pass host cost reaches the composed runtime profile",
        TESTS,
    ),
    Mutation(
        "fixed-layer-term",
        COMPOSE,
        "layer_overhead_s=stack.layer_overhead_s,",
        "layer_overhead_s=0.0,",
        "fixed costs: the fitted per-layer host cost reaches the composed runtime profile",
        TESTS,
    ),
    Mutation(
        "fixed-sequence-term",
        FIT,
        "unit = with_terms(zero, {term: _UNIT})",
        'unit = with_terms(zero, {term: 0.0 if term == "sequence_overhead_s" else _UNIT})',
        "fixed costs: the per-sequence column of the design (each row's batch)",
        TESTS,
    ),
    Mutation(
        "fixed-eager-term",
        ROWS,
        "layer_overhead_s=stack.layer_overhead_s + stack.eager_layer_overhead_s,",
        "layer_overhead_s=stack.layer_overhead_s,",
        "fixed costs: a row without CUDA graphs pays the eager launch cost per layer",
        TESTS,
    ),
    Mutation(
        "fixed-relative-weights",
        FIT,
        "w = 1.0 / d.t",
        "w = np.ones_like(d.t)",
        "fixed costs: least squares on the relative error (each row weighted 1 / t)",
        TESTS,
    ),
    Mutation(
        "fixed-prior-kept",
        FIT,
        "prior = prior_stack(stack)",
        "prior = stack",
        "fixed costs: an unfitted term keeps the stack's previous number",
        TESTS,
    ),
    Mutation(
        "fixed-bounds",
        FIT,
        "bounds=(0.0, np.inf)",
        "bounds=(-np.inf, np.inf)",
        "fixed costs: no host term below zero",
        TESTS,
    ),
    Mutation(
        "loso-leak",
        LOSO,
        "fit = fit_design(d.subset(~out), stack, exact=True)",
        "fit = fit_design(d, stack, exact=True)",
        "leave-one-source-out: the refit never sees the rows it predicts",
        TESTS,
    ),
    Mutation(
        "loso-commit-rule",
        LOSO,
        "commit = med < pmed",
        "commit = True",
        "leave-one-source-out: a fit that does not beat the previous numbers is not committed",
        TESTS,
    ),
    Mutation(
        "moe-kernel-floor",
        "specsim/cost/roofline.py",
        "roof = roof + co.moe_floor_s",
        "roof = roof + 0.0 * co.moe_floor_s",
        "MoE: the expert kernel's measured fixed cost is paid once per MoE layer and pass",
        ("tests/calibrate/test_aic_moe.py",),
    ),
    Mutation(
        "moe-kernel-bandwidth",
        "specsim/cost/moe.py",
        "W = bandwidth if eff is None else hw.mem_bandwidth * eff",
        "W = bandwidth",
        "MoE: the experts are read at the expert kernel's measured bandwidth fraction",
        ("tests/calibrate/test_aic_moe.py",),
    ),
    Mutation(
        "moe-fit-cached-rows",
        "specsim/calibrate/aic_moe.py",
        "return rows.loc[(per_expert <= MAX_TOKENS_PER_EXPERT) & (read >= MIN_READ_BYTES)]",
        "return rows.loc[per_expert <= MAX_TOKENS_PER_EXPERT]",
        "MoE fit: rows whose expert weights sit in the L2 cache are left out",
        ("tests/calibrate/test_aic_moe.py",),
    ),
    Mutation(
        "moe-commit-rule",
        "specsim/calibrate/aic_moe.py",
        "better = self.fitted_median < self.current_median",
        "better = True",
        "MoE fit: only a physical fit that beats no floor out of sample is committed",
        ("tests/calibrate/test_aic_moe.py", "tests/calibrate/test_aiconfigurator.py"),
    ),
)
