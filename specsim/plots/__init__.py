"""Figures: tidy DataFrames in, matplotlib Figures out."""

from specsim.plots.figures import (
    ALT_TEXT_ATTR,
    LINESTYLES,
    STYLE_CYCLE,
    Style,
    alt_text,
    describe,
    figure,
    grouped_bars,
    legend_outside,
    plot_calibration,
    plot_cost_coefficient,
    plot_lines,
    plot_validation_z,
    plot_verification_factor,
    set_alt_text,
    style_map,
)

__all__ = [
    "figure",
    "Style",
    "STYLE_CYCLE",
    "LINESTYLES",
    "style_map",
    "plot_lines",
    "grouped_bars",
    "legend_outside",
    "describe",
    "set_alt_text",
    "alt_text",
    "ALT_TEXT_ATTR",
    "plot_verification_factor",
    "plot_cost_coefficient",
    "plot_calibration",
    "plot_validation_z",
]
