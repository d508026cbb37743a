"""The exact top-k of the vector side: the same rows and bits from one query's scan and from a batch's product.

A float32 scan only proposes rows. FAISS's kernel for one query and a BLAS matrix product for a
batch sum in different orders, so their float32 products of a row may differ in the last bits, and
a top k taken on them may differ at its edge. Both are within a bound of the exact product
(:func:`~langchain_fusion.stores.local.vectors.product_error`, doubled to cover the float64
rescoring too), so every row that may belong to the float64 top k lies within twice that bound of
the k-th float32 product (:func:`contenders`). Those rows are rescored in float64
(:func:`~langchain_fusion.stores.local.vectors.exact_products`: a row's bits do not depend on the
rows scored with it) and the k best are taken, ties by row (:func:`exact_top`). Whichever kernel
proposed them, the result is the float64 top k, so a batch returns exactly what ``invoke`` returns.

:func:`batch_contenders` finds, in one pass over the vectors for many queries, every row that may
be among each query's ``depth`` best: a block of rows at a time (one matrix product of the block
with every query), keeping per query only the rows within the bound of its running ``depth``-th
product. A batch of 64 queries over a million rows thus reads the vectors once and keeps a few
hundred rows per query, instead of a million scores each.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.local.vectors import FloatMatrix, exact_products, in_blocks
from langchain_fusion.stores.ranking import at_least_kth
from langchain_fusion.threads import one_blas_thread_on_small_machine

Keys = NDArray[np.int64]

BLOCK_SCORES = 1 << 22
"""Scores (float32) of one block of a batch's pass: the block's rows times the batch's queries (16 MB)."""

_BLOCK_ROWS = (4096, 65536)
"""The smallest and largest blocks of rows of a batch's pass (within :data:`BLOCK_SCORES`)."""

_SHARED_BLOCK_ROWS = 16384
"""The largest block where the scan threads share the blocks (several per thread, so a slow one does fewer)."""

EXACT_CHUNK_ROWS = 1 << 14
"""Contenders rescored in float64 at once (6 MB of 384-dimension vectors)."""

_SAMPLE_COLUMNS = 2048
"""Scores per query of the first block from which its first, conservative floor is taken."""


