"""Argument checks every layer shares: whole numbers, and the size limits of the work.

Two kinds of check live here, each with one function:

- :func:`check_int`: a value is an integer (not a bool, which Python counts as
  one) of at least ``minimum``, else a TypeError or ValueError naming it;
- :func:`check_size`: a size that the work grows with (sequences in a pass,
  nodes of a token tree, tokens of a stream, requests of a workload, runs of a
  sweep) is at most its limit in :data:`LIMITS`, else a ValueError naming the
  argument and the limit, raised where the work is sized (a library entry
  point, a config's ``__post_init__``), before anything is allocated or run.

Without a limit, a size typed one digit too long ends in a MemoryError
traceback after a minute, or in a run that never ends (for example ``cost
--batch 1000000000`` tried to allocate 7.45 GiB, ``tree --budget 100000``
74.5 GiB, ``simulate --tokens 99999999999999999999`` ran until killed). Each
limit is far above what a study needs and below what one machine can do in
minutes; the table says why, from the measurements below (``/usr/bin/time``
on the 2-core development machine, 2026-12-01):

================  =============  =====================================================
limit             at most        why
================  =============  =====================================================
``batch``         1,000,000      sequences in one pass (``cost --batch``, ``tree
                                 --batch``, a serving ``max_batch``): a pass holds a few
                                 float64 values per sequence, so 10^6 sequences take tens
                                 of MB; 10^9 asked for 7.45 GiB per array
``tree_nodes``    1,024          nodes of a token tree (``tree --budget``): the
                                 optimizer's memory grows as the budget squared and its
                                 time faster (``specsim tree --ngram``: 256 nodes 3.9 s
                                 and 40 MB, 1,024 nodes 87 s and 155 MB, 2,048 nodes over
                                 300 s)
``tokens``        1,000,000,000  tokens of one stream (``simulate --tokens``): bounded
                                 memory, but time grows with them (10^7 tokens 7.0 s,
                                 so 10^9 is about 12 min)
``requests``      1,000,000      requests of a workload (``requests`` of a serving
                                 config): 2 x 10^4 requests (and their plain twin) took
                                 10 s, so 10^6 is about 8 min
``blocks``        1,000,000      Monte Carlo blocks of the sampling demo (``report
                                 --blocks``): about 2 KB a block in memory (10^7 blocks
                                 took 21 GB and 200 s)
``sweep_runs``    1,000,000      runs of a sweep (grid points or random samples, times
                                 ``seeds``): the points are listed before the first run
                                 (a few hundred bytes each), and each run is a simulation
================  =============  =====================================================

The limits are documented for users in ``docs/reference/limits.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Limit", "LIMITS", "NESTED_TOO_DEEPLY", "check_int", "check_size"]


@dataclass(frozen=True)
class Limit:
    """The most a size may be (``most`` ``unit``) and why (the memory or time beyond it)."""

    most: int
    unit: str
    why: str


LIMITS: dict[str, Limit] = {
    "batch": Limit(
        10**6, "sequences", "a pass holds a few numbers per sequence; 10^9 needed 7.45 GiB"
    ),
    "tree_nodes": Limit(
        1024, "nodes", "the tree optimizer's memory grows as the budget squared (1,024: 87 s)"
    ),
    "tokens": Limit(10**9, "tokens", "a stream's time grows with its tokens (10^9: about 12 min)"),
    "requests": Limit(
        10**6, "requests", "a workload's time grows with its requests (10^6: about 8 min)"
    ),
    "blocks": Limit(10**6, "blocks", "the demo holds about 2 KB a block (10^7 blocks: 21 GB)"),
    "sweep_runs": Limit(
        10**6, "runs", "a sweep lists its points first and simulates each (runs = points x seeds)"
    ),
}
"""The size limits, by name (the table of the module docstring)."""

NESTED_TOO_DEEPLY = (
    "arrays or tables nested too deeply to read (hundreds of levels; a specsim file nests a few)"
)
"""Why a TOML or JSON file whose brackets nest past its parser's recursion limit is refused
(by each reader: :func:`specsim.cards.files.parse_toml`,
:func:`specsim.calibrate.engine_records.read_records`, :mod:`specsim.traces.io`): one line
naming the file, not a RecursionError."""


def check_int(
    value: object,
    *,
    name: str,
    minimum: int | None = None,
    maximum: int | None = None,
    why: str | None = None,
) -> int:
    """``value`` as an ``int`` when it is an integer (a Python or numpy integer, not a bool) of
    at least ``minimum`` and at most ``maximum``; else a TypeError (not an integer) or
    ValueError (out of range) whose message starts with ``name`` (the flag, field or key the
    user typed), gives the range, and ends with ``why`` in parentheses (what the number
    counts, or why the bound), when given.

    >>> check_int(3, name="--batch", minimum=1)
    3
    >>> check_int(True, name="--batch")
    Traceback (most recent call last):
    ...
    TypeError: --batch: expected an integer, got True
    >>> check_int(1, name="position_budget", minimum=2, why="a root and one node")
    Traceback (most recent call last):
    ...
    ValueError: position_budget: expected an integer >= 2, got 1 (a root and one node)
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(
            f"{name}: expected an integer{_bound(minimum, maximum)}, got {value!r}{_why(why)}"
        )
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(
            f"{name}: expected an integer{_bound(minimum, maximum)}, got {int(value)}{_why(why)}"
        )
    return int(value)


# The messages are formed only on failure (a speed trick: inner loops check their counts).
def _bound(minimum: int | None, maximum: int | None) -> str:
    if maximum is None:
        return "" if minimum is None else f" >= {minimum}"
    return f" <= {maximum}" if minimum is None else f" in {minimum}..{maximum}"


def _why(why: str | None) -> str:
    return "" if why is None else f" ({why})"


def check_size(value: object, *, name: str, limit: str) -> int:
    """``value`` as an ``int`` when it is an integer >= 1 and at most ``LIMITS[limit].most``;
    else an error starting with ``name`` that gives the limit and why it is there.

    >>> check_size(64, name="max_batch", limit="batch")
    64
    >>> check_size(10**9, name="--budget", limit="tree_nodes")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --budget: 1,000,000,000 nodes is over the limit of 1,024: ...
    """
    if limit not in LIMITS:
        raise ValueError(f"limit: expected one of {sorted(LIMITS)}, got {limit!r}")
    n = check_int(value, name=name, minimum=1)
    lim = LIMITS[limit]
    if n > lim.most:
        raise ValueError(
            f"{name}: {n:,} {lim.unit} is over the limit of {lim.most:,}: {lim.why} "
            "(docs/reference/limits.md)"
        )
    return n
