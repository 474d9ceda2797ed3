"""Printable handouts: the print stylesheet puts a problem on each page and the key on pages of
its own, and ``specsim problems --pdf`` prints it with headless Chromium (skipped without one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specsim.cli import main
from specsim.problems import generate, print_pdf, render_html
from specsim.problems._html import CSS, find_browser

BROWSER = find_browser()


def test_print_css_breaks_a_page_per_problem_and_before_the_key() -> None:
    page = render_html(generate(11), command="specsim problems --seed 11 --html x.html")
    assert "section.statement + section.statement { break-before: page;" in CSS
    assert "h2.level ~ h2.level { break-before: page;" in CSS
    assert "section.key { break-before: page;" in CSS
    statements = re.findall(r'<section class="problem statement" id="problem-(\d+\.\d+)">', page)
    assert statements == [p.number for p in generate(11).problems]
    assert page.count('<h2 class="level">') == 3


def test_pdf_without_a_browser_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="--pdf: cannot run the browser .*not-a-browser"):
        print_pdf("<p>x</p>", tmp_path / "x.pdf", browser=str(tmp_path / "not-a-browser"))
    with pytest.raises(ValueError, match="--pdf: cannot write .* does not exist"):
        print_pdf("<p>x</p>", tmp_path / "no" / "x.pdf", browser="chromium")
    monkeypatch.setattr("specsim.problems._html.shutil.which", lambda name: None)
    assert main(["problems", "--seed", "3", "--pdf", str(tmp_path / "y.pdf")]) == 2
    assert "--pdf: no headless Chromium found on PATH" in capsys.readouterr().err
    assert not (tmp_path / "y.pdf").exists()


def _pages(pdf: bytes) -> int:
    """The page count of the PDF's page tree (the largest /Count; Chromium writes it plain)."""
    counts = [int(n) for n in re.findall(rb"/Count (\d+)", pdf)]
    assert counts, "no page tree found"
    return max(counts)


@pytest.mark.browser
@pytest.mark.skipif(BROWSER is None, reason="needs headless Chromium (apt-get install chromium)")
def test_pdf_handout_has_a_page_per_problem_then_the_key(tmp_path: Path) -> None:
    pdf = tmp_path / "set.pdf"
    assert main(["problems", "--seed", "11", "--level", "1", "--pdf", str(pdf)]) == 0
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    n = len(generate(11, levels=[1]).problems)
    # One page per problem, then the key on at least one page of its own (a problem whose
    # statement is longer than a page would add pages, never remove them).
    assert _pages(data) >= n + 1
    both = tmp_path / "both"
    both.mkdir()
    args = ["problems", "--seed", "11", "--level", "1", "--html", str(both / "s.html")]
    assert main([*args, "--pdf", str(both / "s.pdf")]) == 0
    assert "--pdf " in (both / "s.html").read_text(encoding="utf-8")
    assert _pages((both / "s.pdf").read_bytes()) == _pages(data)
