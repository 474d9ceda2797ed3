"""A disaggregated run's result: :class:`DisaggResult` and its metrics record.

The record has the keys of a serving run's (:meth:`specsim.sim.ServingResult.metrics`),
computed on the whole run's request table (TTFT from the arrival at the prefill pool to
the first token the decode pool emits; TPOT, goodput and the ``plain_*`` twin from the
decode pool) and, for the keys about passes (``iterations``, ``mean_batch``,
``mean_gamma``, ``tokens_per_target_pass``), on the decode pool's iterations. ``energy_j``
is both pools' together. Then each pool's own verdict and load:
``prefill_stable``/``decode_stable`` with their reasons
(:func:`specsim.sim.results.stability.stability` on the pool's own arrivals and completions),
``prefill_utilization``, ``decode_utilization``,
``prefill_offered_load``, ``decode_offered_load``, the pools' energies (``energy_j_per_token`` and
``plain_energy_j_per_token`` count both pools); and the hand-over:
``transfer_p50_s``, ``transfer_p99_s``, ``transfer_mean_s`` (a transfer's own time),
``handover_p99_s`` (prefill end to the cache's arrival: the link's queue included) and
``kv_bytes_per_token``; when the decode pool verified token trees, the tree-serving keys
(:meth:`specsim.sim.serving.tree_batch.TreeServingResult.metrics`: ``tokens_per_pass`` and its
standard error ``tokens_per_pass_se``, ``mean_nodes``, ``budget_bound_share``,
``discarded_share``). ``stable`` is False when the whole run or either pool is shown
unstable, None when one is untested and none unstable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsim.sim.results.records import ServingResult
from specsim.sim.results.stability import stability_metrics
from specsim.sim.serving.tree_batch import TreeServingResult

__all__ = ["DisaggResult"]


@dataclass(frozen=True)
class DisaggResult:
    """The whole run's request tables (with and without speculation on the decode pool:
    the hand-over's columns, then the decode pool's), and each pool's own
    :class:`~specsim.sim.ServingResult` (the prefill pool's has no twin)."""

    requests_spec: pd.DataFrame
    requests_plain: pd.DataFrame | None
    prefill: ServingResult
    decode: ServingResult
    kv_bytes_per_token: float

    def requests(self) -> pd.DataFrame:
        return self.requests_spec

    def whole(self) -> ServingResult:
        """The whole run as one serving result: its request tables and the decode pool's
        iterations (what the serving metrics read of passes)."""
        d = self.decode
        return ServingResult(
            requests_spec=self.requests_spec,
            iterations_spec=d.iterations_spec,
            requests_plain=self.requests_plain,
            iterations_plain=d.iterations_plain,
        )

    def metrics(
        self, *, ttft_target_s: float | None = None, tpot_target_s: float | None = None
    ) -> dict[str, Any]:
        """The metrics record (module docstring)."""
        out = self.whole().metrics(ttft_target_s=ttft_target_s, tpot_target_s=tpot_target_s)
        pools = {"prefill": self.prefill, "decode": self.decode}
        energies = {}
        for name, pool in pools.items():
            own = stability_metrics(pool.requests_spec, pool.iterations_spec, work_s=pool.work_s)
            for key in ("stable", "stability_reason", "utilization", "offered_load"):
                out[f"{name}_{key}"] = own[key]
            e = pool.iterations_spec["energy_j"].to_numpy()
            energies[name] = None if np.isnan(e).all() else float(np.nansum(e))
            out[f"{name}_energy_j"] = energies[name]
            out[f"{name}_replicas"] = _replicas(pool.iterations_spec)
        verdicts = (out["stable"], out["prefill_stable"], out["decode_stable"])
        out["stable"] = False if False in verdicts else None if None in verdicts else True
        out.pop("utilization"), out.pop("offered_load")  # a pool's, not the whole run's
        pre, dec = energies["prefill"], energies["decode"]
        out["energy_j"] = None if pre is None or dec is None else pre + dec
        tokens = out["tokens"]
        out["energy_j_per_token"] = None if out["energy_j"] is None else out["energy_j"] / tokens
        plain = self.decode.iterations_plain
        if out["plain_energy_j_per_token"] is not None and plain is not None and pre is not None:
            both = pre + float(np.nansum(plain["energy_j"].to_numpy()))
            out["plain_energy_j_per_token"] = both / tokens  # the prefill pool's too
        out.update(_handover(self.requests_spec), kv_bytes_per_token=self.kv_bytes_per_token)
        if "accepted" in self.decode.iterations_spec.columns:  # a tree plan decoded
            its = self.decode.iterations_spec
            trees = TreeServingResult(requests=self.requests_spec, iterations=its).metrics()
            out.update({k: trees[k] for k in _TREE_KEYS})
        return out


_TREE_KEYS = (
    "tokens_per_pass",
    "tokens_per_pass_se",
    "mean_nodes",
    "budget_bound_share",
    "discarded_share",
)


def _replicas(iterations: pd.DataFrame) -> int:
    return int(iterations["replica"].nunique()) if "replica" in iterations.columns else 1


def _handover(req: pd.DataFrame) -> dict[str, float]:
    transfer = req["transfer_s"].to_numpy()
    waited = (req["kv_ready_s"] - req["prefill_end_s"]).to_numpy()
    return {
        "transfer_p50_s": float(np.percentile(transfer, 50)),
        "transfer_p99_s": float(np.percentile(transfer, 99)),
        "transfer_mean_s": float(transfer.mean()),
        "handover_p99_s": float(np.percentile(waited, 99)),
    }
