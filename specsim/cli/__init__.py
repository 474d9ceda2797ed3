"""The ``specsim`` command: a thin layer that parses, calls public functions and prints.

Each subcommand lives in its own module of this package with two names,
``add_arguments(parser)`` and ``run(args) -> int``; its one-line help lives in
:data:`COMMANDS` below. ``specsim --help`` lists the subcommands from that table
without importing any of them, and ``specsim NAME ...`` imports only ``NAME``'s
module (start-up: the report alone pulls in matplotlib, pandas and the studies,
about two seconds of CPU; a command should pay for what it runs, not for its
neighbours).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType

from specsim import __version__

__all__ = [
    "COMMANDS",
    "SUBCOMMANDS",
    "PIPE_CLOSED",
    "build_parser",
    "subcommand_parser",
    "user_message",
    "main",
]

PIPE_CLOSED = 141
"""Exit status when the reader of stdout went away (``specsim cost ... | head -1``):
128 + SIGPIPE, what a shell reports for a command ended by a closed pipe."""

# Subcommand -> its one-line help, in the order ``specsim --help`` lists them. The
# module of subcommand ``name`` is ``specsim.cli.<name>``.
COMMANDS: dict[str, str] = {
    "plan": (
        "would speculation pay off here: the verdict, every option's numbers (with intervals), "
        "where each stops paying and what would change the answer"
    ),
    "report": (
        "Run the main job: every study (fast forms by default), the validation tables and the "
        "sampling demo, written as one self-contained HTML page and CSVs."
    ),
    "theory": (
        "print the closed forms of speculative decoding and evaluate them for given alpha, gamma, c"
    ),
    "cost": "time, bound, flops, bytes and energy of one forward pass of a model on an accelerator",
    "tree": "the token tree with the most tokens/s for a proposer, machine and batch (optimizer)",
    "cards": (
        "list every card (models, accelerators, runtime profiles, stacks, heads, proposers) "
        "with its key numbers and sources"
    ),
    "simulate": (
        "Simulate speculative decoding: a single stream from flags, or any scenario from a TOML "
        "config."
    ),
    "validate": "Check the simulator against the closed forms (exit 1 on a failed check).",
    "problems": "print a randomized problem set on speculative decoding (same seed, same set)",
    "explore": (
        "write the explorer: one self-contained HTML page with sliders for alpha, gamma, c and v "
        "(yield, speedup, operations per token, a token tree)"
    ),
    "measure": "time real transformer passes and speculative decoding into traces (needs torch)",
    "calibrate": (
        "Fit a hardware card's efficiencies and overheads to measured traces (docs/traces.md)."
    ),
    "study": (
        "Run one what-if study (paper, table2, bill, lookahead, energy, shift, capacity, "
        "engine, proposers, frontier, crossover); "
        "--list-keys shows its settings."
    ),
    "sweep": (
        "Run a parameter sweep from a TOML spec on local processes or a Dask cluster, streaming "
        "rows to CSV/Parquet (resumable)."
    ),
}
SUBCOMMANDS: tuple[str, ...] = tuple(COMMANDS)

_DESCRIPTION = (
    "Model speculative decoding of language models: exact sampling, closed forms, "
    "a cost model of accelerators and a discrete-event simulator."
)


def _module(name: str) -> ModuleType:
    # start-up: a subcommand's module (and what it needs) loads only when it is chosen.
    return importlib.import_module(f"specsim.cli.{name}")


def _build(
    command: str | None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and its subparsers; only ``command``'s has its arguments."""
    parser = argparse.ArgumentParser(prog="specsim", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subs = {}
    for name, help_line in COMMANDS.items():
        subs[name] = p = sub.add_parser(name, help=help_line, description=help_line)
        if name == command:
            module = _module(name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser, subs


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``specsim`` parser with ``command``'s arguments (every subcommand is listed).

    Only ``command``'s module is imported; the other subcommands are listed with
    their one-line help and take no arguments until they are the one chosen.
    """
    if command is not None and command not in COMMANDS:
        raise ValueError(f"command: expected one of {', '.join(COMMANDS)}, got {command!r}")
    return _build(command)[0]


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """The full parser of subcommand ``name`` (``specsim NAME --help`` prints its help)."""
    if name not in COMMANDS:
        raise ValueError(f"name: expected one of {', '.join(COMMANDS)}, got {name!r}")
    return _build(name)[1][name]


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: its first word that is not an option.

    The top-level options (``--help``, ``--version``) take no value, so the first
    non-option word is the subcommand (or a typo, which argparse then reports).
    """
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


# numpy's reprs (np.int64(0), np.float64(0.5), np.True_, np.str_('a')) -> the plain value.
_NUMPY_REPR = re.compile(r"\bnp\.(?:u?int\d*|float\d*|complex\d*|bool_?|str_)\((.*?)\)")
_NUMPY_BOOL = re.compile(r"\bnp\.(True|False)_")
_LEADING_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*): ")


def _options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The subcommand's option of each argument name: ``{"new_tokens": "--new-tokens"}``."""
    out = {}
    for action in parser._actions:  # argparse keeps no public list of its arguments
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in out:
            out[action.dest] = longs[0]
    return out


def user_message(exc: BaseException, options: dict[str, str] | None = None) -> str:
    """``exc`` as one line in the user's language.

    numpy reprs become plain numbers; a leading internal name (a function's,
    or a Python parameter's such as ``slug_or_path``) is replaced by the
    command-line option it stands for when ``options`` knows one, else
    dropped when the message names a known option right after it.
    """
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = str(exc.args[0])
    elif isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc)
    text = _NUMPY_REPR.sub(r"\1", text)
    text = _NUMPY_BOOL.sub(r"\1", text)
    text = " ".join(text.split())  # one line
    options = options or {}
    m = _LEADING_NAME.match(text)
    if m:
        name, rest = m.group(1), text[m.end() :]
        if name in options:
            return f"{options[name]}: {rest}"
        first = rest.split(" ", 1)[0]
        if first in options:  # "best_gamma: alpha must be ..." -> "--alpha must be ..."
            return options[first] + rest[len(first) :]
    return text


