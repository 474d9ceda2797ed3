"""The report: every study, the validation tables and the sampling demo on one HTML page.

:func:`build_report` runs the studies (fast forms by default) on their embedded
defaults, the closed-form checks of :mod:`specsim.validate.forms` and the two-token
sampling demonstration of :mod:`specsim.report.demo`, writes each study's CSV, PNG
and SVG figures and ``summary.md`` into a subfolder of the output folder, and
writes ``index.html`` beside them: a self-contained page (figures embedded as
base64 PNG, tables inline, no script and no external resource) that opens in
any browser. :func:`render_html` builds the page from results in memory.

Every image carries the figure's alt text (:func:`specsim.plots.figures.alt_text`) in
its ``alt`` attribute. The closed-form checks are shown as their per-quantity
summary (:func:`specsim.validate.forms.check_summary`) and a plot of z per check
(:func:`validate_figure`); the full grid is in the CSV beside the page.
"""

from __future__ import annotations

import base64
import html
import io
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from specsim import __version__
from specsim.plan.cases import opening_html, report_answers, report_cases, user_case
from specsim.plots.fidelity import plot_fidelity, plot_llamacpp_fidelity, plot_stack_fidelity
from specsim.plots.figures import alt_text, plot_validation_z
from specsim.report.demo import SamplingDemo, two_token_demo
from specsim.report.markup import inline_markup, markdown_to_html
from specsim.report.studies import STUDY_NAMES, StudyOutput, run_study, save_study, study_rng
from specsim.validate.fidelity import fidelity_summary, fidelity_table
from specsim.validate.forms import Z_CHECK, check_summary, validation_tables
from specsim.validate.queueing import queueing_checks
from specsim.validate.tree_forms import tree_checks

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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

REPORT_STUDIES: tuple[str, ...] = tuple(n for n in STUDY_NAMES if n != "table2")
"""The studies the report runs (``paper`` includes ``table2``)."""

DEFAULT_OUT = "specsim-report"

Progress = Callable[[int, int, str], None]
"""Called as ``progress(done, total, label)`` before each step and once at the end."""


@dataclass(frozen=True)
class Report:
    """What :func:`build_report` produced and where it wrote it."""

    out_dir: Path
    html: Path
    studies: tuple[StudyOutput, ...]
    demo: SamplingDemo
    validate: dict[str, pd.DataFrame]
    validate_note: str
    seconds: float
    verdicts: tuple[tuple[str, str], ...] = ()  # (case title, verdict sentence) of the opening


def format_demo(d: SamplingDemo) -> str:
    """The sampling demo as aligned plain text (what ``specsim report`` used to print)."""

    def vec(x: tuple[float, ...]) -> str:
        return "(" + ", ".join(f"{v:.6g}" for v in x) + ")"

    mc = ", ".join(
        f"{v:.4f} ± {1.96 * s:.4f}" for v, s in zip(d.mc_emitted, d.mc_emitted_se, strict=True)
    )
    corrected = (
        "n/a" if d.rejected_b_corrected_to_a is None else f"{d.rejected_b_corrected_to_a:.4f}"
    )
    return "\n".join(
        [
            "Exact speculative sampling, one position, two tokens (A, B)",
            f"  target p                       {vec(d.target)}",
            f"  draft q                        {vec(d.draft)}",
            f"  acceptance sum min(p, q)       {d.acceptance:.6g}",
            f"  correction norm(max(0, p - q)) {vec(d.correction)}",
            f"  emitted distribution           {vec(d.emitted)}",
            f"  max |emitted - p|              {d.max_deviation:.3g}",
            f"Monte Carlo check of verify ({d.blocks:,} blocks, 95% intervals)",
            f"  acceptance                     {d.mc_acceptance:.4f} ± "
            f"{1.96 * d.mc_acceptance_se:.4f}",
            f"  emitted frequencies            {mc}",
            f"  rejected B corrected to A      {corrected}",
        ]
    )


def validate_tables(rng: np.random.Generator, *, fast: bool) -> tuple[dict[str, pd.DataFrame], str]:
    """The tables of :mod:`specsim.validate.forms` (the quick grid when ``fast``), and a note."""
    checks, dropped = validation_tables(rng, quick=fast)
    queueing = queueing_checks(rng, quick=fast)
    trees = tree_checks(rng, quick=fast)
    return (
        {
            "closed forms against the simulator": checks,
            "assumptions dropped": dropped,
            "serving against queueing theory": queueing,
            "tree simulator against the tree closed forms": trees,
        },
        "Tables of specsim.validate.forms.check_grid, assumptions_dropped, "
        "specsim.validate.queueing.queueing_checks and specsim.validate.tree_forms.tree_checks"
        + (" (the quick grid of `specsim validate --quick`)." if fast else "."),
    )


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower())


