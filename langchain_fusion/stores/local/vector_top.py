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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.local.vectors import FloatMatrix, exact_products
from langchain_fusion.stores.ranking import at_least_kth

Keys = NDArray[np.int64]

BLOCK_SCORES = 1 << 22
"""Scores (float32) of one block of a batch's pass: the block's rows times the batch's queries (16 MB)."""

_BLOCK_ROWS = (4096, 65536)
"""The smallest and largest blocks of rows of a batch's pass (within :data:`BLOCK_SCORES`)."""

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
    return np.flatnonzero(values >= float32_at_most(kth - 2 * error)).astype(np.int64)


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
    positions = contenders(values, k, error)
    candidates = positions if rows is None else rows[positions]
    exact = exact_products(vectors_of(candidates), query)
    best = np.lexsort((candidates, -exact))[:k]
    return candidates[best], exact[best]


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
    (None: all). One pass: each block of rows is multiplied with every query at once.
    """
    count = queries.shape[0]
    block_rows = min(max(BLOCK_SCORES // max(1, count), _BLOCK_ROWS[0]), _BLOCK_ROWS[1])
    scores = np.empty((count, block_rows), dtype=np.float32)
    floors = np.full(count, -np.inf, dtype=np.float32)
    margins = 2 * np.asarray(errors, dtype=np.float64)
    found: list[list[tuple[Keys, NDArray[np.float32]]]] = [[] for _ in range(count)]
    held = np.zeros(count, dtype=np.int64)
    first = True
    for start, vectors in parts:
        for offset in range(0, vectors.shape[0], block_rows):
            stop = min(vectors.shape[0], offset + block_rows)
            block = scores[:, : stop - offset]
            np.matmul(queries, vectors[offset:stop].T, out=block)
            mask = None if allowed is None else allowed[start + offset : start + stop]
            if mask is not None:
                block[:, ~mask] = -np.inf
            if first:
                _sampled_floors(block, depth, margins, floors)
                first = False
            for query in range(count):
                hits = block[query] >= floors[query]
                if mask is not None:
                    hits &= mask
                columns = np.flatnonzero(hits)
                if columns.size:
                    found[query].append((columns + (start + offset), block[query, columns]))
                    held[query] += columns.size
                    if held[query] > 4 * depth:
                        held[query] = _tighten(found[query], depth, margins[query], floors, query)
    result = []
    for query in range(count):
        _tighten(found[query], depth, margins[query], floors, query)
        rows, values = found[query][0] if found[query] else (np.zeros(0, np.int64), np.zeros(0, np.float32))
        result.append(Contenders(rows.astype(np.int64, copy=False), values, depth))
    return result


def _sampled_floors(
    block: NDArray[np.float32], depth: int, margins: NDArray[np.float64], floors: NDArray[np.float32]
) -> None:
    """Each query's first floor: the ``depth``-th highest of a strided sample of its first block, less the margin.

    The ``depth``-th highest of a sample is at most that of all the rows, so no contender is lost.
    """
    step = max(1, block.shape[1] // _SAMPLE_COLUMNS)
    sample = block[:, ::step]
    if sample.shape[1] < depth:
        return
    kth = np.partition(sample, sample.shape[1] - depth, axis=1)[:, sample.shape[1] - depth]
    for query, value in enumerate(kth.tolist()):
        if math.isfinite(value):
            floors[query] = float32_at_most(value - margins[query])


def _tighten(
    parts: list[tuple[Keys, NDArray[np.float32]]],
    depth: int,
    margin: float,
    floors: NDArray[np.float32],
    query: int,
) -> int:
    """Merge a query's kept rows; raise its floor to its ``depth``-th highest less the margin; keep those above it.

    Returns how many rows it keeps.
    """
    rows = np.concatenate([r for r, _ in parts]) if len(parts) > 1 else parts[0][0] if parts else None
    if rows is None:
        return 0
    values = np.concatenate([v for _, v in parts]) if len(parts) > 1 else parts[0][1]
    if values.size > depth:
        kth = float(np.partition(values, values.size - depth)[values.size - depth])
        if math.isfinite(kth):
            floors[query] = max(floors[query], float32_at_most(kth - margin))
        keep = values >= floors[query]
        rows, values = rows[keep], values[keep]
    parts[:] = [(rows, values)]
    return int(rows.size)
