"""``specsim measure``: time real passes and real speculative decoding into traces.

Examples::

    specsim measure --device cpu --preset smoke --out out/smoke
    specsim measure --device cpu --preset cpu --out models/measured/cpu
    specsim measure --device cuda --preset h200 --out models/measured/h200
    specsim measure --device cpu --preset cpu --out out/cpu --only passes

Needs the optional extra ``specsim[measure]`` (torch, transformers). Rerunning
with the same ``--out`` resumes: finished units are kept and skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

HELP = "time real transformer passes and speculative decoding into traces (needs torch)"

_SECTIONS = ("ceilings", "passes", "autoregressive", "specdec", "assisted")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", required=True, help="cpu or cuda (cuda:N)")
    parser.add_argument("--preset", required=True,
                        help="smoke, cpu, h200 (alias gpu): see specsim.measure.presets")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder of the traces")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--only", nargs="+", choices=_SECTIONS, default=None, metavar="SECTION",
                        help=f"run only these sections ({', '.join(_SECTIONS)})")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch, overriding the preset's (cpu: 2)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")


def _command(args: argparse.Namespace) -> str:
    only = f" --only {' '.join(args.only)}" if args.only else ""
    threads = f" --threads {args.threads}" if args.threads is not None else ""
    return (f"specsim measure --device {args.device} --preset {args.preset} --out {args.out} "
            f"--seed {args.seed}{threads}{only}")


def run(args: argparse.Namespace) -> int:
    try:
        import transformers

        from specsim.measure import get_preset, run_preset
    except ImportError as exc:
        print(f"specsim measure: needs the optional extra specsim[measure] "
              f"(torch, transformers): {exc}", file=sys.stderr)
        return 2
    # This command prints its own progress; transformers' advice about generate()
    # arguments it passes internally during assisted generation is noise here.
    transformers.logging.set_verbosity_error()
    preset = get_preset(args.preset)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads: expected an integer >= 1, got {args.threads}")
        preset = dataclasses.replace(preset, threads=args.threads)
    t0 = time.perf_counter()

    def log(line: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f} s] {line}", flush=True)

    written = run_preset(
        preset, device=args.device, out=args.out, seed=args.seed,
        sections=args.only if args.only else _SECTIONS,
        command=_command(args), log=log,
    )
    total = time.perf_counter() - t0
    rows = ", ".join(f"{k} {v}" for k, v in written.items() if v)
    print(f"preset {preset.name} on {args.device}: {total:.1f} s; rows written: "
          f"{rows or 'none (everything was already measured)'}; traces in {args.out}")
    return 0
