"""The engines' acceptance counters, per request: what vLLM, SGLang and llama.cpp count.

vLLM's ``SpecDecodingStats.observe_draft`` (``vllm/v1/spec_decode/metrics.py``, commit
016a8587) counts, for every request in every step that verified a draft: one draft
(``num_drafts``), its drafted tokens (``num_draft_tokens``), its accepted tokens
(``num_accepted_tokens``), and one at each position ``0 .. accepted - 1``
(``num_accepted_tokens_per_pos``). :class:`Tally` counts the same per request, plus the
verification steps that drafted nothing (plain decoding, or a gamma cut to 0 at a
request's last token), which the engines do not count as drafts. A token tree's drafted
tokens are its verified nodes and its positions are depths on the accepted path.

The metrics these give (:func:`specsim.sim.records.acceptance_metrics`) are defined in
``docs/simulate-config.md``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["TALLY_COLUMNS", "Tally"]

Ints = NDArray[np.int64]

TALLY_COLUMNS = ("verify_steps", "drafts", "drafted_tokens", "accepted_tokens")
"""The requests table's counters (then ``accepted_at_1`` .. ``accepted_at_K``)."""


class Tally:
    """Per request: verification steps, drafts (steps that verified a drafted token),
    drafted and accepted tokens, and accepted tokens at each draft position ``1 .. K``."""

    def __init__(self, requests: int, positions: int) -> None:
        self.steps = np.zeros(requests, dtype=np.int64)
        self.drafts = np.zeros(requests, dtype=np.int64)
        self.drafted = np.zeros(requests, dtype=np.int64)
        self.accepted = np.zeros(requests, dtype=np.int64)
        self.at = np.zeros((requests, max(positions, 1)), dtype=np.int64)
        self._ranks = np.arange(self.at.shape[1], dtype=np.int64)

    def add(self, rid: Ints, drafted: Ints | int, accepted: Ints) -> None:
        """One pass of the sequences of requests ``rid`` (distinct), each drafting
        ``drafted`` tokens and accepting ``accepted`` of them."""
        d = np.broadcast_to(np.asarray(drafted, dtype=np.int64), rid.shape)
        self.steps[rid] += 1
        self.drafts[rid] += d > 0
        self.drafted[rid] += d
        self.accepted[rid] += accepted
        self.at[rid] += self._ranks < accepted[:, None]

    def add_steps(self, rid: Ints, steps: Ints) -> None:
        """``steps`` passes each of requests ``rid`` that draft nothing (plain decoding)."""
        np.add.at(self.steps, rid, steps)

    def add_runs(self, rid: Ints, pos: Ints, steps: Ints, end: Ints, gamma: int) -> None:
        """Whole trajectories (a drain's, :func:`specsim.sim.drain.trajectories`): column
        ``c`` is request ``rid[c]``'s flat position before each of its ``steps[c]`` blocks,
        each drafting ``gamma`` cut at the request's last token ``end[c]``."""
        k = np.arange(pos.shape[0] - 1, dtype=np.int64)[:, None]
        valid = k < steps[None, :]
        here = pos[:-1]
        drafted = np.where(valid, np.minimum(gamma, end[None, :] - here - 1), 0)
        accepted = np.where(valid, pos[1:] - here - 1, 0)
        self.steps[rid] += steps
        self.drafts[rid] += (drafted > 0).sum(axis=0)
        self.drafted[rid] += drafted.sum(axis=0)
        self.accepted[rid] += accepted.sum(axis=0)
        for j in range(self.at.shape[1]):
            self.at[rid, j] += (accepted > j).sum(axis=0)

    def add_drain(self, rid: Ints, pos: Ints | None, steps: Ints, end: Ints, gamma: int) -> None:
        """What a drain serves (:mod:`specsim.sim.drain`): at gamma 0, ``steps`` plain passes
        each; otherwise the trajectories ``pos`` (:meth:`add_runs`)."""
        if gamma == 0 or pos is None:
            self.add_steps(rid, steps)
        else:
            self.add_runs(rid, pos, steps, end, gamma)

    def columns(self) -> dict[str, Ints]:
        """The requests table's columns: :data:`TALLY_COLUMNS`, then ``accepted_at_j`` for
        the positions up to the deepest one any request accepted (at least one)."""
        used = np.flatnonzero(self.at.any(axis=0))
        k = int(used[-1]) + 1 if used.shape[0] else 1
        out = dict(
            zip(TALLY_COLUMNS, (self.steps, self.drafts, self.drafted, self.accepted), strict=True)
        )
        out.update({f"accepted_at_{j + 1}": self.at[:, j] for j in range(k)})
        return out