def _png(study: StudyOutput, key: str) -> str:
    """The figure as base64 PNG: the file :func:`save_study` wrote, else rendered now."""
    saved = study.files.get(f"{key}.png")
    if saved is not None and saved.is_file():
        return base64.b64encode(saved.read_bytes()).decode("ascii")
    return _render_png(study.figures[key])


def _render_png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure_html(fig: Figure, png: str, caption: str) -> str:
    """An embedded figure: its alt text in ``alt``, its title and ``caption`` below it."""
    esc = html.escape
    alt = alt_text(fig) or caption
    title = fig.get_suptitle().replace("\n", " ")
    return (
        f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{esc(title)}{'. ' if title else ''}{caption}</figcaption></figure>"
    )


def validate_figure(checks: pd.DataFrame) -> Figure:
    """z of every closed-form check, grouped by quantity, with the verdict's band
    (:data:`specsim.validate.forms.Z_CHECK` standard errors)."""
    return plot_validation_z(checks, limit=Z_CHECK)


def _is_check_grid(table: pd.DataFrame) -> bool:
    return {"quantity", "z", "ok", "alpha", "gamma", "c"} <= set(table.columns)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{margin-bottom:0.2em} h2{border-bottom:1px solid #ccc;padding-bottom:0.2em;margin-top:2em}
figure{margin:1em 0} figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:0.85em;color:#555}
table.data{border-collapse:collapse;font-size:0.85em;margin:0.8em 0;display:block;
max-width:100%;overflow-x:auto}
table.data th,table.data td{border:1px solid #ddd;padding:2px 6px;text-align:right}
table.data th{background:#f4f4f4} pre{background:#f7f7f7;padding:0.8em;overflow-x:auto}
.meta{color:#555;font-size:0.9em} nav li{display:inline;margin-right:1em}
"""


def _table_html(df: pd.DataFrame, max_rows: int = 400) -> str:
    shown = df.head(max_rows)
    text = shown.to_html(
        index=False, classes="data", border=0, float_format=lambda x: f"{x:.4g}", na_rep=""
    )
    if len(df) > max_rows:
        text += f"<p class='meta'>first {max_rows} of {len(df)} rows</p>"
    return text


def render_html(
    studies: Sequence[StudyOutput],
    *,
    demo: SamplingDemo,
    validate: dict[str, pd.DataFrame],
    validate_note: str,
    seed: int,
    fast: bool,
    seconds: float,
    fidelity: pd.DataFrame | None = None,
    opening: str = "",
) -> str:
    """The report page (self-contained HTML) from results in memory; ``fidelity``: the
    table of :func:`specsim.validate.fidelity.fidelity_table`, shown summarized with its figure;
    ``opening``: the plan verdicts (:func:`specsim.plan.cases.opening_html`), first."""
    esc = html.escape
    nav = "".join(f'<li><a href="#{esc(s.name)}">{esc(s.name)}</a></li>' for s in studies)
    nav += '<li><a href="#validate">validate</a></li>'
    nav += '<li><a href="#fidelity">fidelity</a></li>' if fidelity is not None else ""
    nav += '<li><a href="#demo">sampling demo</a></li>'
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>specsim report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>specsim report</h1>",
        f"<p class='meta'>specsim {esc(__version__)}, seed {seed}, "
        f"{'fast' if fast else 'full'} forms of the studies, {seconds:.0f} s, {when}. Each "
        "study's tidy CSV, PNG and SVG figures and summary are in the folder of its name beside "
        "this page.</p>",
        opening,
        f"<h2>Appendices: the studies</h2><nav><ul>{nav}</ul></nav>",
    ]
    parts += _studies_html(studies)
    parts += _validate_html(validate, validate_note)
    if fidelity is not None:
        parts.append(_fidelity_html(fidelity))
    parts.append('<section id="demo"><h2>sampling demo</h2>')
    parts.append(f"<pre>{esc(format_demo(demo))}</pre></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _studies_html(studies: Sequence[StudyOutput]) -> list[str]:
    """One section a study: its timing and data link, its summary, its figures."""
    esc = html.escape
    parts: list[str] = []
    for s in studies:
        parts.append(f'<section id="{esc(s.name)}"><h2>{esc(s.name)}</h2>')
        parts.append(
            f"<p class='meta'>{s.seconds:.1f} s; data: <a href='{esc(s.name)}/"
            f"{esc(s.name)}.csv'>{esc(s.name)}.csv</a> ({len(s.data)} rows)</p>"
        )
        parts.append(markdown_to_html(s.summary))
        for key, fig in s.figures.items():
            link = f"{esc(key)} (<a href='{esc(s.name)}/{esc(key)}.svg'>SVG</a>)"
            parts.append(_figure_html(fig, _png(s, key), link))
        parts.append("</section>")
    return parts


def _validate_html(validate: dict[str, pd.DataFrame], validate_note: str) -> list[str]:
    """The validation section: a check grid as its per-quantity summary and a plot of z
    (the grid itself in the CSV beside the page), any other table in full."""
    esc = html.escape
    parts: list[str] = []
    parts.append('<section id="validate"><h2>validate</h2>')
    parts.append(f"<p>{inline_markup(validate_note)}</p>")
    for title, table in validate.items():
        csv = f"validate-{_slug(title)}.csv"
        if not _is_check_grid(table):
            parts.append(f"<h3>{esc(title)}</h3>{_table_html(table)}")
            continue
        extra = f" ({int(table['ok'].sum())} of {len(table)} checks pass)"
        parts.append(f"<h3>{esc(title)}{esc(extra)}</h3>")
        parts.append(
            f"<p class='meta'>Per quantity: the checks, how many pass (|z| &lt;= {Z_CHECK:g}) "
            f"and the worst |z|; every check is in <a href='{esc(csv)}'>{esc(csv)}</a>.</p>"
        )
        parts.append(_table_html(check_summary(table)))
        fig = validate_figure(table)
        parts.append(_figure_html(fig, _render_png(fig), f"z of each of the {len(table)} checks"))
    parts.append("</section>")
    return parts


def _fidelity_html(table: pd.DataFrame) -> str:
    misses = int((table["verdict"] == "miss").sum())
    fig, stacks, llama = (
        plot_fidelity(table),
        plot_stack_fidelity(table),
        plot_llamacpp_fidelity(table),
    )
    return "".join(
        [
            '<section id="fidelity"><h2>fidelity</h2>',
            f"<p>Every committed measurement and published anchor, predicted against measured "
            f"out of sample ({len(table)} rows, {misses} outside their measured interval; every "
            "row is in <a href='fidelity.csv'>fidelity.csv</a>, and docs/fidelity.md says why "
            "the misses miss; the Table 2 rows are the predictions of the paper section, one "
            "computation). Per family and quantity, against the accuracy goals:</p>",
            _table_html(fidelity_summary(table)),
            _figure_html(fig, _render_png(fig), "predicted against measured, every anchor"),
            _figure_html(stacks, _render_png(stacks), "published plain passes, by the stacks"),
            _figure_html(llama, _render_png(llama), "llama.cpp's speculative runs on this CPU"),
            "</section>",
        ]
    )


def build_report(
    out_dir: Path | str = DEFAULT_OUT,
    *,
    seed: int = 2023,
    fast: bool = True,
    studies: Sequence[str] = REPORT_STUDIES,
    demo_blocks: int = 200_000,
    progress: Progress | None = None,
    plan: str | Path | None = None,
) -> Report:
    """Run everything and write ``index.html`` and one subfolder per study into ``out_dir``;
    the page opens with plan verdicts (:mod:`specsim.plan.cases`; ``plan``: a user's first)."""
    start = time.perf_counter()
    out = Path(out_dir)
    cases = report_cases() if plan is None else (user_case(plan), *report_cases())
    steps = ["plan verdicts, sampling demo", *studies, "validate", "write"]

    def tick(i: int, label: str) -> None:
        if progress is not None:
            progress(i, len(steps), label)

    tick(0, steps[0])
    answers = report_answers(cases)
    opening = opening_html(answers, png=_render_png)
    demo = two_token_demo(study_rng(seed, "demo"), blocks=demo_blocks)
    # Made once the plan config has been read and answered: a bad one leaves no empty folder.
    out.mkdir(parents=True, exist_ok=True)
    outputs = []
    for i, name in enumerate(studies, start=1):
        tick(i, name)
        result = run_study(name, seed=seed, fast=fast)
        save_study(result, out / name)
        outputs.append(result)
    tick(len(studies) + 1, "validate")
    tables, note = validate_tables(study_rng(seed, "validate"), fast=fast)
    for title, table in tables.items():
        table.to_csv(out / f"validate-{_slug(title)}.csv", index=False)
    fidelity = fidelity_table(study_rng(seed, "fidelity"))
    fidelity.to_csv(out / "fidelity.csv", index=False)
    tick(len(studies) + 2, "write")
    seconds = time.perf_counter() - start
    page = render_html(
        outputs,
        demo=demo,
        validate=tables,
        validate_note=note,
        seed=seed,
        fast=fast,
        seconds=seconds,
        fidelity=fidelity,
        opening=opening,
    )
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    tick(len(steps), "done")
    verdicts = tuple((case.title, answer.verdict.sentence) for case, answer in answers)
    return Report(out, index, tuple(outputs), demo, tables, note, seconds, verdicts)
