"""``specsim simulate CONFIG`` for a config with a ``[disaggregation]`` table: separate
prefill and decode pools (:mod:`specsim.sim.disagg`), the metrics record printed."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim.cards import read_toml
from specsim.checks import NESTED_TOO_DEEPLY
from specsim.cli import jsonout

if TYPE_CHECKING:
    from specsim.sim.disagg.from_toml import DisaggSpec

__all__ = ["is_disaggregated", "run"]

_NOT_HERE = ("trace", "events")


def is_disaggregated(path: str) -> bool:
    """Whether the TOML file at ``path`` has a ``[disaggregation]`` table."""
    return "disaggregation" in read_toml(path)


def _with_sets(path: str, sets: list[str]) -> DisaggSpec:
    """The config at ``path`` with each ``--set PATH=VALUE`` applied to its tables (a TOML
    value, or a bare word as a string), then built; errors name the flag and the file."""
    from specsim.sim.config.config_compose import set_path  # start-up: only for this config
    from specsim.sim.disagg.from_toml import disagg_from_dict  # start-up: as above

    data: dict[str, Any] = dict(read_toml(path))
    for item in sets:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set: expected PATH=VALUE, got {item!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text.strip()  # a bare word: a string (a slug, a link)
        except RecursionError:  # tomllib parses nested arrays by recursion
            raise ValueError(f"--set {key.strip()}: {NESTED_TOO_DEEPLY}") from None
        data = set_path(data, key.strip(), value, where=f"--set {key.strip()}")
    try:
        return disagg_from_dict(data, where=path, base=Path(path).parent)
    except ValueError as exc:
        text, flags = str(exc), " ".join(f"--set {s.partition('=')[0]}" for s in sets)
        text = text if text.startswith(path) else f"{path}: {text}"
        raise ValueError(f"{flags}: {text}" if sets else text) from None


def run(args: argparse.Namespace) -> int:
    """Serve the config on its two pools; print the record (``--json``: as JSON)."""
    from specsim.sim.disagg import simulate_disaggregated  # start-up: only when asked

    given = [f"--{o}" for o in _NOT_HERE if getattr(args, o, None)]
    if given:
        raise ValueError(
            f"{', '.join(given)}: not available for a [disaggregation] config yet (the "
            f"record covers both pools; {args.config})"
        )
    spec = _with_sets(str(args.config), list(getattr(args, "sets", None) or []))
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
