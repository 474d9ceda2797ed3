"""Simulation configs from TOML tables, through the configuration boundary :mod:`specsim.config`.

The schema (commented examples in ``studies/configs/``, reference in
``docs/simulate-config.md``): the top-level keys are the fields of
:class:`specsim.sim.StreamConfig` (``mode = "stream"``, the default) or
:class:`specsim.sim.ServingConfig` (``mode = "serving"``), plus ``mode``,
``seed`` and, for streams, ``method``. Each extension point is a table with a
``kind``, whose other keys are the fields of that kind's class (:data:`KINDS`)::

    [acceptance]  kind = "iid" | "positional" | "markov" | "trace"
    [policy]      kind = "fixed" | "optimal" | "confidence" | "heuristic" |
                  "load-adaptive" | "oracle" | "goodput" | "vllm-disable-by-batch" |
                  "vllm-batch-schedule" | "sglang-adaptive"
    [cost]        kind = "plain" | "cards"   (cards: with [deployment], optional
                  [draft_deployment]; :mod:`specsim.sim.config.config_cards`)
    [workload]    kind = "poisson" | "trace"   (serving only)

Serving's engine options are top-level keys too: ``kv_block_tokens`` and
``preemption`` (a paged KV cache), ``token_budget`` (chunked prefill),
``replicas`` and ``router`` (:mod:`specsim.sim.serving.paged`, :mod:`specsim.sim.serving.router`).

A policy takes ``alpha``, ``c`` and ``max_gamma`` from the run it is part of
unless its table states them: ``alpha`` is the acceptance process's mean,
``c`` the plain cost's ``c`` or, on cards, a draft step over a target step at
the run's typical context, ``max_gamma`` the run's. A sweep that changes the
acceptance or the cost changes them too (:func:`with_value`).

A serving config with ``[proposer]`` and ``[tree]`` tables serves token trees instead (its
``[deployment]``, ``[proposer]`` and ``[tree]`` tables, :mod:`specsim.sim.config.config_compose`); a
``[proposer]`` without a ``[tree]`` drafts a chain serving run's blocks
(``ServingConfig.proposer``, the policy choosing each gamma);
a chain config priced on cards takes what runs where from ``[deployment]`` and
``[draft_deployment]`` (:mod:`specsim.sim.config.config_cards`); ``[slo]`` adds
goodput to any serving run. Those runs keep their table (:attr:`RunSpec.source`), and a
path set on them builds them again.

A bad config raises ValueError naming the field (``acceptance.alpha``) and
the problem; unknown keys are errors, not ignored.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from specsim.cards import read_toml
from specsim.config import build, coerce, field_types, replace_path
from specsim.policies import lookahead as pol
from specsim.sim.config.config_cards import card_cost_from_tables
from specsim.sim.config.config_compose import (
    Slo,
    proposer_from_table,
    set_path,
    tree_config_from_dict,
)
from specsim.sim.config.config_kinds import KINDS, TwoStateMarkov
from specsim.sim.costs.costs import PlainCost
from specsim.sim.costs.source import block_costs
from specsim.sim.stream.stream import StreamConfig
from specsim.sim.workload.arrivals import read_request_trace
from specsim.sim.workload.lengths import Empirical

if TYPE_CHECKING:
    from specsim.sim.config.config_compose import TreeConfig
    from specsim.sim.serving import ServingConfig

__all__ = [
    "KINDS",
    "FROM_RUN",
    "RunSpec",
    "TwoStateMarkov",
    "config_from_dict",
    "load_config",
    "with_value",
]


FROM_RUN: tuple[str, ...] = ("alpha", "c", "max_gamma")
"""Policy fields that, left out of the policy table, come from the run."""

_EXTRA = {"stream": ("mode", "seed", "method"), "serving": ("mode", "seed")}


def _config_class(mode: str) -> type:
    """The config class of a run's ``mode``: the serving engine loads only for a serving run."""
    if mode == "stream":
        return StreamConfig
    from specsim.sim.serving import ServingConfig  # start-up: a stream config needs no engine

    return ServingConfig


@dataclass(frozen=True)
class RunSpec:
    """A parsed config: what to run, its seed, its stream method, and which policy fields follow
    the run (:data:`FROM_RUN`); a serving run's latency targets ``slo`` (goodput); for a
    config with ``[deployment]`` or ``[proposer]``, the ``source`` table it was built from
    and the folder ``base`` its files are read from, and the file's name ``origin`` (for
    messages): :func:`with_value` builds it again."""

    config: StreamConfig | ServingConfig | TreeConfig
    seed: int
    method: Literal["fast", "events"] = "fast"
    derived: frozenset[str] = frozenset()
    slo: Slo | None = None
    source: Mapping[str, Any] | None = None
    base: str = field(default=".", compare=False)  # where it was read, not what it runs
    origin: str = field(default="config", compare=False)

    def __post_init__(self) -> None:
        _seed(self.seed, "seed")


def _seed(value: Any, where: str) -> int:
    """A run's seed: an integer >= 0 (numpy's own refusal would not name the field)."""
    seed = coerce(value, int, where)
    if seed < 0:
        raise ValueError(f"{where}: expected an integer >= 0, got {seed}")
    return int(seed)


