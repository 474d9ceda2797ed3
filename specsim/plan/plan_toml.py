"""A plan TOML: the :class:`~specsim.plan.options.PlanRequest` of a file.

``[deployment]`` (the Deployment's fields), ``[[options]]`` (or one ``[proposer]``) with the
keys of :class:`~specsim.plan.options.OptionSpec`, ``[load]`` (the keys of
:class:`~specsim.plan.options.Load`), ``[slo]`` (``ttft_p99_s``, ``tpot_p99_s``) and
top-level ``price_per_gpu_hour``, ``seed``, ``max_batch``, ``precise``, and a lookahead for
every option without its own: ``k`` or ``tree`` (:mod:`specsim.plan.lookahead`). Every bad
value is a ValueError naming the file, the table and the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specsim.cards import read_toml
from specsim.config import build
from specsim.cost.deployment import deployment_from_table
from specsim.plan.lookahead import check_lookahead
from specsim.plan.option_acceptance import FORMS
from specsim.plan.options import Load, OptionSpec, PlanRequest

__all__ = ["request_from_toml"]


def _options(data: Mapping[str, Any], where: str) -> tuple[OptionSpec, ...]:
    if "options" in data and "proposer" in data:
        raise ValueError(f"{where}: give [[options]] or [proposer], not both")
    raw = data.get("options", [data["proposer"]] if "proposer" in data else [])
    if not isinstance(raw, list):
        raise ValueError(f"{where} [[options]]: expected an array of tables, got {raw!r}")
    folder = Path(where).parent  # a file named in the config is found beside it
    ahead = {k: data[k] for k in ("k", "tree") if k in data}  # every option's, unless its own
    try:
        check_lookahead(ahead.get("k"), ahead.get("tree"))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    out = []
    for i, t in enumerate(raw):
        here = f"{where} [[options]] #{i + 1}"
        if isinstance(t, Mapping):
            t = _sourced(t, folder, where=here, path=where)
        if isinstance(t, Mapping) and not ("k" in t or "tree" in t):
            t = {**t, **ahead}
        out.append(build(OptionSpec, t, where=here))
    return tuple(out)


def _sourced(t: Mapping[str, Any], folder: Path, *, where: str, path: str) -> dict[str, Any]:
    """An option table with its acceptance file found beside the plan TOML and its
    acceptance form said to come from ``path`` (a key ``acceptance_from`` is refused)."""
    if "acceptance_from" in t:
        raise ValueError(
            f"{where}: acceptance_from: not a key of a plan TOML (the plan names the file "
            "an acceptance was given in itself)"
        )
    out = dict(t)
    acc = t.get("acceptance")
    if isinstance(acc, str) and not os.path.isabs(acc):
        out["acceptance"] = os.fspath(folder / acc)
    if any(k in t for k in FORMS):
        out["acceptance_from"] = f"given in {path}"
    return out


def request_from_toml(path: str | os.PathLike[str], **overrides: Any) -> PlanRequest:
    """The :class:`PlanRequest` of a TOML file (module docstring); ``overrides`` replace
    request fields."""
    where = os.fspath(path)
    data = read_toml(path)
    known = {"deployment", "options", "proposer", "load", "slo", "price_per_gpu_hour"}
    known |= {"seed", "max_batch", "precise", "k", "tree"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    if "deployment" not in data:
        raise ValueError(f"{where}: expected a [deployment] table")
    slo = data.get("slo", {})
    bad = sorted(set(slo) - {"ttft_p99_s", "tpot_p99_s"})
    if bad:
        raise ValueError(f"{where} [slo]: unknown key(s) {bad}; allowed: ttft_p99_s, tpot_p99_s")
    fields: dict[str, Any] = {
        "deployment": deployment_from_table(data["deployment"], where=f"{where} [deployment]"),
        "options": _options(data, where),
        "load": build(Load, data.get("load", {}), where=f"{where} [load]"),
        "slo_ttft_p99_s": slo.get("ttft_p99_s"),
        "slo_tpot_p99_s": slo.get("tpot_p99_s"),
        **{k: data[k] for k in ("price_per_gpu_hour", "seed", "max_batch", "precise") if k in data},
    }
    fields.update(overrides)
    try:
        return PlanRequest(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
