"""Worker threads: how many cores the process may use, thread pools that survive a fork, the BLAS thread policy."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

logger = logging.getLogger(__name__)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it, else every core)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


class CopiesWithoutLock:
    """A mixin for objects guarded by ``self._lock``: ``pickle`` and ``copy.deepcopy`` take everything but the lock.

    A copy gets a new lock of its own (a lock can be neither pickled nor shared with a copy).
    """

    _lock: threading.Lock

    def __getstate__(self) -> dict[str, Any]:
        """The object's state without its lock."""
        return {name: value for name, value in self.__dict__.items() if name != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class LazyPool:
    """A thread pool made on first use and shared by every caller in the process.

    A child forked from the process (gunicorn ``--preload``, multiprocessing's fork) inherits
    the pool object but none of its threads, so work submitted there would never run: the child
    makes a fresh pool on its first use instead.
    """

    def __init__(self, workers: int, name: str) -> None:
        """Up to ``workers`` threads named ``name``-N."""
        self.workers = workers
        """Largest number of threads."""
        self.name = name
        """Prefix of the threads' names."""
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> ThreadPoolExecutor:
        """The pool, made now if this process has none yet."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name)
            return self._pool

    def _forget(self) -> None:
        self._pool = None
        self._lock = threading.Lock()  # a lock held by another thread at the fork stays held in the child


class _BlasPolicy:
    """Whether this process's BLAS libraries were limited to one thread (done at most once)."""

    lock = threading.Lock()
    limited = False


SMALL_MACHINE_CORES = 2
"""A machine of at most this many usable cores runs BLAS on one thread once the library does BLAS work of its own."""


def one_blas_thread_on_small_machine(cores: int | None = None) -> bool:
    """:func:`one_blas_thread` on a machine of at most :data:`SMALL_MACHINE_CORES`; whether BLAS runs one thread.

    ``cores``: the usable cores as the caller counted them (None: counted here). Called where the
    library's own BLAS work starts: the bundled model's loading, a batch's pass over an in-process
    index. On two cores BLAS's threads gain nothing measurable on a quiet machine and lose beside
    one busy process, whose core they wait for (``docs/benchmarks.md``).
    """
    if (usable_cores() if cores is None else cores) <= SMALL_MACHINE_CORES:
        one_blas_thread()
    return blas_is_one_thread()


def blas_is_one_thread() -> bool:
    """Whether :func:`one_blas_thread` limited this process's BLAS to one thread (then our own threads split work)."""
    return _BlasPolicy.limited


def one_blas_thread() -> bool:
    """Limit the BLAS libraries of this process (numpy's, FAISS's) to one thread each, once; whether it did.

    The library's BLAS work is small and frequent: embedding a query with the bundled model is a
    few (length x 384) matrix products. BLAS's own threads spin waiting for cores that other
    threads or processes hold, so on a small machine a query embedded under BLAS's default costs
    several times the CPU of one thread, and far more with many clients served at once (the
    figures: ``docs/benchmarks.md``). Changing the limit around each call (what 0.2 and earlier
    did) spins the pools up and down against each other.

    Called once when the query encoder loads or a batch first scores over an in-process index on a
    machine of at most two cores (:func:`one_blas_thread_on_small_machine`), and when a server is
    made (:func:`langchain_fusion.server.create_app`, :func:`langchain_fusion.mcp.build_mcp_server`),
    whose parallelism is its clients. Call it yourself in a service of your own that runs queries
    on many threads. The limit is process-wide (BLAS libraries have no per-thread setting that
    works across vendors) and kept.
    False when it could not (no threadpoolctl, or another thread holds OpenBLAS's limit).
    """
    with _BlasPolicy.lock:
        if _BlasPolicy.limited:
            return True
        try:
            import threadpoolctl
        except ImportError:
            return False
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")
        # threadpoolctl 3.8+ lets only the thread that first set OpenBLAS's process-wide pool set it again; this
        # may be any worker thread, so give the control back (the user's own threadpool_limits keeps working).
        release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
        if release is not None:
            release()
        _BlasPolicy.limited = all(
            info["num_threads"] == 1 for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"
        )
        logger.debug("BLAS limited to one thread for this process: %s", _BlasPolicy.limited)
        return _BlasPolicy.limited
