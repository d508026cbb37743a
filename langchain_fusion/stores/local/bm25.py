"""The in-process BM25 side, weighted at query time: one query's terms over the live statistics.

The rows' term postings (:mod:`~langchain_fusion.stores.local.postings`) depend on no corpus
statistic. A query weighs only its own terms with the current statistics of the live rows
(document frequency, row count, average length), so the scores always equal those of a fresh
build over the same rows. :class:`QueryWeights` scores every row or a few rows looked up in the
postings (the top k found by pruning: :mod:`~langchain_fusion.stores.local.pruning`); weights of
common terms are shared between queries through
:class:`~langchain_fusion.stores.local.term_weights.TermWeights`.

Scale: the formulas are bm25s's (Kamphuis et al., ECIR 2020). The default ``lucene`` variant is
``idf * tf / (tf + k1 * (1 - b + b * len / avg_len))`` with ``idf = log(1 + (N - df + 0.5) /
(df + 0.5))``: Okapi BM25 without the constant ``(k1 + 1)`` factor, which changes no ranking.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local.postings import IntArray, Postings, matching_postings, postings_of_texts
from langchain_fusion.stores.local.term_weights import BlockWeights, TermWeights
from langchain_fusion.stores.local.tokens import query_term_counts
from langchain_fusion.stores.settings import BM25Method, BM25Params

DENSE_TERM_SHARE = 3
"""A term's weights are kept over every row of a block once 1/this of its rows hold it (:class:`BlockWeights`)."""


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


class QueryWeights:
    """BM25 weighting of one query's terms under one set of live-row statistics."""

    def __init__(
        self,
        params: BM25Params,
        term_counts: Counter[int],
        document_frequency: IntArray,
        live_rows: int,
        relative_length: NDArray[np.float32],
        average: float = 1.0,
    ) -> None:
        """Weights for the query terms ``term_counts`` (term id -> repeats in the query).

        ``relative_length`` is each row's length divided by the live ``average``.
        """
        self.params = params
        self.relative_length = relative_length
        self.average = average
        """The live average length the relative lengths are over (block-max bounds scale with it)."""
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
            return BlockWeights(*self.term_weights(postings, first_row, term, term_idf))
        kept = shared.get(term, number)
        if kept is not None:
            return kept
        rows, weights = self.term_weights(postings, first_row, term, term_idf)
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

    def term_weights(
        self, postings: Postings, first_row: int, term: int, term_idf: float
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """Rows of one block holding ``term`` and the term's BM25 weight in each (repeats not applied)."""
        if term >= postings.vocabulary_size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
        rows = postings.rows[lo:hi].astype(np.int64) + first_row
        return rows, self.weigh(postings.tf[lo:hi], rows, term_idf)

    def weigh(self, tf: NDArray[np.integer], rows: NDArray[np.int64], term_idf: float) -> NDArray[np.float32]:
        """A term's BM25 weight in ``rows``, where it occurs ``tf`` times (the same float32 steps for any subset)."""
        weight = tf_component(self.params, tf.astype(np.float32), self.relative_length[rows])
        weight *= np.float32(term_idf)
        if self.absent is not None:
            weight -= np.float32(term_idf * self.absent)
        return weight

    def postings_count(self, blocks: Sequence[tuple[Postings, int]]) -> int:
        """Postings of the query's terms in ``blocks``: what weighing every row costs."""
        return sum(postings.term_count(term) for term, _, _ in self.terms for postings, _ in blocks)

    def row_scores(self, rows: IntArray, blocks: Sequence[tuple[Postings, int]]) -> NDArray[np.float32]:
        """The scores of ``rows`` (ascending, distinct): bit for bit what :meth:`scores` gives them.

        Each row receives its terms' weights in the same order and float32 arithmetic as in
        :meth:`add_scores`; only the rows asked for are looked up in the postings.
        """
        found: list[list[tuple[IntArray, NDArray[np.float32]]]] = [[] for _ in self.terms]
        if rows.size:
            for number, (term, _, term_idf) in enumerate(self.terms):
                found[number].extend(self.weights_at(rows, blocks, term, term_idf))
        return self.summed(rows.size, found)

    def summed(self, size: int, found: Sequence[Sequence[tuple[IntArray, NDArray[np.float32]]]]) -> NDArray[np.float32]:
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

    def weights_at(
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
                positions, matched = matching_postings(postings, term, (rows[lo:hi] - first_row).astype(np.int32))
                if positions.size:
                    yield lo + matched, self.weigh(postings.tf[positions], rows[lo:hi][matched], term_idf)


class BM25Corpus:
    """BM25 over a fixed list of texts, rows in list order (for fusing an external vector store)."""

    def __init__(self, texts: Sequence[str], analyzer: Analyzer, params: BM25Params) -> None:
        """Tokenize and index ``texts``."""
        self.analyzer, self.params = analyzer, params
        self.vocabulary: dict[str, int] = {}
        self.postings, lengths = postings_of_texts(analyzer, texts, self.vocabulary)
        self.size = len(texts)
        self._frequency = self.postings.document_frequencies(len(self.vocabulary))
        self._average = float(lengths.mean()) if lengths.size and lengths.sum() else 1.0
        self._relative = lengths.astype(np.float32) / np.float32(self._average)

    def scores(self, query: str) -> NDArray[np.float32]:
        """BM25 score of every text for ``query``."""
        terms = query_term_counts(self.analyzer, self.vocabulary, query)
        weights = QueryWeights(self.params, terms, self._frequency, self.size, self._relative, self._average)
        return weights.scores(self.size, [(self.postings, 0)])
