"""A paged KV cache with preemption: serving as engines do it.

**Paging** (``kv_block_tokens`` set; vLLM, Kwon et al., "Efficient Memory
Management for Large Language Model Serving with PagedAttention", SOSP 2023).
The cache is ``capacity // kv_block_tokens`` blocks. A sequence holds the
blocks of the tokens in its cache: after its prefill the prompt, and after
each pass every token emitted but the last (which the next pass writes), i.e.
``context - 1`` tokens. A verification pass drafting ``gamma`` writes
``gamma + 1`` positions, so for the pass it holds ``context + gamma`` tokens'
blocks; afterwards it keeps ``context' - 1`` and the blocks of rejected
positions go back. Admission does not know output lengths: a waiting request
is admitted (first come, first served, while the batch has room) when the free
blocks cover its prompt plus one verification pass at ``max_gamma``
(``prompt + max_gamma + 1`` tokens). When a pass does not fit, running
sequences are **preempted**, latest arrival first (vLLM's rule), until it
does; the earliest arrival always fits alone (checked before the run), so the
run always progresses. A preempted sequence keeps its tokens and lookahead
history and goes back to the front of the queue; it resumes by

- ``"recompute"`` (vLLM's default): its cache is rebuilt by a prefill of its
  ``context - 1`` tokens when it is readmitted (those tokens are recorded as
  recomputed, discarded work), or
- ``"swap"``: its cache is copied to host memory and back over the host link,
  at ``kv_bytes_per_token`` / ``host_link_bandwidth`` a token each way; the
  engine waits for the copies (no overlap). It needs a cost source whose
  hardware states ``host_link_bandwidth`` (bytes/s); the accelerator cards do
  not, so on cards this is an error that says so.

With a capacity no run fills, paging changes nothing: the tables equal the
reservation model's (tests check every column, bit for bit).

Chunked prefill, the other engine option: :mod:`specsim.sim.serving.prefill`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from specsim.cost import verification_positions
from specsim.sim.costs.source import CostSource, check_whole

if TYPE_CHECKING:
    from specsim.sim.serving.batch import Admission, Batch, Requests

__all__ = [
    "EXTRA_COLUMNS",
    "PREEMPTIONS",
    "Paging",
    "Preemption",
    "check_engine",
    "host_link",
]


class PrefillHolds(Protocol):
    """What paging asks of the prompts being prefilled
    (:class:`specsim.sim.serving.prefill.Prefills`): their requests, the blocks each holds, and
    to drop the preempted ones."""

    rid: list[int]
    holds: list[int]

    def drop(self, rows: list[int]) -> list[tuple[int, int]]: ...


Ints = NDArray[np.int64]
Preemption = Literal["recompute", "swap"]
PREEMPTIONS: tuple[str, ...] = ("recompute", "swap")
EXTRA_COLUMNS = ("kv_blocks", "preempted", "recomputed_tokens", "swap_s", "prefill_tokens")
"""Iteration-table columns a paged or chunked run adds: blocks held during the pass,
sequences preempted before it, tokens prefilled again after a recompute preemption, the
time spent swapping, and prompt tokens prefilled."""


def host_link(cost: CostSource) -> tuple[float, float] | None:
    """The host link's bandwidth (bytes/s) and the KV bytes per token, where the cost source
    states both (on ``cost`` or its ``hardware``); else None."""
    bw = getattr(cost, "host_link_bandwidth", None)
    if bw is None:
        bw = getattr(getattr(cost, "hardware", None), "host_link_bandwidth", None)
    per_token = getattr(cost, "kv_bytes_per_token", None)
    if bw is None or per_token is None:
        return None
    return float(bw), float(per_token())


def check_engine(config: Any) -> None:
    """Validate a :class:`~specsim.sim.ServingConfig`'s engine fields (paging, preemption,
    token budget, replicas, router); a ValueError names the field and the value."""
    block = config.kv_block_tokens
    if block is not None:
        check_whole(block, "kv_block_tokens", minimum=1)
    preemption = config.preemption
    if preemption not in PREEMPTIONS:
        raise ValueError(f"preemption: expected one of {list(PREEMPTIONS)}, got {preemption!r}")
    if preemption == "swap" and host_link(config.cost) is None:
        raise ValueError(
            "preemption: 'swap' copies a sequence's KV cache over the host link, and the cost "
            "source states no host_link_bandwidth (no accelerator card has one); use "
            "'recompute'"
        )
    budget, max_batch = config.token_budget, config.max_batch
    if budget is not None:
        check_whole(budget, "token_budget", minimum=1)
        one_pass = verification_positions(config.max_gamma)
        if budget < one_pass:
            raise ValueError(
                f"token_budget: {budget} tokens are fewer than one sequence's verification "
                f"pass (max_gamma + 1 = {one_pass})"
            )
        if budget < max_batch:
            raise ValueError(
                f"token_budget: {budget} tokens are fewer than max_batch ({max_batch}); every "
                "running sequence needs a position an iteration (vLLM requires the same)"
            )
        if preemption == "swap" and block is not None:
            raise ValueError(
                "preemption: 'swap' with a token_budget is not modelled; use 'recompute'"
            )


@dataclass(eq=False)
class Paging:
    """The paged cache of one replica: its size in blocks and what preemption left behind.

    ``need``: each request's admission need in blocks (a fresh request's prompt plus one
    verification pass; a preempted one's ``context`` tokens); ``resume``: a preempted
    request's saved flat position, lookahead history and 1 if it was swapped (absent
    for a fresh one); per-request counts of preemptions and recomputed tokens.
    """

    block: int
    capacity: int | None  # blocks (None: unbounded)
    need: Ints
    swap: tuple[float, float] | None  # (host link bytes/s, KV bytes per token) when swapping
    resume: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    preemptions: Ints = field(init=False)
    recomputed: Ints = field(init=False)

    def __post_init__(self) -> None:
        self.preemptions = np.zeros(self.need.shape[0], dtype=np.int64)
        self.recomputed = np.zeros(self.need.shape[0], dtype=np.int64)

    @classmethod
    def build(
        cls,
        req: Requests,
        *,
        block: int,
        capacity: int | None,
        max_gamma: int,
        swap: tuple[float, float] | None,
    ) -> Paging:
        """The cache for ``capacity`` tokens; a ValueError names a request no cache of that
        size can ever serve (its prompt and one pass, or its longest pass, do not fit)."""
        blocks = None if capacity is None else capacity // block
        need = -(-(req.prompt + verification_positions(max_gamma)) // block)
        if blocks is not None:
            i = int(np.argmax(need))
            if need[i] > blocks:
                raise ValueError(
                    f"kv_capacity_tokens: the cache ({blocks} blocks of {block} tokens) can "
                    f"never admit request {i}: its prompt {req.prompt[i]} + one verification "
                    f"pass {verification_positions(max_gamma)} need {need[i]} blocks"
                )
            longest = -(-(req.prompt + req.out_len - 1) // block)
            i = int(np.argmax(longest))
            if longest[i] > blocks:
                raise ValueError(
                    f"kv_capacity_tokens: request {i} grows to "
                    f"{req.prompt[i] + req.out_len[i] - 1} tokens in its cache ({longest[i]} "
                    f"blocks of {block}), more than the "
                    f"{blocks} blocks there are: preemption cannot make room"
                )
        return cls(block=block, capacity=blocks, need=need, swap=swap)

    def held(self, batch: Batch) -> int:
        """Blocks the decoding sequences hold between passes (``context - 1`` tokens each)."""
        return int(((batch.contexts() + (self.block - 2)) // self.block).sum())

    def pass_blocks(self, batch: Batch, gamma: Ints) -> Ints:
        """Each decoding sequence's blocks during a pass drafting ``gamma``."""
        return (batch.contexts() + gamma + (self.block - 1)) // self.block

    def victims(
        self, batch: Batch, gamma: Ints, prefills: PrefillHolds | None
    ) -> tuple[Ints, list[int], int]:
        """Whom to preempt, latest arrival first, so that a pass drafting ``gamma`` fits beside
        the prompts being prefilled: batch rows, prefill entries, and the blocks then held."""
        per = self.pass_blocks(batch, gamma)
        holds = [] if prefills is None else prefills.holds
        total = int(per.sum()) + sum(holds)
        if self.capacity is None or total <= self.capacity:
            return np.zeros(0, dtype=np.int64), [], total
        rid = np.concatenate(
            [batch.rid, np.asarray([] if prefills is None else prefills.rid, dtype=np.int64)]
        )
        amount = np.concatenate([per, np.asarray(holds, dtype=np.int64)])
        order = np.argsort(-rid, kind="stable")  # requests arrive in index order
        freed = np.cumsum(amount[order])
        k = int(np.searchsorted(freed, total - self.capacity)) + 1  # the fewest that free enough
        k = min(k, rid.shape[0] - 1)  # the earliest arrival fits alone (checked at build)
        chosen, b = order[:k], batch.size
        return (
            np.sort(chosen[chosen < b]),
            sorted((chosen[chosen >= b] - b).tolist()),
            total - int(freed[k - 1]),
        )

    def fit(
        self,
        batch: Batch,
        gam: int,
        chosen: Ints | None,
        g: Ints | None,
        prefills: PrefillHolds | None,
        admission: Admission,
    ) -> tuple[Ints | None, Ints | None, tuple[int, int, float, int]]:
        """Make room for the pass (:meth:`victims`), preempting; returns the kept sequences'
        gammas and (sequences preempted, tokens to recompute, swap-out time, blocks held)."""
        gv = np.full(batch.size, gam, dtype=np.int64) if g is None else g
        rows, pre, total = self.victims(batch, gv, prefills)
        if rows.shape[0] == 0 and not pre:
            return chosen, g, (0, 0, 0.0, total)
        if g is not None and chosen is not None:
            keep = np.ones(batch.size, dtype=bool)
            keep[rows] = False
            chosen, g = chosen[keep], g[keep]
        out = batch.remove(rows)
        recomputed = swapped = 0
        for rid, ptr, last_g, last_a, ctx in out.tolist():
            self.resume[rid] = (ptr, last_g, last_a, int(self.swap is not None))
            self.need[rid] = -(-ctx // self.block)
            if self.swap is None:
                self.recomputed[rid] += ctx - 1
                recomputed += ctx - 1
            else:
                swapped += ctx - 1
        victims = out[:, 0].tolist()
        if prefills is not None and pre:
            for rid, done in prefills.drop(pre):  # their chunks so far are thrown away
                self.recomputed[rid] += done
                recomputed += done
                victims.append(rid)
        self.preemptions[victims] += 1
        admission.requeue(victims)
        swap_s = self.swap_s(swapped) if swapped else 0.0
        return chosen, g, (len(victims), recomputed, swap_s, total)

    def split_resumed(self, adm: Ints, req: Requests) -> tuple[Ints, Ints, Ints, Ints, float]:
        """Admitted requests split into fresh ones and preempted ones coming back: those, their
        saved states (flat position, last gamma, last accepted), the tokens to prefill again
        for those that were recomputed, and the time to swap the others back in."""
        back_mask = np.array([i in self.resume for i in adm.tolist()], dtype=bool)
        back = adm[back_mask]
        st = np.array([self.resume.pop(i) for i in back.tolist()], dtype=np.int64).reshape(-1, 4)
        cached = req.prompt[back] - req.base[back] + st[:, 0] - 1
        swapped = st[:, 3] == 1
        swap_s = self.swap_s(int(cached[swapped].sum())) if swapped.any() else 0.0
        return adm[~back_mask], back, st[:, :3], cached[~swapped], swap_s

    def swap_s(self, tokens: int) -> float:
        """Time to copy ``tokens`` tokens' KV cache one way over the host link."""
        assert self.swap is not None
        return tokens * self.swap[1] / self.swap[0]
