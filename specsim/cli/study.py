"""``specsim study NAME``: run one what-if study and write its CSV, figures and summary."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from specsim.cards import load_hardware, load_model, searched_first
from specsim.checks import check_size
from specsim.cli import jsonout
from specsim.cli.output import ProgressBar, check_folder
from specsim.report.studies import (
    STUDY_NAMES,
    config_keys,
    key_doc,
    load_study,
    parse_overrides,
    run_study,
    save_study,
)

HELP = "Run one what-if study (" + ", ".join(STUDY_NAMES) + "); --list-keys shows its settings."
DEFAULT_SEED = 2023


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", choices=STUDY_NAMES, metavar="NAME", help="the study: " + ", ".join(STUDY_NAMES)
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a default (repeatable; lists are comma-separated)",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="output folder (default: out/NAME)"
    )
    parser.add_argument("--fast", action="store_true", help="the fast form (what the report runs)")
    parser.add_argument(
        "--seed", type=int, default=None, help=f"seed of every simulation (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--list-keys",
        action="store_true",
        help="print the study's keys, defaults, meanings and units and exit (no other option)",
    )
    parser.add_argument(
        "--force", action="store_true", help="write into an --out folder that already holds files"
    )
    parser.add_argument(
        "--cards",
        action="append",
        metavar="DIR",
        help="extra card folder, searched first for the study's cards (repeatable)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary (study, rows, seconds, files, output folder, summary text)",
    )


_CARD_KEYS: dict[str, Callable[..., object]] = {
    "target": load_model,
    "draft": load_model,
    "drafts": load_model,
    "hardware": load_hardware,
}
"""The study settings that name cards, and the loader of each."""

_SIZE_KEYS = {
    "requests": "requests",
    "fast_requests": "requests",
    "max_requests": "requests",
    "fast_max_requests": "requests",
    "tokens": "tokens",
    "fast_tokens": "tokens",
    "max_batch": "batch",
    "batches": "batch",
}
"""The study settings that size the work, and their limit in :data:`specsim.checks.LIMITS`."""


def check_settings(
    overrides: Mapping[str, Any], sets: Sequence[str], *, cards: Sequence[str] | None
) -> None:
    """Every card a ``--set`` names (``hardware=h100-sxm,nope``) must be found, and every size
    it sets (``requests``, ``tokens``, ``max_batch``) be within its limit
    (:data:`specsim.checks.LIMITS`), before the study runs; else a ValueError in the user's
    words: ``--set hardware=nope: no hardware card ...``."""
    for item in sets:
        key = item.partition("=")[0].strip()
        value = overrides.get(key)
        if key in _SIZE_KEYS:
            for n in value if isinstance(value, tuple) else (value,):
                if isinstance(n, int):
                    check_size(n, name=f"--set {key}", limit=_SIZE_KEYS[key])
        if key not in _CARD_KEYS:
            continue
        for slug in value if isinstance(value, tuple) else (value,):
            if not isinstance(slug, str):
                continue
            try:
                _CARD_KEYS[key](slug, search_path=cards)
            except (ValueError, TypeError, FileNotFoundError) as exc:
                raise ValueError(f"--set {item.strip()}: {exc}") from None


def _shown(value: object) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


def _list_keys(module: ModuleType, as_json: bool) -> None:
    config = module.Config()
    rows = []
    for key, value in config_keys(config).items():
        doc, unit = key_doc(type(config), key)
        rows.append({"key": key, "default": value, "meaning": doc, "unit": unit})
    if as_json:
        print(jsonout.dumps(rows))
        return
    width = max(len(f"{r['key']} = {_shown(r['default'])}") for r in rows)
    for r in rows:
        head = f"{r['key']} = {_shown(r['default'])}"
        note = r["meaning"] or "(no description)"
        if r["unit"]:
            note += f" [{r['unit']}]"
        print(f"{head:<{width}}  # {note}")


def run(args: argparse.Namespace) -> int:
    module = load_study(args.name)
    if args.list_keys:
        _refuse_run_flags(args)
        _list_keys(module, args.json)
        return 0
    overrides = parse_overrides(module.Config, args.sets)
    check_settings(overrides, args.sets, cards=args.cards)
    # Before any work: an earlier run's results are not overwritten without --force, and a
    # folder that cannot be written is found before the study runs, not after.
    seed = DEFAULT_SEED if args.seed is None else args.seed
    with searched_first(args.cards):
        out = check_folder(
            args.out if args.out is not None else Path("out") / args.name,
            option="--out",
            force=args.force,
        )
        # A bar on a terminal (each serving run of a capacity search, with the time
        # left); logs and pipes stay free of it.
        progress = ProgressBar() if sys.stderr.isatty() else None
        result = run_study(
            args.name, overrides=overrides, seed=seed, fast=args.fast, progress=progress
        )
    files = save_study(result, out)
    if args.json:
        print(
            jsonout.dumps(
                {
                    "study": args.name,
                    "seed": seed,
                    "fast": args.fast,
                    "rows": len(result.data),
                    "figures": len(result.figures),
                    "seconds": result.seconds,
                    "files": {key: str(files[key]) for key in sorted(files)},
                    "output_folder": str(out.resolve()),
                    "summary": result.summary.rstrip("\n"),
                }
            )
        )
        return 0
    print(result.summary.rstrip("\n"))
    print()
    print(
        f"{args.name}: {len(result.data)} rows, {len(result.figures)} figures in "
        f"{result.seconds:.1f} s"
    )
    for key in sorted(files):
        print(f"  {files[key]}")
    print(f"output folder: {out.resolve()}")
    return 0


def _refuse_run_flags(args: argparse.Namespace) -> None:
    """A ValueError naming every flag given with ``--list-keys`` that only a run reads."""
    given = [
        flag
        for flag, on in (
            ("--set", bool(args.sets)),
            ("--out", args.out is not None),
            ("--fast", args.fast),
            ("--seed", args.seed is not None),
            ("--force", args.force),
            ("--cards", bool(args.cards)),
        )
        if on
    ]
    if given:
        raise ValueError(f"{', '.join(given)}: not with --list-keys, which runs nothing")
