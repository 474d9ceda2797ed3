"""Host time of one prompt-lookup (n-gram) proposal, measured on this machine's CPU.

The lookup is vLLM's: ``_find_longest_matched_ngram_and_propose_tokens`` in
``vllm/v1/spec_decode/ngram_proposer.py`` (vllm-project/vllm at commit
016e8ede870e3c087fdcdfb36ed3622112712f10), a KMP scan of the reversed context for the
longest suffix n-gram of length ``min_n..max_n``, compiled with numba's ``@jit(nopython=True)``
as there, then ``k`` tokens copied from after the match. It is re-implemented here from that
description (same algorithm, same compiler), not copied.

Tokens: the words and punctuation of the committed corpus sample (``models/corpora/sample``,
:data:`specsim.proposers.ngram.TOKEN`), as integer ids, repeated to the longest context, so
the scan meets the repetitions of real text. For each context length and ``k``, the call is
timed with the list vLLM's ``batch_propose`` makes of each draft (``.tolist()``)
``CALLS`` times in a row and the median kept; ``REPEATS`` such medians are taken, the grid
visited in a new (seeded) order each time, and their minimum and median written
(the machine is shared: the minimum is the least disturbed).

Run from the repository root (numba is not a specsim dependency; install it anywhere)::

    PYTHONPATH=$PWD:/tmp/numba-site python models/measured/ngram/bench_lookup.py \
        > models/measured/ngram/lookup-cost.csv
"""

from __future__ import annotations

import csv
import platform
import sys
import time

import numba
import numpy as np

from specsim.proposers.ngram import documents, tokens

CONTEXTS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
KS = (1, 4, 8, 16)
MIN_N, MAX_N = 1, 4  # vLLM's prompt_lookup_min / prompt_lookup_max as commonly set
CALLS, REPEATS = 200, 15


@numba.njit(cache=False)
def lookup(origin: np.ndarray, min_n: int, max_n: int, k: int) -> np.ndarray:
    """The longest suffix n-gram (``min_n..max_n``) found earlier, latest match, by KMP over
    the reversed context; the ``k`` tokens after it (fewer at the end, none without one)."""
    total = origin.shape[0]
    if total < min_n or k <= 0:
        return origin[:0]
    rev = origin[::-1]
    lps = np.zeros(max_n, dtype=np.int32)
    longest, position, prev, i = 0, 0, 0, 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:
                longest, position = prev, i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return origin[:0]
    start = total - 1 - position + longest
    return origin[start : start + min(k, total - start)]


def corpus_ids(n: int) -> np.ndarray:
    ids: dict[str, int] = {}
    out: list[int] = []
    for _, text in documents("models/corpora/sample"):
        out += [ids.setdefault(t, len(ids)) for t in tokens(text)]
    arr = np.asarray(out, dtype=np.int32)
    return np.resize(arr, n)  # repeated to n tokens


def median_call(ctx: np.ndarray, k: int) -> float:
    times = np.empty(CALLS)
    for j in range(CALLS):
        t0 = time.perf_counter_ns()
        lookup(ctx, MIN_N, MAX_N, k).tolist()  # vLLM's batch_propose returns lists
        times[j] = time.perf_counter_ns() - t0
    return float(np.median(times)) * 1e-9


def measure(ids: np.ndarray) -> dict[tuple[int, int], list[float]]:
    """``REPEATS`` medians per (context, k), the grid visited in a new order each repeat
    (seeded) so that another process's burst does not fall on every repeat of one point."""
    grid = [(c, k) for c in CONTEXTS for k in KS]
    out: dict[tuple[int, int], list[float]] = {g: [] for g in grid}
    rng = np.random.default_rng(0)
    for _ in range(REPEATS):
        for i in rng.permutation(len(grid)):
            c, k = grid[i]
            out[c, k].append(median_call(np.ascontiguousarray(ids[:c]), k))
    return out


def cpu_name() -> str:
    for line in open("/proc/cpuinfo", encoding="utf-8"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main() -> None:
    ids = corpus_ids(max(CONTEXTS) + 1)
    lookup(ids[:64], MIN_N, MAX_N, 4)  # compile first
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["context", "k", "min_n", "max_n", "calls", "repeats", "min_s", "median_s", "cpu"])
    cpu = f"{cpu_name()}; numba {numba.__version__}"
    for (c, k), meds in measure(ids).items():
        row = [c, k, MIN_N, MAX_N, CALLS, REPEATS, f"{min(meds):.4g}", f"{np.median(meds):.4g}"]
        w.writerow([*row, cpu])


if __name__ == "__main__":
    main()
