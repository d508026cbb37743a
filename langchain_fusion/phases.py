"""Where the time of a run went: the steps of the write path report their phases to a clock, if one is running.

:func:`timing` starts a :class:`PhaseClock` for the code under it (in this thread and the tasks it
starts: a context variable); the steps wrap their work in :func:`phase` (``load``, ``split``,
``embed``, ``bm25``, ``vectors``, ``save``...), which costs nothing when no clock runs. An indexing
run reports the result (:class:`~langchain_fusion.pipeline.indexing.IndexReport`). A leaf module:
every layer may import it.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

PHASES = ("load", "split", "enrich", "embed", "bm25", "vectors", "store", "summaries", "save")
"""The phases of an indexing run, in the order they are shown: reading files, chunking them, contextual
enrichment (a chat model), the embedding model, the BM25 side, the vector side, writes to a remote store (both
sides at once), page summaries (a chat model), and saving."""


class PhaseClock:
    """Seconds spent in each phase (wall time), added up over every time the phase ran."""

    def __init__(self) -> None:
        """An empty clock, started now."""
        self.started = time.perf_counter()
        """When the clock started (``time.perf_counter``)."""
        self.seconds: dict[str, float] = {}
        """Seconds by phase, for the phases that ran."""

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` more in phase ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def elapsed(self) -> float:
        """Seconds since the clock started."""
        return time.perf_counter() - self.started

    def ordered(self) -> dict[str, float]:
        """The phases that ran, in :data:`PHASES` order (others after), rounded to milliseconds."""
        names = [name for name in PHASES if name in self.seconds]
        names += sorted(set(self.seconds) - set(PHASES))
        return {name: round(self.seconds[name], 3) for name in names}


_CLOCK: contextvars.ContextVar[PhaseClock | None] = contextvars.ContextVar("langchain_fusion_phase_clock", default=None)


@contextlib.contextmanager
def timing() -> Iterator[PhaseClock]:
    """Run the code under it with a new clock, and yield the clock."""
    clock = PhaseClock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time of the code under it in phase ``name`` of the running clock (nothing without one).

    Phases do not nest: each step of the write path is in one of them.
    """
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        clock.add(name, time.perf_counter() - start)
