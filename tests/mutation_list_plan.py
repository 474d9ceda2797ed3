"""Mutations of ``specsim plan``'s numbers and of the costs it reads (the mutation check's
list, :mod:`mutations`): each a one-line bug that moves a number the plan prints."""

from __future__ import annotations

from mutation_list import Mutation  # beside this script: on the path

PLAN: tuple[Mutation, ...] = (
    Mutation(
        "plan-slo-on-the-median",
        "specsim/plan/verdict.py",
        "checks.append(row.tpot_p99_s.value <= request.slo_tpot_p99_s)",
        "checks.append(row.tpot_p50_s.value <= request.slo_tpot_p99_s)",
        "plan: the TPOT target is checked on the p99, not the median",
        ("tests/plan/test_plan_verdict.py",),
    ),
    Mutation(
        "plan-cost-one-gpu",
        "specsim/plan/evaluation.py",
        "per_s = request.price_per_gpu_hour * gpus / 3600.0",
        "per_s = request.price_per_gpu_hour / 3600.0",
        "plan: $/M tokens bills every device of the tensor-parallel group",
        ("tests/test_bad_inputs_plan.py",),
    ),
    Mutation(
        "plan-cost-own-device-draft",
        "specsim/plan/evaluation.py",
        "return dep.tensor_parallel + (own(dep).tensor_parallel if callable(own) else 1)",
        "return dep.tensor_parallel",
        "plan: a draft placed on a device of its own is billed for that device",
        ("tests/test_bad_inputs_plan.py",),
    ),
    Mutation(
        "plan-capacity-closed-form",
        "specsim/plan/answer.py",
        "if rate > cap and r.stable is not False:",
        "if False:",
        "plan: a rate above what a row serves at full batch is NOT STABLE, however short the run",
        ("tests/test_bad_inputs_plan.py",),
    ),
    Mutation(
        "plan-ratio-interval-below-zero",
        "specsim/plan/evaluation.py",
        "return Estimate(v, max(lo, 0.0), hi)",
        "return Estimate(v, lo, hi)",
        "plan: a positive ratio's interval stops at 0",
        ("tests/test_bad_inputs_plan.py",),
    ),
    Mutation(
        "plan-break-even-gain",
        "specsim/plan/breakeven.py",
        "return price(chain_tree(k), Shifted(proposer, alpha)) / none - 1.0",
        "return price(chain_tree(k), Shifted(proposer, alpha)) / none - 0.95",
        "plan: the break-even is where a chain's tokens per second equal no speculation's",
        ("tests/plan/test_plan_breakeven.py",),
    ),
    Mutation(
        "plan-break-even-lowest-k",
        "specsim/plan/breakeven.py",
        "alpha, k = min(found) if found else (None, None)",
        "alpha, k = max(found) if found else (None, None)",
        "plan: the break-even is the lowest over k, where the option starts to pay",
        ("tests/plan/test_plan_breakeven.py",),
    ),
    Mutation(
        "engine-per-request-position-rate",
        "specsim/sim/results/engine_metrics.py",
        "[float(x) for x in np.mean(at[has] / per_d[:, None], axis=0)]",
        "[float(x) for x in np.mean(at[has] / drafted[has][:, None], axis=0)]",
        "engine metrics: a request's per-position acceptance is over its drafts, not its tokens",
        ("tests/sim/serving/test_serving_engine.py",),
    ),
    Mutation(
        "selfspec-step-on-model",
        "specsim/proposers/selfspec.py",
        "return dataclasses.replace(target, target=self.draft_model(target.target))",
        "return target.on_model(self.draft_model(target.target))",
        "self-speculation: a draft step runs in the deployment's formats and parallelism",
        ("tests/proposers/test_proposer_selfspec.py",),
    ),
)
