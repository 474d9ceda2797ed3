"""The little markdown the studies write (headings, bullets, pipe tables, paragraphs, `code`
and **bold**) as HTML, for the report page."""

from __future__ import annotations

import html
import re

__all__ = ["markdown_to_html"]

_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
]


def inline_markup(text: str) -> str:
    """``text`` escaped for HTML, with its `code` and **bold** spans marked up."""
    out = html.escape(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def markdown_to_html(text: str) -> str:
    """The markdown the studies write (headings, bullets, pipe tables, paragraphs) as HTML.

    >>> markdown_to_html("### A\\n\\n- x `y`\\n")
    '<h3>A</h3>\\n<ul>\\n<li>x <code>y</code></li>\\n</ul>'
    """
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if not line:
            i += 1
        elif m := re.match(r"^(#{1,6})\s+(.*)$", line):
            level = min(len(m.group(1)) + 1, 6) if len(m.group(1)) < 3 else len(m.group(1))
            out.append(f"<h{level}>{inline_markup(m.group(2))}</h{level}>")
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{inline_markup(lines[i][2:].strip())}</li>")
                i += 1
            out.append("<ul>\n" + "\n".join(items) + "\n</ul>")
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            body = [r for r in rows[1:] if not all(set(c) <= set("-: ") for c in r)]
            head = "".join(f"<th>{inline_markup(c)}</th>" for c in rows[0])
            trs = "".join(
                "<tr>" + "".join(f"<td>{inline_markup(c)}</td>" for c in r) + "</tr>" for r in body
            )
            out.append(
                f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>'
            )
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not re.match(r"^(#|- |\|)", lines[i]):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{inline_markup(' '.join(para))}</p>")
    return "\n".join(out)
