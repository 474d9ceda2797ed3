"""``specsim simulate``: one simulation from flags (plain parameters) or a TOML config."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim.acceptance.processes import IIDAcceptance
from specsim.cards import searched_first
from specsim.checks import LIMITS, NESTED_TOO_DEEPLY
from specsim.cli import jsonout
from specsim.cli.disaggregated import is_disaggregated
from specsim.cli.disaggregated import run as run_pools
from specsim.cli.output import check_file, writable
from specsim.config import parse_text, path_hint
from specsim.policies.lookahead import FixedGamma
from specsim.sim.costs.plain import PlainCost
from specsim.sim.stream.stream import (
    CHUNK_TOKENS,
    Method,
    StreamConfig,
    simulate_stream,
    simulate_stream_metrics,
)

if TYPE_CHECKING:
    from specsim.sim.config.config import RunSpec

HELP = (
    "Simulate speculative decoding: a single stream from flags, or any scenario from a TOML config."
)

TABLE_TOKEN_LIMIT = 2_000_000
"""The longest stream --trace or --events accept: they keep every block in memory (it grows
with the tokens); without them a stream runs in chunks, in memory bounded whatever --tokens."""

DEFINITIONS = {
    "speedup": "speedup: this run's throughput (tokens/s) over the plain twin's (the same "
    "workload served without a draft)",
    "tpot_speedup": "tpot_speedup: the plain twin's median time per output token over this "
    "run's (tpot_p50_s)",
}
STREAM_SPEEDUP = (
    "speedup: plain decoding's time for the same tokens (one target step each, same costs) "
    "over this run's"
)

# The plain-parameter run's flags and their defaults; with a CONFIG they are refused.
PLAIN: dict[str, Any] = {
    "alpha": None,
    "gamma": None,
    "c": 0.0,
    "v": 1.0,
    "tokens": 100_000,
    "step_s": None,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="a config TOML (see studies/configs/)")
    parser.add_argument(
        "--cards",
        action="append",
        metavar="DIR",
        help="extra card folder, searched first for cards of a CONFIG (repeatable)",
    )
    _add_flag_run_arguments(parser)
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a CONFIG value by its dotted path, e.g. acceptance.alpha=0.6 (repeatable)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed, >= 0 (default: the config's, or 0)"
    )
    parser.add_argument("--json", action="store_true", help="print the metrics record as JSON")
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="write a Chrome trace (Perfetto) here (a stream: memory grows with the tokens, "
        f"at most {TABLE_TOKEN_LIMIT:,})",
    )
    parser.add_argument(
        "--events",
        metavar="FILE",
        help="write the tidy event table (CSV) here (a stream: memory grows with the tokens, "
        f"at most {TABLE_TOKEN_LIMIT:,})",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite an existing --trace or --events FILE"
    )


def _add_flag_run_arguments(parser: argparse.ArgumentParser) -> None:
    """A run given by flags instead of a CONFIG: acceptance, lookahead, costs, length."""
    parser.add_argument(
        "--alpha", type=float, help="i.i.d. acceptance probability, in [0, 1] (no CONFIG; required)"
    )
    parser.add_argument("--gamma", type=int, help="fixed lookahead, >= 0 (no CONFIG; required)")
    parser.add_argument(
        "--c",
        type=float,
        help="draft step time / target step time (no CONFIG; default 0, a free draft, said so "
        "on stderr)",
    )
    parser.add_argument(
        "--v",
        type=float,
        help="target time to verify gamma + 1 tokens / time for one (no CONFIG; default 1)",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        help=f"tokens to decode (no CONFIG; default 100000, at most {LIMITS['tokens'].most:,}; "
        "docs/reference/limits.md). The last block is not cut, so "
        "'tokens' may exceed 'tokens_requested' by up to gamma. Runs in bounded memory "
        f"(chunks of {CHUNK_TOKENS:,} tokens) unless --trace or --events, which hold every "
        f"block and accept at most {TABLE_TOKEN_LIMIT:,} tokens",
    )
    parser.add_argument(
        "--step-s",
        type=float,
        metavar="SECONDS",
        help="the target's step time (no CONFIG): times in seconds; without it every time is "
        "in target steps",
    )


def _value(spec: RunSpec, path: str, text: str) -> Any:
    """``--set`` text read by the type of the field at ``path`` (tables as TOML inline tables)."""
    from specsim.sim.config.config import KINDS  # start-up: configs load serving, pandas and traces

    if path == "seed":
        return parse_text(text, int, path)
    if path == "method":  # a stream's method, not a field of its config: a bare word
        return text.strip().strip('"')
    if spec.source is not None:  # a composed config: the value as TOML would write it
        try:
            return tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            return text.strip()  # a bare word: a string (a slug, a format)
        except RecursionError:  # tomllib parses nested arrays by recursion
            raise ValueError(f"--set {path}: {NESTED_TOO_DEEPLY}") from None
    hint = path_hint(spec.config, path) if path != "policy" else None
    if hint is None or hint in KINDS:
        try:
            return tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            raise ValueError(f"--set {path}: expected a TOML inline table, got {text!r}") from None
        except RecursionError:  # as above
            raise ValueError(f"--set {path}: {NESTED_TOO_DEEPLY}") from None
    return parse_text(text, hint, f"--set {path}")


def _spec(args: argparse.Namespace) -> RunSpec | StreamConfig:
    """A CONFIG's run spec, or the plain-parameter stream (its seed is ``--seed``)."""
    given = [f"--{k.replace('_', '-')}" for k in PLAIN if getattr(args, k) is not None]
    if args.config:
        from specsim.sim.config.config import load_config, with_value  # start-up: as in _value

        if given:
            raise ValueError(
                f"{', '.join(given)}: plain-parameter flags do not apply to a CONFIG; change "
                "config values with --set PATH=VALUE (e.g. --set acceptance.alpha=0.1)"
            )
        try:
            spec = load_config(args.config)
        except ValueError as exc:  # a check of the whole run: say that it came from CONFIG
            where = str(args.config)
            text = str(exc)
            raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None
        for item in args.sets:
            path, sep, text = item.partition("=")
            if not sep or not path.strip():
                raise ValueError(f"--set: expected PATH=VALUE, got {item!r}")
            path = path.strip()
            spec = with_value(spec, path, _value(spec, path, text), where=f"--set {path}")
        if args.seed is not None:
            spec = with_value(spec, "seed", args.seed, where="--seed")
        return spec
    if args.sets:
        raise ValueError("--set: overrides apply to a CONFIG.toml; give one, or use the flags")
    if args.alpha is None or args.gamma is None:
        raise ValueError("give a CONFIG.toml, or --alpha and --gamma (plain parameters)")
    plain: dict[str, Any] = {k: getattr(args, k) for k in PLAIN}
    plain = {k: PLAIN[k] if v is None else v for k, v in plain.items()}
    step = {} if plain["step_s"] is None else {"step_s": plain["step_s"]}
    cfg = StreamConfig(
        tokens=plain["tokens"],
        acceptance=IIDAcceptance(alpha=plain["alpha"]),
        policy=FixedGamma(gamma=plain["gamma"]),
        cost=PlainCost(c=plain["c"], v=plain["v"], **step),
        max_gamma=plain["gamma"],
    )
    if args.c is None:
        print(
            "specsim simulate: note: --c not given, so the draft is free (c = 0)", file=sys.stderr
        )
    return cfg


