"""The read view of the in-process store: one :class:`Snapshot` as a :class:`StoreView`.

Keys are the snapshot's row numbers. The view hands out one scorer per side and query
(:mod:`~langchain_fusion.stores.local.scorers`), batches of them, the rows' documents, texts, ids and
vectors, and decides when a fused search runs its two sides in two threads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from langchain_core.documents import Document

from langchain_fusion.stores.base import FloatMatrix, Keys, StoreView, Where
from langchain_fusion.stores.local.scorers import LocalBM25Scorer, LocalVectorScorer
from langchain_fusion.stores.local.snapshot import Snapshot
from langchain_fusion.stores.local.term_weights import TermWeights
from langchain_fusion.stores.settings import StoreSettings
from langchain_fusion.threads import usable_cores

PARALLEL_SIDES_MIN_ROWS = 1 << 16
"""From this many rows a fused query searches its vector and BM25 sides in two threads."""

_MANY_CORES = usable_cores() > 1


class LocalView(StoreView):
    """A read view of one :class:`Snapshot`: keys are its row numbers."""

    documents_are_new = True  # materialised from the compact store on every call

    def __init__(self, snapshot: Snapshot) -> None:
        """View ``snapshot`` (which never changes)."""
        self.snapshot = snapshot

    @property
    def settings(self) -> StoreSettings:
        """How the rows were indexed."""
        return self.snapshot.settings

    def __len__(self) -> int:
        return self.snapshot.live_count

    def vector(self, query_vector: FloatMatrix) -> LocalVectorScorer:
        """The vector side for one query."""
        return LocalVectorScorer(self.snapshot, query_vector)

    def bm25(self, query: str) -> LocalBM25Scorer:
        """The BM25 side for one query."""
        return LocalBM25Scorer(self.snapshot, query)

    def sides_in_parallel(self, where: Where | None) -> bool:
        """True for a large snapshot searched through ANN indexes, on a machine with a second core.

        A graph search runs on one core while BM25 takes milliseconds on another. An exact scan
        already spreads over every core (see :func:`inner_products`): a second thread for BM25
        only competes with it (no gain for a query and slower batches: ``docs/benchmarks.md``).
        """
        return self._second_thread_pays(where) and self.snapshot.approximate

    def whole_corpus_in_parallel(self, where: Where | None) -> bool:
        """True for a large snapshot on a machine with a second core, exact or not.

        Scoring every row differs from a top-k of each side: BM25 over every row costs a fifth to a
        half of the scan, which waits on memory, and the two overlap (a gain at a million rows, none
        at 100k: ``docs/benchmarks.md``).
        """
        return self._second_thread_pays(where)

    def _second_thread_pays(self, where: Where | None) -> bool:
        # A callable metadata filter keeps both sides in the caller's thread: each side evaluates it, and
        # user code must not run twice at once, nor outside the caller's thread.
        if where is not None and where.metadata is not None and not isinstance(where.metadata, Mapping):
            return False
        return _MANY_CORES and self.snapshot.size >= PARALLEL_SIDES_MIN_ROWS

    def vector_many(
        self, query_vectors: FloatMatrix, depth: int | None = None, where: Where | None = None
    ) -> list[LocalVectorScorer]:
        """The vector side for each query vector (a row), scored in one pass over the vectors when exact.

        With ``depth``, the pass keeps for each query only the rows that may be among its ``depth``
        best under ``where`` (:mod:`~langchain_fusion.stores.local.vector_top`); without, every row's score.
        """
        queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
        scorers = [LocalVectorScorer(self.snapshot, queries[i : i + 1]) for i in range(queries.shape[0])]
        if self.snapshot.approximate:
            return scorers
        if depth is not None:
            for scorer, near in zip(scorers, self.snapshot.vector_contenders_many(queries, depth, where), strict=True):
                scorer.prefetch(near, where)
        else:
            for scorer, scores in zip(scorers, self.snapshot.vector_scores_many(queries), strict=True):
                scorer.preset(scores)
        return scorers

    def bm25_many(self, queries: Sequence[str]) -> list[LocalBM25Scorer]:
        """The BM25 side for each query; where every row's score is needed, each distinct term is weighed once.

        One distinct query has no weights to share: it is searched as alone (see :class:`LocalBM25Scorer`).
        """
        shared = TermWeights(parent=self.snapshot.common_term_weights()) if len(set(queries)) > 1 else None
        return [LocalBM25Scorer(self.snapshot, query, shared) for query in queries]

    def documents(self, keys: Keys) -> list[Document]:
        """The documents of ``keys`` (materialised from the compact store)."""
        return self.snapshot.documents_of(keys)

    def texts(self, keys: Keys) -> list[str]:
        """The texts of ``keys`` (no document is built)."""
        return self.snapshot.texts_of(keys)

    def ids(self, keys: Keys) -> list[str]:
        """The ids of ``keys`` (no document is built)."""
        return self.snapshot.ids_of(keys)

    def vectors(self, keys: Keys) -> FloatMatrix:
        """The stored vectors of ``keys``."""
        return self.snapshot.vectors_of(np.asarray(keys, dtype=np.int64))

    def keys_of(self, ids: Sequence[str]) -> Keys:
        """Rows of these ids (-1 when absent)."""
        return self.snapshot.rows_of(ids)

    def select(self, where: Where) -> Keys:
        """Live rows allowed by ``where``."""
        allowed = self.snapshot.allowed(where)
        if allowed is None:
            return np.arange(self.snapshot.size, dtype=np.int64)
        return np.flatnonzero(allowed).astype(np.int64)

    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """Chunks of ``source`` at these positions."""
        table = self.snapshot.chunk_rows()
        return {i: self.snapshot.document(row) for i in chunk_indexes if (row := table.get((source, i))) is not None}

    def iter_documents(self) -> Iterator[Document]:
        """Live documents in row order."""
        return (segment.documents.document(local) for _, segment, local in self.snapshot.iter_rows())

    @property
    def key_count(self) -> int:
        """Size of the key space (rows including dead ones): the length of ``all_scores``."""
        return self.snapshot.size
