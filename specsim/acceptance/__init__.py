"""Acceptance: processes (which drafted tokens the target accepts), fits to measured sequences, the
measured real-text alphas and acceptance under shift.
"""

from specsim.acceptance.processes import (
    AcceptanceDraw,
    AcceptanceProcess,
    DistributionAcceptance,
    IIDAcceptance,
    MarkovAcceptance,
    PositionalAcceptance,
    TraceAcceptance,
    accepted_in_block,
    leading_run,
)

__all__ = [
    "AcceptanceDraw",
    "AcceptanceProcess",
    "IIDAcceptance",
    "PositionalAcceptance",
    "MarkovAcceptance",
    "TraceAcceptance",
    "DistributionAcceptance",
    "accepted_in_block",
    "leading_run",
]
