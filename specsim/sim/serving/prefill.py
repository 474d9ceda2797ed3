"""Chunked prefill: prompts prefilled in chunks inside the iterations' token budget.

**Chunked prefill** (``token_budget`` set; Agrawal et al., "Taming
Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve", OSDI 2024,
stall-free batching). Each iteration carries at most ``token_budget`` tokens:
first every decoding sequence's verification positions (``gamma + 1``), then
prefill chunks, to prompts already being prefilled and then to newly admitted
ones, first come first served. When the positions alone exceed the budget the
lookahead shrinks: every gamma is capped at the largest common ``t`` with
``sum(min(gamma_i, t) + 1) <= token_budget`` (water filling; the budget is at
least ``max_batch`` and ``max_gamma + 1``, so ``t >= 0`` exists and no
sequence stalls). A chunk rides in the iteration's verification pass: the
target reads its weights once for both (the chunk is a chain of new tokens at
its offset in the prompt), and the draft, when drafting, prefills the chunk in
a pass of its own. A prompt's first token comes with its last chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from specsim.sim.serving.batch import Admission, Batch, Requests
    from specsim.sim.serving.paged import Paging

__all__ = ["Prefills", "budget_cap", "join_prefilled", "shrink_to_budget", "start_prefills"]

Ints = NDArray[np.int64]


def budget_cap(gamma: Ints, budget: int) -> int:
    """The largest ``t`` with ``sum(min(gamma_i, t) + 1) <= budget`` (at least 0 when the
    batch is no larger than the budget; ``gamma.max()`` when the budget does not bind)."""
    top = int(gamma.max())
    if int(gamma.sum()) + gamma.shape[0] <= budget:
        return top
    lo, hi = 0, top  # sum(min(g, lo) + 1) <= budget < sum(min(g, hi) + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int(np.minimum(gamma, mid).sum()) + gamma.shape[0] <= budget:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(eq=False)
class Prefills:
    """Prompts being prefilled in chunks, in admission order: the request, tokens still to
    prefill, tokens prefilled so far (the next chunk's offset) and the blocks it holds."""

    rid: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    holds: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rid)

    def start(self, i: int, tokens: int, holds: int) -> None:
        self.rid.append(i)
        self.left.append(tokens)
        self.done.append(0)
        self.holds.append(holds)

    def plan(self, room: int) -> tuple[list[int], list[int], list[int]]:
        """Chunks for ``room`` tokens, first come first served: (rows, sizes, offsets)."""
        rows, sizes, offsets = [], [], []
        for k in range(len(self.rid)):
            if room <= 0:
                break
            c = min(self.left[k], room)
            rows.append(k)
            sizes.append(c)
            offsets.append(self.done[k])
            room -= c
        return rows, sizes, offsets

    def drop(self, rows: list[int]) -> list[tuple[int, int]]:
        """Take out the entries ``rows`` (preempted); returns (request, tokens prefilled)."""
        out = [(self.rid[k], self.done[k]) for k in rows]
        keep = [k for k in range(len(self.rid)) if k not in set(rows)]
        self.keep(keep)
        return out

    def keep(self, keep: list[int]) -> None:
        """Keep only the entries ``keep``, in order."""
        self.rid = [self.rid[k] for k in keep]
        self.left = [self.left[k] for k in keep]
        self.done = [self.done[k] for k in keep]
        self.holds = [self.holds[k] for k in keep]

    def advance(self, rows: list[int], sizes: list[int]) -> list[int]:
        """Record the chunks; drop and return the requests whose prompt is now prefilled."""
        for k, c in zip(rows, sizes, strict=True):
            self.left[k] -= c
            self.done[k] += c
        finished = [self.rid[k] for k in rows if self.left[k] == 0]
        self.keep([k for k in range(len(self.rid)) if self.left[k] > 0])
        return finished


def shrink_to_budget(
    batch: Batch, gam: int, chosen: Ints | None, g: Ints | None, budget: int
) -> tuple[int, Ints | None, Ints | None]:
    """The lookahead cut to the budget (the module docstring's water filling)."""
    if g is None:  # every sequence drafts gam: the common cap is one division
        return min(gam, budget // batch.size - 1), None, None
    return gam, chosen, np.minimum(g, budget_cap(g, budget))


def start_prefills(
    prefills: Prefills,
    admission: Admission,
    batch: Batch,
    paging: Paging | None,
    req: Requests,
    room: int,
) -> int:
    """Admit waiting requests into chunked prefill (the admission's scheduler, while the
    budget has room after the prompts already in prefill and their KV fits); returns how
    many started."""
    left = [room - sum(prefills.left)]

    def fits(i: int) -> bool:  # the budget's room first, then the KV reservation
        if left[0] <= 0 or not admission.fits(i):
            return False
        left[0] -= _prompt_left(i, req, paging)
        return True

    got = admission.admit(batch.size + len(prefills), fits)
    for i in got:
        prefills.start(
            i, _prompt_left(i, req, paging), 0 if paging is None else int(paging.need[i])
        )
    return len(got)


def _prompt_left(i: int, req: Requests, paging: Paging | None) -> int:
    """The tokens request ``i`` prefills: its prompt, or a preempted one's cache to recompute."""
    if paging is not None and i in paging.resume:
        return int(req.prompt[i] - req.base[i] + paging.resume[i][0] - 1)
    return int(req.prompt[i])


def join_prefilled(
    finished: list[int],
    *,
    batch: Batch,
    admission: Admission,
    paging: Paging | None,
    req: Requests,
    now: float,
    first_tok: NDArray[np.float64],
    finish: NDArray[np.float64],
) -> int:
    """Requests whose prompt is prefilled: a fresh one has its first token (a one-token one
    is done, the others join the batch); a preempted one rejoins where it left off. Returns
    how many are done."""
    if not finished:
        return 0
    adm = np.asarray(finished, dtype=np.int64)
    if paging is not None and paging.resume:
        adm, back, states, _, _ = paging.split_resumed(adm, req)
        if back.shape[0]:
            batch.add(back, req, resume=states)
    first_tok[adm] = now
    one = req.out_len[adm] == 1
    finish[adm[one]] = now
    admission.release(adm[one])
    if not one.all():
        batch.add(adm[~one], req)
    return int(one.sum())
