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
)
