"""``specsim simulate``: one simulation from flags (plain parameters) or a TOML config."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from specsim.acceptance import IIDAcceptance
from specsim.policies import FixedGamma
from specsim.sim import PlainCost, StreamConfig, simulate_serving, simulate_stream
from specsim.sim.config import RunSpec, load_config

HELP = (
    "Simulate speculative decoding: a single stream from flags, or any scenario from a TOML config."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="a config TOML (see studies/configs/)")
    parser.add_argument("--alpha", type=float, help="i.i.d. acceptance probability")
    parser.add_argument("--gamma", type=int, help="fixed lookahead")
    parser.add_argument("--c", type=float, default=0.0, help="draft step time / target step time")
    parser.add_argument("--v", type=float, default=1.0, help="verification factor (gamma >= 1)")
    parser.add_argument("--tokens", type=int, default=100_000, help="tokens to decode")
    parser.add_argument("--seed", type=int, default=None, help="seed (overrides the config's)")
    parser.add_argument("--json", action="store_true", help="print the metrics record as JSON")
    parser.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto) here")
    parser.add_argument("--events", metavar="FILE", help="write the tidy event table (CSV) here")


def _spec(args: argparse.Namespace) -> RunSpec:
    if args.config:
        spec = load_config(args.config)
        if args.seed is not None:
            spec = RunSpec(config=spec.config, seed=args.seed, engine=spec.engine)
        return spec
    if args.alpha is None or args.gamma is None:
        raise ValueError("give a CONFIG.toml, or --alpha and --gamma (plain parameters)")
    cfg = StreamConfig(
        tokens=args.tokens,
        acceptance=IIDAcceptance(alpha=args.alpha),
        policy=FixedGamma(gamma=args.gamma),
        cost=PlainCost(c=args.c, v=args.v),
        max_gamma=args.gamma,
    )
    return RunSpec(config=cfg, seed=0 if args.seed is None else args.seed)


def _clean(m: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in m.items()}


def run(args: argparse.Namespace) -> int:
    spec = _spec(args)
    rng = np.random.default_rng(spec.seed)
    if isinstance(spec.config, StreamConfig):
        result: Any = simulate_stream(spec.config, rng, engine=spec.engine)  # type: ignore[arg-type]
    else:
        result = simulate_serving(spec.config, rng)
    metrics = _clean(result.metrics())
    if args.trace:
        with open(args.trace, "w", encoding="utf-8") as fh:
            json.dump(result.chrome_trace(), fh)
    if args.events:
        result.events().to_csv(args.events, index=False)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        width = max(len(k) for k in metrics)
        for key, value in metrics.items():
            shown = f"{value:.6g}" if isinstance(value, float) else str(value)
            print(f"{key:<{width}}  {shown}")
    return 0
