"""The in-process BM25 side: term postings in immutable segments, weighted at query time.

Each :class:`Postings` segment stores, term by term, the rows that contain the term and how
often (a CSC matrix of raw term frequencies over the segment's rows). Nothing in it depends
on corpus statistics, so adding rows appends a segment and deleting rows marks tombstones:
neither touches the existing postings. A query weighs only its own terms with the current
statistics of the live rows (document frequency, row count, average length), so the scores
always equal those of a fresh build over the same rows.

Scale: the formulas are bm25s's (Kamphuis et al., ECIR 2020). The default ``lucene`` variant is
``idf * tf / (tf + k1 * (1 - b + b * len / avg_len))`` with ``idf = log(1 + (N - df + 0.5) /
(df + 0.5))``: Okapi BM25 without the constant ``(k1 + 1)`` factor, which changes no ranking.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local.tokens import query_term_counts, text_token_ids
from langchain_fusion.stores.ranking import top_rows
from langchain_fusion.stores.settings import BM25Method, BM25Params

_BLOCK = 1 << 18
"""Postings processed per step when merging segments, bounding the temporary arrays."""

SEED_MAX_SHARE = 0.125
"""A pruned top-k gives up (scores every row) when its rarest terms' postings exceed this share of the rows."""

ESSENTIAL_MAX_SHARE = 0.5
"""...or when the postings of the terms that must be read in full exceed this share."""

SEED_ROWS_PER_RESULT = 2
"""Rows scored exactly per result wanted to set the first threshold (those the rarest terms weigh most)."""

DENSE_PARTIAL_SHARE = 16
"""Candidates are accumulated over an array of every row once there are more than 1/this many postings per row."""

PRESENCE_MIN_SHARE = 16
"""A term gets a :class:`TermPresence` where it holds at least 1/this of the rows its postings span."""

PRESENCE_MIN_LOOKUPS = 32
"""Rows looked up at once from which a term's presence bitmap, once built, beats a binary search in its postings."""

PRESENCE_BUILD_MIN_LOOKUPS = 512
"""Rows looked up at once from which a common term's bitmap is built if it has none yet (a one-off cost of
about a binary search of 20,000 rows for a term in every row of a million)."""

_ROUNDING = 1e-5
"""Relative room left for float32 rounding when a sum of upper bounds is compared with a score."""

TOKENIZE_BATCH = 4096
"""Texts tokenized and counted at a time when building postings: only one batch's token ids exist at once."""

IntArray = NDArray[np.int64]

DENSE_TERM_SHARE = 3
"""A term's weights are kept over every row of a block once 1/this of its rows hold it (:class:`BlockWeights`)."""


@dataclass(frozen=True)
class BlockWeights:
    """One term's BM25 weight in the rows of one block (repeats not applied), as a :class:`TermWeights` keeps it.

    Sparse, the rows holding the term and its weight in each; dense, its weight in every row of
    the block, 0 where the term is absent. A row without the term gains ``+0.0``, which leaves
    its float32 score the same bits, so both forms add exactly what scattering the postings adds.
    Dense from :data:`DENSE_TERM_SHARE` on: no more memory than the sparse form (4 bytes a row
    against 12 a posting), and added as one contiguous vector instead of a scatter.
    """

    rows: IntArray | None
    """The rows holding the term, or None when ``weights`` covers every row of the block."""
    weights: NDArray[np.float32]
    """The term's weight in each of ``rows`` (or in each row of the block)."""

    def add_to(self, out: NDArray[np.float32], first_row: int, repeats: int) -> None:
        """Add the term's weight, ``repeats`` times, to ``out`` (whose row ``first_row`` is the block's first)."""
        weight = self.weights if repeats == 1 else self.weights * np.float32(repeats)
        if self.rows is None:
            out[first_row : first_row + weight.size] += weight
        elif self.rows.size:
            out[self.rows] += weight

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return self.weights.nbytes + (0 if self.rows is None else self.rows.nbytes)


SHARED_WEIGHTS_BUDGET = 64 << 20
"""Bytes of term weights a batch keeps for its other queries (as much as one side's score arrays, 2^24 float32)."""

COMMON_WEIGHTS_BUDGET = 32 << 20
"""Bytes of common terms' weights an index snapshot keeps for every query it serves (8 terms over 1M rows)."""


