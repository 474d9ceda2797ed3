"""A stack's speculative host terms fitted to forced-acceptance runs.

Engines can force the acceptance of a speculative run, so its step costs what the stack
costs at a known draft length ``k`` and acceptance length ``L`` (tokens a sequence emits
per step, the bonus token included): vLLM's synthetic rejection sampler
(``rejection_sample_method = "synthetic"`` with ``synthetic_acceptance_length`` in
``--speculative-config``, ``vllm/config/speculative.py``). A run of ``vllm bench serve``
records ``k`` and ``L`` when given ``--metadata num_speculative_tokens=K
synthetic_acceptance_length=L`` (saved in its result JSON); its step time is
``median_tpot_ms * L``.

The model prices a speculative iteration (``k`` draft steps and one verification pass of
``b (k + 1)`` new tokens, :meth:`specsim.sim.costs.costs.CardCost.uniform_iteration`) on the
stack with the plain fit's pass and sequence terms; each of ``speculation_overhead_s``,
``rejection_s_per_token`` and ``draft_step_overhead_s`` adds to it linearly, its
coefficient in a run read off the model itself (the change of the iteration time for a
unit of the term). Ordinary least squares on the excess over the model with the three
terms zeroed gives them, with standard errors from the residual variance, as in
:mod:`specsim.calibrate.stack_fit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsim.cards import HardwareCard, ModelCard
from specsim.cards.stack import StackProfile
from specsim.cards.stack_files import compose
from specsim.cost import Deployment
from specsim.sim.costs.costs import CardCost

__all__ = ["ForcedRun", "SPEC_TERMS", "fit_speculative", "iteration_s"]

SPEC_TERMS = ("speculation_overhead_s", "rejection_s_per_token", "draft_step_overhead_s")
_UNIT = 1e-3  # the step of a term used to read its coefficient (exact: the terms add)


@dataclass(frozen=True, kw_only=True)
class ForcedRun:
    """A forced-acceptance run: ``step_s`` per speculative step of ``batch`` sequences at a
    mean context ``context``, ``k`` drafted tokens and ``accept_len`` tokens emitted."""

    source: str
    batch: int
    context: float
    k: int
    accept_len: float
    step_s: float


def iteration_s(
    run: ForcedRun,
    *,
    stack: StackProfile,
    hardware: HardwareCard,
    model: ModelCard,
    draft: ModelCard,
) -> float:
    """The modelled time of one speculative iteration of ``run`` on ``stack``."""
    dep = Deployment(target=model, hardware=hardware, runtime=compose(stack, hardware))
    cost = CardCost(deployment=dep, draft=draft)
    it = cost.uniform_iteration(batch=run.batch, context_sum=run.batch * run.context, gamma=run.k)
    return float(it.time_s)


def fit_speculative(
    runs: Sequence[ForcedRun],
    *,
    stack: StackProfile,
    hardware: HardwareCard,
    model: ModelCard,
    draft: ModelCard,
) -> tuple[StackProfile, dict[str, float], dict[str, float], pd.DataFrame]:
    """The stack with :data:`SPEC_TERMS` fitted to ``runs``, the estimates, their standard
    errors and the residual table; a ValueError when the runs do not identify the three
    terms (vary the batch and ``k``) or an estimate is below zero."""

    def times(st: StackProfile) -> np.ndarray:
        return np.array(
            [iteration_s(r, stack=st, hardware=hardware, model=model, draft=draft) for r in runs]
        )

    base = _with(stack, dict.fromkeys(SPEC_TERMS, 0.0))
    zero = times(base)
    cols = [(times(_with(base, {term: _UNIT})) - zero) / _UNIT for term in SPEC_TERMS]
    X = np.column_stack(cols)
    if len(runs) <= len(SPEC_TERMS) or np.linalg.matrix_rank(X) < len(SPEC_TERMS):
        raise ValueError(
            f"--engine-output: {len(runs)} forced-acceptance runs do not identify "
            f"{', '.join(SPEC_TERMS)}: give four runs or more, at two batch sizes and two "
            "draft lengths (num_speculative_tokens) or more"
        )
    t = np.array([r.step_s for r in runs])
    coef, *_ = np.linalg.lstsq(X, t - zero, rcond=None)
    resid = t - zero - X @ coef
    s2 = float(resid @ resid) / max(len(t) - len(SPEC_TERMS), 1)
    se = np.sqrt(np.diag(s2 * np.linalg.inv(X.T @ X)))
    est = {k: float(v) for k, v in zip(SPEC_TERMS, coef, strict=True)}
    negative = [k for k, v in est.items() if v < 0]
    if negative:
        raise ValueError(
            f"--engine-output: fitted {', '.join(f'{k} = {est[k]:.3g}' for k in negative)} is "
            "below zero: the model prices these speculative runs above their measured times"
        )
    table = pd.DataFrame(
        {
            "time_s": t,
            "predicted_s": t - resid,
            "model": f"{model.slug} speculative",
            "batch": [r.batch for r in runs],
            "context": [r.context for r in runs],
            "source": [r.source for r in runs],
        }
    )
    fitted = _with(stack, est)
    return fitted, est, {k: float(v) for k, v in zip(SPEC_TERMS, se, strict=True)}, table


def _with(stack: StackProfile, terms: dict[str, float]) -> StackProfile:
    """``stack`` with the speculative terms in ``terms`` replaced."""
    return dataclasses.replace(
        stack,
        speculation_overhead_s=terms.get("speculation_overhead_s", stack.speculation_overhead_s),
        rejection_s_per_token=terms.get("rejection_s_per_token", stack.rejection_s_per_token),
        draft_step_overhead_s=terms.get("draft_step_overhead_s", stack.draft_step_overhead_s),
    )
