"""One stream's result: the per-block arrays, the metrics record with batch-means standard
errors and the engines' acceptance metrics, the tidy event table and the Chrome trace
(re-exported by :mod:`specsim.sim.results.records`, which holds serving's result).

Discarded work is accounted apart from useful work: ``target_positions_wasted``
(positions a pass verified whose output was not used: after the first rejection;
the bonus position dropped when an overlapped pre-drafted block takes its place),
``draft_tokens_wasted`` (drafts rejected or after a rejection) and
``overlap_draft_s_wasted`` (draft-accelerator time pre-drafting a block that a
rejection threw away). Operations and energy of a pass are split between used and
wasted positions in proportion to positions (weights are read once per pass whatever
happens, so this is an attribution, not a measurement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost import verification_positions
from specsim.sim.costs.source import BlockCosts
from specsim.sim.results.chrome import chrome_trace
from specsim.sim.results.engine_metrics import stream_acceptance
from specsim.stats import batch_means_se

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Blocks",
    "StreamResult",
    "add_accepted_at",
    "stream_record",
]


@dataclass(frozen=True)
class Blocks:
    """Per-block arrays of one stream's run."""

    start: NDArray[np.int64]
    gamma: NDArray[np.int64]
    accepted: NDArray[np.int64]
    emitted: NDArray[np.int64]
    draft_start: NDArray[np.float64]
    draft_end: NDArray[np.float64]
    verify_end: NDArray[np.float64]
    overlap_wasted_s: NDArray[np.float64]
    costs: BlockCosts
    overlapped: bool

    @property
    def verify_start(self) -> NDArray[np.float64]:
        # A pass starts once its block is drafted: the clamp removes rounding (end minus
        # duration came out at -5.55e-11 for the first pass), so a trace starts at 0.
        return np.maximum(self.verify_end - self.costs.verify_time, self.draft_end)


@dataclass(frozen=True)
class StreamResult:
    """One stream's run and its baseline (plain decoding of the same tokens, same costs)."""

    blocks: Blocks
    baseline_time_s: float
    baseline_flops: float
    baseline_energy_j: float | None
    tokens_requested: int | None = None

    def sums(self) -> dict[str, Any]:
        """The run's totals: what :func:`stream_record` turns into the metrics record, and
        what a run in chunks adds up chunk by chunk."""
        b, c = self.blocks, self.blocks.costs
        positions = verification_positions(b.gamma)
        pos_wasted = positions - b.emitted
        draft_wasted = b.gamma - b.accepted
        overlap_steps = np.divide(
            b.overlap_wasted_s,
            c.draft_time,
            where=c.draft_time > 0,
            out=np.zeros_like(b.overlap_wasted_s),
        )
        energy = energy_wasted = None
        if c.verify_energy is not None and c.draft_energy is not None:
            energy = float(
                c.verify_energy.sum() + (c.draft_energy * (b.gamma + overlap_steps)).sum()
            )
            energy_wasted = float(
                (c.verify_energy * pos_wasted / positions).sum()
                + (c.draft_energy * (draft_wasted + overlap_steps)).sum()
            )
        return {
            "tokens_requested": self.tokens_requested,
            "tokens": int(b.emitted.sum()),
            "passes": int(b.gamma.shape[0]),
            "draft_steps": int(b.gamma.sum()),
            "accepted": int(b.accepted.sum()),
            # The engines' counters (specsim.sim.results.engine_metrics): blocks that drafted, and
            # tokens accepted at each draft position.
            "drafts": int((b.gamma > 0).sum()),
            "accepted_at": _accepted_at(b.accepted),
            # Proposals actually tested: the accepted ones plus the first rejected one.
            "tested": int((b.accepted + (b.accepted < b.gamma)).sum()),
            "time_s": float(b.verify_end[-1]),
            "baseline_time_s": self.baseline_time_s,
            "baseline_flops": self.baseline_flops,
            "baseline_energy_j": self.baseline_energy_j,
            "positions": int(positions.sum()),
            "positions_wasted": int(pos_wasted.sum()),
            "draft_wasted": int(draft_wasted.sum()),
            "overlap_wasted_s": float(b.overlap_wasted_s.sum()),
            "target_flops": float(c.verify_flops.sum()),
            "draft_flops": float((c.draft_flops * b.gamma).sum()),
            "flops_wasted": float(
                (c.verify_flops * pos_wasted / positions).sum()
                + (c.draft_flops * (draft_wasted + overlap_steps)).sum()
            ),
            "energy_j": energy,
            "energy_j_wasted": energy_wasted,
            "overlapped": b.overlapped,
        }

    def batch_series(self) -> tuple[NDArray[np.float64], ...]:
        """Per block: tokens emitted, time and operations (the batch-means series)."""
        b, c = self.blocks, self.blocks.costs
        return (
            b.emitted.astype(float),
            np.diff(b.verify_end, prepend=0.0),
            c.verify_flops + c.draft_flops * b.gamma,
        )

    def metrics(self) -> dict[str, Any]:
        """The metrics record (a flat dict of numbers, JSON-ready)."""
        emitted, block_time, ops = self.batch_series()
        return stream_record(
            self.sums(),
            tokens_per_pass_se=batch_means_se(emitted),
            tokens_per_time_se=batch_means_se(emitted, block_time),
            ops_per_token_se=batch_means_se(ops, emitted),
        )

    def events(self) -> pd.DataFrame:
        """Tidy event table: one row per draft phase, verification pass, emission and discard."""
        import pandas as pd  # start-up: a stream's metrics need no pandas (specsim simulate)

        b = self.blocks
        idx = np.arange(b.gamma.shape[0])
        cols = ("block", "kind", "track", "start_s", "end_s", "tokens")
        rej, ow = b.accepted < b.gamma, b.overlap_wasted_s > 0
        parts = [
            (idx, "draft", "draft", b.draft_start, b.draft_end, b.gamma),
            (
                idx,
                "verify",
                "target",
                b.verify_start,
                b.verify_end,
                verification_positions(b.gamma),
            ),
            (idx, "emit", "output", b.verify_end, b.verify_end, b.emitted),
            (
                idx[rej],
                "discard",
                "discarded",
                b.verify_end[rej],
                b.verify_end[rej],
                (b.gamma - b.accepted)[rej],
            ),
        ]
        if ow.any():
            parts.append(
                (
                    idx[ow],
                    "overlap_discard",
                    "discarded",
                    b.draft_end[ow],
                    b.draft_end[ow] + b.overlap_wasted_s[ow],
                    0,
                )
            )
        frames = [pd.DataFrame(dict(zip(cols, part, strict=True))) for part in parts]
        out = pd.concat(frames, ignore_index=True)
        return out.sort_values(["start_s", "block"], kind="stable").reset_index(drop=True)

    def chrome_trace(self) -> dict[str, Any]:
        return chrome_trace(self.events())


