"""Composed simulation configs: the ``[deployment]``, ``[proposer]``, ``[tree]`` and ``[slo]``
tables of :mod:`specsim.sim.config.config`.

A serving config (``mode = "serving"``) with a ``[proposer]`` table serves token trees on
the one serving engine (:mod:`specsim.sim.serving.tree_serving` for a fixed tree,
:mod:`specsim.sim.serving.tree_serving_dynamic` for trees chosen per pass)::

    [deployment]  the fields of :class:`specsim.cost.deployment.Deployment` (target,
                  hardware, runtime, dtype, weights, kv, group_size, tensor_parallel)
    [proposer]    kind = "draft"    card (a model), acceptance (an alpha: a chain, or a
                                    file of acceptance by depth and rank), dtype
                  kind = "heads"    card (a head card), acceptance (optional: a file in
                                    place of the card's published table), dtype
                  kind = "ngram"    acceptance (alpha or file), n, threads, overlap
                  kind = "parallel" card (a proposer card of kind "parallel"), acceptance
                  kind = "selfspec" card (a proposer card of kind "self-speculation"),
                                    acceptance (optional, as for heads)
    [tree]        kind = "static"   parents, or shape = "chain" | "k-ary" with depth (and k)
                  kind = "dynamic"  budget, max_depth, max_rank (EAGLE-2's policy,
                                    :class:`~specsim.sim.stream.tree_policies.ConfidenceTree`),
                                    concentration, noise (the per-node acceptances,
                                    :class:`~specsim.sim.stream.tree_policies.NodeConfidence`)
    [workload]    as for chain serving

and the engine's top-level keys (``max_batch``, ``position_budget``, ``kv_capacity_tokens``,
``kv_block_tokens``, ``preemption``, ``token_budget``, ``replicas``, ``router``,
``plain_twin``). ``[slo]`` (``ttft_s``, ``tpot_s``: the user's latency targets) adds
``goodput_requests_per_s``, ``slo_attainment`` and ``plain_goodput_requests_per_s``
(:func:`slo_metrics`) to any serving run's metrics. A ``[deployment]`` in a chain config
(no ``[proposer]``) prices its ``[cost] kind = "cards"`` (:mod:`specsim.sim.config.config_cards`).

These runs keep the table they were built from (:attr:`specsim.sim.config.config.RunSpec.source`):
a dotted path (``deployment.weights``, ``proposer.kind``, ``tree.budget``) is set in the
table and the run built again by the same code (:func:`set_path`), so ``--set`` and sweeps
reach every table. Errors name the key, the table and the file.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim.checks import check_size
from specsim.config import Kinds, build, coerce, field_types
from specsim.cost.deployment import Deployment, deployment_from_table
from specsim.policies.lookahead import FixedGamma, fixed_gamma
from specsim.proposers import (
    KINDS,
    Proposer,
    RankAcceptance,
    build_proposer,
    load_acceptance,
)
from specsim.sim.results.records import ServingResult, goodput
from specsim.sim.stream.tree_policies import ConfidenceTree, NodeConfidence

if TYPE_CHECKING:
    from specsim.sim.serving import ServingConfig
    from specsim.sim.serving.tree_serving import TreeServingConfig
    from specsim.sim.serving.tree_serving_dynamic import DynamicTreeServingConfig

    TreeConfig = TreeServingConfig | DynamicTreeServingConfig
    Served = ServingConfig | TreeServingConfig | DynamicTreeServingConfig
    """A serving config of any plan: chains, a static tree, trees chosen per pass (a type
    only: the serving engine loads when a serving config is composed or run)."""

__all__ = [
    "PROPOSER_KEYS",
    "TREE_KEYS",
    "Slo",
    "get_path",
    "proposer_from_table",
    "set_path",
    "simulate_run",
    "slo_metrics",
    "speculates",
    "tree_config_from_dict",
    "tree_parents",
]

PROPOSER_KEYS: dict[str, tuple[str, ...]] = {name: k.keys for name, k in KINDS.items()}
"""Each ``[proposer]`` kind's keys besides ``kind`` (:data:`specsim.proposers.KINDS`)."""