def _quiet_stdout() -> None:
    """Point stdout at the null device so that the interpreter's last flush cannot fail.

    What Python's documentation recommends for SIGPIPE (library/signal.rst,
    "Note on SIGPIPE").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a descriptor (tests)
        pass


def _common_checks(args: argparse.Namespace) -> None:
    """Checks every subcommand shares, made before any work: a seed is an integer >= 0, and
    a command that reads cards (it has ``--cards``) has folders where ``--cards`` and
    ``SPECSIM_CARDS`` point."""
    seed = getattr(args, "seed", None)
    if isinstance(seed, int) and seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {seed}")
    if hasattr(args, "cards"):
        from specsim.cards.files import ENV_VAR  # start-up: cards load for card commands only
        from specsim.cli.output import check_cards  # start-up: as above

        check_cards(args.cards, env=ENV_VAR)


def _cards_first(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """For a command with ``--cards DIR``: its folders searched first for every kind of card
    (models, hardware, runtime profiles, stacks, heads, proposers) by every lookup the command
    makes, as ``SPECSIM_CARDS`` would be (:func:`specsim.cards.files.searched_first`)."""
    folders = getattr(args, "cards", None)
    if not folders:
        return contextlib.nullcontext()
    from specsim.cards.folders import searched_first  # start-up: as _common_checks

    return searched_first(folders)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, subs = _build(_chosen(argv))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    args._argv = argv  # the whole command line, for outputs that record what made them
    try:
        _common_checks(args)
        with _cards_first(args):
            code = int(args._run(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return PIPE_CLOSED
    except (ValueError, TypeError, KeyError, OSError) as exc:
        # User errors (and files that cannot be read or written): one clear line, no traceback.
        message = user_message(exc, _options(subs[args.command]))
        print(f"specsim {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