def run(args: argparse.Namespace) -> int:
    for option in ("trace", "events"):  # before any work: a result is not thrown away
        if getattr(args, option):
            check_file(getattr(args, option), option=f"--{option}", force=args.force)
    with searched_first(args.cards):
        if args.config and is_disaggregated(args.config):  # two pools: specsim.sim.disagg
            return run_pools(args)
        spec = _spec(args)
        method: Method = "fast"
        if isinstance(spec, StreamConfig):
            stream, seed = spec, (0 if args.seed is None else args.seed)
        elif isinstance(spec.config, StreamConfig):
            stream, seed, method = spec.config, spec.seed, spec.method
        else:
            result, metrics = _serve(spec)
            stream = None
        if stream is not None:
            tables = [f"--{o}" for o in ("trace", "events") if getattr(args, o)]
            if tables and stream.tokens > TABLE_TOKEN_LIMIT:
                raise ValueError(
                    f"{' and '.join(tables)}: a stream's trace and event table keep every block "
                    f"in memory, so they accept at most {TABLE_TOKEN_LIMIT:,} tokens; got "
                    f"{stream.tokens:,} (without {' or '.join(tables)} any length runs in "
                    "bounded memory)"
                )
            rng = np.random.default_rng(seed)
            if tables:
                result = simulate_stream(stream, rng, method=method)
                metrics = result.metrics()
            else:
                metrics = simulate_stream_metrics(
                    stream, rng, method=method, progress=_progress(stream.tokens)
                )
    if args.trace:
        with open(writable(args.trace), "w", encoding="utf-8") as fh:
            json.dump(result.chrome_trace(), fh)
    if args.events:
        result.events().to_csv(writable(args.events), index=False)
    if args.json:
        print(jsonout.dumps(metrics))
    else:
        if not args.config and args.step_s is None:
            print(
                "(plain parameters: times are in target steps and flops in target tokens' "
                "operations; --step-s SECONDS gives seconds)"
            )
        width = max(len(k) for k in metrics)
        for key, value in metrics.items():
            print(f"{key:<{width}}  {_shown(value)}")
        # Define the ratios where they are printed (not only in the docs).
        if "tpot_speedup" in metrics:  # serving: None without a plain twin, nothing to define
            for key, line in DEFINITIONS.items():
                if metrics[key] is not None:
                    print(line)
            print(_stability_line(metrics))
        else:
            print(STREAM_SPEEDUP)
    return 0


