"""Where sweep points run: a local process pool or a Dask cluster (imported only here).

:func:`pool_results` and :func:`dask_results` yield the rows of finished points
in completion order; the caller writes them. :func:`dask_client` connects (or
starts a local cluster) first, so that a scheduler that does not answer is an
error before any output exists. A Dask ``LocalCluster`` binds the loopback
address only and keeps its scratch space in a temporary folder removed at the
end (not Dask's fixed ``dask-scratch-space`` in the system temp folder). Local
pool workers end with the process that started them, even when it is killed
(:func:`end_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "check_connect_timeout",
    "local_cluster",
    "dask_client",
    "dask_results",
    "pool_results",
    "end_with_parent",
]

DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""How long a sweep waits for a Dask scheduler named by address to answer."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ValueError(
            f"--dask/--scheduler need the sweep extra: pip install 'specsim[sweep]' ({exc})"
        ) from None
    return distributed


def _dask_config(values: dict[str, Any]) -> Any:
    import dask

    return dask.config.set(values)


def local_cluster(workers: int, *, local_directory: str | None = None) -> Any:
    """A Dask ``LocalCluster`` of ``workers`` single-threaded processes on the loopback
    address only: scheduler, workers and nannies bind 127.0.0.1 and the dashboard is off.
    ``local_directory`` is the workers' scratch space (Dask's default folder otherwise)."""
    distributed = _distributed()
    extra = {} if local_directory is None else {"local_directory": local_directory}
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
        **extra,
    )


# Loggers that report a worker's or a comm's end while a cluster is being closed on purpose:
# at that point a closed comm (CommClosedError) or a nanny stopping a worker is the
# expected course of a shutdown, not a fault, so they are silenced for the close only.
_SHUTDOWN_LOGGERS = (
    "distributed",
    "distributed.batched",
    "distributed.comm",
    "distributed.core",
    "distributed.nanny",
    "distributed.scheduler",
    "distributed.worker",
    "distributed.client",
)


def _quieting() -> tuple[Callable[[], None], Callable[[], None]]:
    """``(quiet, restore)``: raise the shutdown loggers to CRITICAL; put their levels back."""
    loggers = [logging.getLogger(name) for name in _SHUTDOWN_LOGGERS]
    levels: list[int] = []

    def quiet() -> None:
        levels[:] = [lg.level for lg in loggers]
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)

    def restore() -> None:
        for lg, level in zip(loggers, levels, strict=False):
            lg.setLevel(level)

    return quiet, restore


def check_connect_timeout(seconds: float) -> float:
    """``seconds`` if it is a finite number > 0, else ValueError naming ``connect_timeout``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"connect_timeout: expected a number of seconds, got {seconds!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"connect_timeout: expected a finite number of seconds > 0, got {seconds}")
    return float(seconds)


@contextlib.contextmanager
def dask_client(
    *, workers: int, scheduler: str | None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
) -> Iterator[Any]:
    """A Dask client: of a new LocalCluster of ``workers`` processes, or of the cluster at
    ``scheduler``, which must answer within ``connect_timeout`` seconds (else ValueError
    naming ``scheduler``).

    Client and cluster close on exit, the client first, and the expected end-of-run noise
    of the close (closed comms, nannies stopping workers) is silenced for the close only.
    """
    connect_timeout = check_connect_timeout(connect_timeout)
    distributed = _distributed()
    quiet, restore = _quieting()
    with contextlib.ExitStack() as stack:
        stack.callback(restore)  # unwinds last
        if scheduler is None:
            scratch = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="specsim-dask-", ignore_cleanup_errors=True)
            )
            # The scheduler keeps a workspace too: Dask's temporary-directory covers it.
            stack.enter_context(_dask_config({"temporary-directory": scratch}))
            cluster = stack.enter_context(local_cluster(workers, local_directory=scratch))
            client = stack.enter_context(distributed.Client(cluster))
        else:
            try:
                client = stack.enter_context(distributed.Client(scheduler, timeout=connect_timeout))
            except (OSError, TimeoutError, ValueError) as exc:
                why = " ".join(str(exc).split()) or type(exc).__name__
                raise ValueError(
                    f"scheduler: no Dask scheduler answered at {scheduler} within "
                    f"{connect_timeout:g} s (--connect-timeout; {why})"
                ) from None
        stack.callback(quiet)  # unwinds first: before the client and the cluster close
        yield client


def dask_results(
    fn: Callable[..., list[dict[str, Any]]], tasks: list[tuple[Any, ...]], *, client: Any
) -> Generator[list[dict[str, Any]], None, None]:
    """``fn(*task)`` for every task on the cluster of ``client`` (from :func:`dask_client`;
    its workers must import specsim). The caller closes this generator
    (``contextlib.closing``) when it stops early: the futures left are cancelled."""
    distributed = _distributed()
    futures = [client.submit(fn, *t, pure=False) for t in tasks]
    try:
        for fut in distributed.as_completed(futures):
            yield fut.result()
            fut.release()
    finally:
        client.cancel(futures)
        futures.clear()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def end_with_parent(parent: int) -> None:
    """Make this process end when process ``parent`` (the one that started it) ends.

    A pool initializer: without it the workers of a sweep killed with ``kill -9`` wait
    on their task queue for ever (and keep multiprocessing's resource tracker alive, which
    ends when the last of them has gone). On Linux the kernel does it
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes: no thread, no polling);
    elsewhere a daemon thread checks the parent's pid once a second.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent ended before the request above took effect
        os._exit(1)


def pool_results(
    fn: Callable[..., list[dict[str, Any]]], tasks: Sequence[tuple[Any, ...]], workers: int
) -> Generator[list[dict[str, Any]], None, None]:
    """``fn(*task)`` for every task on a pool of ``workers`` local processes, which end
    with this process (:func:`end_with_parent`)."""
    # spawn: workers start clean (no inherited threads or state), on every platform alike.
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=end_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = [pool.submit(fn, *t) for t in tasks]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()
