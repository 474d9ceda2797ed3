"""Acceptance metrics as the serving engines define them, so that a simulated run and an
engine's log compare line by line.

vLLM (``vllm/v1/spec_decode/metrics.py``, commit 016a8587edb04ae53c913a1da9355a07dc0ca4ae,
``SpecDecodingStats`` and ``SpecDecodingLogging.log``) counts, for every request in every
step that verified a draft, one *draft* (``num_drafts``), its drafted tokens
(``num_draft_tokens``), its accepted tokens (``num_accepted_tokens``) and one accepted
token at each position ``0 .. accepted - 1`` (``num_accepted_tokens_per_pos``), and logs

- mean acceptance length ``1 + num_accepted_tokens / num_drafts`` ("conventionally
  includes the bonus token"; 1 with no drafts, ``compute_acceptance_len``);
- per-position acceptance rate ``num_accepted_tokens_per_pos[i] / num_drafts``;
- draft acceptance rate ``num_accepted_tokens / num_draft_tokens``.

SGLang's scheduler logs ``accept len`` (accepted tokens per forward pass and request,
``spec_num_total_accepted_tokens / spec_num_total_forward_ct``), the counterpart of the
mean acceptance length, and llama.cpp's ``examples/speculative/speculative.cpp`` prints
``n_drafted``, ``n_accept`` and ``accept = 100 * n_accept / n_drafted``, the draft
acceptance rate in percent (``docs/simulate-config.md`` has the table).
Here each is given token-weighted (the engines' way: sums over every draft of every
request, then the ratio) and per request (the ratio for each request that drafted, then
the mean over those requests). Keys: ``num_drafts``, ``num_draft_tokens``,
``num_accepted_tokens``, ``mean_acceptance_length``, ``draft_acceptance_rate``,
``acceptance_rate_per_position`` (a list, positions 1, 2, ...), and the same three with
``_per_request``. A rate with nothing drafted is None (vLLM prints NaN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["acceptance_metrics", "engine_acceptance", "stream_acceptance"]

Ints = NDArray[np.int64]


def engine_acceptance(
    *, drafts: Ints, drafted: Ints, accepted: Ints, at: NDArray[np.int64]
) -> dict[str, Any]:
    """The metrics (module docstring) from per-request counters: ``drafts``, ``drafted``
    and ``accepted`` tokens, and ``at[i, j]`` tokens accepted at position ``j + 1``."""
    n_d, n_t, n_a = int(drafts.sum()), int(drafted.sum()), int(accepted.sum())
    has = drafts > 0
    out: dict[str, Any] = {
        "num_drafts": n_d,
        "num_draft_tokens": n_t,
        "num_accepted_tokens": n_a,
        "mean_acceptance_length": 1.0 + n_a / n_d if n_d else 1.0,
        "draft_acceptance_rate": n_a / n_t if n_t else None,
        "acceptance_rate_per_position": [float(x) / n_d for x in at.sum(axis=0)] if n_d else [],
    }
    per_d = drafts[has].astype(np.float64)
    tok = drafted[has] > 0
    out["mean_acceptance_length_per_request"] = (
        float(np.mean(1.0 + accepted[has] / per_d)) if has.any() else 1.0
    )
    out["draft_acceptance_rate_per_request"] = (
        float(np.mean(accepted[has][tok] / drafted[has][tok])) if tok.any() else None
    )
    out["acceptance_rate_per_position_per_request"] = (
        [float(x) for x in np.mean(at[has] / per_d[:, None], axis=0)] if has.any() else []
    )
    return out


def acceptance_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    """A serving run's metrics (module docstring) from its requests table's counters
    (:class:`specsim.sim.serving.tally.Tally`: ``drafts``, ``drafted_tokens``, ``accepted_tokens``,
    ``accepted_at_1`` ...); an empty record for a table without them."""
    if "drafts" not in requests.columns:
        return {}
    cols = [c for c in requests.columns if c.startswith("accepted_at_")]
    cols.sort(key=lambda c: int(c.rsplit("_", 1)[1]))
    return engine_acceptance(
        drafts=requests["drafts"].to_numpy(dtype=np.int64),
        drafted=requests["drafted_tokens"].to_numpy(dtype=np.int64),
        accepted=requests["accepted_tokens"].to_numpy(dtype=np.int64),
        at=requests[cols].to_numpy(dtype=np.int64).reshape(len(requests), len(cols)),
    )


def stream_acceptance(
    *, drafts: int, drafted: int, accepted: int, accepted_at: NDArray[np.int64]
) -> dict[str, Any]:
    """One stream's metrics (module docstring; the stream is the one request, so the
    per-request figures equal the token-weighted ones) from its totals: blocks that
    drafted, tokens drafted and accepted, and ``accepted_at[j]`` blocks that accepted at
    position ``j + 1``."""
    at = np.asarray(accepted_at, dtype=np.int64)
    return engine_acceptance(
        drafts=np.array([drafts]),
        drafted=np.array([drafted]),
        accepted=np.array([accepted]),
        at=at.reshape(1, -1) if at.shape[0] else np.zeros((1, 1), dtype=np.int64),
    )
