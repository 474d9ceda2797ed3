"""``specsim measure``: time real passes and real speculative decoding into traces.

Examples::

    specsim measure --device cpu --preset smoke --out out/smoke
    specsim measure --device cpu --preset cpu --out models/measured/cpu
    specsim measure --device cuda --preset h200 --out models/measured/h200
    specsim measure --device cpu --preset h200 --shrink --out out/h200-shrunk
    specsim measure --device cpu --preset cpu-rows --out models/measured/cpu-rows
    specsim measure --device cpu --preset cpu --out out/cpu --only passes
    specsim measure --device cpu --preset real --stage corpus tokenizer train \
        --work out/real-work --models models/tiny --out models/measured/real
    specsim measure --engine llama.cpp --out models/measured/llama.cpp

``--engine llama.cpp`` runs llama.cpp's own llama-bench and llama-speculative-simple
(built by ``make llama-cpp``) on GGUF files written from ``models/tiny`` and on
random-weight Llamas, raw outputs into ``--out`` (``docs/llama-cpp.md``); it needs no
``--device`` or ``--preset``.

The ``real`` preset trains (or reuses) the tiny draft/target pairs on real
text and measures their acceptance (``docs/real-acceptance.md``): stages
``corpus``, ``tokenizer``, ``train``, ``alpha`` (default: all of them).

Needs the optional extra ``specsim[measure]`` (torch, transformers). Rerunning
with the same ``--out`` resumes: finished units are kept and skipped. Each
finished unit's line says how many of the run's units are done and about how
long the rest will take (with ``--quiet`` on a terminal: a progress bar on
stderr). ``--json`` prints a summary of what was measured and where. A flag the
chosen preset does not read is refused (``--only`` with ``--preset real``; the
``real`` group's flags with any other preset).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsim.cli import jsonout
from specsim.cli.measure_llamacpp import add_engine_arguments, check_engine_flags, run_engine
from specsim.cli.measure_real import REAL_FLAGS, REAL_STAGES, add_real_arguments, run_real
from specsim.cli.output import ProgressBar, check_folder

HELP = "time real transformer passes and speculative decoding into traces (needs torch)"

_SECTIONS = ("ceilings", "passes", "autoregressive", "specdec", "assisted")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="cpu or cuda (cuda:N); required without --engine")
    parser.add_argument(
        "--preset",
        help="required without --engine: "
        "smoke, cpu, cpu-rows, h200 (alias gpu): see "
        "specsim.measure.presets; real: "
        "tiny models trained on real text (below)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder of the traces")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=_SECTIONS,
        default=None,
        metavar="SECTION",
        help=f"run only these sections ({', '.join(_SECTIONS)})",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch, overriding the preset's (cpu: 2)",
    )
    parser.add_argument(
        "--shrink",
        action="store_true",
        help="cut the preset to CPU size with every path kept (smallest "
        "cards, short runs): check a GPU preset end to end without the GPU; with "
        "--preset real --stage alpha: a shrunk alpha stage (fits the --sample corpora)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print only the summary (and, on a terminal, a progress bar)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary (preset, device, seconds, rows written per "
        "trace, trace files, output folder); progress lines go to stderr",
    )
    add_real_arguments(parser)
    add_engine_arguments(parser)


def _ignored_flags(args: argparse.Namespace) -> None:
    """A ValueError naming every given flag that ``--preset`` does not read (exit 2)."""
    if args.preset == "real":
        if args.shrink and set(args.stage or REAL_STAGES) != {"alpha"}:
            raise ValueError(
                "--shrink: the real preset reads it with --stage alpha only (a shrunk alpha "
                "stage, specsim.measure.realrun.SHRUNK); run the other stages without it"
            )
        if args.only:
            raise ValueError(
                "--only: the real preset does not read it (it has stages, not "
                "sections); choose stages with --stage"
            )
        return
    given = [f"--{k.replace('_', '-')}" for k in REAL_FLAGS if getattr(args, k) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)}: only --preset real reads "
            f"{'this flag' if len(given) == 1 else 'these flags'}, not --preset "
            f"{args.preset}"
        )


def _plan(preset: Any, sections: tuple[str, ...]) -> list[str]:
    """The labels of the units :func:`specsim.measure.run_preset` runs, in its order.

    Each unit's log line starts with its label and a colon; the total and the
    position of each finished unit give the progress and the time left.
    """
    p = preset
    targets = list(dict.fromkeys(t for t, _ in p.pairs))
    units: dict[str, list[str]] = {
        "ceilings": [f"ceilings matmul {n}" for n in p.matmul_sizes]
        + [f"ceilings copy {b}" for b in p.copy_bytes],
        "passes": [
            f"passes {m} b{b} c{c}" + (f" {f}" if i else "")
            for m in p.timing_models
            for b in p.batches
            for c in p.contexts
            for i, f in enumerate(["", *(f for f, _ in p.weight_formats)])
        ],
        "autoregressive": []
        if p.interleave
        else [
            f"ar/{t}/T{temp:g}/b{b}"
            for t in targets
            for temp in p.temperatures
            for b in p.decode_batches
        ],
        "specdec": [
            f"sd/{t}+{d}/T{temp:g}/g{g}/b{b}"
            for t, d in p.pairs
            for temp in p.temperatures
            for g in p.gammas
            for b in p.decode_batches
        ],
        "assisted": [],
    }
    if p.assisted_repeats:
        configs = [f"{t}+-" + "/{T}/none0" for t in targets]
        for t, d in p.pairs:
            configs += [f"{t}+{d}" + "/{T}/constant" + str(g) for g in p.gammas]
            configs.append(f"{t}+{d}" + "/{T}/heuristic" + str(max(p.gammas)))
        units["assisted"] = [
            "hf/" + c.format(T=f"T{temp:g}") for c in configs for temp in p.assisted_temperatures
        ]
    return [label for section in _SECTIONS if section in sections for label in units[section]]


def _progress_log(args: argparse.Namespace, plan: list[str], t0: float) -> Callable[[str], None]:
    """The ``log`` of :func:`specsim.measure.run_preset`: each line with the time since the
    start; a finished unit's with ``done/total`` and the time left (a bar with --quiet on a
    terminal). Lines go to stderr with --json, so that stdout holds the JSON only."""
    where = {label: i for i, label in enumerate(plan)}
    bar = ProgressBar()
    stream = sys.stderr if args.json else sys.stdout
    show_bar = args.quiet and sys.stderr.isatty()

    def log(line: str) -> None:
        i = where.get(line.partition(":")[0])
        if i is not None and show_bar:
            bar(i + 1, len(plan), plan[i])
        if args.quiet:
            return
        note = ""
        if i is not None:
            note = f"  [{i + 1}/{len(plan)}{bar.left(i + 1, len(plan))}]"
        print(f"[{time.perf_counter() - t0:7.1f} s] {line}{note}", file=stream, flush=True)

    return log


def _command(args: argparse.Namespace) -> str:
    only = f" --only {' '.join(args.only)}" if args.only else ""
    threads = f" --threads {args.threads}" if args.threads is not None else ""
    shrink = " --shrink" if args.shrink else ""
    return (
        f"specsim measure --device {args.device} --preset {args.preset} --out {args.out} "
        f"--seed {args.seed}{threads}{shrink}{only}"
    )


def run(args: argparse.Namespace) -> int:
    check_engine_flags(args)
    if args.engine is not None:
        return run_engine(args)
    _ignored_flags(args)
    if args.preset == "real":
        return run_real(args)
    # Before any measuring: the traces' folder can be written (it may hold an earlier
    # run's traces, which are resumed).
    check_folder(args.out, option="--out", force=True)
    try:
        import transformers

        from specsim.measure import get_preset, run_preset, shrink
    except ImportError as exc:
        print(
            f"specsim measure: needs the optional extra specsim[measure] "
            f"(torch, transformers): {exc}",
            file=sys.stderr,
        )
        return 2
    # This command prints its own progress; transformers' advice about generate()
    # arguments it passes internally during assisted generation is noise here.
    transformers.logging.set_verbosity_error()
    preset = get_preset(args.preset)
    if args.shrink:
        preset = shrink(preset)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads: expected an integer >= 1, got {args.threads}")
        preset = dataclasses.replace(preset, threads=args.threads)
    sections = tuple(args.only) if args.only else _SECTIONS
    t0 = time.perf_counter()
    written = run_preset(
        preset,
        device=args.device,
        out=args.out,
        seed=args.seed,
        sections=sections,
        command=_command(args),
        log=_progress_log(args, _plan(preset, sections), t0),
    )
    _print_summary(
        args, name=preset.name, sections=sections, seconds=time.perf_counter() - t0, written=written
    )
    return 0


def _print_summary(
    args: argparse.Namespace,
    *,
    name: str,
    sections: tuple[str, ...],
    seconds: float,
    written: dict[str, int],
) -> None:
    """What was measured and where the traces are: one JSON object with --json, else one
    line."""
    if args.json:
        out = Path(args.out)
        print(
            jsonout.dumps(
                {
                    "preset": name,
                    "device": args.device,
                    "seed": args.seed,
                    "sections": list(sections),
                    "seconds": seconds,
                    "rows_written": written,
                    "traces": {
                        kind: str(out / f"{kind}.csv")
                        for kind in written
                        if (out / f"{kind}.csv").is_file()
                    },
                    "output_folder": str(out.resolve()),
                }
            )
        )
        return
    rows = ", ".join(f"{k} {v}" for k, v in written.items() if v)
    print(
        f"preset {name} on {args.device}: {seconds:.1f} s; rows written: "
        f"{rows or 'none (everything was already measured)'}; traces in {args.out}"
    )