def _serve(spec: RunSpec) -> tuple[Any, dict[str, Any]]:
    """A serving run (chains, or token trees for a ``[proposer]`` config) and its metrics,
    with goodput when the config has an ``[slo]``; the result as a
    :class:`~specsim.sim.results.records.ServingResult` (its trace and event table)."""
    from specsim.sim.config.config_compose import (  # start-up: as in _value
        simulate_run,
        slo_metrics,
    )

    result = simulate_run(spec.config, np.random.default_rng(spec.seed))
    metrics = result.metrics()
    if spec.slo is not None:
        metrics.update(slo_metrics(result, spec.slo))
    return result, metrics


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple) and all(isinstance(v, float) for v in value):
        return "[" + ", ".join(f"{v:.4g}" for v in value) + "]"
    return str(value)


def _stability_line(metrics: dict[str, Any]) -> str:
    """What the serving record's ``stable`` means for its numbers, said where they print."""
    if metrics["stable"] is False or metrics.get("plain_stable") is False:
        spec = metrics["stable"] is False
        why = metrics["stability_reason" if spec else "plain_stability_reason"]
        return (
            f"NOT STABLE ({'this run' if spec else 'the plain twin'}): the queue grows "
            "without bound at this load, so the latency percentiles grow with the number of "
            f"requests (they measure the run's length, not the system). {why}"
        )
    if metrics["stable"] is None:
        return f"stability: {metrics['stability_reason']}"
    return (
        "stable: the queue keeps up with the arrivals (utilization: the share of time the "
        "accelerator is busy; offered_load: the arrival rate times a request's work at "
        "full batch, decoding plainly, per replica)"
    )


def _progress(total: int) -> Callable[[int, int], None] | None:
    """Progress on stderr for a stream longer than one chunk, only on a terminal."""
    if total <= CHUNK_TOKENS or not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        print(
            f"\rspecsim simulate: {min(done, total):,} of {total:,} tokens "
            f"({100 * min(done, total) // total}%)",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return show
