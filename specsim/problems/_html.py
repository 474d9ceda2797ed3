"""Render a problem set as one self-contained HTML page to print: statements, then the key.

The page needs nothing from the network (no scripts, no fonts, no math library):
math is shown as its TeX source in a serif italic span, with Greek letters and
common symbols (``\\alpha``, ``\\times``, ``\\le``, ...) written as the characters
they stand for, which reads well for the short formulas the problems use. Its
print stylesheet starts each problem on a new page and the answer key on pages of
its own, so printing the file gives the handout and, separately, the key;
:func:`print_pdf` prints it to PDF with a headless Chromium.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from specsim.problems._core import Answer
from specsim.problems._render import (
    INTRO,
    LEVEL_NAMES,
    REFERENCES,
    ProblemSet,
    blocks,
    by_level,
    cells,
)

__all__ = ["CSS", "BROWSERS", "render_html", "find_browser", "print_pdf"]

CSS = """
body { font-family: Georgia, 'Times New Roman', serif; max-width: 44em; margin: 2em auto;
       line-height: 1.45; color: #111; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 1.6em; }
h3 { font-size: 1.05em; margin-top: 1.3em; }
.math { font-style: italic; white-space: nowrap; }
.display { display: block; text-align: center; margin: 0.6em 0; white-space: normal; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #999; padding: 0.15em 0.5em; text-align: left; }
code { font-family: 'DejaVu Sans Mono', monospace; font-size: 0.88em; }
section.problem { break-inside: avoid; page-break-inside: avoid; }
section.key { break-before: page; page-break-before: always; }
h2 { break-after: avoid; page-break-after: avoid; }
@media print {
  body { margin: 0; max-width: none; font-size: 11pt; }
  a { color: inherit; text-decoration: none; }
  section.statement + section.statement { break-before: page; page-break-before: always; }
  h2.level ~ h2.level { break-before: page; page-break-before: always; }
}
@page { margin: 2cm; }
"""
"""The page's stylesheet. Printed, every problem starts a new page (the handout, one problem a
sheet), and ``section.key`` starts the answer key on a page of its own."""

_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`")

_SYMBOLS = {
    "alpha": "\u03b1",
    "gamma": "\u03b3",
    "kappa": "\u03ba",
    "eta": "\u03b7",
    "mu": "\u03bc",
    "pi": "\u03c0",
    "rho": "\u03c1",
    "sigma": "\u03c3",
    "times": "\u00d7",
    "cdot": "\u00b7",
    "le": "\u2264",
    "ge": "\u2265",
    "sim": "~",
    "to": "\u2192",
    "infty": "\u221e",
    "sum": "\u03a3",
    "dots": "\u2026",
    "qquad": "\u2003",
}
_MACRO = re.compile(r"\\(" + "|".join(_SYMBOLS) + r")(?![A-Za-z])")
_WRAPPER = re.compile(r"\\(?:mathrm|text|mathbf|mathbb)\{([^{}]*)\}")


def _math(tex: str) -> str:
    """TeX made readable as text: symbols as characters, font wrappers dropped (escaped)."""
    text = _WRAPPER.sub(r"\1", tex)
    text = _MACRO.sub(lambda m: _SYMBOLS[m.group(1)], text).replace("\\,", " ")
    return html.escape(text)


def _plain(text: str) -> str:
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        if m.group(1) is not None:
            out.append("<strong>" + html.escape(m.group(1)) + "</strong>")
        else:
            out.append("<code>" + html.escape(m.group(2)) + "</code>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _inline(text: str) -> str:
    pieces = text.split("$")
    if len(pieces) % 2 == 0:
        raise ValueError(f"unbalanced $ in problem text: {text!r}")
    return "".join(
        f'<span class="math">{_math(piece)}</span>' if i % 2 else _plain(piece)
        for i, piece in enumerate(pieces)
    )


def _paragraphs(paragraphs: Sequence[str]) -> list[str]:
    out = []
    for kind, items in blocks(paragraphs):
        if kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in items) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(c)}</th>" for c in cells(items[0]))
            rows = "".join(
                "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in cells(r)) + "</tr>"
                for r in items[1:]
            )
            out.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif items[0].startswith("$$") and items[0].endswith("$$"):
            tex = _math(items[0][2:-2].strip())
            out.append(f'<p><span class="math display">{tex}</span></p>')
        else:
            out.append(f"<p>{_inline(items[0])}</p>")
    return out


def _answer(a: Answer) -> str:
    unit = f" {html.escape(a.unit)}" if a.unit else ""
    return (
        f'<li>{html.escape(a.what)}, <span class="math">{_math(a.symbol)}</span> = '
        f"<strong>{a.text}</strong>{unit}</li>"
    )


def render_html(ps: ProblemSet, *, command: str) -> str:
    """The set and its answer key as one HTML page; ``command`` is the line that made it."""
    title = f"Problem set, seed {ps.seed}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Generated by <code>{html.escape(command)}</code>. {_plain(INTRO)}</p>",
        f"<p>{_plain(REFERENCES)}</p>",
    ]
    for level, probs in by_level(ps.problems).items():
        out.append(f'<h2 class="level">Level {level}: {html.escape(LEVEL_NAMES[level])}</h2>')
        for p in probs:
            out.append(f'<section class="problem statement" id="problem-{p.number}">')
            out.append(f"<h3>Problem {p.number}. {html.escape(p.title)}</h3>")
            out += _paragraphs(p.statement)
            out.append("</section>")
    out.append('<section class="key"><h2>Answer key</h2>')
    for p in ps.problems:
        out.append(f'<section class="problem" id="solution-{p.number}">')
        out.append(f"<h3>Solution {p.number}. {html.escape(p.title)}</h3>")
        out += _paragraphs(p.solution)
        out.append("<p><strong>Answers</strong>, rounded as shown:</p>")
        out.append("<ul>" + "".join(_answer(a) for a in p.answers) + "</ul>")
        out.append("</section>")
    out.append("</section></body></html>")
    return "\n".join(out) + "\n"


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""Headless browsers that can print a page to PDF, looked up on ``PATH`` in this order."""


def find_browser() -> str | None:
    """The first of :data:`BROWSERS` on ``PATH`` (its full path), or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def print_pdf(page: str, path: Path | str, *, browser: str | None = None) -> Path:
    """Print the HTML ``page`` to the PDF file ``path`` with a headless Chromium.

    The print stylesheet (:data:`CSS`) does the layout: a problem a page, the key on pages of its
    own. ``browser`` is the executable (default: :func:`find_browser`); without one this raises
    ValueError saying what to install, rather than writing nothing silently.
    """
    exe = browser or find_browser()
    if exe is None:
        raise ValueError(
            "--pdf: no headless Chromium found on PATH (looked for " + ", ".join(BROWSERS) + "); "
            "install chromium, or write --html FILE and print it from any browser"
        )
    out = Path(path).resolve()
    if not out.parent.is_dir():
        raise ValueError(f"--pdf: cannot write {path}: the folder {out.parent} does not exist")
    with tempfile.TemporaryDirectory(prefix="specsim-pdf-") as tmp:
        source = Path(tmp) / "handout.html"
        source.write_text(page, encoding="utf-8")
        cmd = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            "--no-pdf-header-footer",
            f"--print-to-pdf={out}",
            source.as_uri(),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        except OSError as exc:
            raise ValueError(f"--pdf: cannot run the browser {exe!r}: {exc.strerror}") from exc
    if done.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        raise ValueError(
            f"--pdf: {exe} could not print {out} (exit {done.returncode}): "
            + " ".join(done.stderr.split()[-40:])
        )
    return out