class TermWeights:
    """Term weights kept for other queries: (term, block number) -> :class:`BlockWeights`.

    Weighing a term depends on the statistics only, not on the query, so queries under the same
    statistics can share it. A batch weighs each distinct term once and keeps it, up to
    ``budget`` bytes; terms weighed once the budget is spent are not kept (the queries that
    need them weigh them again). An index snapshot keeps only common terms (``common_only``: the
    dense form, see :class:`BlockWeights`), which recur in many queries and cost the most to
    weigh; a batch's store has the snapshot's as ``parent``, which it reads too and fills first
    with common terms. Threads may share a store: two may weigh the same term at once, and one
    copy is kept; a thread that finds another keeping weights at that moment does not keep its own
    (nor wait).
    """

    def __init__(
        self, budget: int = SHARED_WEIGHTS_BUDGET, *, common_only: bool = False, parent: TermWeights | None = None
    ) -> None:
        """An empty store of at most ``budget`` bytes."""
        self._parts: dict[tuple[int, int], BlockWeights] = {}
        self._left = budget
        self._lock = threading.Lock()
        self.common_only = common_only
        """Keep dense weights only (the common terms')."""
        self.parent = parent
        """A longer-lived store also read, and given common terms first, if any."""

    def get(self, term: int, block: int) -> BlockWeights | None:
        """The weights kept for ``term`` in block number ``block``, here or else in the parent, if any."""
        found = self._parts.get((term, block))
        if found is None and self.parent is not None:
            return self.parent.get(term, block)
        return found

    def has_room(self, nbytes: int) -> bool:
        """Whether weights of ``nbytes`` would be kept here or in the parent (budget left, no other thread keeping)."""
        here = nbytes <= self._left and not self._lock.locked()
        return here or (self.parent is not None and self.parent.has_room(nbytes))

    def keep(self, term: int, block: int, weights: BlockWeights) -> None:
        """Keep ``weights`` for other queries if a budget allows (and no other thread kept them)."""
        if weights.rows is None and self.parent is not None and self.parent.has_room(weights.nbytes):
            self.parent.keep(term, block, weights)
            return
        if self.common_only and weights.rows is not None:
            return
        # Never wait: a thread keeping weights at the same moment wins, and a child forked while another
        # thread held the lock keeps nothing more instead of blocking for ever.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if weights.nbytes <= self._left and (term, block) not in self._parts:
                self._parts[term, block] = weights
                self._left -= weights.nbytes
        finally:
            self._lock.release()

    def parts(self) -> list[tuple[tuple[int, int], BlockWeights]]:
        """Every ``((term, block number), weights)`` kept here (not in the parent)."""
        return list(self._parts.items())


def idf(method: BM25Method, df: int, n: int) -> float:
    """Inverse document frequency of a term found in ``df`` of ``n`` rows (``df`` >= 1)."""
    if method == "robertson":
        return math.log(max((n - df + 0.5) / (df + 0.5), 1.0))
    if method == "lucene":
        return math.log(1 + (n - df + 0.5) / (df + 0.5))
    if method == "atire":
        return math.log(n / df)
    if method == "bm25l":
        return math.log((n + 1) / (df + 0.5))
    return math.log((n + 1) / df)  # bm25+


def tf_component(
    params: BM25Params, tf: NDArray[np.float32], relative_length: NDArray[np.float32]
) -> NDArray[np.float32]:
    """The term-frequency part of BM25 for frequencies ``tf`` in rows of ``length / avg_length``."""
    k1, b, delta = np.float32(params.k1), np.float32(params.b), np.float32(params.delta)
    norm = np.float32(1) - b + b * relative_length
    method = params.method
    if method in ("lucene", "robertson"):
        result = tf / (k1 * norm + tf)
    elif method == "atire":
        result = (tf * (k1 + 1)) / (tf + k1 * norm)
    elif method == "bm25l":
        c = tf / norm
        result = ((k1 + 1) * (c + delta)) / (k1 + c + delta)
    else:  # bm25+
        result = ((k1 + 1) * tf) / (k1 * norm + tf) + delta
    return np.asarray(result, dtype=np.float32)


