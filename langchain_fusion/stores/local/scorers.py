"""The two sides of one query over a :class:`Snapshot`: its vector scorer and its BM25 scorer.

Each scorer answers a top-k (exact scans, ANN candidates rescored exactly, or a pruned BM25 top-k),
the exact scores of given rows, and the score of every row, computed once and kept for the query.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.base import FloatMatrix, Keys, Scores, Where
from langchain_fusion.stores.local.bm25 import QueryWeights
from langchain_fusion.stores.local.snapshot import Snapshot
from langchain_fusion.stores.local.term_weights import TermWeights
from langchain_fusion.stores.local.vector_top import Contenders, exact_top
from langchain_fusion.stores.local.vectors import exact_products, inner_products
from langchain_fusion.stores.ranking import top_rows

CONTENDERS_MIN_RATIO = 2
"""ANN candidates are narrowed by float32 products with error bounds before the float64 rescoring when there are
more than this many per wanted row (indexes of compressed codes propose ``k_factor`` of them, 10 by default, and
several segments each their own)."""

FEW_ROWS_SHARE = 16
"""BM25 scores of fewer than 1/this of the rows are looked up in the postings rather than computed for every row."""


class _LocalScorer(ABC):
    """Shared top-k over a lazily computed whole-corpus score array."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._all: NDArray[np.float32] | None = None

    @abstractmethod
    def _compute(self) -> NDArray[np.float32]:
        """The score of every row for this scorer's query."""

    def preset(self, scores: NDArray[np.float32]) -> None:
        """Use ``scores`` (computed for this query with others in a batch) as the score of every row."""
        self._all = scores

    def release(self) -> None:
        """Forget the score of every row (a batch's query is done with it; computed again if asked)."""
        self._all = None

    def all_scores(self) -> NDArray[np.float32]:
        """The score of every row (computed once)."""
        scores = self._all  # read once: another run of the same query may release it meanwhile
        if scores is None:
            scores = self._all = self._compute()
        return scores

    def scores(self, keys: Keys) -> Scores:
        """Exact scores of ``keys``."""
        return self.all_scores()[keys].astype(np.float64)

    def _top_of(
        self, scores: NDArray[np.float32], k: int | None, valid: NDArray[np.bool_] | None
    ) -> tuple[Keys, Scores]:
        if k is None:
            rows = np.arange(scores.size, dtype=np.int64) if valid is None else np.flatnonzero(valid)
        else:
            rows = top_rows(scores, k, valid)
        return rows, scores[rows].astype(np.float64)


