"""``specsim measure``: time real passes and real speculative decoding into traces.

Examples::

    specsim measure --device cpu --preset smoke --out out/smoke
    specsim measure --device cpu --preset cpu --out models/measured/cpu
    specsim measure --device cuda --preset h200 --out models/measured/h200
    specsim measure --device cpu --preset cpu --out out/cpu --only passes
    specsim measure --device cpu --preset real --stage corpus tokenizer train \
        --work out/real-work --models models/tiny --out models/measured/real

The ``real`` preset trains (or reuses) the tiny draft/target pairs on real
text and measures their acceptance (``docs/real-acceptance.md``): stages
``corpus``, ``tokenizer``, ``train``, ``alpha`` (default: all of them).

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
_REAL_STAGES = ("corpus", "tokenizer", "train", "alpha")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", required=True, help="cpu or cuda (cuda:N)")
    parser.add_argument("--preset", required=True,
                        help="smoke, cpu, h200 (alias gpu): see specsim.measure.presets; real: "
                        "tiny models trained on real text (below)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder of the traces")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--only", nargs="+", choices=_SECTIONS, default=None, metavar="SECTION",
                        help=f"run only these sections ({', '.join(_SECTIONS)})")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch, overriding the preset's (cpu: 2)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    real = parser.add_argument_group("preset real (tiny models trained on real text)")
    real.add_argument("--stage", nargs="+", choices=_REAL_STAGES, default=None,
                      metavar="STAGE", help=f"stages to run ({', '.join(_REAL_STAGES)}; "
                      "default all)")
    real.add_argument("--work", default="out/real-work", metavar="DIR",
                      help="corpora, token cache and checkpoints (default out/real-work)")
    real.add_argument("--models", default="models/tiny", metavar="DIR",
                      help="tokenizer and trained weights (default models/tiny)")
    real.add_argument("--sample", default=None, metavar="DIR",
                      help="build the corpora from this committed sample instead of the "
                      "installed packages (models/corpora/sample)")
    real.add_argument("--train-only", nargs="+", default=None, metavar="MODEL",
                      help="train only these models of the plan")
    real.add_argument("--vocab", type=int, default=4096, help="tokenizer vocabulary (4096)")


def _command(args: argparse.Namespace) -> str:
    only = f" --only {' '.join(args.only)}" if args.only else ""
    threads = f" --threads {args.threads}" if args.threads is not None else ""
    return (f"specsim measure --device {args.device} --preset {args.preset} --out {args.out} "
            f"--seed {args.seed}{threads}{only}")


def _run_real(args: argparse.Namespace) -> int:
    try:
        from specsim.measure.realbuild import build_real
    except ImportError as exc:
        print(f"specsim measure: the real preset needs the optional extra specsim[measure] "
              f"(torch, transformers, tokenizers, safetensors): {exc}", file=sys.stderr)
        return 2
    from specsim.measure.corpus import MissingPackageError

    stages = args.stage or _REAL_STAGES
    t0 = time.perf_counter()

    def log(line: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f} s] {line}", file=sys.stderr, flush=True)

    threads = 1 if args.threads is None else args.threads
    try:
        build_real(work=args.work, models_dir=args.models,
                   stages=[s for s in stages if s != "alpha"], sample=args.sample,
                   vocab_size=args.vocab, only=args.train_only, threads=threads, log=log)
    except MissingPackageError as exc:
        print(f"specsim measure: {exc}", file=sys.stderr)
        return 2
    if "alpha" in stages:
        from specsim.measure.realrun import measure_real

        measure_real(work=args.work, models_dir=args.models, out=args.out, seed=args.seed,
                     threads=threads, command=_real_command(args), log=log)
    print(f"preset real: stages {' '.join(stages)} done in {time.perf_counter() - t0:.1f} s; "
          f"models in {args.models}" + (f", measurements in {args.out}"
                                        if "alpha" in stages else ""))
    return 0


def _real_command(args: argparse.Namespace) -> str:
    stage = f" --stage {' '.join(args.stage)}" if args.stage else ""
    threads = f" --threads {args.threads}" if args.threads is not None else ""
    return (f"specsim measure --device {args.device} --preset real{stage} --work {args.work} "
            f"--models {args.models} --out {args.out} --seed {args.seed}{threads}")


def run(args: argparse.Namespace) -> int:
    if args.preset == "real":
        return _run_real(args)
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
