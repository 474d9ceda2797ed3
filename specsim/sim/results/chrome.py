"""The Chrome trace-event format of a simulated timeline (loads in Perfetto or chrome://tracing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["chrome_trace"]


def chrome_trace(events: pd.DataFrame) -> dict[str, Any]:
    """Chrome trace-event JSON (loads in Perfetto or chrome://tracing), one track per kind.

    Durations become complete events (``ph = "X"``) and instants (emissions)
    instant events (``ph = "i"``); times are in microseconds.
    """
    tracks = {name: i for i, name in enumerate(dict.fromkeys(events["track"]), start=1)}
    trace: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}
        for name, tid in tracks.items()
    ]
    for row in events.itertuples(index=False):
        ts = float(row.start_s) * 1e6
        dur = (float(row.end_s) - float(row.start_s)) * 1e6
        ev = {
            "name": f"{row.kind} {int(row.tokens)}",
            "cat": str(row.kind),
            "pid": 1,
            "tid": tracks[str(row.track)],
            "ts": ts,
            "args": {"block": int(row.block), "tokens": int(row.tokens)},
        }
        ev.update({"ph": "X", "dur": dur} if dur > 0 else {"ph": "i", "s": "t"})
        trace.append(ev)
    return {"traceEvents": trace, "displayTimeUnit": "ms"}
