"""The engines' acceptance counters, per request: what vLLM, SGLang and llama.cpp count.

vLLM's ``SpecDecodingStats.observe_draft`` (``vllm/v1/spec_decode/metrics.py``, commit
016a8587) counts, for every request in every step that verified a draft: one draft
(``num_drafts``), its drafted tokens (``num_draft_tokens``), its accepted tokens
(``num_accepted_tokens``), and one at each position ``0 .. accepted - 1``
(``num_accepted_tokens_per_pos``). :class:`Tally` counts the same per request, plus the
verification steps that drafted nothing (plain decoding, or a gamma cut to 0 at a
request's last token), which the engines do not count as drafts. A token tree's drafted
tokens are its verified nodes and its positions are depths on the accepted path.

The metrics these give (:func:`specsim.sim.results.records.acceptance_metrics`) are defined in
``docs/simulate-config.md``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["TALLY_COLUMNS", "Tally"]

Ints = NDArray[np.int64]

TALLY_COLUMNS = ("verify_steps", "drafts", "drafted_tokens", "accepted_tokens")
"""The requests table's counters (then ``accepted_at_1`` .. ``accepted_at_K``)."""


def _drafted(passes: list[tuple[Ints, Ints | int, Ints]]) -> Ints:
    """Each kept pass's drafted tokens, a row per sequence: one ``np.repeat`` over the passes
    that drafted one number for every sequence (a speed trick: most do)."""
    if all(isinstance(p[1], int) for p in passes):
        size = [p[0].shape[0] for p in passes]
        return np.repeat(np.array([p[1] for p in passes], dtype=np.int64), size)
    return np.concatenate(
        [np.broadcast_to(np.asarray(p[1], dtype=np.int64), p[0].shape) for p in passes]
    )


class Tally:
    """Per request: verification steps, drafts (steps that verified a drafted token),
    drafted and accepted tokens, and accepted tokens at each draft position ``1 .. K``."""

    def __init__(self, requests: int, positions: int) -> None:
        self.steps = np.zeros(requests, dtype=np.int64)
        self.drafts = np.zeros(requests, dtype=np.int64)
        self.drafted = np.zeros(requests, dtype=np.int64)
        self.accepted = np.zeros(requests, dtype=np.int64)
        self.at = np.zeros((requests, max(positions, 1)), dtype=np.int64)
        self._passes: list[tuple[Ints, Ints | int, Ints]] = []  # added by :meth:`flush`

    def add(self, rid: Ints, drafted: Ints | int, accepted: Ints) -> None:
        """One pass of the sequences of requests ``rid``, each drafting ``drafted`` tokens
        and accepting ``accepted`` of them (kept, and counted in bulk by :meth:`flush`: a
        speed trick, a pass then costs the engine a list append)."""
        self._passes.append((rid.copy(), drafted, accepted.copy()))

    def flush(self) -> None:
        """Count the passes :meth:`add` kept: one bincount per counter."""
        if not self._passes:
            return
        rid = np.concatenate([p[0] for p in self._passes])
        d = _drafted(self._passes)
        acc = np.concatenate([p[2] for p in self._passes]).astype(np.int64)
        self._passes = []
        n, k = self.steps.shape[0], self.at.shape[1]
        self.steps += np.bincount(rid, minlength=n)
        self.drafts += np.bincount(rid, weights=d > 0, minlength=n).astype(np.int64)
        self.drafted += np.bincount(rid, weights=d, minlength=n).astype(np.int64)
        self.accepted += np.bincount(rid, weights=acc, minlength=n).astype(np.int64)
        hist = np.bincount(rid * (k + 1) + np.minimum(acc, k), minlength=n * (k + 1))
        self.at += hist.reshape(n, k + 1)[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]

    def add_steps(self, rid: Ints, steps: Ints) -> None:
        """``steps`` passes each of requests ``rid`` that draft nothing (plain decoding)."""
        np.add.at(self.steps, rid, steps)

    def add_runs(self, rid: Ints, pos: Ints, steps: Ints, end: Ints, gamma: int) -> None:
        """Whole trajectories (a drain's, :func:`specsim.sim.serving.drain.trajectories`): column
        ``c`` is request ``rid[c]``'s flat position before each of its ``steps[c]`` blocks
        (held at its end after them), each drafting ``gamma`` cut at the request's last
        token ``end[c]``. A speed trick: the accepted counts telescope, only a block within
        ``gamma`` of its end drafts less, and one bincount gives every column's histogram
        of accepted counts (a held row's -1 falls in a bucket of its own)."""
        cols = np.arange(rid.shape[0], dtype=np.int64)
        last = pos[steps, cols]
        self.steps[rid] += steps
        self.accepted[rid] += last - pos[0] - steps
        idx = steps[None, :] - gamma + np.arange(gamma, dtype=np.int64)[:, None]
        near = pos[np.maximum(idx, 0), cols]
        short = np.where(idx >= 0, np.minimum(gamma, end - near - 1), gamma)
        self.drafted[rid] += gamma * steps - (gamma - short).sum(axis=0)
        self.drafts[rid] += steps - ((idx >= 0) & (short <= 0)).sum(axis=0)
        width = gamma + 2  # buckets: held (-1), then accepted 0 .. gamma
        flat = np.diff(pos, axis=0)  # accepted + 1, offset per column
        flat += cols * width
        hist = np.bincount(flat.ravel(), minlength=width * cols.shape[0])
        hist = hist.reshape(cols.shape[0], width)[:, 1:]  # accepted 0 .. gamma
        above = hist[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]  # blocks accepting > j
        k = min(above.shape[1], self.at.shape[1])
        self.at[rid, :k] += above[:, :k]

    def add_drain(self, rid: Ints, pos: Ints | None, steps: Ints, end: Ints, gamma: int) -> None:
        """What a drain serves (:mod:`specsim.sim.serving.drain`): at gamma 0, ``steps`` plain
        passes each; otherwise the trajectories ``pos`` (:meth:`add_runs`)."""
        if gamma == 0 or pos is None:
            self.add_steps(rid, steps)
        else:
            self.add_runs(rid, pos, steps, end, gamma)

    def columns(self) -> dict[str, Ints]:
        """The requests table's columns: :data:`TALLY_COLUMNS`, then ``accepted_at_j`` for
        the positions up to the deepest one any request accepted (at least one)."""
        self.flush()
        used = np.flatnonzero(self.at.any(axis=0))
        k = int(used[-1]) + 1 if used.shape[0] else 1
        out = dict(
            zip(TALLY_COLUMNS, (self.steps, self.drafts, self.drafted, self.accepted), strict=True)
        )
        out.update({f"accepted_at_{j + 1}": self.at[:, j] for j in range(k)})
        return out
