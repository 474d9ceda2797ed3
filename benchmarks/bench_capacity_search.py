"""The capacity search for one configuration, on one process and on two (issue 17).

Run: .venv/bin/python benchmarks/bench_capacity_search.py [--workers 1,2] [--crossover 1]
Goal (issue 17): the capacity search for one configuration finishes within 30 s
on 2 cores at the default precision. One configuration: Llama 3.1 70B verifying
for Llama 3.2 1B on H200 at tensor parallelism 2 (the capacity study's choice
for that card), i.i.d. alpha = 0.7, the LoadAdaptive policy (max gamma 6),
prompts 256-2048 and outputs 64-512 tokens, batch up to 64, SLO p99 TPOT 50 ms
and p99 TTFT 2 s, 20 requests/s, ``Search()`` defaults (2% on the rate, 800 to
3,200 requests a run, 5% crossover), with the crossover: the capacity study's
defaults (``studies/capacity.py``). Each worker count runs in the same process,
one after the other; a search's first runs fill the card's memo of pass times,
so every count starts from a fresh card. Wall time (``time.perf_counter``, which
counts the pool's start and end), this process's CPU time and its workers'
(``RUSAGE_CHILDREN``); the rows must be identical for every count. On a shared
machine the wall time of two workers depends on what else runs: compare the
workers' CPU with the wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine, table  # noqa: E402

from specsim.acceptance.processes import IIDAcceptance  # noqa: E402
from specsim.capacity.planner import SLO, Search, search_capacity  # noqa: E402
from specsim.cards import load_hardware, load_model  # noqa: E402
from specsim.cost import Deployment  # noqa: E402
from specsim.policies.lookahead import LoadAdaptive  # noqa: E402
from specsim.sim import CardCost, PoissonWorkload, ServingConfig  # noqa: E402


def config() -> ServingConfig:
    """A fresh configuration (a new card: an empty memo of pass times)."""
    return ServingConfig(
        workload=PoissonWorkload(
            rate_per_s=1.0, requests=800, prompt_tokens=(256, 2048), output_tokens=(64, 512)
        ),
        cost=CardCost(
            deployment=Deployment(
                target=load_model("llama-3.1-70b"),
                hardware=load_hardware("h200"),
                tensor_parallel=2,
            ),
            draft=load_model("llama-3.2-1b"),
        ),
        acceptance=IIDAcceptance(alpha=0.7),
        policy=LoadAdaptive(alpha=0.7, max_gamma=6),
        max_batch=64,
        max_gamma=6,
    )


def children_cpu() -> float:
    """CPU seconds of this process's ended children (the pool's workers, once shut down)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def search(workers: int, crossover: bool) -> tuple[pd.DataFrame, float, float, float]:
    """The search's rows, its wall seconds, this process's CPU seconds and its workers'."""
    cfg = config()
    wall, cpu, kids = time.perf_counter(), time.process_time(), children_cpu()
    rows = search_capacity(
        cfg,
        slo=SLO(tpot_p99_s=0.05, ttft_p99_s=2.0),
        search=Search(),
        rate_per_s=20.0,
        seed=1,
        crossover=crossover,
        workers=workers,
        base={"hardware": "h200", "tensor_parallel": 2},
    )
    return (
        pd.DataFrame(rows),
        time.perf_counter() - wall,
        time.process_time() - cpu,
        children_cpu() - kids,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    parser.add_argument("--crossover", type=int, default=1, help="1: with the crossover")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    load = os.getloadavg()
    results = {w: search(w, bool(args.crossover)) for w in counts}
    first = results[counts[0]][0]
    for w in counts[1:]:  # the rows do not depend on the worker count
        pd.testing.assert_frame_equal(first, results[w][0], check_exact=True)
    runs = first.loc[first["kind"] == "probe", "run"].nunique()
    rows = [("serving runs of the search", f"{runs}")]
    for w in counts:
        _, wall, cpu, kids = results[w]
        rows.append(
            (
                f"workers = {w}: wall / CPU of this process / CPU of its workers",
                f"{wall:.1f} s / {cpu:.1f} s / {kids:.1f} s",
            )
        )
    if len(counts) > 1:
        a, b = results[counts[0]][1], results[counts[-1]][1]
        rows.append((f"wall ratio, workers {counts[0]} / {counts[-1]}", f"{a / b:.2f}"))
    rows.append(("load average before (1, 5, 15 min)", ", ".join(f"{x:.2f}" for x in load)))
    rows.append(("load average after", ", ".join(f"{x:.2f}" for x in os.getloadavg())))
    rows.append(("CPUs this process may use", f"{len(os.sched_getaffinity(0))}"))
    what = "LoadAdaptive" + (", with the crossover" if args.crossover else "")
    print(f"## Capacity search, one configuration (h200, tp 2, {what}; {machine()})\n")
    print(table(rows))


if __name__ == "__main__":
    main()
