"""``specsim problems --check`` and ``--html``: grading answers files and the printable handout."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from specsim.cli import main
from specsim.problems import ProblemSet, generate, grade, parse_answers, parts_of, tolerance

SEED = 29


def answers_file(
    ps: ProblemSet,
    changes: dict[tuple[str, str], str] | None = None,
    drop: frozenset[tuple[str, str]] = frozenset(),
) -> str:
    """The key of ``ps`` as an answers file (printed values), some parts replaced or dropped."""
    changes = changes or {}
    out = [f"seed = {ps.seed}"]
    for p in ps.problems:
        out.append(f'\n["{p.number}"]')
        parts: dict[str, list[str]] = {}
        for part, a in zip(parts_of(p), p.answers, strict=True):
            parts.setdefault(part, []).append(a.text)
        for part, values in parts.items():
            if (p.number, part) in drop:
                continue
            value = changes.get((p.number, part))
            text = values[0] if len(values) == 1 else "[" + ", ".join(values) + "]"
            out.append(f"{part} = {text if value is None else value}")
    return "\n".join(out) + "\n"


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, str, str]:
    path = tmp_path / "answers.toml"
    path.write_text(text, encoding="utf-8")
    rc = main(["problems", "--seed", str(SEED), "--check", str(path)])
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_a_correct_file_scores_full_marks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ps = generate(SEED)
    total = sum(len(p.answers) for p in ps.problems)
    rc, out, _ = check(tmp_path, capsys, answers_file(ps))
    assert rc == 0
    assert f"Score: {total} of {total} answers (100.0 %)" in out
    assert "Every answer is right." in out and "missed" not in out


def test_a_partly_wrong_file_gets_partial_credit_and_the_worked_solutions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ps = generate(SEED)
    by = {p.number: p for p in ps.problems}
    total = sum(len(p.answers) for p in ps.problems)
    td = by["2.6"].answers[1:3]
    changes = {
        ("1.1", "a"): f"{by['1.1'].answers[0].value + 0.05:.2f}",
        ("2.6", "b"): f"[{td[0].text}, {td[1].value + 1.0:.4f}]",  # the draft's time wrong
    }
    text = answers_file(ps, changes, drop=frozenset({("3.6", "a")}))  # left out: scores zero
    rc, out, _ = check(tmp_path, capsys, text)
    assert rc == 0
    assert f"Score: {total - 3} of {total} answers" in out
    for number in ("1.1", "2.6", "3.6"):
        assert f"## Problem {number}. {by[number].title}: missed" in out
    assert "- (b) draft step estimate: you gave" in out
    assert "- (a) expected tokens of the chain: you gave nothing" in out
    # the worked solution of each miss follows it
    assert by["2.6"].solution[1] in out and by["1.1"].solution[0] in out
    assert by["1.2"].solution[0] not in out


def test_tolerance_is_one_unit_of_the_printed_rounding() -> None:
    ps = generate(SEED)
    p = ps.problems[2]  # 1.3: four decimals
    a = p.answers[0]
    assert tolerance(a) == pytest.approx(max(1e-4, 5e-3 * a.value))
    problems = {q.number: q for q in ps.problems}

    def score(x: float) -> int:
        parsed = parse_answers(
            f'seed = {SEED}\n["1.3"]\na = {x!r}\n', source="f", problems=problems
        )
        return grade(ps, parsed).points

    assert score(a.value + 0.9 * tolerance(a)) == 1
    assert score(a.value - 1.1 * tolerance(a)) == 0
    batch = next(q for q in ps.problems if q.key == "capacity").answers[0]
    assert batch.decimals == 0 and tolerance(batch) == 0.0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("seed = [29\n", ("not valid TOML",)),
        ('["1.1"]\na = 0.5\n', ("integer 'seed'",)),
        ('seed = 29\n["9.9"]\na = 1\n', ("'9.9'", "no such problem")),
        ('seed = 29\n["1.1"]\nz = 1\n', ("problem 1.1 has no part 'z'",)),
        ('seed = 29\n["1.1"]\na = "half"\n', ("problem 1.1 part (a)", "expected a number", "half")),
        ('seed = 29\n["1.2"]\nb = 0.5\n', ("problem 1.2 part (b)", "3 numbers")),
        ('seed = 29\n["1.2"]\nb = [0.5, true, 0.5]\n', ("problem 1.2 part (b)[1]",)),
        ('seed = 30\n["1.1"]\na = 0.5\n', ("seed = 30", "--seed 29")),
    ],
)
def test_a_malformed_file_is_an_error_naming_problem_and_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: tuple[str, ...]
) -> None:
    rc, out, err = check(tmp_path, capsys, text)
    assert rc == 2 and out == ""
    assert "specsim problems: error: --check" in err and "answers.toml" in err
    for w in words:
        assert w in err, (w, err)


def test_a_missing_answers_file_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["problems", "--check", str(tmp_path / "none.toml")])
    assert rc == 2 and "--check: cannot read" in capsys.readouterr().err


class _Page(HTMLParser):
    """Collects what a self-contained printable page must (and must not) hold."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.external: list[str] = []
        self.sections: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "link", "img", "iframe") or a.get("src"):
            self.external.append(tag)
        if tag == "section":
            self.sections.append((a.get("class") or "", a.get("id") or ""))
        if tag not in ("meta", "br", "hr"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()


def test_html_handout_is_self_contained_with_the_key_on_its_own_page(tmp_path: Path) -> None:
    path = tmp_path / "set.html"
    assert main(["problems", "--seed", "11", "--html", str(path)]) == 0
    page = path.read_text(encoding="utf-8")
    ps = generate(11)
    parser = _Page()
    parser.feed(page)
    assert parser.open == [] and parser.external == []
    assert "http://" not in page and "https://" not in page.replace("arXiv", "")
    assert "section.key { break-before: page; page-break-before: always; }" in page
    key_at = page.index('<section class="key">')
    for p in ps.problems:
        assert (
            page.index(f'id="problem-{p.number}"')
            < key_at
            < page.index(f'id="solution-{p.number}"')
        )
        assert f"<strong>{p.answers[0].text}</strong>" in page[key_at:]
    assert "--html " in page and "specsim problems --seed 11" in page
    assert "\u03b1 = " in page and "\\alpha" not in page  # symbols as characters
    assert "&lt;" not in page[: page.index("<body>")]


def test_the_documented_example_grades_as_the_readme_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "problems"
    example = docs / "answers-seed-1-example.toml"
    assert main(["problems", "--seed", "1", "--check", str(example)]) == 0
    out = capsys.readouterr().out
    assert "Score: 7 of 82 answers (8.5 %)." in out
    assert "Score: 7 of 82 answers (8.5 %)." in (docs / "README.md").read_text(encoding="utf-8")
    assert "- (a) rejection probability: you gave 0.4, the key is **0.60**" in out
    assert "## Problem 1.1" not in out and "Not answered (no table in the file): 1.3, " in out


def test_check_grades_against_the_chosen_levels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ps = generate(SEED, levels=(1,))
    total = sum(len(p.answers) for p in ps.problems)
    path = tmp_path / "level1.toml"
    path.write_text(answers_file(ps), encoding="utf-8")
    argv = ["problems", "--seed", str(SEED), "--level", "1", "--check", str(path)]
    assert main(argv) == 0
    assert f"Score: {total} of {total} answers (100.0 %)" in capsys.readouterr().out
    path.write_text(answers_file(generate(SEED, levels=(2,))), encoding="utf-8")
    assert main(argv) == 2
    assert "'2.1'" in capsys.readouterr().err