def _accepted_at(accepted: NDArray[np.int64]) -> NDArray[np.int64]:
    """Blocks that accepted at least ``j`` tokens, for ``j = 1 .. max(accepted)``."""
    most = int(accepted.max()) if accepted.shape[0] else 0
    return np.bincount(accepted, minlength=most + 1)[::-1].cumsum()[::-1][1:].astype(np.int64)


def add_accepted_at(a: NDArray[np.int64], b: NDArray[np.int64]) -> NDArray[np.int64]:
    """Two runs' :func:`_accepted_at` counts, added position by position."""
    out = np.zeros(max(a.shape[0], b.shape[0]), dtype=np.int64)
    out[: a.shape[0]] += a
    out[: b.shape[0]] += b
    return out


def _over(x: float | None, y: float) -> float | None:
    return None if x is None else x / y


def stream_record(
    s: dict[str, Any],
    *,
    tokens_per_pass_se: float | None,
    tokens_per_time_se: float | None,
    ops_per_token_se: float | None,
) -> dict[str, Any]:
    """A stream's metrics record from its totals (:meth:`StreamResult.sums`) and the
    batch-means standard errors of tokens per pass, tokens per time and operations per token.

    ``tokens`` is what was emitted: the last block may overshoot ``tokens_requested`` by up
    to its gamma (a block's output is not cut).
    """
    tokens, passes, time_s = s["tokens"], s["passes"], s["time_s"]
    t_flops, d_flops = s["target_flops"], s["draft_flops"]
    energy = s["energy_j"]
    per_token_base = s["baseline_time_s"] / tokens
    base_ops_per_token = s["baseline_flops"] / tokens
    return {
        "tokens": tokens,
        "tokens_requested": s["tokens_requested"],
        "target_passes": passes,
        "draft_steps": s["draft_steps"],
        "mean_gamma": s["draft_steps"] / passes,
        "tokens_per_target_pass": tokens / passes,
        "tokens_per_target_pass_se": tokens_per_pass_se,
        "acceptance_observed": float(s["accepted"] / max(s["tested"], 1)),
        "time_s": time_s,
        "tokens_per_s": tokens / time_s,
        "baseline_time_s": s["baseline_time_s"],
        "speedup": per_token_base * tokens / time_s,
        "speedup_se": None if tokens_per_time_se is None else per_token_base * tokens_per_time_se,
        "target_positions_verified": s["positions"],
        "target_positions_wasted": s["positions_wasted"],
        "draft_tokens_wasted": s["draft_wasted"],
        "overlap_draft_s_wasted": s["overlap_wasted_s"],
        "flops": t_flops + d_flops,
        "flops_wasted": s["flops_wasted"],
        "ops_factor": (t_flops + d_flops) / tokens / base_ops_per_token,
        "ops_factor_se": _over(ops_per_token_se, base_ops_per_token),
        "target_calls_per_token": passes / tokens,
        "energy_j": energy,
        "energy_j_per_token": _over(energy, tokens),
        "energy_j_wasted": s["energy_j_wasted"],
        "baseline_energy_j_per_token": _over(s["baseline_energy_j"], tokens),
        "overlapped": s["overlapped"],
        **stream_acceptance(
            drafts=s["drafts"],
            drafted=s["draft_steps"],
            accepted=s["accepted"],
            accepted_at=s["accepted_at"],
        ),
    }
