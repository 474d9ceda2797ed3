"""Simulation configs from TOML tables: every key checked before anything runs.

The schema (commented examples in ``studies/configs/``, reference in
``docs/simulate-config.md``)::

    mode = "stream"            # or "serving"
    seed = 1
    tokens = 100000            # stream: tokens to decode
    prompt = 0                 # stream: prompt length (context at the start)
    max_gamma = 64
    [acceptance]  kind = "iid" | "positional" | "markov" | "trace"
    [policy]      kind = "fixed" | "optimal" | "confidence" | "heuristic" |
                  "load-adaptive" | "oracle"
    [cost]        kind = "plain" | "cards"
    [workload]    kind = "poisson" | "trace"   (serving only)
    max_batch = 64             # serving
    kv_capacity_tokens = 200000  # serving, optional

A bad config raises ValueError naming the field (``acceptance.alpha``) and
the problem; unknown keys are errors, not ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim import acceptance as acc
from specsim import policies as pol
from specsim.sim.costs import CardCost, PlainCost
from specsim.sim.serving import ServingConfig
from specsim.sim.stream import StreamConfig
from specsim.sim.workload import PoissonWorkload, TraceWorkload

__all__ = ["RunSpec", "config_from_dict", "load_config"]


@dataclass(frozen=True)
class RunSpec:
    """A parsed config: what to run, its seed and its engine."""

    config: StreamConfig | ServingConfig
    seed: int
    engine: str = "fast"


_TOP = {
    "stream": {"mode", "seed", "tokens", "prompt", "max_gamma", "engine", "acceptance", "policy",
               "cost"},
    "serving": {"mode", "seed", "max_gamma", "max_batch", "kv_capacity_tokens", "acceptance",
                "policy", "cost", "workload"},
}  # fmt: skip


def _keys(table: Mapping[str, Any], where: str, allowed: set[str], required: set[str]) -> None:
    if not isinstance(table, Mapping):
        raise ValueError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(table))
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")


def _typed(table: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    value = table[key]
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, float))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"{where}.{key}: expected {names}, got {value!r}")
    return value


def _build(kinds: Mapping[str, Any], table: Any,
           where: str, extra: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
    if not isinstance(table, Mapping) or "kind" not in table:
        raise ValueError(f"{where}: expected a table with a 'kind' key, got {table!r}")
    kind = table["kind"]
    if kind not in kinds:
        raise ValueError(f"{where}.kind: unknown kind {kind!r}; known: {sorted(kinds)}")
    factory, fields = kinds[kind]
    _keys(table, where, set(fields) | {"kind"}, set())
    args = {k: _typed(table, k, where, t) for k, t in fields.items() if k in table}
    for k, v in list(args.items()):
        if isinstance(v, list):
            args[k] = tuple(v)
    try:
        return factory(**args, **(extra or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} ({kind}): {exc}") from None


def _trace_probs(path: str, base: Path) -> tuple[float, ...]:
    """Per-position acceptance ``alpha`` from a ``positions`` trace (docs/traces.md)."""
    from specsim.traces import read_trace

    p = Path(path)
    trace = read_trace(p if p.is_absolute() else base / p, kind="positions")
    return tuple(trace.data["alpha"].astype(float).tolist())


def _markov(**kw: Any) -> acc.MarkovAcceptance:
    if "mean" in kw:
        return acc.MarkovAcceptance.two_state(**kw)
    return acc.MarkovAcceptance(**kw)


def _cards(**kw: Any) -> CardCost:
    from specsim.cards import load_hardware, load_model

    return CardCost(
        target=load_model(kw.pop("target")),
        draft=load_model(kw.pop("draft")) if "draft" in kw else None,
        hardware=load_hardware(kw.pop("hardware")),
        draft_hardware=load_hardware(kw.pop("draft_hardware")) if "draft_hardware" in kw else None,
        **kw,
    )


ACCEPTANCE = {
    "iid": (acc.IIDAcceptance, {"alpha": float, "confidence_noise": float}),
    "positional": (acc.PositionalAcceptance, {"alphas": list, "confidence_noise": float}),
    "markov": (_markov, {"alphas": list, "weights": list, "persistence": float, "mean": float,
                         "spread": float, "confidence_noise": float}),
    "trace": (acc.TraceAcceptance, {"probs": list, "offset_from_rng": bool,
                                    "confidence_noise": float}),
}  # fmt: skip
POLICY = {
    "fixed": (pol.FixedGamma, {"gamma": int}),
    "optimal": (pol.OptimalStatic, {"alpha": float, "c": float, "max_gamma": int}),
    "confidence": (pol.ConfidenceThreshold, {"threshold": float, "max_gamma": int}),
    "heuristic": (pol.HeuristicPlusTwoMinusOne, {"initial": int, "max_gamma": int}),
    "load-adaptive": (pol.LoadAdaptive, {"alpha": float, "max_gamma": int}),
    "oracle": (pol.Oracle, {"max_gamma": int}),
}
COST = {
    "plain": (PlainCost, {"c": float, "v": (float, int, list), "c_hat": float, "step_s": float,
                          "overlap": bool}),
    "cards": (_cards, {"target": str, "draft": str, "hardware": str, "draft_hardware": str,
                       "tensor_parallel": int, "dtype": str}),
}  # fmt: skip
WORKLOAD = {
    "poisson": (PoissonWorkload, {"rate_per_s": float, "requests": int,
                                  "prompt_tokens": (int, list), "output_tokens": (int, list)}),
    "trace": (TraceWorkload, {"arrival_s": list, "prompt_tokens": list, "output_tokens": list}),
}  # fmt: skip


def config_from_dict(data: Mapping[str, Any], *, where: str = "config",
                     base: str | os.PathLike[str] = ".") -> RunSpec:  # fmt: skip
    """Build a run from a parsed TOML table; ``base`` resolves relative trace paths."""
    mode = data.get("mode", "stream")
    if mode not in _TOP:
        raise ValueError(f"{where}.mode: expected 'stream' or 'serving', got {mode!r}")
    required = {"acceptance", "policy", "cost"} | ({"tokens"} if mode == "stream" else {"workload"})
    _keys(data, where, _TOP[mode], required)
    a_table = dict(data["acceptance"]) if isinstance(data["acceptance"], Mapping) else {}
    if a_table.get("kind") == "trace" and "file" in a_table:
        a_table["probs"] = list(_trace_probs(a_table.pop("file"), Path(base)))
    acceptance = _build(ACCEPTANCE, a_table or data["acceptance"], f"{where}.acceptance")
    policy = _build(POLICY, data["policy"], f"{where}.policy")
    cost_table = dict(data["cost"]) if isinstance(data["cost"], Mapping) else data["cost"]
    if isinstance(cost_table, dict) and isinstance(cost_table.get("v"), int | float):
        cost_table["v"] = float(cost_table["v"])
    cost = _build(COST, cost_table, f"{where}.cost")
    seed = _typed(data, "seed", where, int) if "seed" in data else 0
    names = ("tokens", "prompt", "max_gamma", "max_batch", "kv_capacity_tokens")
    ints = {k: _typed(data, k, where, int) for k in names if k in data}
    try:
        if mode == "stream":
            engine = _typed(data, "engine", where, str) if "engine" in data else "fast"
            if engine not in ("fast", "events"):
                raise ValueError(f"engine: expected 'fast' or 'events', got {engine!r}")
            cfg: StreamConfig | ServingConfig = StreamConfig(
                acceptance=acceptance, policy=policy, cost=cost, **ints
            )
            return RunSpec(config=cfg, seed=seed, engine=engine)
        workload = _build(WORKLOAD, data["workload"], f"{where}.workload")
        cfg = ServingConfig(workload=workload, acceptance=acceptance, policy=policy, cost=cost,
                            **ints)  # fmt: skip
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return RunSpec(config=cfg, seed=seed)


def load_config(path: str | os.PathLike[str]) -> RunSpec:
    """Read a simulation config TOML file (through :func:`specsim.cards.read_toml`)."""
    from specsim.cards import read_toml

    p = Path(path)
    return config_from_dict(read_toml(p), where=str(p), base=p.parent)
