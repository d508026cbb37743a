"""BM25 term postings of a block of rows: built from texts, merged, and looked up row by row.

Each :class:`Postings` block stores, term by term, the rows that contain the term and how often
(a CSC matrix of raw term frequencies over the block's rows). Nothing in it depends on corpus
statistics, so adding rows appends a block and deleting rows marks tombstones: neither touches
the existing postings (see :mod:`~langchain_fusion.stores.local.bm25` for the weighting at query
time). A common term also gets a presence bitmap (:class:`TermPresence`) for looking many rows up
at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local.tokens import text_token_ids

_BLOCK = 1 << 18
"""Postings processed per step when merging segments, bounding the temporary arrays."""

PRESENCE_MIN_SHARE = 16
"""A term gets a :class:`TermPresence` where it holds at least 1/this of the rows its postings span."""

PRESENCE_MIN_LOOKUPS = 32
"""Rows looked up at once from which a term's presence bitmap, once built, beats a binary search in its postings."""

PRESENCE_BUILD_MIN_LOOKUPS = 512
"""Rows looked up at once from which a common term's bitmap is built if it has none yet (a one-off cost of
about a binary search of 20,000 rows for a term in every row of a million)."""

TOKENIZE_BATCH = 4096
"""Texts tokenized and counted at a time when building postings: only one batch's token ids exist at once."""

IntArray = NDArray[np.int64]
"""Rows, term ids and postings offsets (64-bit integers)."""


@dataclass(frozen=True, eq=False)
class TermPresence:
    """Which local rows hold one term and where each one's posting is, for looking many rows up at once.

    Bit ``r % 64`` of word ``r // 64`` says whether row ``r`` holds the term; the postings before
    a word plus the set bits below ``r`` in it give its posting's offset among the term's. A
    lookup is a few array reads per row, where a binary search in a long postings list costs
    about twenty scattered reads. Built only for a term holding at least 1/:data:`PRESENCE_MIN_SHARE`
    of the rows its postings span, it takes at most 3 bytes per posting and one spare word (a
    posting: 6 bytes); building it briefly takes a byte per row spanned.
    """

    bits: NDArray[np.uint64]
    """The presence bits, with one empty word past the last row (rows beyond it land there)."""
    before: NDArray[np.int32]
    """The term's postings in the words before each word."""

    @classmethod
    def of(cls, rows: NDArray[np.int32]) -> TermPresence:
        """The presence of a term held by local ``rows`` (ascending, at least one)."""
        words = int(rows[-1]) // 64 + 2
        held = np.zeros(words * 64, dtype=bool)
        held[rows] = True
        bits = np.packbits(held, bitorder="little").view("<u8")
        before = np.zeros(words, dtype=np.int32)
        np.cumsum(np.bitwise_count(bits[:-1]), out=before[1:])
        return cls(bits=bits, before=before)

    def find(self, local: NDArray[np.int32]) -> tuple[IntArray, IntArray]:
        """For local rows ``local``: the offsets of their postings among the term's, and which of ``local`` hold it."""
        word_of = np.minimum(local >> 6, self.bits.size - 1)
        words = self.bits[word_of]
        bit = (local & 63).astype(np.uint64)
        held = np.flatnonzero((words >> bit) & np.uint64(1))
        below = words[held] & ((np.uint64(1) << bit[held]) - np.uint64(1))
        return self.before[word_of[held]].astype(np.int64) + np.bitwise_count(below), held


