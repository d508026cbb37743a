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
from langchain_fusion.stores.local.bitmaps import KeptPresence, TermPresence, held_in, presence_bits
from langchain_fusion.stores.local.block_max import BlockMaxima
from langchain_fusion.stores.local.tokens import text_token_ids

_BLOCK = 1 << 18
"""Postings processed per step when merging segments, bounding the temporary arrays."""

PRESENCE_MIN_SHARE = 64
"""A term gets a :class:`TermPresence` where it holds at least 1/this of the rows its postings span."""

PRESENCE_MIN_LOOKUPS = 32
"""Rows looked up at once from which a term's presence bitmap, once built, beats a binary search in its postings."""

PRESENCE_BUILD_MIN_LOOKUPS = 512
"""Rows looked up at once from which a common term's bitmap is built if it has none yet (a one-off cost of
about a binary search of 20,000 rows for a term in every row of a million)."""

HOLDING_BITS_SHARE = 32
"""Which rows hold a term with no kept bitmap is found by setting its bits once there are over 1/this as many rows
as postings (fewer: each row is searched among its postings)."""

TOKENIZE_BATCH = 4096
"""Texts tokenized and counted at a time when building postings: only one batch's token ids exist at once."""

IntArray = NDArray[np.int64]
"""Rows, term ids and postings offsets (64-bit integers)."""

Frequencies = NDArray[np.uint8] | NDArray[np.uint16] | NDArray[np.int32]
"""Term frequencies of postings, in the narrowest of these types that holds them."""


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
    tf: Frequencies
    """Term frequency of each posting (uint8 unless a frequency needs more; a saved folder holds uint16 or int32)."""
    block_maxima: BlockMaxima = field(default_factory=BlockMaxima, repr=False, compare=False)
    """Block-max bounds of the common terms' weights, derived on first use (see :mod:`block_max`)."""
    presence: KeptPresence = field(default_factory=KeptPresence, repr=False, compare=False)
    """The common terms' presence bitmaps, built on first use (see :mod:`bitmaps`)."""

    def __getstate__(self) -> dict[str, Any]:
        """The postings for ``pickle`` and ``copy.deepcopy``, without the bitmaps and bounds derived from them."""
        return {name: value for name, value in self.__dict__.items() if name not in ("block_maxima", "presence")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, block_maxima=BlockMaxima(), presence=KeptPresence())

    @property
    def vocabulary_size(self) -> int:
        """Number of term ids this block knows (later terms have no postings here)."""
        return int(self.indptr.size - 1)

    @property
    def size(self) -> int:
        """Number of postings."""
        return int(self.rows.size)

    def term_count(self, term: int) -> int:
        """Postings of ``term`` here (0 for a term this block does not know)."""
        return int(self.indptr[term + 1] - self.indptr[term]) if term < self.vocabulary_size else 0

    def document_frequencies(self, vocabulary_size: int) -> IntArray:
        """Rows of this block containing each term, padded to ``vocabulary_size``."""
        counts = np.zeros(vocabulary_size, dtype=np.int64)
        counts[: self.vocabulary_size] = np.diff(self.indptr)
        return counts

    def term_presence(self, term: int, build: bool = True) -> TermPresence | None:
        """``term``'s :class:`TermPresence`, built on first use if ``build``; None if too sparse (or not built).

        Built for a term holding at least 1/:data:`PRESENCE_MIN_SHARE` of the rows its postings
        span, while the block's budget has room to keep it (:class:`KeptPresence`): a bitmap built
        for one use costs a read of every posting of the term.
        """
        found = self.presence.get(term)
        if found is None and build and term < self.vocabulary_size:
            lo, hi = int(self.indptr[term]), int(self.indptr[term + 1])
            span = int(self.rows[hi - 1]) if hi > lo else 0
            if hi > lo and (hi - lo) * PRESENCE_MIN_SHARE > span and self.presence.has_room((span // 64 + 2) * 8):
                found = self.presence.keep(term, TermPresence.of(self.rows[lo:hi]))
        return found

    def terms_of_rows(self, local_rows: NDArray[np.bool_]) -> IntArray:
        """Term ids of the postings of the rows flagged in ``local_rows`` (one per row and term)."""
        positions = np.flatnonzero(local_rows[self.rows])
        return np.searchsorted(self.indptr, positions, side="right").astype(np.int64) - 1


def _narrow_tf(tf: NDArray[np.integer]) -> Frequencies:
    largest = int(tf.max()) if tf.size else 0
    if largest <= np.iinfo(np.uint8).max:
        return tf.astype(np.uint8)
    return tf.astype(np.uint16) if largest <= np.iinfo(np.uint16).max else tf.astype(np.int32)


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
    tf: Frequencies = np.empty(total, dtype=np.result_type(*(p.tf.dtype for p, _ in blocks), np.uint8))
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


def holding(postings: Postings, term: int, local: NDArray[np.int32]) -> NDArray[np.bool_]:
    """Which of the local rows ``local`` (ascending) hold ``term``, without finding the postings.

    A term's kept bitmap answers with a few array reads per row. Otherwise the shorter side is
    searched in the longer (a term with few postings among the rows, or a few rows among a
    common term's postings); in between, the term's bits are set first, which reads its postings
    once but costs less than :data:`HOLDING_BITS_SHARE` binary searches per row.
    """
    held = np.zeros(local.size, dtype=bool)
    if term >= postings.vocabulary_size or local.size == 0:
        return held
    lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
    if hi == lo:
        return held
    rows = postings.rows[lo:hi]
    presence = postings.term_presence(term, build=local.size >= PRESENCE_BUILD_MIN_LOOKUPS)
    if presence is not None:
        return held_in(presence.bits, local)
    if hi - lo <= local.size:
        at = np.minimum(np.searchsorted(local, rows), local.size - 1)
        held[at[local[at] == rows]] = True
        return held
    if local.size * HOLDING_BITS_SHARE < hi - lo:
        at = np.minimum(np.searchsorted(rows, local), rows.size - 1)
        found: NDArray[np.bool_] = rows[at] == local
        return found
    return held_in(presence_bits(rows), local)


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
