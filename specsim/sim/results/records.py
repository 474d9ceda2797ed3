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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsim.sim.results.chrome import chrome_trace
from specsim.sim.results.engine_metrics import acceptance_metrics
from specsim.sim.results.stability import stability, stability_metrics
from specsim.sim.results.stream_result import (
    Blocks,
    StreamResult,
    stream_record,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Blocks",
    "StreamResult",
    "ServingResult",
    "acceptance_metrics",
    "stream_record",
    "chrome_trace",
    "goodput",
    "iteration_table",
    "with_columns",
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


def with_columns(table: pd.DataFrame, columns: dict[str, Any]) -> pd.DataFrame:
    """A copy of ``table`` with ``columns`` added (or replaced, where it has them), in one
    concatenation (a speed trick: pandas inserts columns one at a time several times slower;
    the same table)."""
    import pandas as pd  # start-up: as in iteration_table

    if any(name in table.columns for name in columns):
        out = table.copy()
        for name, col in columns.items():
            out[name] = col
        return out
    return pd.concat([table, pd.DataFrame(columns, index=table.index)], axis=1)


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
    decoding plainly (:func:`specsim.sim.results.stability.plain_work_s`), for ``offered_load``
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
        with ``utilization`` and ``offered_load`` (:mod:`specsim.sim.results.stability`); the
        twin's ``plain_stable`` too."""
        out = _summary(self.requests_spec, self.iterations_spec)
        out.update(stability_metrics(self.requests_spec, self.iterations_spec, work_s=self.work_s))
        out.update(acceptance_metrics(self.requests_spec))  # the engines' (engine_metrics)
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