@dataclass(frozen=True, eq=False)
class Postings:
    """Term postings of a contiguous block of rows, immutable once built.

    Term ``t`` occurs in local rows ``rows[indptr[t]:indptr[t + 1]]`` (ascending) with
    frequencies ``tf[...]``. Terms at or beyond ``vocabulary_size`` do not occur in the block.
    """

    indptr: IntArray
    """Start of each term's postings (length ``vocabulary_size + 1``)."""
    rows: NDArray[np.int32]
    """Local row (0 = the block's first row) of each posting."""
    tf: NDArray[np.uint16] | NDArray[np.int32]
    """Term frequency of each posting (uint16 unless a frequency needs more)."""
    _extremes: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)
    """Term -> (largest frequency, local row of the shortest row holding it), computed on first use."""
    _presence: dict[int, TermPresence] = field(default_factory=dict, repr=False)
    """Term -> its presence bitmap, built on first use (common terms only)."""

    @property
    def vocabulary_size(self) -> int:
        """Number of term ids this block knows (later terms have no postings here)."""
        return int(self.indptr.size - 1)

    @property
    def size(self) -> int:
        """Number of postings."""
        return int(self.rows.size)

    def document_frequencies(self, vocabulary_size: int) -> IntArray:
        """Rows of this block containing each term, padded to ``vocabulary_size``."""
        counts = np.zeros(vocabulary_size, dtype=np.int64)
        counts[: self.vocabulary_size] = np.diff(self.indptr)
        return counts

    def term_extremes(self, term: int, lengths: NDArray[np.floating]) -> tuple[int, int] | None:
        """The largest frequency of ``term`` here and the local row of the shortest row holding it; None if absent.

        ``lengths`` (or any positive multiple of them, such as relative lengths) are those of the
        block's rows. Neither value depends on corpus statistics, so they are kept for the life
        of the block: with them a term's largest BM25 weight is bounded in constant time.
        """
        found = self._extremes.get(term)
        if found is None:
            if term >= self.vocabulary_size or self.indptr[term] == self.indptr[term + 1]:
                return None
            lo, hi = int(self.indptr[term]), int(self.indptr[term + 1])
            rows = self.rows[lo:hi]
            found = self._extremes[term] = (int(self.tf[lo:hi].max()), int(rows[int(np.argmin(lengths[rows]))]))
        return found

    def term_presence(self, term: int, build: bool = True) -> TermPresence | None:
        """``term``'s :class:`TermPresence`, built on first use if ``build``; None if too sparse (or not built)."""
        found = self._presence.get(term)
        if found is None and build and term < self.vocabulary_size:
            lo, hi = int(self.indptr[term]), int(self.indptr[term + 1])
            if hi > lo and (hi - lo) * PRESENCE_MIN_SHARE > int(self.rows[hi - 1]):
                found = self._presence[term] = TermPresence.of(self.rows[lo:hi])
        return found

    def terms_of_rows(self, local_rows: NDArray[np.bool_]) -> IntArray:
        """Term ids of the postings of the rows flagged in ``local_rows`` (one per row and term)."""
        positions = np.flatnonzero(local_rows[self.rows])
        return np.searchsorted(self.indptr, positions, side="right").astype(np.int64) - 1


def _narrow_tf(tf: NDArray[np.integer]) -> NDArray[np.uint16] | NDArray[np.int32]:
    if tf.size == 0 or int(tf.max()) <= np.iinfo(np.uint16).max:
        return tf.astype(np.uint16)
    return tf.astype(np.int32)


def build_postings(token_ids: Sequence[IntArray], vocabulary_size: int) -> Postings:
    """Postings of a block of rows given each row's token ids (repeats counted)."""
    lengths = np.fromiter((ids.size for ids in token_ids), dtype=np.int64, count=len(token_ids))
    ids = np.concatenate(token_ids) if token_ids else np.zeros(0, dtype=np.int64)
    return postings_of_ids(ids, lengths, vocabulary_size)


def postings_of_ids(ids: IntArray, lengths: NDArray[np.integer[Any]], vocabulary_size: int) -> Postings:
    """Postings of a block of rows given their token ids end to end and each row's length in tokens."""
    row_count = len(lengths)
    rows = np.repeat(np.arange(row_count, dtype=np.int64), lengths)
    # Sort (term, row) pairs, then run-length encode them: one posting per distinct pair.
    keys = ids.astype(np.int64) * max(row_count, 1) + rows
    del ids, rows
    keys.sort()
    if keys.size:
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        tf = np.diff(np.append(starts, keys.size))
        pairs = keys[starts]
    else:
        tf, pairs = np.zeros(0, np.int64), np.zeros(0, np.int64)
    del keys
    terms = pairs // max(row_count, 1)
    indptr = np.zeros(vocabulary_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(terms, minlength=vocabulary_size), out=indptr[1:])
    local = (pairs % max(row_count, 1)).astype(np.int32)
    return Postings(indptr=indptr, rows=local, tf=_narrow_tf(tf))


