"""Lookahead policies and tree plans: how much to draft before the target verifies (fixed,
adaptive, from the draft's signals), replays on measured sequences and the tree optimizer.
"""

from specsim.policies.engine_rules import (
    BatchSizeSchedule,
    DisableByBatchSize,
    GoodputAdaptive,
    SglangAdaptiveSteps,
)
from specsim.policies.lookahead import (
    MAX_GAMMA,
    ConfidenceThreshold,
    FixedGamma,
    HeuristicPlusTwoMinusOne,
    LoadAdaptive,
    LookaheadPolicy,
    OptimalStatic,
    Oracle,
    PolicyContext,
    batch_wide,
    check_choice,
    fixed_gamma,
)

__all__ = [
    "MAX_GAMMA",
    "PolicyContext",
    "LookaheadPolicy",
    "FixedGamma",
    "OptimalStatic",
    "ConfidenceThreshold",
    "HeuristicPlusTwoMinusOne",
    "LoadAdaptive",
    "Oracle",
    "GoodputAdaptive",
    "DisableByBatchSize",
    "BatchSizeSchedule",
    "SglangAdaptiveSteps",
    "batch_wide",
    "check_choice",
    "fixed_gamma",
]
