"""``specsim explore``: write the explorer, one self-contained HTML page of sliders.

For teaching::

    specsim explore --out explorer                 # explorer/explore.html
    specsim explore --out explorer --alpha 0.6 --gamma 3 --c 0.1

Open the file in any browser; it needs no network. The sliders start where the flags say.
"""

from __future__ import annotations

import argparse

from specsim.cli.output import check_folder
from specsim.report.explore import FILE_NAME, ExplorerStart, write_explorer

__all__ = ["add_arguments", "run"]

_START = ExplorerStart()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder to write explore.html into (made if absent)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an explore.html already in --out"
    )
    parser.add_argument(
        "--alpha", type=float, default=_START.alpha, help="acceptance slider's start"
    )
    parser.add_argument("--gamma", type=int, default=_START.gamma, help="lookahead's start")
    parser.add_argument(
        "--c", type=float, default=_START.c, help="draft step cost (in target steps) at start"
    )
    parser.add_argument(
        "--v", type=float, default=_START.v, help="verification pass cost (target steps) at start"
    )
    parser.add_argument(
        "--c-hat",
        type=float,
        default=_START.c_hat,
        help="draft arithmetic per token over the target's, at start",
    )


def run(args: argparse.Namespace) -> int:
    options = {"alpha": "--alpha", "gamma": "--gamma", "c": "--c", "v": "--v", "c_hat": "--c-hat"}
    try:
        start = ExplorerStart(
            alpha=args.alpha, gamma=args.gamma, c=args.c, v=args.v, c_hat=args.c_hat
        )
    except ValueError as exc:
        text = str(exc)
        for name, flag in options.items():
            text = text.replace(f"ExplorerStart.{name}:", f"{flag}:")
        raise ValueError(text) from exc
    folder = check_folder(args.out, option="--out", force=True)
    if (folder / FILE_NAME).exists() and not args.force:
        raise ValueError(
            f"--out: {folder / FILE_NAME} already exists; pass --force to replace it, or choose "
            "another folder"
        )
    command = " ".join(["specsim", *getattr(args, "_argv", ["explore"])])
    path = write_explorer(args.out, start=start, command=command)
    print(f"explorer: {path}")
    return 0
