"""Block-max bounds of BM25 term weights: the largest weight of a term in each block of rows.

A segment's rows are cut into blocks of :data:`BLOCK_ROWS` consecutive rows. For a term, the
largest length-normalised frequency ``tf / (tf + k1 * (1 - b + b * length / average))`` among
its postings in each block bounds its BM25 weight in every row of the block (times the term's
idf, which is the same for every row). A pruned top-k (:mod:`~langchain_fusion.stores.local.pruning`)
skips the blocks whose bounds cannot reach its threshold, as Lucene and PISA do with block-max
WAND and block-max MaxScore.

The bound depends on the live average length only through one factor: computed once with
average ``a``, it still bounds the weights under another average ``a'`` once multiplied by
``max(1, a' / a)`` (the denominator shrinks at most by that ratio). So a segment derives its
terms' block maxima once, on first use, and keeps them for its whole life whatever rows are
added or deleted around it: one byte per block and term (rounded up to 1/255), only for terms
with more postings than the segment has blocks (rarer terms are weighed whole, which costs less
than reading their bounds), within :data:`BLOCK_MAX_BUDGET` bytes per segment.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

BLOCK_SHIFT = 7
"""Rows per block, as a power of two: blocks of 128 rows."""

BLOCK_ROWS = 1 << BLOCK_SHIFT
"""Rows per block."""

BLOCK_MAX_BUDGET = 24 << 20
"""Bytes of block maxima a segment keeps (3,000 terms' at a million rows); terms past it are bounded per query."""

_LEVELS = 255
"""Quantisation steps of a kept bound (rounded up, so a kept bound is never below the weight it bounds)."""


def block_count(rows: int) -> int:
    """Blocks covering ``rows`` rows."""
    return (rows + BLOCK_ROWS - 1) >> BLOCK_SHIFT


def block_maxima(rows: NDArray[np.integer], values: NDArray[np.floating], blocks: int) -> NDArray[np.float64]:
    """The largest of ``values`` in each of ``blocks`` blocks, given their local ``rows`` (ascending); 0 where none."""
    out = np.zeros(blocks, dtype=np.float64)
    if rows.size:
        of_block = np.asarray(rows, dtype=np.int64) >> BLOCK_SHIFT
        starts = np.flatnonzero(np.concatenate(([True], of_block[1:] != of_block[:-1])))
        out[of_block[starts]] = np.maximum.reduceat(np.asarray(values, dtype=np.float64), starts)
    return out


def saturation(tf: NDArray[Any], relative_length: NDArray[np.floating], k1: float, b: float) -> NDArray[np.float64]:
    """``tf / (tf + k1 * (1 - b + b * relative_length))`` in float64: the part of a weight a block bounds."""
    tf64 = np.asarray(tf, dtype=np.float64)
    return tf64 / (tf64 + k1 * (1.0 - b + b * np.asarray(relative_length, dtype=np.float64)))


class BlockMaxima:
    """One segment's kept block maxima of the length-normalised frequency, per term (derived on first use).

    Keyed by ``(k1, b)``: each entry holds the average length it was computed with and, per
    term, one ``uint8`` per block (``ceil(255 * max)``). Threads may derive the same term at
    once; one copy is kept. Nothing here depends on which rows are live.
    """

    def __init__(self, budget: int = BLOCK_MAX_BUDGET) -> None:
        """An empty store of at most ``budget`` bytes."""
        self._kept: dict[tuple[float, float], tuple[float, dict[int, tuple[NDArray[np.uint8], int, float]]]] = {}
        self._left = budget
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of bounds kept."""
        return sum(kept[0].nbytes for _, terms in self._kept.values() for kept in terms.values())

    def bounds(
        self,
        term: int,
        k1: float,
        b: float,
        average: float,
        weigh: tuple[NDArray[np.int32], NDArray[np.integer], NDArray[np.floating]],
        blocks: int,
    ) -> tuple[NDArray[np.uint8], int, float, float]:
        """Per block, a bound of ``term``'s length-normalised frequency under the live ``average`` length.

        Returned as kept: ``(steps, largest, fill, unit)``, the bound of block ``i`` being
        ``steps[i] * unit``, ``largest`` the largest step and ``fill`` the mean step over the
        largest (near 1: the bounds differ little between blocks). ``weigh``: the term's postings
        in the segment (local rows, frequencies) and the relative lengths of the segment's rows
        under ``average``, read only when the bounds are not kept yet.
        """
        entry = self._kept.get((k1, b))
        reference = average if entry is None else entry[0]  # the average every kept bound of (k1, b) is under
        kept = None if entry is None else entry[1].get(term)
        if kept is None:
            rows, tf, relative = weigh
            scaled = relative[rows].astype(np.float64) * (average / reference)  # lengths over the reference average
            steps = np.ceil(block_maxima(rows, saturation(tf, scaled, k1, b), blocks) * _LEVELS).astype(np.uint8)
            largest = int(steps.max(initial=0))
            kept = steps, largest, float(steps.mean()) / max(largest, 1) if steps.size else 0.0
            self._keep(term, (k1, b), reference, kept)
        return kept[0], kept[1], kept[2], max(1.0, average / reference) / _LEVELS

    def _keep(
        self, term: int, key: tuple[float, float], reference: float, kept: tuple[NDArray[np.uint8], int, float]
    ) -> None:
        if not self._lock.acquire(blocking=False):  # another thread keeping bounds: never wait
            return
        try:
            entry = self._kept.setdefault(key, (reference, {}))
            if kept[0].nbytes <= self._left and term not in entry[1] and entry[0] == reference:
                kept[0].flags.writeable = False
                entry[1][term] = kept
                self._left -= kept[0].nbytes
        finally:
            self._lock.release()
