"""Calibration: accelerator cards and runtime profiles fitted to measured passes."""

from specsim.calibrate.cards import (
    PARAMETERS,
    TRUST_LIMITS,
    Fit,
    calibrated_card,
    card_from_ceilings,
    fit_card,
    holdout_errors,
    one_device,
    past_positions,
    predict,
    summarize_passes,
    trust_problems,
)

__all__ = [
    "PARAMETERS",
    "TRUST_LIMITS",
    "Fit",
    "one_device",
    "past_positions",
    "trust_problems",
    "summarize_passes",
    "predict",
    "fit_card",
    "holdout_errors",
    "calibrated_card",
    "card_from_ceilings",
]
