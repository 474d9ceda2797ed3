"""``specsim problems``: print a randomized problem set, with its worked answer key.

For teaching::

    specsim problems --seed 7                       # statements only, Markdown
    specsim problems --seed 7 --answers             # with worked solutions and answers
    specsim problems --seed 7 --level 3 --answers   # one level
    specsim problems --seed 7 --answers --format latex > set7.tex
    specsim problems --seed 7 --html set7.html      # printable: statements, then the key
    specsim problems --seed 7 --pdf set7.pdf        # the same, printed by headless Chromium
    specsim problems --seed 7 --check answers.toml  # grade a student's answers

The same seed gives the same set; every answer is computed by specsim. The
answers file format is in :mod:`specsim.problems._grade` and docs/problems/README.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specsim.cli.jsonout import dumps
from specsim.cli.output import check_file, writable
from specsim.problems import (
    Problem,
    answers_seed,
    generate,
    grade,
    parse_answers,
    parts_of,
    print_pdf,
    render_grade,
    render_html,
    render_latex,
    render_markdown,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the set, an integer >= 0 (default 1; with --check, the seed the answers "
        "file names)",
    )
    parser.add_argument(
        "--level",
        type=int,
        choices=(1, 2, 3),
        action="append",
        help="only this level (1 mechanics, 2 design and cost, 3 analysis); repeat for several",
    )
    parser.add_argument(
        "--answers",
        action="store_true",
        help="append the answer key: worked solutions and rounded answers",
    )
    parser.add_argument(
        "--format",
        choices=("markdown", "latex"),
        default="markdown",
        help="output format (default markdown; latex is a standalone document)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: each problem's number, parameters, statement and (with "
        "--answers) solution and answers",
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="write the set and its answer key as one self-contained HTML page to print "
        "(the key starts on a new page)",
    )
    parser.add_argument(
        "--pdf",
        metavar="FILE",
        help="print the same page to a PDF handout (needs headless Chromium): a problem a "
        "page, then the answer key on pages of its own",
    )
    parser.add_argument(
        "--check",
        metavar="ANSWERS.toml",
        help="grade a student's answers file against the set of the seed it names (and "
        "--level): a score with partial credit and the worked solution of every missed part",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite an existing --html or --pdf FILE"
    )


def problem_record(p: Problem, *, answers: bool) -> dict[str, Any]:
    """One problem as JSON-ready data (the texts as their paragraphs, in the set's markup)."""
    out: dict[str, Any] = {
        "number": p.number,
        "key": p.key,
        "level": p.level,
        "title": p.title,
        "params": dict(p.params),
        "statement": list(p.statement),
    }
    if answers:
        out["solution"] = list(p.solution)
        out["answers"] = [
            {
                "part": part,
                "symbol": a.symbol,
                "what": a.what,
                "value": a.value,
                "decimals": a.decimals,
                "unit": a.unit,
                "text": a.text,
            }
            for part, a in zip(parts_of(p), p.answers, strict=True)
        ]
    return out


def _check(args: argparse.Namespace) -> int:
    path = Path(args.check)
    source = f"--check {path}"
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ValueError(f"--check: cannot read {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:  # a binary file: an answers file is UTF-8 text
        raise ValueError(
            f"{source}: not a UTF-8 TOML file (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None
    named = answers_seed(text, source=source)
    seed = named if args.seed is None else args.seed
    if named != seed:
        raise ValueError(
            f"{source}: seed = {named} in the file but --seed {seed}; grade against the seed "
            "the answers were written for (or leave --seed out)"
        )
    ps = generate(seed, levels=args.level)
    answers = parse_answers(text, source=source, problems={p.number: p for p in ps.problems})
    answered = frozenset(n for n in answers if n != "seed")
    print(render_grade(ps, grade(ps, answers), answered=answered), end="")
    return 0


def _outputs(args: argparse.Namespace) -> None:
    """``--html`` and ``--pdf`` can be written (an existing file only with ``--force``), checked
    before the set is drawn."""
    for option in ("html", "pdf"):
        if getattr(args, option) is not None:
            check_file(getattr(args, option), option=f"--{option}", force=args.force)


def run(args: argparse.Namespace) -> int:
    if args.check is not None:
        return _check(args)
    _outputs(args)
    ps = generate(1 if args.seed is None else args.seed, levels=args.level)
    if args.html is not None or args.pdf is not None:
        written = [f"--html {args.html}"] if args.html is not None else []
        written += [f"--pdf {args.pdf}"] if args.pdf is not None else []
        command = " ".join(
            ["specsim problems", f"--seed {ps.seed}", *[f"--level {lv}" for lv in args.level or []]]
            + written
        )
        page = render_html(ps, command=command)
        if args.html is not None:
            writable(args.html).write_text(page, encoding="utf-8")
        if args.pdf is not None:
            print_pdf(page, writable(args.pdf))
        return 0
    if args.json:
        record = {
            "seed": ps.seed,
            "levels": list(ps.levels),
            "problems": [problem_record(p, answers=args.answers) for p in ps.problems],
        }
        print(dumps(record))
        return 0
    render = render_latex if args.format == "latex" else render_markdown
    print(render(ps, answers=args.answers), end="")
    return 0
