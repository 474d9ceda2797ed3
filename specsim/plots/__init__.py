"""Figures: tidy DataFrames in, matplotlib Figures out (the cost model's and calibration's
figures in :mod:`specsim.plots.cost`, the fidelity page's in :mod:`specsim.plots.fidelity`).
"""

from specsim.plots.cost import (
    plot_calibration,
    plot_cost_coefficient,
    plot_verification_factor,
)
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
    plot_lines,
    plot_validation_z,
    require_columns,
    set_alt_text,
    style_map,
)

__all__ = [
    "plot_verification_factor",
    "plot_cost_coefficient",
    "plot_calibration",
    "figure",
    "Style",
    "STYLE_CYCLE",
    "LINESTYLES",
    "style_map",
    "require_columns",
    "plot_lines",
    "grouped_bars",
    "legend_outside",
    "describe",
    "set_alt_text",
    "alt_text",
    "ALT_TEXT_ATTR",
    "plot_validation_z",
]