def has_nonoccurrence(params: BM25Params) -> bool:
    """True for the variants (bm25l, bm25+) that credit a row for a query term it lacks."""
    return params.method in ("bm25l", "bm25+")


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
    rows = np.repeat(np.arange(len(token_ids), dtype=np.int64), lengths)
    # Sort (term, row) pairs, then run-length encode them: one posting per distinct pair.
    keys = ids.astype(np.int64) * max(len(token_ids), 1) + rows
    del ids, rows
    keys.sort()
    if keys.size:
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        tf = np.diff(np.append(starts, keys.size))
        pairs = keys[starts]
    else:
        tf, pairs = np.zeros(0, np.int64), np.zeros(0, np.int64)
    del keys
    terms = pairs // max(len(token_ids), 1)
    indptr = np.zeros(vocabulary_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(terms, minlength=vocabulary_size), out=indptr[1:])
    local = (pairs % max(len(token_ids), 1)).astype(np.int32)
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
        blocks.append((build_postings(token_ids, len(vocabulary)), lo))
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


class QueryWeights:
    """BM25 weighting of one query's terms under one set of live-row statistics."""

    def __init__(
        self,
        params: BM25Params,
        term_counts: Counter[int],
        document_frequency: IntArray,
        live_rows: int,
        relative_length: NDArray[np.float32],
    ) -> None:
        """Weights for the query terms ``term_counts`` (term id -> repeats in the query).

        ``relative_length`` is each row's length divided by the live average.
        """
        self.params = params
        self.relative_length = relative_length
        # bm25l and bm25+ credit every row for a query term it lacks: idf * tf_component(tf=0).
        self.absent = (
            float(tf_component(params, np.zeros(1, np.float32), np.ones(1, np.float32))[0])
            if has_nonoccurrence(params)
            else None
        )
        self.terms: list[tuple[int, int, float]] = []  # (term, repeats, idf)
        nonoccurrence = 0.0
        for term, repeats in term_counts.items():
            df = int(document_frequency[term]) if term < document_frequency.size else 0
            if df == 0:
                continue
            term_idf = idf(params.method, df, live_rows)
            self.terms.append((term, repeats, term_idf))
            if self.absent is not None:
                nonoccurrence += repeats * term_idf * self.absent
        self.nonoccurrence = np.float32(nonoccurrence)
        """What every row gets for the query terms it lacks (bm25l and bm25+ only)."""

    def scores(self, size: int, blocks: Sequence[tuple[Postings, int]]) -> NDArray[np.float32]:
        """The score of each of ``size`` rows, from ``(postings, first_row)`` blocks covering them."""
        out = np.zeros(size, dtype=np.float32)
        self.add_scores(out, blocks, None)
        return out

    def add_scores(
        self,
        out: NDArray[np.float32],
        blocks: Sequence[tuple[Postings, int]],
        shared: TermWeights | None,
    ) -> None:
        """Add this query's scores to ``out`` (zeros on entry; its length: the rows the blocks cover).

        ``shared`` holds the term weights other queries under the same statistics computed (a
        batch's, an index snapshot's common terms) and keeps this query's where it has room (see
        :class:`TermWeights`). None: each term's postings are added as they are weighed.
        """
        if not self.terms:
            return
        for number, (postings, first_row) in enumerate(blocks):
            block_rows = (blocks[number + 1][1] if number + 1 < len(blocks) else out.size) - first_row
            for term, repeats, term_idf in self.terms:
                block = (postings, first_row, block_rows, number)
                self._block_weights(block, term, term_idf, shared).add_to(out, first_row, repeats)
        if self.nonoccurrence:
            out += self.nonoccurrence

    def _block_weights(
        self, block: tuple[Postings, int, int, int], term: int, term_idf: float, shared: TermWeights | None
    ) -> BlockWeights:
        """``term``'s weights in ``block`` (postings, first row, rows, number): as ``shared`` kept them, or weighed.

        Weighed with a store, they are dense where the term is common (:class:`BlockWeights`) and
        kept, if the store has room for them.
        """
        postings, first_row, block_rows, number = block
        if shared is None:
            return BlockWeights(*self._term_weights(postings, first_row, term, term_idf))
        kept = shared.get(term, number)
        if kept is not None:
            return kept
        rows, weights = self._term_weights(postings, first_row, term, term_idf)
        if rows.size * DENSE_TERM_SHARE < block_rows:
            found = BlockWeights(rows, weights)
        elif not shared.has_room(block_rows * 4):
            return BlockWeights(rows, weights)  # it would not be kept: no dense array for one use
        else:
            every_row = np.zeros(block_rows, dtype=np.float32)
            every_row[rows - first_row] = weights
            every_row.flags.writeable = False  # read by every query of the store, from any thread
            found = BlockWeights(None, every_row)
        shared.keep(term, number, found)
        return found

    def _term_weights(
        self, postings: Postings, first_row: int, term: int, term_idf: float
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """Rows of one block holding ``term`` and the term's BM25 weight in each (repeats not applied)."""
        if term >= postings.vocabulary_size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
        rows = postings.rows[lo:hi].astype(np.int64) + first_row
        return rows, self._weigh(postings.tf[lo:hi], rows, term_idf)

    def _weigh(self, tf: NDArray[np.integer], rows: NDArray[np.int64], term_idf: float) -> NDArray[np.float32]:
        """A term's BM25 weight in ``rows``, where it occurs ``tf`` times (the same float32 steps for any subset)."""
        weight = tf_component(self.params, tf.astype(np.float32), self.relative_length[rows])
        weight *= np.float32(term_idf)
        if self.absent is not None:
            weight -= np.float32(term_idf * self.absent)
        return weight

    def term_bound(self, blocks: Sequence[tuple[Postings, int]], term: int, term_idf: float) -> float:
        """An upper bound of the weight ``term`` has in any row of ``blocks`` (repeats not applied; 0 if absent).

        The weight grows with the frequency and shrinks with the row's length, so the largest
        frequency in the shortest row holding the term bounds it, in the same float32 steps.
        """
        best = 0.0
        for postings, first_row in blocks:
            extremes = postings.term_extremes(term, self.relative_length[first_row:])
            if extremes is not None:
                most, shortest = extremes
                weight = self._weigh(np.array([most]), np.array([first_row + shortest]), term_idf)
                best = max(best, float(weight[0]))
        return best

    def postings_count(self, blocks: Sequence[tuple[Postings, int]]) -> int:
        """Postings of the query's terms in ``blocks``: what weighing every row costs."""
        return sum(_postings_count(blocks, term) for term, _, _ in self.terms)

    def row_scores(self, rows: IntArray, blocks: Sequence[tuple[Postings, int]]) -> NDArray[np.float32]:
        """The scores of ``rows`` (ascending, distinct): bit for bit what :meth:`scores` gives them.

        Each row receives its terms' weights in the same order and float32 arithmetic as in
        :meth:`add_scores`; only the rows asked for are looked up in the postings.
        """
        found: list[list[tuple[IntArray, NDArray[np.float32]]]] = [[] for _ in self.terms]
        if rows.size:
            for number, (term, _, term_idf) in enumerate(self.terms):
                found[number].extend(self._weights_at(rows, blocks, term, term_idf))
        return self._summed(rows.size, found)

    def _summed(
        self, size: int, found: Sequence[Sequence[tuple[IntArray, NDArray[np.float32]]]]
    ) -> NDArray[np.float32]:
        """The scores of ``size`` rows from where each query term was found in them and its weight there.

        ``found[i]``: ``(positions, weights)`` parts of term ``i`` of :attr:`terms`, each row at most
        once a term. Each row receives its terms' weights in the order and float32 arithmetic of
        :meth:`add_scores`, so the scores are the same bits as scoring every row.
        """
        out = np.zeros(size, dtype=np.float32)
        for (_, repeats, _), parts in zip(self.terms, found, strict=True):
            for at, weight in parts:
                out[at] += weight if repeats == 1 else weight * np.float32(repeats)
        if self.nonoccurrence:
            out += self.nonoccurrence
        return out

    def _weights_at(
        self, rows: IntArray, blocks: Sequence[tuple[Postings, int]], term: int, term_idf: float
    ) -> Iterator[tuple[IntArray, NDArray[np.float32]]]:
        """Per block: where in ``rows`` (ascending, distinct) the rows holding ``term`` are, and its weight in each."""
        for number, (postings, first_row) in enumerate(blocks):
            if len(blocks) == 1:  # one segment: every row is in it
                lo, hi = 0, rows.size
            else:
                lo = int(np.searchsorted(rows, first_row))
                hi = int(np.searchsorted(rows, blocks[number + 1][1])) if number + 1 < len(blocks) else rows.size
            if hi > lo:
                positions, matched = _matches(postings, term, (rows[lo:hi] - first_row).astype(np.int32))
                if positions.size:
                    yield lo + matched, self._weigh(postings.tf[positions], rows[lo:hi][matched], term_idf)

    def top(
        self,
        size: int,
        blocks: Sequence[tuple[Postings, int]],
        k: int,
        allowed: NDArray[np.bool_] | None,
    ) -> tuple[IntArray, NDArray[np.float32]] | None:
        """The ``k`` best ``allowed`` rows scoring above 0 and their scores, or None where pruning cannot help.

        Exactly the rows, order (ties by row) and scores of a top-k over :meth:`scores`, found
        without weighing every posting (MaxScore, Turtle and Flood 1995): rows found through the
        rarest terms give a k-th score ``theta``; the commonest terms whose upper bounds
        (:meth:`term_bound`) sum below ``theta`` cannot lift a row
        that lacks every other term into the top k, so only rows holding another term are
        candidates, and only candidates whose bound still reaches ``theta`` are scored exactly.
        None (the caller scores every row) for the variants that credit absent terms, or when
        the rare terms' postings are themselves a large share of the rows.
        """
        if k <= 0 or not self.terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if self.absent is not None:
            return None
        counts = np.array([_postings_count(blocks, term) for term, _, _ in self.terms], dtype=np.int64)
        bounds = np.array([repeats * self.term_bound(blocks, term, w) for term, repeats, w in self.terms])
        order = np.argsort(bounds, kind="stable")  # ascending: the commonest terms first
        theta = self._seed_threshold(size, blocks, k, allowed, order[::-1], max(int(size * SEED_MAX_SHARE), 4 * k))
        if theta is None:
            return None
        # Terms order[:j] are non-essential: together they stay below theta (with room for float32 rounding).
        prefix = np.concatenate(([0.0], np.cumsum(bounds[order])))
        j = min(int(np.count_nonzero(prefix * (1 + _ROUNDING) < theta)) - 1, len(self.terms) - 1)
        essential = order[j:]
        if int(counts[essential].sum()) > size * ESSENTIAL_MAX_SHARE:
            return None
        candidates, partial, parts = self._essential_partial(
            size, blocks, [self.terms[t] for t in essential.tolist()], per_term=True
        )
        # Each term's weights as found, by column (a candidate's place among the first ones): the exact
        # scores are their float32 sum, with no second lookup of the terms.
        found: list[list[tuple[IntArray, NDArray[np.float32]]]] = [[] for _ in self.terms]
        for number, columns, weight in parts:
            found[int(essential[number])].append((columns, weight))
        first_count = candidates.size
        column = np.arange(first_count)  # the column of each remaining candidate
        if allowed is not None:
            keep = allowed[candidates]
            candidates, partial, column = candidates[keep], partial[keep], column[keep]
        for position in range(j, -1, -1):  # the common terms, most weighty first: prune as bounds become weights
            keep = (partial + prefix[position]) * (1 + _ROUNDING) >= theta
            candidates, partial, column = candidates[keep], partial[keep], column[keep]
            if position == 0 or not candidates.size:
                break
            number = int(order[position - 1])
            term, repeats, term_idf = self.terms[number]
            for at, weight in self._weights_at(candidates, blocks, term, term_idf):
                partial[at] += weight.astype(np.float64) * repeats
                found[number].append((column[at], weight))
        scores = self._summed(first_count, found)[column]  # summed by column, then the remaining ones
        best = top_rows(scores, k, above=0.0)
        return candidates[best], scores[best]

    def _seed_threshold(
        self,
        size: int,
        blocks: Sequence[tuple[Postings, int]],
        k: int,
        allowed: NDArray[np.bool_] | None,
        descending: IntArray,
        budget: int,
    ) -> float | None:
        """A score at most the k-th best (None: the rarest terms hold over ``budget`` postings).

        The k-th best exact score among the rows that the rarest terms weigh most: any k rows'
        scores bound the k-th best from below, and these are likely near it. When fewer than
        ``k`` rows qualify, the least positive float32: every row with a positive score is then
        a candidate, which is still exact.
        """
        rows = np.zeros(0, dtype=np.int64)
        partial = np.zeros(0, dtype=np.float64)
        for count in range(1, descending.size + 1):
            terms = [self.terms[t] for t in descending[:count].tolist()]
            if sum(_postings_count(blocks, term) for term, _, _ in terms) > budget:
                return None
            rows, partial, _ = self._essential_partial(size, blocks, terms)
            if allowed is not None:
                keep = allowed[rows]
                rows, partial = rows[keep], partial[keep]
            if rows.size >= k:
                break
        rows = np.sort(rows[top_rows(partial, SEED_ROWS_PER_RESULT * k)])
        scores = self.row_scores(rows, blocks)
        positive = scores[scores > 0]
        if positive.size < k:
            return float(np.nextafter(np.float32(0), np.float32(1)))
        return float(np.partition(positive, positive.size - k)[positive.size - k])

    def _essential_partial(
        self,
        size: int,
        blocks: Sequence[tuple[Postings, int]],
        terms: Sequence[tuple[int, int, float]],
        per_term: bool = False,
    ) -> tuple[IntArray, NDArray[np.float64], list[tuple[int, IntArray, NDArray[np.float32]]]]:
        """The rows holding any of ``terms`` (ascending) and the sum of those terms' weights in each.

        With ``per_term``, also ``(i, positions, weights)`` for each block of each term ``terms[i]``:
        where among those rows the term is and its weight there (repeats not applied); else [].
        """
        parts = [
            (*self._term_weights(postings, first_row, term, term_idf), repeats, number)
            for postings, first_row in blocks
            for number, (term, repeats, term_idf) in enumerate(terms)
        ]
        rows = np.concatenate([part[0] for part in parts]) if parts else np.zeros(0, dtype=np.int64)
        if rows.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64), []
        weights = np.concatenate([part[1].astype(np.float64) * part[2] for part in parts])
        position = np.zeros(0, dtype=np.int64)  # with per_term: the candidate of each of ``rows``
        if rows.size * DENSE_PARTIAL_SHARE > size:  # many postings: accumulate over every row, no sort
            marked = np.zeros(size, dtype=bool)
            marked[rows] = True
            candidates = np.flatnonzero(marked).astype(np.int64)
            partial = np.bincount(rows, weights, minlength=size)[candidates].astype(np.float64)
            if per_term:
                of_row = np.empty(size, dtype=np.int64)  # only the candidates' entries are read
                of_row[candidates] = np.arange(candidates.size)
                position = of_row[rows]
        else:
            order = np.argsort(rows, kind="stable")
            ordered = rows[order]
            first = np.concatenate(([True], ordered[1:] != ordered[:-1]))
            candidates = ordered[first].astype(np.int64)
            partial = np.bincount(np.cumsum(first) - 1, weights[order]).astype(np.float64)
            if per_term:
                position = np.empty(rows.size, dtype=np.int64)
                position[order] = np.cumsum(first) - 1
        found = []
        if per_term:
            ends = np.cumsum([part[0].size for part in parts])
            for (_, weight, _, number), end in zip(parts, ends.tolist(), strict=True):
                if weight.size:
                    found.append((number, position[end - weight.size : end], weight))
        return candidates, partial, found


