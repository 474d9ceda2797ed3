"""The report and the studies' runner: one HTML page of every study, the validation tables and the
sampling demo; the reference-page generator.
"""

from specsim.report.page import (
    DEFAULT_OUT,
    REPORT_STUDIES,
    Progress,
    Report,
    build_report,
    format_demo,
    markdown_to_html,
    render_html,
    validate_figure,
    validate_tables,
)

__all__ = [
    "REPORT_STUDIES",
    "DEFAULT_OUT",
    "Report",
    "Progress",
    "build_report",
    "format_demo",
    "markdown_to_html",
    "validate_tables",
    "validate_figure",
    "render_html",
]