def squared_norm_bound(vectors: FloatMatrix) -> float:
    """The largest squared row norm of ``vectors``, summed in float32 as the error bound expects (0 if none)."""
    if vectors.shape[0] == 0:
        return 0.0
    largest = 0.0
    step = max(1, (64 << 20) // max(1, vectors.shape[1] * 4))  # 64 MB of rows at a time: no matrix-sized copy
    for start in range(0, vectors.shape[0], step):
        block = vectors[start : start + step]
        largest = max(largest, float(np.einsum("ij,ij->i", block, block).max()))
    return largest


def float32_at_most(value: float) -> np.float32:
    """The largest float32 not above ``value`` (``value`` itself when it is one)."""
    rounded: np.float32 = np.float32(value)
    if float(rounded) > value:
        lower: np.float32 = np.nextafter(rounded, np.float32(-np.inf))
        return lower
    return rounded


def floor_below(kth: float, error: float) -> np.float32:
    """The float32 products that may still reach a row whose product is ``kth``: those at least this.

    ``error`` bounds each product's distance from its float64 rescoring; twice that below ``kth``,
    rounded down to a float32, a row is below ``kth``'s row whatever the rescoring gives.
    """
    return float32_at_most(kth - 2 * error)


def contenders(values: NDArray[np.float32], k: int, error: float) -> Keys:
    """Positions of the ``values`` that may belong to the float64 top ``k`` (see the module docstring).

    ``error`` bounds each value's distance from its float64 rescoring. A value more than twice
    that below the ``k``-th highest is below ``k`` rows whatever the rescoring gives, ties
    included; every other position is returned (all of them when ``error`` is not finite).
    """
    if k <= 0 or values.size == 0:
        return np.zeros(0, dtype=np.int64)
    if values.size <= k or not math.isfinite(error):
        return np.arange(values.size, dtype=np.int64)
    kth = float(values[at_least_kth(values, k, None)].min())
    return np.flatnonzero(values >= floor_below(kth, error)).astype(np.int64)


def exact_top(
    rows: Keys | None,
    values: NDArray[np.float32],
    k: int,
    error: float,
    vectors_of: Callable[[Keys], FloatMatrix],
    query: NDArray[np.float32],
) -> tuple[Keys, NDArray[np.float64]]:
    """The ``k`` rows of the largest float64 products among ``rows``, best first, ties by row, with those products.

    ``values`` are the rows' float32 products from any kernel (``rows`` None: position ``i`` is
    row ``i``); ``error`` bounds their distance from float64 ones; ``vectors_of`` reads rows' vectors.
    """
    if not np.any(query):  # every product is zero: the first k rows, ties by row
        candidates = np.arange(min(k, values.size), dtype=np.int64) if rows is None else rows[:k]
        return candidates, exact_products(vectors_of(candidates), query)
    positions = contenders(values, k, error)
    candidates = positions if rows is None else rows[positions]
    best_rows, best_scores = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    # A few rows usually; in chunks when many tie within the bound, so that no matrix-sized float64 copy is made.
    for start in range(0, candidates.size, EXACT_CHUNK_ROWS):
        part = candidates[start : start + EXACT_CHUNK_ROWS]
        merged_rows = np.concatenate((best_rows, part))
        merged = np.concatenate((best_scores, exact_products(vectors_of(part), query)))
        best = np.lexsort((merged_rows, -merged))[:k]
        best_rows, best_scores = merged_rows[best], merged[best]
    return best_rows, best_scores


@dataclass(frozen=True)
class Contenders:
    """The rows that may be among one query's ``depth`` best in a batch's pass, with their float32 products."""

    rows: Keys
    """Rows, ascending."""
    values: NDArray[np.float32]
    """Each row's float32 product with the query."""
    depth: int
    """Any top ``k`` up to this many is among :attr:`rows`."""


def batch_contenders(
    parts: Sequence[tuple[int, FloatMatrix]],
    queries: FloatMatrix,
    depth: int,
    errors: NDArray[np.float64],
    allowed: NDArray[np.bool_] | None,
) -> list[Contenders]:
    """For each query (a row of ``queries``), the allowed rows that may be among its ``depth`` best.

    ``parts`` are the vectors as (first row, matrix) in row order; ``errors`` bound each query's
    float32 products' distance from float64 ones; ``allowed`` masks the rows a search may return
    (None: all). One pass: each block of rows is multiplied with every query at once. Where BLAS
    runs one thread (:func:`~langchain_fusion.threads.one_blas_thread`: servers, and any machine of
    two cores, where the first pass sets it) the blocks are shared among the scan threads, each
    taking the next; else BLAS's own threads split each product.
    """
    count = queries.shape[0]
    shared = one_blas_thread_on_small_machine()
    largest = min(_BLOCK_ROWS[1], _SHARED_BLOCK_ROWS) if shared else _BLOCK_ROWS[1]
    block_rows = min(max(BLOCK_SCORES // max(1, count), _BLOCK_ROWS[0]), largest)
    rows_in_all = sum(vectors.shape[0] for _, vectors in parts)
    pass_ = _Pass(queries, depth, np.asarray(errors, dtype=np.float64), allowed, rows_in_all, block_rows)
    for start, vectors in parts:
        if not pass_.sampled and vectors.shape[0]:
            # The first block sets the first floors before any other starts: a small one, as it runs alone.
            first = min(_BLOCK_ROWS[0], vectors.shape[0])
            pass_.block(start, vectors, 0, 0, first)
            offset = first
        else:
            offset = 0
        rows = vectors.shape[0] - offset
        if rows <= 0:
            continue
        work = functools.partial(pass_.block, start, vectors, offset)
        if shared:
            in_blocks(rows, block_rows, work)
        else:
            for lo in range(0, rows, block_rows):
                work(lo, min(rows, lo + block_rows))
    return pass_.result()


class _Pass:
    """The state of one :func:`batch_contenders` pass: each query's floor and kept rows."""

    def __init__(
        self,
        queries: FloatMatrix,
        depth: int,
        errors: NDArray[np.float64],
        allowed: NDArray[np.bool_] | None,
        rows: int,
        block_rows: int,
    ) -> None:
        count = queries.shape[0]
        self.queries, self.depth, self.errors, self.allowed = queries, depth, errors, allowed
        self.rows, self.block_rows = rows, block_rows
        self._buffers = threading.local()  # each thread's block of scores, reused: no fresh pages per block
        # A zero query's products are all zero: its contenders are the first allowed rows, and it skips the pass.
        self.zero = [not np.any(queries[i]) for i in range(count)]
        self.limits = [4 * depth] * count  # kept rows that trigger a tightening (raised when many rows tie)
        self.floors = np.full(count, -np.inf, dtype=np.float32)  # only ever raised: a stale read keeps more rows
        self.found: list[list[tuple[Keys, NDArray[np.float32]]]] = [[] for _ in range(count)]
        self.held = [0] * count
        self.sampled = False
        self.lock = threading.Lock()

    def block(self, start: int, vectors: FloatMatrix, offset: int, lo: int, hi: int) -> None:
        """Score rows ``offset + lo:offset + hi`` of ``vectors`` (global row ``start`` first) and keep each query's."""
        lo, hi = offset + lo, offset + hi
        buffer = getattr(self._buffers, "scores", None)
        if buffer is None:
            buffer = self._buffers.scores = np.empty((self.queries.shape[0], self.block_rows), dtype=np.float32)
        scores = buffer[:, : hi - lo]
        np.matmul(self.queries, vectors[lo:hi].T, out=scores)
        mask = None if self.allowed is None else self.allowed[start + lo : start + hi]
        if mask is not None:
            scores[:, ~mask] = -np.inf
        if not self.sampled:
            self._sample_floors(scores)
            self.sampled = True
        picked = []
        for query in range(scores.shape[0]):
            if self.zero[query]:
                continue
            hits = scores[query] >= self.floors[query]
            if mask is not None:
                hits &= mask
            columns = np.flatnonzero(hits)
            if columns.size:
                picked.append((query, columns + (start + lo), scores[query, columns]))
        with self.lock:
            for query, rows, values in picked:
                self.found[query].append((rows, values))
                self.held[query] += rows.size
                if self.held[query] > self.limits[query]:
                    self.held[query] = self._tighten(query)
                    self.limits[query] = max(4 * self.depth, 2 * self.held[query])

    def result(self) -> list[Contenders]:
        """Each query's contenders, rows ascending."""
        result = []
        for query, parts in enumerate(self.found):
            if self.zero[query]:
                rows = np.arange(self.rows, dtype=np.int64) if self.allowed is None else np.flatnonzero(self.allowed)
                first = rows[: self.depth]
                result.append(Contenders(first, np.zeros(first.size, dtype=np.float32), self.depth))
                continue
            self._tighten(query)
            rows, values = parts[0] if parts else (np.zeros(0, np.int64), np.zeros(0, np.float32))
            order = np.argsort(rows, kind="stable")  # blocks may have been kept in any order
            result.append(Contenders(rows[order].astype(np.int64, copy=False), values[order], self.depth))
        return result

    def _sample_floors(self, block: NDArray[np.float32]) -> None:
        """Each query's first floor, from the ``depth``-th highest of a strided sample of its first block.

        The ``depth``-th highest of a sample is at most that of all the rows, so no contender is lost.
        """
        step = max(1, block.shape[1] // _SAMPLE_COLUMNS)
        sample = block[:, ::step]
        if sample.shape[1] < self.depth:
            return
        kth = np.partition(sample, sample.shape[1] - self.depth, axis=1)[:, sample.shape[1] - self.depth]
        for query, value in enumerate(kth.tolist()):
            if math.isfinite(value):
                self.floors[query] = floor_below(value, self.errors[query])

    def _tighten(self, query: int) -> int:
        """Merge a query's kept rows, raise its floor from their ``depth``-th highest, keep those at or above it.

        Returns how many rows it keeps.
        """
        parts = self.found[query]
        if not parts:
            return 0
        rows = np.concatenate([r for r, _ in parts]) if len(parts) > 1 else parts[0][0]
        values = np.concatenate([v for _, v in parts]) if len(parts) > 1 else parts[0][1]
        if values.size > self.depth:
            kth = float(np.partition(values, values.size - self.depth)[values.size - self.depth])
            if math.isfinite(kth):
                self.floors[query] = max(self.floors[query], floor_below(kth, self.errors[query]))
            keep = values >= self.floors[query]
            rows, values = rows[keep], values[keep]
        parts[:] = [(rows, values)]
        return int(rows.size)
