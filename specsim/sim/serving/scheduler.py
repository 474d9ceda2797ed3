"""Admission order: which waiting requests start, as a one-method object.

A scheduler is asked, whenever the engine has room, which of the waiting requests start
now. It is handed the queue (request indices in arrival order, preempted ones back at
the front), how many may start (the batch's free slots) and ``fits``, the engine's test
of one request against what is left (its KV reservation, and under a token budget the
iteration's room for its prompt). ``fits`` charges what it accepts, so a scheduler calls
it only for requests it starts, in the order it starts them; a refusal charges nothing.
The scheduler removes the requests it starts from the queue and returns them in that
order.

:class:`FirstComeFirstServed` (:data:`FCFS`) is the rule every engine path uses: the
head of the queue starts while there is a slot and it fits; the first that does not fit
blocks those behind it (head-of-line blocking, as vLLM's first-come-first-served policy
does). The stepped engine (:meth:`specsim.sim.serving.batch.Admission.admit`,
:func:`specsim.sim.serving.prefill.start_prefills`) and the bulk drains
(:mod:`specsim.sim.serving.drain`, :mod:`specsim.sim.serving.chunk_drain`) all ask it.
A new rule is one class with this method, passed as ``ServingConfig.scheduler``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["FCFS", "FirstComeFirstServed", "Scheduler", "check_scheduler"]


@runtime_checkable
class Scheduler(Protocol):
    """Which waiting requests start (module docstring)."""

    def admit(self, waiting: deque[int], room: int, fits: Callable[[int], bool]) -> list[int]:
        """The requests that start now, taken out of ``waiting``: at most ``room`` of them,
        each accepted by ``fits`` (asked in the order they start)."""
        ...


class FirstComeFirstServed:
    """First come, first served: the head of the queue while a slot is free and it fits."""

    def admit(self, waiting: deque[int], room: int, fits: Callable[[int], bool]) -> list[int]:
        admitted: list[int] = []
        while waiting and len(admitted) < room and fits(waiting[0]):
            admitted.append(waiting.popleft())
        return admitted

    def __repr__(self) -> str:
        return "FCFS"


FCFS = FirstComeFirstServed()


def check_scheduler(scheduler: object) -> None:
    """A TypeError naming ``scheduler`` unless it has a callable ``admit``."""
    if not callable(getattr(scheduler, "admit", None)):
        raise TypeError(
            f"scheduler: expected an object with admit(waiting, room, fits) (such as "
            f"specsim.sim.serving.scheduler.FCFS), got {scheduler!r}"
        )
