"""The rows that a query's common terms could lift to a threshold, found through their presence bitmaps.

When every term of a query is of middling frequency, the terms MaxScore must read hold hundreds
of thousands of postings at a million rows, though few rows hold enough of the terms to reach the
threshold. Their bitmaps (:mod:`~langchain_fusion.stores.local.bitmaps`) give those rows in a few
passes over the words whatever the terms' postings: a row reaches the threshold only if the
bounds of the terms it holds sum to it (:func:`~langchain_fusion.stores.local.bitmaps.reaching`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.local.bitmaps import Words, presence_bits, reaching, rows_of
from langchain_fusion.stores.local.postings import IntArray, Postings

REACHING_MAX_TERMS = 6
"""Terms whose bitmaps are combined at most (up to ``2 ** this`` combinations); the others count as held everywhere."""


def likely_mark(bounds: NDArray[np.float64], shares: NDArray[np.float64], size: int, rows: float) -> float:
    """A mark that about ``rows`` of ``size`` rows can reach through terms of these ``bounds`` held by these ``shares``.

    Counted as if rows held terms independently, each in the share of rows it is in: the
    combinations of terms by the sum of their bounds, highest first, until ``rows`` are expected.
    """
    held = (np.arange(1 << bounds.size)[:, None] >> np.arange(bounds.size)) & 1
    sums = held @ bounds
    chance = np.prod(np.where(held == 1, shares, 1 - shares), axis=1)
    order = np.argsort(-sums, kind="stable")
    expected = np.cumsum(chance[order]) * size
    return float(sums[order[min(int(np.searchsorted(expected, rows)), order.size - 1)]])


def reaching_rows(
    blocks: Sequence[tuple[Postings, int]], size: int, terms: Sequence[int], bounds: Sequence[float], need: float
) -> IntArray:
    """The rows of ``blocks`` (``size`` rows) where the bounds of the ``terms`` they hold sum to ``need`` or more.

    ``bounds`` descend; a term's bitmap is read as its block keeps it, or set from its postings.
    """
    found = []
    ends = [start for _, start in blocks[1:]] + [size]
    for (postings, first_row), end in zip(blocks, ends, strict=True):
        words = (end - first_row + 63) // 64
        bits = reaching([_bits(postings, term, words) for term in terms], bounds, need, words)
        found.append(np.arange(first_row, end, dtype=np.int64) if bits is None else rows_of(bits) + first_row)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _bits(postings: Postings, term: int, words: int) -> Words:
    """``term``'s presence bits in ``postings``: kept if the block keeps (or now builds) them, else set for this use."""
    presence = postings.term_presence(term)
    if presence is not None:
        return presence.bits
    if not postings.term_count(term):
        return np.zeros(words, dtype=np.uint64)
    return presence_bits(postings.rows[int(postings.indptr[term]) : int(postings.indptr[term + 1])], words)
