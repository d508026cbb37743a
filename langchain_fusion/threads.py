"""Worker threads: how many cores the process may use, and thread pools that survive a fork."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it, else every core)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


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