def _trace_table(table: Any, base: Path, where: str) -> Any:
    """A ``kind = "trace"`` table with ``file``: the file's per-position alphas as ``probs``."""
    if not (isinstance(table, Mapping) and table.get("kind") == "trace" and "file" in table):
        return table
    if "probs" in table:
        raise ValueError(f"{where}: give probs or file, not both")
    from specsim.traces.io import read_trace  # start-up: pandas loads for a trace file only

    p = Path(str(table["file"]))
    trace = read_trace(p if p.is_absolute() else base / p, kind="positions")
    rest = {k: v for k, v in table.items() if k != "file"}
    return {**rest, "probs": tuple(trace.data["alpha"].astype(float).tolist())}


def _typical_context(config: StreamConfig | ServingConfig) -> int:
    if isinstance(config, StreamConfig):
        return int(config.prompt + config.tokens // 2)
    return int(config.workload.mean_prompt_tokens)


def _workload_files(table: Any, base: Path) -> Any:
    """``file`` keys in a workload table: a request trace (``kind = "trace"``, the schema of
    :func:`specsim.sim.workload.arrivals.read_request_trace`) or a length histogram (``kind =
    "empirical"``, optional ``column``), read relative to ``base``."""
    if not isinstance(table, Mapping):
        return table
    out = {
        k: _workload_files(v, base) if k in ("prompt", "output") else v for k, v in table.items()
    }
    if "file" not in out or out.get("kind") not in ("trace", "empirical"):
        return out
    p = Path(str(out.pop("file")))
    path = p if p.is_absolute() else base / p
    if out["kind"] == "trace":
        w = read_request_trace(path)
        return {
            **out,
            "arrival_s": w.arrival_s,
            "prompt_tokens": w.prompt_tokens,
            "output_tokens": w.output_tokens,
        }
    e = Empirical.from_csv(path, column=str(out.pop("column", "tokens")))
    return {**out, "values": e.values, "counts": e.counts}


def _from_run(name: str, config: StreamConfig | ServingConfig, max_gamma: int, where: str) -> Any:
    """The run's value of policy field ``name``."""
    if name == "max_gamma":
        return max_gamma
    if name == "alpha":
        mean = getattr(config.acceptance, "mean", None)
        if mean is None:
            raise ValueError(f"{where}.alpha: the acceptance process has no mean; state alpha")
        return float(mean)
    cost = config.cost
    if isinstance(cost, PlainCost):
        return float(cost.c)
    ctx = np.array([_typical_context(config)], dtype=np.int64)
    proposer = getattr(config, "proposer", None)
    if proposer is not None:  # the proposer drafts: its one-token pass, not the source's step
        from specsim.sim.serving.drafting import (  # start-up: only a serving run has a proposer
            ProposerDrafts,
            target_deployment,
        )

        drafts = ProposerDrafts(cost, proposer, target_deployment(cost, where=f"{where}.c"))
        one = np.ones(1, dtype=np.int64)
        return drafts.draft(1, batch=1, context=int(ctx[0]))[0] / cost.verify(one, ctx).time_s
    blocks = block_costs(cost, np.zeros(1, dtype=np.int64), ctx)
    return float(blocks.draft_time[0] / blocks.verify_time[0])


def _policy(
    table: Any, config: StreamConfig | ServingConfig, max_gamma: int, where: str
) -> tuple[Any, frozenset[str]]:
    """The policy a table names, with the fields it leaves out taken from the run."""
    kinds = KINDS[pol.LookaheadPolicy]
    if not isinstance(table, Mapping) or table.get("kind") not in kinds:
        return coerce(table, pol.LookaheadPolicy, where, kinds=KINDS), frozenset()
    fields = field_types(kinds[table["kind"]])
    derived = frozenset(f for f in FROM_RUN if f in fields and f not in table)
    filled = {**table, **{f: _from_run(f, config, max_gamma, where) for f in derived}}
    return coerce(filled, pol.LookaheadPolicy, where, kinds=KINDS), derived


def _slo(data: Mapping[str, Any], *, mode: str, where: str) -> tuple[Slo | None, Mapping[str, Any]]:
    """A serving run's ``[slo]`` (None without one) and the table without it."""
    if "slo" not in data:
        return None, data
    if mode != "serving":
        raise ValueError(f"{where} [slo]: latency targets are for mode = 'serving'")
    rest = {k: v for k, v in data.items() if k != "slo"}
    return build(Slo, data["slo"], where=f"{where} [slo]"), rest


def _on_cards(data: Mapping[str, Any]) -> bool:
    """Whether a chain config is priced on cards: a ``[deployment]`` (or a
    ``[draft_deployment]``) table, or ``[cost]`` of ``kind = "cards"``."""
    cost = data.get("cost")
    cards = isinstance(cost, Mapping) and cost.get("kind") == "cards"
    return cards or "deployment" in data or "draft_deployment" in data


def config_from_dict(
    data: Mapping[str, Any], *, where: str = "config", base: str | os.PathLike[str] = "."
) -> RunSpec:
    """Build a run from a parsed TOML table; ``base`` resolves relative trace paths."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a table, got {data!r}")
    mode = data.get("mode", "stream")
    if mode not in _EXTRA:
        raise ValueError(f"{where}.mode: expected 'stream' or 'serving', got {mode!r}")
    composed = "deployment" in data or "proposer" in data or _on_cards(data)
    source = dict(data) if composed else None
    slo, data = _slo(data, mode=mode, where=where)
    proposer = None
    if "proposer" in data and mode == "serving" and "tree" not in data:  # a chain's drafts
        proposer = proposer_from_table(data["proposer"], base=base, where=f"{where} [proposer]")
        data = {k: v for k, v in data.items() if k != "proposer"}
    if "proposer" in data:
        if mode != "serving":
            raise ValueError(f"{where} [proposer]: proposers draft with mode = 'serving'")
        seed = _seed(data.get("seed", 0), f"{where}.seed")
        tree = tree_config_from_dict(data, where=where, base=base, kinds=KINDS)
        return RunSpec(
            config=tree, seed=seed, slo=slo, source=source, base=os.fspath(base), origin=where
        )
    if _on_cards(data):  # a chain run priced on its deployment's cards
        cost = card_cost_from_tables(data, where=where)
        tables = ("deployment", "draft_deployment")
        data = {**{k: v for k, v in data.items() if k not in tables}, "cost": cost}
    cls = _config_class(mode)
    hints = field_types(cls)
    allowed = set(hints) | set(_EXTRA[mode])
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")
    seed = _seed(data.get("seed", 0), f"{where}.seed")
    method = coerce(data.get("method", "fast"), Literal["fast", "events"], f"{where}.method")
    table = {k: v for k, v in data.items() if k in hints and k != "policy"}
    table["acceptance"] = _trace_table(table["acceptance"], Path(base), f"{where}.acceptance")
    if "workload" in table:
        table["workload"] = _workload_files(table["workload"], Path(base))
    parts = {k: coerce(v, hints[k], f"{where}.{k}", kinds=KINDS) for k, v in table.items()}
    if proposer is not None:
        parts["proposer"] = proposer
    # A stand-in policy, so that the run's own values (alpha, c) can be read from it.
    trial = build(cls, {**parts, "policy": pol.FixedGamma(gamma=0)}, where=where)
    policy, derived = _policy(data["policy"], trial, trial.max_gamma, f"{where}.policy")
    config = dataclasses.replace(trial, policy=policy)
    return RunSpec(
        config=config,
        seed=seed,
        method=method,
        derived=derived,
        slo=slo,
        source=source,
        base=os.fspath(base),
        origin=where,
    )


def with_value(
    spec: RunSpec, path: str, value: Any, *, where: str, base: str | os.PathLike[str] = "."
) -> RunSpec:
    """``spec`` with the dotted ``path`` (``"acceptance.alpha"``, ``"policy"``, ``"seed"``)
    set to ``value``, by :func:`dataclasses.replace`; policy fields that follow the run
    are worked out again. A composed run (``spec.source``) has ``path`` set in its table and
    is built again (:func:`specsim.sim.config.config_compose.set_path`)."""
    if spec.source is not None:
        data = set_path(spec.source, path, value, where=where)
        try:
            return config_from_dict(data, where=spec.origin, base=spec.base)
        except ValueError as exc:  # the flag (or sweep point) and the file's key
            raise ValueError(f"{where}: {exc}") from None
    if path in ("seed", "method"):
        return RunSpec(
            config=spec.config,
            seed=_seed(value, f"{where}: seed") if path == "seed" else spec.seed,
            method=coerce(value, Literal["fast", "events"], f"{where}: method")
            if path == "method"
            else spec.method,
            derived=spec.derived,
            slo=spec.slo,
        )
    config: Any = spec.config  # a chain run (a composed one returned above)
    derived = spec.derived
    if path == "policy":
        policy, derived = _policy(value, config, config.max_gamma, f"{where}: policy")
        config = dataclasses.replace(config, policy=policy)
    else:
        if path == "cost" and _on_cards({"cost": value}):  # needs a [deployment]: says so
            card_cost_from_tables({"cost": value}, where=where)
        if path == "acceptance":
            value = _trace_table(value, Path(base), f"{where}: acceptance")
        config = replace_path(config, path, value, where=where, kinds=KINDS)
        if path.startswith("policy."):
            derived = derived - {path.removeprefix("policy.")}
    if derived:
        filled = {f: _from_run(f, config, config.max_gamma, where) for f in derived}
        try:
            current: Any = config.policy  # a dataclass whose fields include those in `derived`
            config = dataclasses.replace(config, policy=dataclasses.replace(current, **filled))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: policy: {exc}") from None
    return RunSpec(config=config, seed=spec.seed, method=spec.method, derived=derived, slo=spec.slo)


def load_config(path: str | os.PathLike[str]) -> RunSpec:
    """Read a simulation config TOML file (through :func:`specsim.cards.read_toml`)."""
    p = Path(path)
    return config_from_dict(read_toml(p), where=str(p), base=p.parent)
