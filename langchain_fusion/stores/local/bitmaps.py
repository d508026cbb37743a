"""Presence bitmaps of BM25 terms: which rows of a block hold a term, one bit a row.

Bit ``r % 64`` of word ``r // 64`` says whether local row ``r`` holds the term. A bitmap answers
"does this row hold the term" with a few array reads, where a binary search in a long postings
list costs about twenty scattered ones (:class:`TermPresence` also finds the postings), and
bitmaps combine 64 rows per operation: :func:`reaching` finds the rows whose terms' bounds can
reach a threshold in a few passes over the words, however many postings the terms hold.
:class:`KeptPresence` keeps a block's bitmaps within a byte budget.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

Words = NDArray[np.uint64]
"""Presence bits, 64 rows a word."""

PRESENCE_BUDGET = 32 << 20
"""Bytes of bitmaps a block of postings keeps (about 170 terms' at a million rows); others are built per use."""

_ONE = np.uint64(1)


def presence_bits(rows: NDArray[np.integer], words: int | None = None) -> Words:
    """Bits of local ``rows`` (ascending), over ``words`` words (default: one empty word past the last row)."""
    size = (int(rows[-1]) // 64 + 2 if rows.size else 1) if words is None else words
    bits = np.zeros(size, dtype=np.uint64)
    if rows.size:
        word = rows >> 6
        starts = np.flatnonzero(np.concatenate(([True], word[1:] != word[:-1])))
        bit = np.left_shift(_ONE, (rows & 63).astype(np.uint64))
        bits[word[starts]] = np.bitwise_or.reduceat(bit, starts)
    return bits


def held_in(bits: Words, local: NDArray[np.integer]) -> NDArray[np.bool_]:
    """Which of local rows ``local`` have their bit set in ``bits`` (rows past the words: the last, empty word)."""
    words = bits[np.minimum(local >> 6, bits.size - 1)]
    held: NDArray[np.bool_] = ((words >> (local & 63).astype(np.uint64)) & _ONE).astype(bool)
    return held


def rows_of(bits: Words) -> NDArray[np.int64]:
    """The local rows whose bit is set, ascending."""
    nonzero = np.flatnonzero(bits)
    if nonzero.size == 0:
        return np.zeros(0, dtype=np.int64)
    set_bits = np.flatnonzero(np.unpackbits(bits[nonzero].view(np.uint8), bitorder="little"))
    rows: NDArray[np.int64] = nonzero[set_bits >> 6].astype(np.int64) * 64 + (set_bits & 63)
    return rows


def reaching(bits: Sequence[Words], bounds: Sequence[float], need: float, words: int) -> Words | None:
    """The rows whose held terms' ``bounds`` sum to at least ``need``, as bits over ``words`` words (None: every row).

    ``bits[i]`` holds term ``i``, whose weight is at most ``bounds[i]`` (descending). A row reaches
    ``need`` with term 0 if it reaches ``need - bounds[0]`` with the others, else it must reach
    ``need`` without it: a walk over at most ``2 ** len(bits)`` combinations, each an AND and an
    OR of whole bitmaps, cut short where the remaining bounds cannot reach what is still needed.
    """
    rest = np.concatenate((np.cumsum(np.asarray(bounds, dtype=np.float64)[::-1])[::-1], [0.0]))
    every = np.full(words, np.iinfo(np.uint64).max, dtype=np.uint64)

    def walk(first: int, still: float) -> Words | None:
        """The rows reaching ``still`` with terms ``first`` on (None: no row)."""
        if still <= 0:
            return every
        if rest[first] < still:
            return None
        term = bits[first][:words] if bits[first].size >= words else _padded(bits[first], words)
        with_first = walk(first + 1, still - bounds[first])
        without = walk(first + 1, still)
        held = None if with_first is None else term if with_first is every else term & with_first
        if held is None or without is every:
            return without
        return held if without is None else held | without

    found = walk(0, need)
    if found is every:
        return None
    return np.zeros(words, dtype=np.uint64) if found is None else found


def _padded(bits: Words, words: int) -> Words:
    out = np.zeros(words, dtype=np.uint64)
    out[: bits.size] = bits
    return out


class TermPresence:
    """Which local rows hold one term and where each one's posting is, for looking many rows up at once.

    The postings before a word plus the set bits below ``r`` in it give row ``r``'s posting's offset
    among the term's (computed on first use: half a bitmap more).
    """

    __slots__ = ("_before", "bits")

    def __init__(self, bits: Words) -> None:
        """The presence given by ``bits`` (with one empty word past the last row: rows beyond it land there)."""
        self.bits = bits
        self._before: NDArray[np.int32] | None = None

    @classmethod
    def of(cls, rows: NDArray[np.int32]) -> TermPresence:
        """The presence of a term held by local ``rows`` (ascending, at least one)."""
        return cls(presence_bits(rows))

    @property
    def nbytes(self) -> int:
        """Memory held (the bits, and the offsets once computed)."""
        return self.bits.nbytes + (0 if self._before is None else self._before.nbytes)

    def before(self) -> NDArray[np.int32]:
        """The term's postings in the words before each word."""
        if self._before is None:
            before = np.zeros(self.bits.size, dtype=np.int32)
            np.cumsum(np.bitwise_count(self.bits[:-1]), out=before[1:])
            self._before = before
        return self._before

    def find(self, local: NDArray[np.int32]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """For local rows ``local``: the offsets of their postings among the term's, and which of ``local`` hold it."""
        word_of = np.minimum(local >> 6, self.bits.size - 1)
        words = self.bits[word_of]
        bit = (local & 63).astype(np.uint64)
        held = np.flatnonzero((words >> bit) & _ONE)
        below = words[held] & ((_ONE << bit[held]) - _ONE)
        return self.before()[word_of[held]].astype(np.int64) + np.bitwise_count(below), held


class KeptPresence:
    """One block's kept :class:`TermPresence` per term, within :data:`PRESENCE_BUDGET` bytes.

    Each term kept is charged a bitmap and a half (its offsets, whenever they are computed).
    Threads may build the same term at once; one copy is kept, and a thread finding another
    keeping one at that moment does not keep its own (nor wait).
    """

    def __init__(self, budget: int = PRESENCE_BUDGET) -> None:
        """An empty store of at most ``budget`` bytes."""
        self._kept: dict[int, TermPresence] = {}
        self._left = budget
        self._lock = threading.Lock()

    def get(self, term: int) -> TermPresence | None:
        """The kept presence of ``term``, if any."""
        return self._kept.get(term)

    def has_room(self, bits: int) -> bool:
        """Whether a bitmap of ``bits`` bytes would be kept (with its offsets)."""
        return bits * 3 // 2 <= self._left

    def keep(self, term: int, presence: TermPresence) -> TermPresence:
        """Keep ``presence`` if the budget allows; the one kept for ``term`` (this one if none)."""
        charge = presence.bits.nbytes * 3 // 2
        if charge <= self._left and self._lock.acquire(blocking=False):
            try:
                if term not in self._kept and charge <= self._left:
                    self._kept[term] = presence
                    self._left -= charge
            finally:
                self._lock.release()
        return self._kept.get(term, presence)

    @property
    def nbytes(self) -> int:
        """Memory held by the kept bitmaps and offsets."""
        return sum(presence.nbytes for presence in list(self._kept.values()))
