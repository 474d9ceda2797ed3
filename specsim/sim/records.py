"""What a simulation reports: the metrics record, the tidy event table, the Chrome trace.

Discarded work is accounted apart from useful work: ``target_positions_wasted``
(positions a pass verified whose output was not used: after the first rejection;
the bonus position dropped when an overlapped pre-drafted block takes its place),
``draft_tokens_wasted`` (drafts rejected or after a rejection) and
``overlap_draft_s_wasted`` (draft-accelerator time pre-drafting a block that a
rejection threw away). Operations and energy of a pass are split between used and
wasted positions in proportion to positions (weights are read once per pass whatever
happens, so this is an attribution, not a measurement). Serving adds :func:`goodput`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsim.cost import verification_positions
from specsim.sim.chrome import chrome_trace
from specsim.sim.source import BlockCosts
from specsim.sim.stability import stability, stability_metrics

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Blocks",
    "StreamResult",
    "ServingResult",
    "batch_means_se",
    "grouped_ratio_se",
    "stream_record",
    "chrome_trace",
    "goodput",
    "iteration_table",
]

ITERATION_COLUMNS = [
    "start_s",
    "end_s",
    "prefill_s",
    "draft_s",
    "batch",
    "admitted",
    "draft_tokens",
    "positions",
    "positions_wasted",
    "draft_wasted",
    "emitted",
    "energy_j",
]
"""The serving iteration table: one row per batch iteration (its prefill, draft steps and
verification pass; token counts summed over the batch; energy NaN without a power model)."""
_COUNTS = frozenset(ITERATION_COLUMNS[4:11])  # integer columns: batch .. emitted


def iteration_table(rows: Sequence[tuple[float, ...] | NDArray[np.float64]]) -> pd.DataFrame:
    """The serving iteration table from its rows, in the columns of :data:`ITERATION_COLUMNS`.

    A row is a tuple, or a block of rows as a 2-d array (a stretch of iterations). One numpy
    conversion per run of tuples, then a column each (a speed trick: pandas infers
    row-wise data several times slower; the counts are exact integers well below 2^53).
    """
    import pandas as pd  # start-up: a stream's metrics need no pandas (specsim simulate)

    width = len(ITERATION_COLUMNS)
    parts: list[NDArray[np.float64]] = []
    tuples: list[tuple[float, ...]] = []
    for row in rows:
        if type(row) is tuple:
            tuples.append(row)
            continue
        if tuples:
            parts.append(np.array(tuples, dtype=np.float64).reshape(-1, width))
            tuples = []
        parts.append(row)  # type: ignore[arg-type]
    if tuples or not parts:
        parts.append(np.array(tuples, dtype=np.float64).reshape(-1, width))
    arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return pd.DataFrame(
        {
            name: arr[:, i].astype(np.int64) if name in _COUNTS else arr[:, i]
            for i, name in enumerate(ITERATION_COLUMNS)
        }
    )


def batch_means_se(x: NDArray[np.float64], y: NDArray[np.float64] | None = None) -> float | None:
    """Standard error of ``mean(x)`` (or of the ratio ``sum x / sum y``) by batch means.

    Thirty batches of consecutive blocks absorb the correlation that non-i.i.d.
    acceptance or adaptive lookahead leaves between blocks. ``None`` below 60
    blocks, where no honest interval can be given.
    """
    n = x.shape[0]
    k = 30
    if n < 2 * k:
        return None
    m = n // k
    xs = x[: m * k].reshape(k, m).sum(axis=1)
    ys = np.full(k, float(m)) if y is None else y[: m * k].reshape(k, m).sum(axis=1)
    return grouped_ratio_se(xs, ys)


def grouped_ratio_se(num: NDArray[np.float64], den: NDArray[np.float64]) -> float:
    """Standard error of a mean or ratio from its batches' sums: the spread of the ``k``
    batch ratios ``num / den`` over ``sqrt(k)`` (the batch-means rule of
    :func:`batch_means_se`, for callers that accumulate the sums themselves)."""
    return float((num / den).std(ddof=1) / math.sqrt(num.shape[0]))


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
    }


PLAIN_KEYS = (
    "throughput_tokens_per_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "ttft_p99_s",
    "energy_j_per_token",
)


@dataclass(frozen=True)
class ServingResult:
    """Per-request table and per-iteration table of a speculative run and its plain twin.

    The plain twin's tables are None when the run skipped it
    (``ServingConfig.plain_twin = False``). ``work_s``: a request's work at full batch,
    decoding plainly (:func:`specsim.sim.stability.plain_work_s`), for ``offered_load``
    (None: not known, and ``offered_load`` is None).
    """

    requests_spec: pd.DataFrame
    iterations_spec: pd.DataFrame
    requests_plain: pd.DataFrame | None = None
    iterations_plain: pd.DataFrame | None = None
    work_s: float | None = None

    def requests(self) -> pd.DataFrame:
        return self.requests_spec

    def events(self) -> pd.DataFrame:
        return self.iterations_spec

    def metrics(
        self, *, ttft_target_s: float | None = None, tpot_target_s: float | None = None
    ) -> dict[str, Any]:
        """The metrics record: the speculative run's summary, then ``plain_*`` (the same
        quantities for the plain twin), ``speedup`` (throughput over the twin's) and
        ``tpot_speedup`` (the twin's median TPOT over the run's), None without a twin. Both
        latency targets add ``goodput_requests_per_s`` (:func:`goodput`), ``slo_attainment``.
        Every record says whether the run is ``stable`` and why (``stability_reason``),
        with ``utilization`` and ``offered_load`` (:mod:`specsim.sim.stability`); the
        twin's ``plain_stable`` too."""
        out = _summary(self.requests_spec, self.iterations_spec)
        out.update(stability_metrics(self.requests_spec, self.iterations_spec, work_s=self.work_s))
        if (ttft_target_s, tpot_target_s) != (None, None):  # one alone: goodput names the other
            good = goodput(self.requests_spec, ttft_s=ttft_target_s, tpot_s=tpot_target_s)  # type: ignore[arg-type]
            rate = len(self.requests_spec) / out["time_s"]
            out.update(goodput_requests_per_s=good, slo_attainment=good / rate)
        plain = None
        out["plain_stable"] = out["plain_stability_reason"] = None
        if self.requests_plain is not None and self.iterations_plain is not None:
            plain = _summary(self.requests_plain, self.iterations_plain)
            steady = stability(self.requests_plain)
            out.update(plain_stable=steady.stable, plain_stability_reason=steady.reason)
        for key in PLAIN_KEYS:
            out[f"plain_{key}"] = None if plain is None else plain[key]
        if plain is None:
            out["speedup"] = out["tpot_speedup"] = None
        else:
            out["speedup"] = out["throughput_tokens_per_s"] / plain["throughput_tokens_per_s"]
            out["tpot_speedup"] = plain["tpot_p50_s"] / out["tpot_p50_s"]
        return out

    def chrome_trace(self) -> dict[str, Any]:
        import pandas as pd  # start-up: a stream's metrics need no pandas (specsim simulate)

        it = self.iterations_spec
        rows = []
        for r in it.itertuples(index=False):
            if r.prefill_s > 0:
                rows.append(("prefill", "target", r.start_s, r.start_s + r.prefill_s, r.admitted))
            t0 = r.start_s + r.prefill_s
            if r.draft_s > 0:
                rows.append(("draft", "draft", t0, t0 + r.draft_s, r.draft_tokens))
            if r.positions > 0:  # not a prefill-only iteration
                rows.append(("verify", "target", t0 + r.draft_s, r.end_s, r.positions))
            if r.positions_wasted > 0:
                rows.append(("discard", "discarded", r.end_s, r.end_s, r.positions_wasted))
        ev = pd.DataFrame(rows, columns=["kind", "track", "start_s", "end_s", "tokens"])
        ev.insert(0, "block", np.arange(len(ev)))
        return chrome_trace(ev)


def goodput(requests: pd.DataFrame, *, ttft_s: float, tpot_s: float) -> float:
    """Requests per second meeting both targets, TTFT <= ``ttft_s`` and TPOT <= ``tpot_s`` (a
    one-token request has no TPOT and meets that one), over the span of throughput (first
    arrival to last finish). An unfinished request (finish NaN) meets neither."""
    for name, v in (("ttft_s", ttft_s), ("tpot_s", tpot_s)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not (v > 0):
            raise ValueError(f"{name}: expected a latency target > 0 seconds, got {v!r}")
    first, finish = requests["first_token_s"].to_numpy(), requests["finish_s"].to_numpy()
    n_out, arrival = requests["output_tokens"].to_numpy(), requests["arrival_s"].to_numpy()
    ok = (first - arrival <= ttft_s) & ((n_out == 1) | (finish - first <= tpot_s * (n_out - 1)))
    done = np.isfinite(finish)  # none finished: none met the targets (and no span to divide)
    return float(np.sum(ok & done) / (finish[done].max() - arrival.min())) if done.any() else 0.0


def _pct(x: NDArray[np.float64], q: float) -> float:
    return float(np.percentile(x, q)) if x.shape[0] else float("inf")


def _summary(req: pd.DataFrame, it: pd.DataFrame) -> dict[str, Any]:
    ttft = (req["first_token_s"] - req["arrival_s"]).to_numpy()
    e2e = (req["finish_s"] - req["arrival_s"]).to_numpy()
    n_out = req["output_tokens"].to_numpy()
    multi = n_out > 1
    tpot = (req["finish_s"] - req["first_token_s"]).to_numpy()[multi] / (n_out[multi] - 1)
    span = float(req["finish_s"].max() - req["arrival_s"].min())
    tokens = int(n_out.sum())
    energy = it["energy_j"].to_numpy()
    out: dict[str, Any] = {"requests": len(req), "tokens": tokens}
    for name, arr in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_s"] = _pct(arr, q)
    out.update(
        throughput_tokens_per_s=tokens / span,
        iterations=len(it),
        mean_batch=float(it["batch"].mean()),
        mean_gamma=float((it["draft_tokens"].sum()) / max(int(it["batch"].sum()), 1)),
        target_positions_verified=int(it["positions"].sum()),
        target_positions_wasted=int(it["positions_wasted"].sum()),
        draft_tokens_wasted=int(it["draft_wasted"].sum()),
        tokens_per_target_pass=float(it["emitted"].sum() / max(int(it["batch"].sum()), 1)),
        time_s=span,
        energy_j=None if np.isnan(energy).all() else float(np.nansum(energy)),
        # Paged KV: sequences preempted and the tokens recomputed for them (0 without paging).
        preemptions=int(req["preemptions"].sum()) if "preemptions" in req.columns else 0,
        recomputed_tokens=(
            int(req["recomputed_tokens"].sum()) if "recomputed_tokens" in req.columns else 0
        ),
    )
    out["energy_j_per_token"] = None if out["energy_j"] is None else out["energy_j"] / tokens
    return out
