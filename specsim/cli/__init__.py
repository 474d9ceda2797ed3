"""The ``specsim`` command: a thin layer that parses, calls public functions and prints.

Each subcommand lives in its own module of this package with three names:
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, in the order ``specsim --help`` lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "report",
    "theory",
    "cost",
    "cards",
    "simulate",
    "validate",
    "problems",
    "measure",
    "calibrate",
    "study",
    "sweep",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsim",
        description=(
            "Model speculative decoding of language models: exact sampling, closed forms, "
            "a cost model of accelerators and a discrete-event simulator."
        ),
    )
    from specsim import __version__

    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"specsim.cli.{name.replace('-', '_')}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except (ValueError, TypeError, FileNotFoundError, KeyError) as exc:
        # User errors: one clear line, no traceback.
        print(f"specsim {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
