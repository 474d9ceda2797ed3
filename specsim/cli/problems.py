"""``specsim problems``: print a randomized problem set, with its worked answer key.

For teaching::

    specsim problems --seed 7                       # statements only, Markdown
    specsim problems --seed 7 --answers             # with worked solutions and answers
    specsim problems --seed 7 --level 3 --answers   # one level
    specsim problems --seed 7 --answers --format latex > set7.tex

The same seed gives the same set; every answer is computed by specsim.
"""

from __future__ import annotations

import argparse
from typing import Any

from specsim.cli.jsonout import dumps
from specsim.problems import Problem, generate, render_latex, render_markdown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed", type=int, default=1, help="seed of the set, an integer >= 0 (default 1)"
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
                "symbol": a.symbol,
                "what": a.what,
                "value": a.value,
                "decimals": a.decimals,
                "unit": a.unit,
                "text": a.text,
            }
            for a in p.answers
        ]
    return out


def run(args: argparse.Namespace) -> int:
    ps = generate(args.seed, levels=args.level)
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