def _postings_count(blocks: Sequence[tuple[Postings, int]], term: int) -> int:
    """Postings of ``term`` over every block."""
    return sum(int(p.indptr[term + 1] - p.indptr[term]) for p, _ in blocks if term < p.vocabulary_size)


def _matches(postings: Postings, term: int, local: NDArray[np.int32]) -> tuple[IntArray, IntArray]:
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


class BM25Corpus:
    """BM25 over a fixed list of texts, rows in list order (for fusing an external vector store)."""

    def __init__(self, texts: Sequence[str], analyzer: Analyzer, params: BM25Params) -> None:
        """Tokenize and index ``texts``."""
        self.analyzer, self.params = analyzer, params
        self.vocabulary: dict[str, int] = {}
        self.postings, lengths = postings_of_texts(analyzer, texts, self.vocabulary)
        self.size = len(texts)
        self._frequency = self.postings.document_frequencies(len(self.vocabulary))
        average = float(lengths.mean()) if lengths.size and lengths.sum() else 1.0
        self._relative = lengths.astype(np.float32) / np.float32(average)

    def scores(self, query: str) -> NDArray[np.float32]:
        """BM25 score of every text for ``query``."""
        terms = query_term_counts(self.analyzer, self.vocabulary, query)
        weights = QueryWeights(self.params, terms, self._frequency, self.size, self._relative)
        return weights.scores(self.size, [(self.postings, 0)])
