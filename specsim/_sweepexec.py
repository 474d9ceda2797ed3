"""Where sweep points run: a local process pool or a Dask cluster (imported only here).

Each function yields the rows of finished points in completion order; the
caller writes them. A Dask ``LocalCluster`` binds the loopback address only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any

__all__ = ["local_cluster", "dask_results", "pool_results"]


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ValueError(
            f"--dask/--scheduler need the sweep extra: pip install 'specsim[sweep]' ({exc})"
        ) from None
    return distributed


def local_cluster(workers: int) -> Any:
    """A Dask ``LocalCluster`` of ``workers`` single-threaded processes on the loopback
    address only: scheduler, workers and nannies bind 127.0.0.1 and the dashboard is off."""
    distributed = _distributed()
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
    )


def dask_results(
    fn: Callable[..., list[dict[str, Any]]],
    tasks: list[tuple[Any, ...]],
    *,
    workers: int,
    scheduler: str | None,
) -> Iterator[list[dict[str, Any]]]:
    """``fn(*task)`` for every task on a new LocalCluster of ``workers`` processes, or on the
    cluster at ``scheduler`` (whose workers must import specsim)."""
    distributed = _distributed()
    cluster = local_cluster(workers) if scheduler is None else None
    client = distributed.Client(cluster if cluster is not None else scheduler)
    try:
        futures = [client.submit(fn, *t, pure=False) for t in tasks]
        for fut in distributed.as_completed(futures):
            yield fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def pool_results(
    fn: Callable[..., list[dict[str, Any]]], tasks: Sequence[tuple[Any, ...]], workers: int
) -> Iterator[list[dict[str, Any]]]:
    """``fn(*task)`` for every task on a pool of ``workers`` local processes."""
    # spawn: workers start clean (no inherited threads or state), on every platform alike.
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(fn, *t) for t in tasks]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()