class LocalVectorScorer(_LocalScorer):
    """Cosine similarity of one query vector: exact scans, or ANN candidates on large segments.

    A scan (or an approximate index) proposes the candidates; the scores reported for them are
    float64 dot products of the stored vectors, and an exact top k is the float64 top k whichever
    kernel scanned (FAISS for one query, a matrix product for a batch: :mod:`.vector_top`). Only
    ``k=None`` (the whole corpus) reports the scan's float32 scores.
    """

    def __init__(self, snapshot: Snapshot, query_vector: FloatMatrix) -> None:
        super().__init__(snapshot)
        self.query_vector = query_vector
        self._near: tuple[Contenders, Where | None] | None = None

    def prefetch(self, near: Contenders, where: Where | None) -> None:
        """Use ``near`` (this query's rows from a batch's pass under ``where``) for top-k searches it covers."""
        self._near = (near, where)

    def _compute(self) -> NDArray[np.float32]:
        return self.snapshot.vector_scores_all(self.query_vector)

    def _exact(self, keys: Keys) -> Scores:
        return exact_products(self.snapshot.vectors_of(np.asarray(keys, dtype=np.int64)), self.query_vector[0])

    def scores(self, keys: Keys) -> Scores:
        """Exact similarity of ``keys`` (float64 dot products of the stored vectors)."""
        return self._exact(keys)

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` most similar allowed rows (exact unless a segment has an ANN index)."""
        if k is not None and not self.snapshot.approximate:
            return self._exact_top(k, where)
        allowed = self.snapshot.allowed(where)
        if k is None:
            return self._top_of(self.all_scores(), None, allowed)
        candidates = self._ann_candidates(k, allowed)
        if candidates.size > CONTENDERS_MIN_RATIO * k:
            # Many candidates (compressed codes propose k_factor per wanted row, and each segment its own):
            # float32 products with error bounds rule most of them out, and only the rest are rescored in
            # float64 (the same top k, the same bits).
            candidates = candidates[self.snapshot.products_at(candidates, self.query_vector[0]).contenders(k)]
        exact = self._exact(candidates)
        best = np.lexsort((candidates, -exact))[:k]
        return candidates[best], exact[best]

    def _exact_top(self, k: int, where: Where | None) -> tuple[Keys, Scores]:
        """The float64 top ``k`` of a scan: of the batch's contenders when they cover it, else of every row."""
        near = self._near
        rows: Keys | None
        if near is not None and k <= near[0].depth and near[1] == where:
            rows, values = near[0].rows, near[0].values
        else:
            values = self.all_scores()
            allowed = self.snapshot.allowed(where)
            rows = None if allowed is None else np.flatnonzero(allowed)
            if rows is not None:
                values = values[rows]
        error = self.snapshot.vector_error(self.query_vector)
        return exact_top(rows, values, k, error, self.snapshot.vectors_of, self.query_vector[0])

    def _ann_candidates(self, k: int, allowed: NDArray[np.bool_] | None) -> Keys:
        """Per segment: up to ``k_factor * k`` candidates from its ANN index, or ``k`` from an exact scan."""
        found: list[Keys] = []
        for segment in self.snapshot.segments:
            local = None if allowed is None else allowed[segment.start : segment.stop]
            if segment.ann is not None:
                rows, _ = segment.ann.search(self.query_vector, k, local)
                wanted = min(k, segment.size if local is None else int(np.count_nonzero(local)))
                if rows.size < wanted:
                    # A graph index can miss allowed rows under a selector: scan the segment exactly.
                    rows = top_rows(inner_products(segment.vectors, self.query_vector[0]), k, local)
                found.append(rows + segment.start)
            else:
                found.append(top_rows(inner_products(segment.vectors, self.query_vector[0]), k, local) + segment.start)
        return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


class LocalBM25Scorer(_LocalScorer):
    """BM25 of one query text over the live statistics of the snapshot.

    A top-k is found by pruning where it pays (:meth:`Snapshot.bm25_top`), and the scores of a
    few rows are looked up in the postings; the score of every row is computed only when asked
    for (a whole-corpus search) or where a batch makes it cheaper than pruning: the batch's
    queries share their term weights, each common term weighed once and added as one vector.
    Sharing pays more the more queries share; on a corpus whose common terms are very common,
    scoring every row costs more than pruning once the score array outgrows the cache (the
    figures, per corpus shape and size: ``docs/benchmarks.md``). Every path gives the same
    float32 scores.
    """

    def __init__(self, snapshot: Snapshot, query: str, shared: TermWeights | None = None) -> None:
        """BM25 of ``query``; ``shared``: term weights of a batch (see :meth:`QueryWeights.add_scores`)."""
        super().__init__(snapshot)
        self.query = query
        self._shared = shared
        self._weights: QueryWeights | bool | None = False  # False: not computed yet

    def _compute(self) -> NDArray[np.float32]:
        return self.snapshot.bm25_scores_all(self._query_weights(), self._shared)  # the query analysed once

    def _query_weights(self) -> QueryWeights | None:
        if self._weights is False:
            self._weights = self.snapshot.bm25_weights(self.query)
        return self._weights  # type: ignore[return-value]

    def scores(self, keys: Keys) -> Scores:
        """Exact BM25 scores of ``keys``: looked up for a few rows, read from the whole array once it exists."""
        if self._all is not None or keys.size * FEW_ROWS_SHARE > self.snapshot.size:
            return super().scores(keys)
        weights = self._query_weights()
        if weights is None:
            return np.zeros(keys.size, dtype=np.float64)
        order = np.argsort(keys, kind="stable")
        rows = keys[order]
        first = np.concatenate(([True], rows[1:] != rows[:-1])) if rows.size else np.zeros(0, dtype=bool)
        found = weights.row_scores(rows[first], self.snapshot.bm25_blocks())
        out = np.empty(keys.size, dtype=np.float64)
        out[order] = found[np.cumsum(first) - 1]
        return out

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` best allowed rows among those that match a query term."""
        allowed = self.snapshot.allowed(where)
        if k is not None and self._all is None:
            weights = self._query_weights()
            if weights is None:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
            found = self.snapshot.bm25_top(weights, k, allowed, in_batch=self._shared is not None)
            if found is not None:
                return found[0], found[1].astype(np.float64)
        scores = self.all_scores()
        if k is None:
            return self._top_of(scores, None, scores > 0 if allowed is None else allowed & (scores > 0))
        rows = top_rows(scores, k, allowed, above=0.0)
        return rows, scores[rows].astype(np.float64)
