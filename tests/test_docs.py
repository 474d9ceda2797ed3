"""The docs cannot drift from the code: every example runs, every link resolves, the
reference pages are regenerated from the docstrings and compared.

Examples: every ```python block of every page under docs/ (except generated pages) runs,
page by page in one namespace, in order. A block with ``>>>`` prompts is a doctest
(ELLIPSIS and NORMALIZE_WHITESPACE on); any other block is executed, and when an
```output block follows it, what it printed must match. Blocks in other languages
(```text, ```toml, ```bash) are not run; fence an illustrative Python snippet that
cannot run here (it needs data or hardware the checkout lacks) as ```py.
"""

from __future__ import annotations

import doctest
import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from specsim.problems import TEMPLATES
from specsim.report import docgen as docgen

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GENERATED = ("reference/api.md", "reference/cli.md", "derivations.md")
OWNED = (
    "index.md",
    "tutorial.md",
    "design.md",
    "howto/*.md",
    "background/*.md",
    "problems/README.md",
)
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _generated(path: Path) -> bool:
    rel = path.relative_to(DOCS).as_posix()
    return rel in GENERATED or re.fullmatch(r"problems/set-.*\.md", rel) is not None


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not _generated(p))


def owned_pages() -> list[Path]:
    return sorted({p for pattern in OWNED for p in DOCS.glob(pattern)})


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line number of the body) of every fenced block."""
    return [
        (m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1) for m in _FENCE.finditer(text)
    ]


def run_page(path: Path) -> int:
    """Run every python block of ``path``; return how many ran."""
    text = path.read_text(encoding="utf-8")
    found = blocks(text)
    globs: dict[str, object] = {"__name__": f"docs.{path.stem}"}
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    ran = 0
    for i, (lang, body, line) in enumerate(found):
        if lang != "python":
            continue
        ran += 1
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"
        if re.search(r"^\s*>>> ", body, re.M):
            test = doctest.DocTestParser().get_doctest(body, globs, where, str(path), line - 1)
            runner = doctest.DocTestRunner(optionflags=flags)
            report: list[str] = []
            runner.run(test, out=report.append, clear_globs=False)
            assert runner.failures == 0, f"doctest failed at {where}:\n" + "".join(report)
            globs.update(test.globs)
            continue
        printed = io.StringIO()
        with redirect_stdout(printed):
            exec(compile(body, where, "exec"), globs)  # running the docs is the point
        if i + 1 < len(found) and found[i + 1][0] == "output":
            assert printed.getvalue().strip() == found[i + 1][1].strip(), (
                f"output differs at {where}"
            )
    return ran


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_examples_run(page: Path) -> None:
    run_page(page)


def test_the_tutorial_and_guides_have_examples() -> None:
    for rel in ("tutorial.md", "howto/check-a-formula.md", "howto/estimate-c-and-v.md"):
        text = (DOCS / rel).read_text(encoding="utf-8")
        assert sum(lang == "python" for lang, _, _ in blocks(text)) >= 1, rel


def test_runner_catches_a_wrong_example(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("```python\n>>> 1 + 1\n3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="doctest failed"):
        run_page(bad)
    bad.write_text("```python\nprint(2)\n```\n\n```output\n3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="output differs"):
        run_page(bad)
    good = tmp_path / "good.md"
    good.write_text("```python\nx = 40\n```\n\n```python\n>>> x + 2\n42\n```\n", encoding="utf-8")
    assert run_page(good) == 2


# Links --------------------------------------------------------------------------------------
def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = _FENCE.sub("", text)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _links(path: Path) -> list[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", owned_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    for target in _links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        assert dest.exists(), f"{page.relative_to(ROOT)} links to missing {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.relative_to(ROOT)}: no anchor {target}"


def test_every_page_is_reachable_from_the_index() -> None:
    seen, todo = set(), [DOCS / "index.md"]
    while todo:
        page = todo.pop()
        if page in seen or not page.exists() or page.suffix != ".md":
            continue
        seen.add(page)
        for target in _links(page):
            file_part = target.partition("#")[0]
            if file_part:
                todo.append((page.parent / file_part).resolve())
    missing = [
        p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p.resolve() not in seen
    ]
    assert not missing, f"pages no link from docs/index.md leads to: {missing}"


def test_problem_set_readme_lists_every_template() -> None:
    readme = (DOCS / "problems" / "README.md").read_text(encoding="utf-8")
    for t in TEMPLATES:
        assert t.title in readme, t.title


# The generated reference ---------------------------------------------------------------------
def test_reference_pages_are_current() -> None:
    for name, text in (("api.md", docgen.api_reference()), ("cli.md", docgen.cli_reference())):
        page = DOCS / "reference" / name
        assert page.read_text(encoding="utf-8") == text, (
            f"docs/reference/{name} is stale: run `python -m specsim.report.docgen`"
        )


def test_reference_covers_every_public_module_and_subcommand() -> None:
    from specsim.cli import SUBCOMMANDS

    api = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    for module in docgen.public_modules():
        assert f"\n## {module}\n" in api
    assert "specsim.problems" in docgen.public_modules()
    cli = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    for name in SUBCOMMANDS:
        assert f"\n## specsim {name}\n" in cli


def test_docgen_check_mode(tmp_path: Path) -> None:
    assert docgen.main(["--out", str(tmp_path)]) == 0
    assert docgen.main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "cli.md").write_text("stale\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="stale reference pages"):
        docgen.main(["--out", str(tmp_path), "--check"])


# Fences and the card schema -----------------------------------------------------------------
_FENCE_LINE = re.compile(r"^\s*(```|~~~)")


def _unclosed_fence(text: str) -> int | None:
    """The line (from 1) of a fence that opens and never closes, or None."""
    opened = None
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE_LINE.match(line):
            opened = number if opened is None else None
    return opened


@pytest.mark.parametrize(
    "page",
    [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "models" / "README.md"],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_fence_closes(page: Path) -> None:
    line = _unclosed_fence(page.read_text(encoding="utf-8"))
    assert line is None, f"{page.relative_to(ROOT)}:{line}: a fence opens here and never closes"


def test_an_unclosed_fence_is_found() -> None:
    assert _unclosed_fence("a\n```sh\nx\n```\n") is None
    assert _unclosed_fence("```text\nout\n```\n```sh\ncmd\n\nprose") == 4


def test_the_plan_page_asks_its_questions_in_order() -> None:
    text = (DOCS / "plan.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## Question (\d):", text, re.M)
    assert len(headings) >= 3 and headings == [str(i + 1) for i in range(len(headings))]


def _schema_fields(section: str) -> list[str]:
    """The first column of the table under ``section`` of docs/reference/cards.md."""
    text = (DOCS / "reference" / "cards.md").read_text(encoding="utf-8")
    body = text.split(f"\n{section}\n", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \|", body.split("\n#", 1)[0], re.M)
    return rows


@pytest.mark.parametrize(
    ("section", "cls"),
    [
        ("## Head card", "HeadCard"),
        ("### Parallel draft card", "ParallelDraftCard"),
        ("### Self-speculation card", "SelfSpecCard"),
        ("### Streaming self-speculation card", "StreamingSelfSpecCard"),
    ],
)
def test_the_card_schema_page_lists_every_field(section: str, cls: str) -> None:
    import dataclasses

    import specsim.cards as cards

    fields = [f.name for f in dataclasses.fields(getattr(cards, cls)) if f.name != "source_path"]
    listed = _schema_fields(section)
    assert sorted(listed) == sorted(fields), (cls, set(listed) ^ set(fields))
