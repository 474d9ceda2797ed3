"""``specsim simulate CONFIG`` for a config with a ``[disaggregation]`` table: separate
prefill and decode pools (:mod:`specsim.sim.disagg`), the metrics record printed."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from specsim.cards import read_toml
from specsim.cli import jsonout

__all__ = ["is_disaggregated", "run"]

_NOT_HERE = ("trace", "events")


def is_disaggregated(path: str) -> bool:
    """Whether the TOML file at ``path`` has a ``[disaggregation]`` table."""
    return "disaggregation" in read_toml(path)


def run(args: argparse.Namespace) -> int:
    """Serve the config on its two pools; print the record (``--json``: as JSON)."""
    from specsim.sim.disagg import simulate_disaggregated  # start-up: only when asked
    from specsim.sim.disagg.from_toml import load_disaggregated

    given = [f"--{o}" for o in _NOT_HERE if getattr(args, o, None)]
    if given or getattr(args, "sets", None):
        flags = given + (["--set"] if getattr(args, "sets", None) else [])
        raise ValueError(
            f"{', '.join(flags)}: not available for a [disaggregation] config yet; edit the "
            f"file ({args.config}) instead"
        )
    try:
        spec = load_disaggregated(args.config)
    except ValueError as exc:
        text, where = str(exc), str(args.config)
        raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None
    seed = spec.seed if args.seed is None else args.seed
    result = simulate_disaggregated(spec.config, np.random.default_rng(seed))
    slo: dict[str, Any] = (
        {}
        if spec.slo is None
        else {"ttft_target_s": spec.slo.ttft_s, "tpot_target_s": spec.slo.tpot_s}
    )
    metrics = result.metrics(**slo)
    if args.json:
        print(jsonout.dumps(metrics))
        return 0
    width = max(len(k) for k in metrics)
    for key, value in metrics.items():
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")
    print(
        "ttft: arrival at the prefill pool to the decode pool's first token (prefill, KV "
        "transfer over the link, first decode step); tpot: the decode pool's; stable: the "
        "whole run and both pools"
    )
    return 0