TREE_KEYS: dict[str, tuple[str, ...]] = {
    "static": ("parents", "shape", "depth", "k"),
    "dynamic": ("budget", "max_depth", "max_rank", "concentration", "noise"),
}
"""Each ``[tree]`` kind's keys besides ``kind``."""

_TABLES = ("workload", "deployment", "proposer", "tree", "slo")


@dataclass(frozen=True, kw_only=True)
class Slo:
    """Latency targets for goodput: time to first token ``ttft_s`` and time per output token
    ``tpot_s``, in seconds (the user's requirement, not a measurement)."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
                raise ValueError(f"slo.{name}: expected a finite number of seconds > 0, got {v!r}")


def _kind_table(
    table: Any, keys: Mapping[str, tuple[str, ...]], *, where: str
) -> tuple[str, dict[str, Any]]:
    """A ``{kind = ..., ...}`` table's kind and other keys, each checked against ``keys``."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{where}: expected a table, got {table!r}")
    kind = table.get("kind")
    if not isinstance(kind, str) or kind not in keys:
        raise ValueError(f"{where}.kind: expected one of {list(keys)}, got {kind!r}")
    rest = {k: v for k, v in table.items() if k != "kind"}
    unknown = sorted(set(rest) - set(keys[kind]))
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {unknown} for kind {kind!r}; allowed: {list(keys[kind])}"
        )
    return kind, rest


def _acceptance(value: Any, *, base: Path, where: str) -> RankAcceptance:
    """An alpha (every depth's first child accepted with that probability: a chain's i.i.d.
    acceptance) or a file of acceptance by depth and rank, relative to ``base``, or a
    :class:`RankAcceptance` built already (the plan's engine forms)."""
    if isinstance(value, RankAcceptance):
        return value
    if isinstance(value, str):
        p = Path(value)
        return load_acceptance(p if p.is_absolute() else base / p)
    alpha = coerce(value, float, where)
    return RankAcceptance(
        accept=((alpha,),), source=f"{where} = {alpha} (i.i.d. chain)", name=where
    )


def proposer_from_table(table: Any, *, base: str | os.PathLike[str], where: str) -> Proposer:
    """The proposer a ``[proposer]`` table names (module docstring); file paths relative to
    ``base``; every bad key or value a ValueError beginning with ``where``."""
    kind, rest = _kind_table(table, PROPOSER_KEYS, where=where)
    spec = KINDS[kind]
    if spec.card and "card" not in rest:
        raise ValueError(f"{where}: kind {kind!r} needs 'card'")
    if spec.needs_acceptance and "acceptance" not in rest:
        raise ValueError(f"{where}: kind {kind!r} needs 'acceptance' (an alpha or a file)")
    try:
        acc = None
        if "acceptance" in rest:
            acc = _acceptance(rest.pop("acceptance"), base=Path(base), where=f"{where}.acceptance")
        card = rest.pop("card", None)
        return build_proposer(
            kind, card=None if card is None else str(card), acceptance=acc, extra=rest
        )
    except (TypeError, ValueError, FileNotFoundError) as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None


