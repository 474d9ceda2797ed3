"""The report: every study's fast form on its defaults, one self-contained HTML page, and a
real browser (headless Chromium, when installed) that loads every figure."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
import pytest
from browser import CHROMIUM, dump_dom

from specsim.cli import main
from specsim.plan.cases import report_cases
from specsim.plots.figures import alt_text
from specsim.report.page import (
    REPORT_STUDIES,
    Report,
    build_report,
    markdown_to_html,
    validate_figure,
)
from specsim.validate.forms import check_summary


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, list[tuple[int, int, str]]]:
    calls: list[tuple[int, int, str]] = []
    out = tmp_path_factory.mktemp("report")
    rep = build_report(
        out,
        seed=5,
        fast=True,
        demo_blocks=20_000,
        progress=lambda d, t, label: calls.append((d, t, label)),
    )
    return rep, calls


@pytest.mark.slow
def test_report_runs_every_study_and_writes_its_files(
    report: tuple[Report, list[tuple[int, int, str]]],
) -> None:
    rep, calls = report
    assert [s.name for s in rep.studies] == list(REPORT_STUDIES)
    for s in rep.studies:
        folder = rep.out_dir / s.name
        back = pd.read_csv(folder / f"{s.name}.csv")
        assert back.shape == s.data.shape
        assert (folder / "summary.md").read_text(encoding="utf-8").strip() == s.summary.strip()
        for key in s.figures:
            assert (folder / f"{key}.png").stat().st_size > 1000
            assert (folder / f"{key}.svg").stat().st_size > 1000
    # paper includes the Table 2 prediction (issue 6)
    paper = rep.studies[0]
    assert (paper.data["part"] == "table2").sum() == 12 * 4
    assert "table2_predicted" in paper.figures
    # progress: one call per step, in order, ending at total
    total = calls[-1][1]
    assert [c[0] for c in calls] == list(range(total + 1))
    assert calls[-1][2] == "done"


@pytest.mark.slow
def test_report_page_is_self_contained(report: tuple[Report, list[tuple[int, int, str]]]) -> None:
    rep, _ = report
    page = rep.html.read_text(encoding="utf-8")
    n_figures = (
        sum(len(s.figures) for s in rep.studies) + 4
    )  # + the z plot and the three fidelity figures
    images = re.findall(r'<img alt="[^"]+" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == n_figures
    assert all(len(b) > 1000 for b in images)
    for s in rep.studies:  # alt text that says what the figure shows
        for fig in s.figures.values():
            text = alt_text(fig)
            assert text and f'alt="{html.escape(text)}"' in page
    assert not re.search(r'(src|href)="https?://', page)  # nothing fetched from outside
    for s in rep.studies:
        assert f'<section id="{s.name}">' in page
        first = next(ln for ln in s.summary.splitlines() if ln.startswith("#"))
        assert html.escape(first.lstrip("# "), quote=False) in page
    assert "Exact speculative sampling, one position, two tokens" in page
    assert rep.validate, rep.validate_note
    for title, table in rep.validate.items():
        assert title in page
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower())
        assert len(pd.read_csv(rep.out_dir / f"validate-{slug}.csv")) == len(table)
    checks = next(iter(rep.validate.values()))
    assert f"({int(checks['ok'].sum())} of {len(checks)} checks pass)" in page
    fidelity = pd.read_csv(rep.out_dir / "fidelity.csv")
    assert '<section id="fidelity">' in page and f"({len(fidelity)} rows, " in page


@pytest.mark.slow
def test_report_shows_the_check_summary_and_a_z_plot_not_the_grid(
    report: tuple[Report, list[tuple[int, int, str]]],
) -> None:
    rep, _ = report
    page = rep.html.read_text(encoding="utf-8")
    checks = rep.validate["closed forms against the simulator"]
    section = page.split('<section id="validate">')[1].split("</section>")[0]
    summary = check_summary(checks)
    for q, worst in zip(summary["quantity"], summary["worst_abs_z"], strict=True):
        assert f"<td>{q}</td>" in section and f"{worst:.4g}" in section
    assert section.count("<tr>") < len(checks)  # the summary, not the 144-row grid
    assert section.count("<img ") == 1
    alt = alt_text(validate_figure(checks))
    assert alt and f'alt="{html.escape(alt)}"' in section
    assert "validate-closed-forms-against-the-simulator.csv" in section  # the full grid


# What a reader of the report or the docs cannot use: an issue tracker's numbers, a folder
# outside the checkout.
_INTERNAL = re.compile(r"\bissues? \d+|shared/data|\.\./shared")


@pytest.mark.slow
def test_report_names_no_issue_and_no_path_outside_the_checkout(
    report: tuple[Report, list[tuple[int, int, str]]],
) -> None:
    rep, _ = report
    page = rep.html.read_text(encoding="utf-8")
    text = re.sub(r'src="data:image/png;base64,[^"]+"', "", page)
    assert not _INTERNAL.search(text), _INTERNAL.search(text)
    outside = str(Path(__file__).resolve().parents[3])  # the folder holding the checkout
    assert f"{outside}/shared" not in text


def test_docs_name_no_issue_and_no_path_outside_the_checkout() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page in sorted(docs.rglob("*.md")):
        if page.name == "api.md":  # generated from the docstrings, checked by test_docs
            continue
        found = _INTERNAL.search(page.read_text(encoding="utf-8"))
        assert not found, (page.name, found.group(0) if found else None)


def test_markdown_subset() -> None:
    md = (
        "### T\n\ntext with `a<b` and **bold**\n\n| x | y |\n| --- | --- |\n| 1 | 2 |\n\n"
        "- one\n- two"
    )
    out = markdown_to_html(md)
    assert "<h3>T</h3>" in out and "<code>a&lt;b</code>" in out and "<strong>bold</strong>" in out
    assert "<th>x</th><th>y</th>" in out and "<td>1</td><td>2</td>" in out
    assert "<li>one</li>\n<li>two</li>" in out and "---" not in out


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (apt-get install chromium)")
def test_every_figure_loads_in_a_real_browser(
    report: tuple[Report, list[tuple[int, int, str]]], tmp_path: Path
) -> None:
    rep, _ = report
    # + the z plot, the three fidelity figures and the opening's plan verdicts (one each)
    n_figures = sum(len(s.figures) for s in rep.studies) + 4 + len(report_cases())
    probe = (
        "<script>window.addEventListener('load', () => {"
        "const imgs = Array.from(document.images);"
        "const ok = imgs.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);"
        "document.body.setAttribute('data-images', ok.length + '/' + imgs.length);"
        "const root = document.documentElement;"
        "document.body.setAttribute('data-overflow', root.scrollWidth - root.clientWidth);"
        "});</script>"
    )
    page = rep.html.read_text(encoding="utf-8").replace("</body>", probe + "</body>")
    probed = tmp_path / "probed.html"
    probed.write_text(page, encoding="utf-8")
    out = dump_dom(probed, tmp_path)
    m = re.search(r'data-images="(\d+)/(\d+)"', out)
    assert m, out[:2000]
    assert int(m.group(2)) == n_figures
    assert int(m.group(1)) == n_figures, f"only {m.group(1)} of {n_figures} figures loaded"
    wide = re.search(r'data-overflow="(-?\d+)"', out)
    assert wide and int(wide.group(1)) <= 0, "the page is wider than the window (a table?)"


def test_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rep"
    assert main(["report", "--out", str(out), "--study", "bill", "--blocks", "20000"]) == 0
    captured = capsys.readouterr()
    assert "acceptance sum min(p, q)       0.6" in captured.out
    from specsim.plan.cases import report_cases  # the opening's verdicts, on the terminal too

    for case in report_cases():
        line = next(ln for ln in captured.out.splitlines() if ln.startswith(f"{case.title}: "))
        assert line.split(": ", 1)[1].split()[0] in ("Turn", "Keep", "NOT")  # a verdict's start
    assert f"output folder: {out.resolve()}" in captured.out
    assert "[" in captured.err and "done" in captured.err  # the progress bar
    assert (out / "index.html").is_file() and (out / "bill" / "bill.csv").is_file()
    with pytest.raises(SystemExit):
        main(["report", "--out", str(out), "--study", "nope"])


def test_validate_tables_are_the_quick_grid_of_specsim_validate() -> None:
    import numpy as np

    from specsim.report.page import validate_tables
    from specsim.validate.forms import QUICK_ALPHAS, QUICK_GAMMAS, validation_tables

    tables, note = validate_tables(np.random.default_rng(0), fast=True)
    checks, dropped = validation_tables(np.random.default_rng(0), quick=True)
    assert list(tables) == [
        "closed forms against the simulator",
        "assumptions dropped",
        "serving against queueing theory",
        "tree simulator against the tree closed forms",
    ]
    pd.testing.assert_frame_equal(tables["closed forms against the simulator"], checks)
    queueing = tables["serving against queueing theory"]
    assert queueing["pass"].all() and len(queueing) >= 4
    assert tables["tree simulator against the tree closed forms"]["pass"].all()
    pd.testing.assert_frame_equal(tables["assumptions dropped"], dropped)
    assert set(checks["alpha"]) == set(QUICK_ALPHAS) and set(checks["gamma"]) == set(QUICK_GAMMAS)
    assert "--quick" in note
