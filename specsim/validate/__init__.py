"""Validation: the simulator against the closed forms and queueing theory, and every measurement
predicted (fidelity).
"""

from specsim.validate.forms import (
    DEFAULT_ALPHAS,
    DEFAULT_CS,
    DEFAULT_GAMMAS,
    assumptions_dropped,
    check_grid,
    check_summary,
    predict_runs,
    validation_tables,
)

__all__ = [
    "DEFAULT_ALPHAS",
    "DEFAULT_GAMMAS",
    "DEFAULT_CS",
    "check_grid",
    "assumptions_dropped",
    "validation_tables",
    "check_summary",
    "predict_runs",
]