def tree_parents(rest: Mapping[str, Any], where: str) -> tuple[int, ...]:
    """A static tree: ``parents`` as given, or ``shape = "chain"`` of ``depth`` nodes or the
    full ``k``-ary tree of ``depth`` levels (``k + k**2 + ... + k**depth`` nodes)."""
    if "parents" in rest:
        extra = sorted(set(rest) - {"parents"})
        if extra:
            raise ValueError(f"{where}: give parents or shape, not both (also given: {extra})")
        return tuple(coerce(rest["parents"], tuple[int, ...], f"{where}.parents"))
    shape = rest.get("shape")
    if shape not in ("chain", "k-ary"):
        raise ValueError(
            f"{where}.shape: expected 'chain' or 'k-ary' (or give parents), got {shape!r}"
        )
    if "depth" not in rest:
        raise ValueError(f"{where}: shape {shape!r} needs 'depth'")
    # Depth and k first: each is at most the tree's nodes, so the sum below stays small.
    depth = check_size(
        coerce(rest["depth"], int, f"{where}.depth"), name=f"{where}.depth", limit="tree_nodes"
    )
    k = 1
    if shape == "k-ary":
        if "k" not in rest:
            raise ValueError(f"{where}: shape 'k-ary' needs 'k'")
        k = check_size(coerce(rest["k"], int, f"{where}.k"), name=f"{where}.k", limit="tree_nodes")
    nodes = depth if shape == "chain" else sum(k**d for d in range(1, depth + 1))
    check_size(nodes, name=f"{where}: a {shape} tree of depth {depth}", limit="tree_nodes")
    if shape == "chain":  # as specsim.policies.tree_optimizer.chain_tree (a layer above this one)
        if "k" in rest:
            raise ValueError(f"{where}.k: a chain has one child per node; remove k")
        return tuple(range(-1, depth - 1))
    # Breadth first, node i's parent is i // k - 1, as specsim.policies.tree_optimizer.kary_tree.
    return tuple(i // k - 1 for i in range(nodes))


def _plan(table: Any, where: str) -> dict[str, Any]:
    """The tree config's plan fields: ``parents``, or ``policy`` and ``world``."""
    kind, rest = _kind_table(table, TREE_KEYS, where=where)
    if kind == "static":
        return {"parents": tree_parents(rest, where)}
    grow = {k: v for k, v in rest.items() if k in field_types(ConfidenceTree)}
    world = {k: v for k, v in rest.items() if k in field_types(NodeConfidence)}
    return {
        "policy": build(ConfidenceTree, grow, where=where),
        "world": build(NodeConfidence, world, where=where),
    }


def _deployed(table: Any, where: str) -> Deployment:
    """A ``[deployment]`` table checked (:func:`deployment_from_table`); a draft placement
    other than ``shared`` is refused (drafting here shares the target's devices)."""
    dep: Deployment = deployment_from_table(table, where=where)
    if dep.draft_placement != "shared":
        raise ValueError(
            f"{where}.draft_placement: simulate serves drafts on the target's devices "
            f"('shared'), got {dep.draft_placement!r}"
        )
    return dep


def tree_config_from_dict(
    data: Mapping[str, Any], *, where: str, base: str | os.PathLike[str], kinds: Kinds
) -> TreeConfig:
    """A tree-serving config from a composed table (module docstring)."""
    from specsim.sim.serving.tree_serving import TreeServingConfig  # start-up: a serving config
    from specsim.sim.serving.tree_serving_dynamic import (  # start-up: as above
        DynamicTreeServingConfig,
    )

    for name in ("deployment", "proposer", "tree", "workload"):
        if name not in data:
            raise ValueError(f"{where}: a [proposer] run needs a [{name}] table")
    plan = _plan(data["tree"], f"{where} [tree]")
    cls: type = TreeServingConfig if "parents" in plan else DynamicTreeServingConfig
    own = set(field_types(cls)) - {"deployment", "proposer"}
    own -= {"parents", "policy", "world"}
    allowed = own | {"mode", "seed", *_TABLES}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    hints = field_types(cls)
    fields = {
        k: coerce(v, hints[k], f"{where}.{k}", kinds=kinds) for k, v in data.items() if k in own
    }
    fields["deployment"] = _deployed(data["deployment"], f"{where} [deployment]")
    fields["proposer"] = proposer_from_table(
        data["proposer"], base=base, where=f"{where} [proposer]"
    )
    try:
        return cls(**fields, **plan)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def simulate_run(config: object, rng: np.random.Generator, *, plain: bool = False) -> ServingResult:
    """Serve a serving config on the one engine (chains, a static tree or trees chosen per
    pass), as a :class:`~specsim.sim.results.records.ServingResult` (a tree run's tables and its
    metrics, :meth:`specsim.sim.serving.tree_batch.TreeServingResult.metrics`, kept). ``plain``:
    the same requests without speculation instead (a chain config at gamma 0; a tree
    config's plain twin alone, :func:`specsim.sim.serving.tree_batch.plain_twin`: roots only,
    nothing drafted, the target's prefill alone)."""
    from specsim.sim.serving import ServingConfig, simulate_serving  # start-up: a serving run
    from specsim.sim.serving.tree_batch import plain_twin  # start-up: as above
    from specsim.sim.serving.tree_serving import (  # start-up: as above
        TreeServingConfig,
        simulate_tree_serving,
    )
    from specsim.sim.serving.tree_serving_dynamic import (  # start-up: as above
        DynamicTreeServingConfig,
        simulate_dynamic_tree_serving,
    )

    if isinstance(config, ServingConfig):
        run = dataclasses.replace(config, policy=FixedGamma(gamma=0)) if plain else config
        return simulate_serving(run, rng)
    if not isinstance(config, TreeServingConfig | DynamicTreeServingConfig):
        raise TypeError(f"config: expected a serving config, got {type(config).__name__}")
    if plain:
        table = config.workload.sample(rng).reset_index(drop=True)
        req, it = plain_twin(config, table, rng)
        return ServingResult(requests_spec=req, iterations_spec=it)
    tree: Any = (
        simulate_tree_serving(config, rng)
        if isinstance(config, TreeServingConfig)
        else simulate_dynamic_tree_serving(config, rng)
    )
    return _TreeResult(
        requests_spec=tree.requests,
        iterations_spec=tree.iterations,
        requests_plain=tree.requests_plain,
        iterations_plain=tree.iterations_plain,
        tree=tree,
    )


@dataclass(frozen=True)
class _TreeResult(ServingResult):
    """A tree run as a :class:`~specsim.sim.results.records.ServingResult` (its trace, events and
    requests), whose metrics are the tree run's own (``tokens_per_pass``, ...)."""

    tree: Any = None

    def metrics(
        self, *, ttft_target_s: float | None = None, tpot_target_s: float | None = None
    ) -> dict[str, Any]:
        if (ttft_target_s, tpot_target_s) != (None, None):
            raise ValueError("a tree run's latency targets: give an [slo] (slo_metrics)")
        out: dict[str, Any] = self.tree.metrics()
        return out


def speculates(config: Served) -> bool:
    """Whether a serving config drafts at all (a chain policy of gamma 0, an empty tree: no)."""
    from specsim.sim.serving import ServingConfig  # start-up: only a serving config asks
    from specsim.sim.serving.tree_serving import TreeServingConfig  # start-up: as above

    if isinstance(config, ServingConfig):
        return fixed_gamma(config.policy) != 0
    return not isinstance(config, TreeServingConfig) or bool(config.parents)


def slo_metrics(result: ServingResult, slo: Slo) -> dict[str, float | None]:
    """Goodput against ``slo`` of a serving result, named as
    :meth:`specsim.sim.results.records.ServingResult.metrics` names it (``goodput_requests_per_s``,
    ``slo_attainment``: goodput over the completion rate), and the plain twin's
    ``plain_goodput_requests_per_s`` (None without a twin)."""
    req = result.requests_spec
    good = goodput(req, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s)
    span = float(req["finish_s"].max() - req["arrival_s"].min())
    out: dict[str, float | None] = {
        "goodput_requests_per_s": good,
        "slo_attainment": good * span / len(req),
        "plain_goodput_requests_per_s": None,
    }
    plain = result.requests_plain
    if plain is not None:
        out["plain_goodput_requests_per_s"] = goodput(plain, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s)
    return out


def get_path(data: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """Whether the dotted ``path`` is set in the nested table ``data``, and its value."""
    node: Any = data
    for name in path.split("."):
        if not isinstance(node, Mapping) or name not in node:
            return False, None
        node = node[name]
    return True, node


def set_path(data: Mapping[str, Any], path: str, value: Any, *, where: str) -> dict[str, Any]:
    """A deep copy of the nested table ``data`` with the dotted ``path`` set to ``value`` (the
    tables along it made when missing; a value that is not a table on the way is an error)."""
    out = copy.deepcopy(dict(data))
    parts = path.split(".")
    if not all(parts):
        raise ValueError(f"{where}: {path!r} is not a dotted path")
    node: dict[str, Any] = out
    for i, name in enumerate(parts[:-1]):
        nxt = node.setdefault(name, {})
        if not isinstance(nxt, dict):
            raise ValueError(f"{where}: {'.'.join(parts[: i + 1])!r} is not a table")
        node = nxt
    node[parts[-1]] = copy.deepcopy(value)
    return out
