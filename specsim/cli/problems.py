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

from specsim.problems import generate, render_latex, render_markdown

HELP = "print a randomized problem set on speculative decoding (same seed, same set)"


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


def run(args: argparse.Namespace) -> int:
    ps = generate(args.seed, levels=args.level)
    render = render_latex if args.format == "latex" else render_markdown
    print(render(ps, answers=args.answers), end="")
    return 0