def postings_of_texts(
    analyzer: Analyzer, texts: Sequence[str], vocabulary: dict[str, int]
) -> tuple[Postings, NDArray[np.int32]]:
    """Postings of ``texts`` (rows in order; new tokens added to ``vocabulary``) and each text's length.

    Built a batch of :data:`TOKENIZE_BATCH` texts at a time and merged, so the peak memory is
    the postings plus one batch's token ids, not every token id of the corpus.
    """
    blocks, lengths = [], []
    for lo in range(0, len(texts), TOKENIZE_BATCH):
        token_ids, block_lengths = text_token_ids(analyzer, texts[lo : lo + TOKENIZE_BATCH], vocabulary)
        blocks.append((postings_of_ids(token_ids, block_lengths, len(vocabulary)), lo))
        lengths.append(block_lengths)
        del token_ids
    if not blocks:
        return build_postings([], len(vocabulary)), np.zeros(0, dtype=np.int32)
    postings = blocks[0][0] if len(blocks) == 1 else merge_postings(blocks, len(vocabulary))
    return postings, np.concatenate(lengths)


def merge_postings(
    blocks: Sequence[tuple[Postings, int]],
    vocabulary_size: int,
    keep: NDArray[np.bool_] | None = None,
    new_row: NDArray[np.int64] | None = None,
) -> Postings:
    """One block from ``(postings, first_row)`` blocks that are contiguous and in row order.

    Rows are renumbered relative to the first block's first row, or through ``new_row``
    (old row -> new local row) when ``keep`` (over old rows) drops tombstoned rows. Works in
    bounded steps so the temporary arrays stay small next to the result.
    """
    base = blocks[0][1] if blocks else 0
    counts = np.zeros(vocabulary_size, dtype=np.int64)
    for postings, start in blocks:
        if keep is None:
            block_counts = postings.document_frequencies(vocabulary_size)
        else:
            block_counts = np.zeros(vocabulary_size, dtype=np.int64)
            for lo in range(0, postings.size, _BLOCK):
                hi = min(lo + _BLOCK, postings.size)
                mask = keep[postings.rows[lo:hi].astype(np.int64) + start]
                terms = np.searchsorted(postings.indptr, np.arange(lo, hi)[mask], side="right") - 1
                block_counts += np.bincount(terms, minlength=vocabulary_size)
        counts += block_counts
    indptr = np.zeros(vocabulary_size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    total = int(indptr[-1])
    rows = np.empty(total, dtype=np.int32)
    wide = any(p.tf.dtype == np.int32 for p, _ in blocks)
    tf: NDArray[np.uint16] | NDArray[np.int32] = (
        np.empty(total, dtype=np.int32) if wide else np.empty(total, dtype=np.uint16)
    )
    cursor = indptr[:-1].copy()  # next free slot of each term in the output
    for postings, start in blocks:
        for lo in range(0, postings.size, _BLOCK):
            hi = min(lo + _BLOCK, postings.size)
            positions = np.arange(lo, hi)
            local = postings.rows[lo:hi].astype(np.int64)
            if keep is not None:
                mask = keep[local + start]
                positions, local = positions[mask], local[mask]
            terms = np.searchsorted(postings.indptr, positions, side="right") - 1
            # Postings of one term are consecutive within a step: its offset among them.
            first = np.searchsorted(terms, terms, side="left")
            dest = cursor[terms] + (np.arange(terms.size) - first)
            rows[dest] = (new_row[local + start] if new_row is not None else local + start - base).astype(np.int32)
            tf[dest] = postings.tf[positions]
            cursor += np.bincount(terms, minlength=vocabulary_size)
    return Postings(indptr=indptr, rows=rows, tf=tf)


def matching_postings(postings: Postings, term: int, local: NDArray[np.int32]) -> tuple[IntArray, IntArray]:
    """Positions of ``term``'s postings for the rows ``local`` (ascending) holds, and where in ``local`` each row is.

    Binary search from the shorter side: a rare term's postings into the rows, or the rows
    into a common term's postings; rows are looked up in a common term's bitmap
    (:class:`TermPresence`) instead once it has one (built by a lookup of many rows).
    """
    if term >= postings.vocabulary_size or local.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
    rows = postings.rows[lo:hi]
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if rows.size <= local.size:
        at = np.minimum(np.searchsorted(local, rows), local.size - 1)
        hit = local[at] == rows
        return lo + np.flatnonzero(hit), at[hit].astype(np.int64)
    presence = (
        postings.term_presence(term, build=local.size >= PRESENCE_BUILD_MIN_LOOKUPS)
        if local.size >= PRESENCE_MIN_LOOKUPS
        else None
    )
    if presence is not None:
        offsets, held = presence.find(local)
        return lo + offsets, held
    at = np.minimum(np.searchsorted(rows, local), rows.size - 1)
    hit = rows[at] == local
    return lo + at[hit].astype(np.int64), np.flatnonzero(hit)
